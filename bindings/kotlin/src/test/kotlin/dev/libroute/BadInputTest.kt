package dev.libroute

import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows

/** Bad input throws a RouteException subclass naming what was wrong; nothing crashes. */
class BadInputTest {
    private val request = Request(promptTokens = 64uL, blockSize = 16u, role = Role.AGGREGATED)

    private fun row(id: ULong, blocks: UInt = 0u, effective: Double = blocks.toDouble()) =
        Row(Worker(id), cache = RowCache(blocks, effectiveBlocks = effective, effectiveTokens = blocks.toULong() * 16uL))

    @Test
    fun invalidConfigNamesTheKnob() {
        val knob = assertThrows<RouteException.InvalidKnob> { Policy("""{"temperature": -1}""") }
        assertTrue(knob.detail.contains("temperature"), knob.detail)
        val key = assertThrows<RouteException.UnknownKey> { Policy("""{"temprature": 0}""") }
        assertTrue(key.detail.contains("temprature"), key.detail)
        assertThrows<RouteException.InvalidJson> { Policy("{") }
    }

    @Test
    fun emptyRows() {
        Policy("{}").use { policy ->
            Selector(8u, 0uL).use { selector ->
                val e = assertThrows<RouteException.NoEndpoints> { selector.select(policy, request, listOf()) }
                // One sentence, the same as C's libroute_last_error, not the status's text and
                // then the detail repeating it.
                assertEquals("no endpoints: no eligible worker among the rows", e.detail)
            }
        }
    }

    @Test
    fun tooManyRows() {
        val e = assertThrows<RouteException.CapacityExceeded> {
            Selector(2u, 0uL).select(Policy("{}"), request, listOf(row(1u), row(2u), row(3u)))
        }
        assertTrue(e.detail.contains("3 rows"), e.detail)
        assertThrows<RouteException.CapacityExceeded> { Selector(5000u, 0uL) }
        assertThrows<RouteException.InvalidArgument> { Selector(0u, 0uL) }
    }

    @Test
    fun nanFields() {
        val policy = Policy("{}")
        val selector = Selector(8u, 0uL)
        val e = assertThrows<RouteException.InvalidRow> {
            selector.select(policy, request, listOf(row(1u, 1u), row(2u, 1u, Double.NaN)))
        }
        assertTrue(e.detail.contains("row 1"), e.detail)
        val nanWeight = request.copy(preferredTaints = listOf(PreferredTaint(3u, Double.NaN)))
        assertThrows<RouteException.InvalidRequest> { selector.select(policy, nanWeight, listOf(row(1u))) }
    }

    @Test
    fun useAfterCloseThrows() {
        val policy = Policy("{}")
        val selector = Selector(8u, 0uL)
        policy.close()
        policy.close()
        assertThrows<IllegalStateException> { selector.select(policy, request, listOf(row(1u))) }
        selector.close()
        assertThrows<IllegalStateException> { selector.lastCosts() }
        // release() frees the native state while other references may remain.
        val shared = Policy("{}")
        shared.release()
        assertThrows<RouteException.Closed> { shared.inputs(Role.DECODE, false) }
    }
}
