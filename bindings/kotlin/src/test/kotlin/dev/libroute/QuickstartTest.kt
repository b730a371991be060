package dev.libroute

import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Test

/** The README's Kotlin example, between the markers, verbatim (an xtask test compares them). */
class QuickstartTest {
    @Test
    fun quickstart() {
        // README begin
        val policy = Policy("""{"temperature": 0}""") // immutable and thread-safe: share one
        val selector = Selector(64u, 12345uL)          // capacity, entropy; one per thread
        val rows = listOf(
            Row(Worker(1uL), cache = RowCache(6u, effectiveBlocks = 6.0, effectiveTokens = 96uL),
                load = RowLoad(32uL, 10uL, 1uL)),
            Row(Worker(2uL), load = RowLoad(0uL, 2uL, 0uL)),
        )
        val request = Request(promptTokens = 128uL, blockSize = 16u, role = Role.AGGREGATED)
        val chosen = try {
            selector.select(policy, request, rows)
        } catch (e: RouteException) { // RouteException.NoEndpoints, .InvalidRow, ... with e.detail
            error("no route: $e")
        }
        println("worker ${chosen.worker.workerId}, cost ${chosen.cost}, breakdown ${chosen.contributions}")
        selector.close(); policy.close() // or Kotlin's use { }; a Cleaner frees what is forgotten
        // README end
        assertEquals(Worker(2uL), chosen.worker)
        assertEquals(10.0, chosen.cost)
    }
}
