package example

import dev.libroute.DirectSelector
import dev.libroute.Policy
import dev.libroute.Request
import dev.libroute.Role
import dev.libroute.Row
import dev.libroute.RowLoad
import dev.libroute.Selector
import dev.libroute.Worker
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test

/** A Maven user's first select, with the native library coming from the libroute JAR only. */
class ConsumerTest {
    @Test
    fun selectsWithTheLibraryFromTheJar() {
        // Nothing points the JVM at a library directory: JNA must take the one in the JAR.
        assertNull(System.getProperty("jna.library.path"))
        assertTrue(System.getenv("LD_LIBRARY_PATH").isNullOrEmpty())
        Policy("{}").use { policy ->
            Selector(8u, 1uL).use { selector ->
                val rows = listOf(
                    Row(Worker(1uL), load = RowLoad(512uL, 40uL, 4uL)),
                    Row(Worker(2uL), load = RowLoad(0uL, 2uL, 0uL)),
                )
                val request = Request(promptTokens = 64uL, blockSize = 16u, role = Role.AGGREGATED)
                assertEquals(Worker(2uL), selector.select(policy, request, rows).worker)
                // The JNI fast path registers the same library, extracted from the JAR.
                DirectSelector(policy, selector).use { direct ->
                    assertEquals(Worker(2uL), direct.select(request, DirectSelector.directRows(rows)).worker)
                }
                // One copy of the library serves JNA and JNI (Linux: the process's mappings). A
                // copy JNA extracted itself would be a second `jna*.tmp` file beside its own
                // dispatch library.
                val mapped = java.io.File("/proc/self/maps").readLines()
                    .map { it.substringAfter('/', "").removeSuffix(" (deleted)") }
                    .toSet()
                val copies = mapped.filter { it.contains("libroute_jvm") }
                val jnaTemp = mapped.filter { Regex("/jna[0-9]+\\.tmp$").containsMatchIn("/$it") }
                assertEquals(1, copies.size, "libroute_jvm is mapped from $copies")
                assertTrue(jnaTemp.size <= 1, "JNA extracted more than its dispatch library: $jnaTemp")
            }
        }
    }
}
