package example

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
            }
        }
    }
}
