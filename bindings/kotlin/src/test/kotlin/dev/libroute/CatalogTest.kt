package dev.libroute

import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows

/** The catalog through Kotlin: every builtin type by JSON, explanations, named instances. */
class CatalogTest {
    private val request = Request(promptTokens = 160uL, blockSize = 16u, role = Role.AGGREGATED)

    private fun row(id: Long, dev: Int, n: Long) = Row(
        Worker(id.toULong()),
        cache = RowCache(dev.toUInt(), effectiveBlocks = dev.toDouble(), effectiveTokens = (dev * 16).toULong()),
        load = RowLoad((100 * n).toULong(), (10 * n).toULong(), n.toULong()),
    )

    @Test
    fun everyBuiltinBuildsAndSelects() {
        val types = listOf(
            """{"type": "default", "temperature": 0.5, "seed": 1}""",
            """{"type": "round_robin"}""",
            """{"type": "random", "seed": 3}""",
            """{"type": "power_of_two", "k": 2}""",
            """{"type": "least_loaded", "metric": "active_blocks"}""",
            """{"type": "dynamo_two_tier", "coverage": 0.4}""",
            """{"type": "sglang_cache_aware"}""",
            """{"type": "llm_d", "kv_capacity_blocks": 100}""",
            """{"type": "composed", "scorers": [{"type": "queue"}, {"type": "prefix", "host": 0.7}]}""",
        )
        val rows = listOf(row(1, 2, 10), row(2, 6, 12), row(3, 0, 40))
        for (json in types) {
            val chosen = Selector(16u, 1uL).select(Policy(json), request, rows)
            assertTrue(chosen.worker.workerId in 1uL..3uL, json)
        }
    }

    @Test
    fun explanationsAndRoles() {
        val policy = Policy("""{"type": "dynamo_two_tier", "filters": [{"type": "overload", "max_requests": 30}]}""")
        val explained = Selector(16u, 1uL).selectExplained(
            policy, request, listOf(row(1, 2, 10), row(2, 6, 12), row(3, 0, 20), row(4, 9, 40)))
        assertEquals(2uL, explained.selection.worker.workerId)
        assertEquals(listOf(4.0, 0.0, 6.0), explained.rows.take(3).map { it.total })
        assertEquals(Disposition.FilterOverloaded(0u), explained.rows[3].disposition)

        val set = PolicySet("""{"instances": [{"name": "rr", "policy": {"type": "round_robin"}}], "roles": {"decode": "rr"}}""")
        assertEquals("rr", set.instanceName(Role.DECODE))
        assertEquals("default", set.instanceName(Role.PREFILL))
        val decode = set.policy(Role.DECODE)
        val s = Selector(4u, 1uL)
        val picks = (0 until 4).map { s.select(decode, request, listOf(row(1, 0, 0), row(2, 0, 0))).worker.workerId }
        assertEquals(listOf(1uL, 2uL, 1uL, 2uL), picks)
        val e = assertThrows<RouteException.InvalidKnob> { PolicySet("""{"roles": {"decode": "nope"}}""") }
        assertTrue(e.detail.contains("nope"), e.detail)
        assertThrows<RouteException.UnknownKey> { Policy("""{"type": "fastest"}""") }
    }
}
