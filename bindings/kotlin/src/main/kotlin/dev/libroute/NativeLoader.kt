package dev.libroute

import com.sun.jna.Platform
import java.io.File
import java.nio.file.Files
import java.nio.file.StandardCopyOption

/**
 * Loads `libroute_jvm` (the uniffi facade and the JNI fast path, `ffi/jvm`) once for both of its callers: uniffi's JNA bindings (whose library
 * lookup `cargo xtask codegen` routes here) and the JNI natives of [DirectSelector]. It takes the
 * library from the JAR (`linux-x86-64/libroute_jvm.so`, extracted to a temporary file) or
 * else from a directory of `jna.library.path`, loads it with [System.load] (which registers the
 * JNI natives) and gives JNA the same path, so the process holds one copy of libroute.
 */
internal object NativeLoader {
    /** The loaded library's path, once [library] has found one. */
    @Volatile
    var path: String? = null
        private set

    /** The path JNA should load for [name]: the file loaded here, or [name] itself (JNA's own lookup) when none is found. */
    @Synchronized
    fun library(name: String): String {
        path?.let { return it }
        val file = extract(name) ?: search(name) ?: return name
        System.load(file.absolutePath)
        path = file.absolutePath
        return file.absolutePath
    }

    private fun extract(name: String): File? {
        val resource = "${Platform.RESOURCE_PREFIX}/${System.mapLibraryName(name)}"
        val input = NativeLoader::class.java.classLoader?.getResourceAsStream(resource) ?: return null
        val file = Files.createTempFile("libroute_jvm", ".so").toFile()
        file.deleteOnExit()
        input.use { Files.copy(it, file.toPath(), StandardCopyOption.REPLACE_EXISTING) }
        return file
    }

    private fun search(name: String): File? =
        (System.getProperty("jna.library.path") ?: "").split(File.pathSeparator)
            .filter { it.isNotEmpty() }
            .map { File(it, System.mapLibraryName(name)) }
            .firstOrNull { it.isFile }
}
