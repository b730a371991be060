package dev.libroute

import java.util.concurrent.Executors
import java.util.concurrent.TimeUnit
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows

/** The host side: KV events into the index, bookings in the ledger, one-call routing. */
class RouterTest {
    private val a = Worker(1uL)
    private val b = Worker(2uL)
    private val request = Request(promptTokens = 64uL, blockSize = 16u, role = Role.AGGREGATED)
    private val candidates = listOf(Row(a), Row(b))

    @Test
    fun routeFollowsTheCachedPrefixAndBooks() {
        val router = Router(RouterConfig(blockSlots = 64uL, requestSlots = 64uL))
        router.addWorker(a)
        router.addWorker(b)
        router.applyKvEvents(listOf(KvEvent.Stored(b, Tier.DEVICE, listOf(11uL, 12uL, 13uL))))
        val policy = Policy("{}")
        val selector = Selector(16u, 1uL)
        val routed = router.route(policy, selector, request, listOf(11uL, 12uL, 13uL, 14uL), candidates, 7uL, 0uL)
        // 4 blocks. Worker 2 holds 3: 1 block to prefill + 1 new decode block = 2; worker 1: 4 + 4.
        assertEquals(b, routed.selection.worker)
        assertEquals(listOf(Candidate(0uL, 8.0), Candidate(1uL, 2.0)), selector.lastCosts())
        assertEquals(3u, routed.rows[1].cache?.deviceBlocks)
        assertEquals(1uL, router.counters().activeRequests)
        assertThrows<RouteException.DuplicateRequest> {
            router.route(policy, selector, request, listOf(), candidates, 7uL, 0uL)
        }
        router.prefillComplete(7uL)
        router.freeRequest(7uL)
        assertThrows<RouteException.UnknownRequest> { router.freeRequest(7uL) }
    }

    private fun direct(bytes: ByteArray): java.nio.ByteBuffer =
        java.nio.ByteBuffer.allocateDirect(bytes.size).put(bytes).flip()

    @Test
    fun aRestoredRouterRoutesAndFreesAsTheOriginal() {
        val original = Router(RouterConfig(blockSlots = 64uL, requestSlots = 64uL, tombstones = 8uL))
        val copy = Router(RouterConfig(blockSlots = 64uL, requestSlots = 64uL, tombstones = 8uL))
        original.addWorker(a)
        original.addWorker(b)
        original.applyKvEvents(listOf(KvEvent.Stored(b, Tier.DEVICE, listOf(11uL, 12uL, 13uL))))
        val policy = Policy("{}")
        val selector = Selector(16u, 1uL)
        val hashes = listOf(11uL, 12uL, 13uL, 14uL)
        original.route(policy, selector, request, hashes, candidates, 7uL, 0uL)
        val snapshot = original.snapshot()
        val e = assertThrows<RouteException.InvalidArgument> { copy.restore(direct(snapshot.copyOf(snapshot.size - 1))) }
        assert(e.detail.startsWith("snapshot byte ")) { e.detail }
        assertEquals(0uL, copy.counters().ledgerWorkers)
        copy.restore(direct(snapshot))
        assertEquals(original.counters(), copy.counters())
        val x = original.route(policy, selector, request, hashes, candidates, 8uL, 0uL)
        val y = copy.route(policy, selector, request, hashes, candidates, 8uL, 0uL)
        assertEquals(x.selection.worker, y.selection.worker)
        assertEquals(x.rows, y.rows)
        copy.freeRequest(7uL) // booked before the snapshot
    }

    /** vLLM's payload: [ts, [["BlockStored", [11, 12], nil, tokens 1..32, 16, nil, "GPU"]]]. */
    private fun storedPayload(): java.nio.ByteBuffer {
        val head = intArrayOf(0x92, 0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0, 0x91, 0x97, 0xab)
        val bytes = head.map { it.toByte() } + "BlockStored".toByteArray().toList() +
            intArrayOf(0x92, 11, 12, 0xc0, 0xdc, 0, 32).map { it.toByte() } +
            (1..32).map { it.toByte() } + intArrayOf(16, 0xc0, 0xa3).map { it.toByte() } +
            "GPU".toByteArray().toList()
        // The facade reads the payload in place: a direct buffer, from its start.
        return java.nio.ByteBuffer.allocateDirect(bytes.size).put(bytes.toByteArray()).flip()
    }

    @Test
    fun engineKvBatchesFeedTheIndex() {
        val router = Router(RouterConfig(blockSlots = 64uL, requestSlots = 64uL))
        router.addWorker(a)
        router.addWorker(b)
        val payload = storedPayload()
        assertThrows<RouteException.InvalidArgument> { router.applyKvBatch(a, payload) }
        router.readKvBatches(16u, 64uL)
        val truncated = java.nio.ByteBuffer.allocateDirect(40)
        repeat(40) { truncated.put(payload.get(it)) }
        val e = assertThrows<RouteException.InvalidArgument> { router.applyKvBatch(a, truncated.flip()) }
        assertEquals("KV event payload, byte 40: the payload ends inside a value", e.detail)
        assertEquals(0uL, router.counters().blocks)
        val summary = router.applyKvBatch(a, payload)
        assertEquals(KvBatchSummary(a, 1uL, 2uL, 0uL, 0uL, 0uL, 0uL), summary)
        val hashes = blockHashes((1..33).map { it.toUInt() }, 16u, null)
        assertEquals(2, hashes.size)
        val routed = router.route(
            Policy("{}"), Selector(16u, 1uL), Request(promptTokens = 32uL, blockSize = 16u, role = Role.AGGREGATED),
            hashes, listOf(Row(b), Row(a)), 1uL, 0uL,
        )
        assertEquals(a, routed.selection.worker)
        assertEquals(32uL, routed.selection.cachedTokens)
    }

    @Test
    fun timedRoutingCalibratesTheTtftPolicy() {
        val router = Router(RouterConfig(blockSlots = 64uL, requestSlots = 64uL))
        router.addWorker(a)
        router.addWorker(b)
        // Worker b takes three times as long as worker a for the same prompt.
        for (i in 0uL until 40uL) {
            val (worker, slow) = if (i % 2uL == 0uL) Pair(a, 1.0) else Pair(b, 3.0)
            val tokens = 200uL + 50uL * i
            val now = 1000.0 * i.toDouble()
            router.bookAt(i, worker, tokens, 2uL, now)
            router.prefillCompleteAt(i, now + slow * (10 + 0.05 * tokens.toDouble()))
            router.freeRequest(i)
        }
        val policy = Policy("""{"type": "ttft"}""")
        val selector = Selector(16u, 1uL)
        val req = Request(promptTokens = 1000uL, blockSize = 16u, role = Role.AGGREGATED)
        val routed = router.routeAt(policy, selector, req, listOf(5uL, 6uL), candidates, 100uL, 50_000.0)
        assertEquals(a, routed.selection.worker)
        val fast = routed.rows[0].speed!!.msPerPrefillToken
        val slow = routed.rows[1].speed!!.msPerPrefillToken
        org.junit.jupiter.api.Assertions.assertTrue(slow > 2 * fast, "$fast $slow")
        assertThrows<RouteException.InvalidArgument> { router.prefillCompleteAt(100uL, -1.0) }
        assertThrows<RouteException.InvalidArgument> {
            router.routeAt(policy, selector, req, listOf(), candidates, 101uL, Double.NaN)
        }
    }

    @Test
    fun replicaEventsAreIdempotent() {
        val router = Router(RouterConfig(blockSlots = 64uL, requestSlots = 64uL, tombstones = 8uL))
        router.addWorker(a)
        val booked = LedgerEvent.Booked(5uL, a, 64uL, 4uL)
        router.applyLedgerEvents(listOf(booked, booked, LedgerEvent.Freed(5uL)))
        assertEquals(0uL, router.counters().activeRequests)
        assertEquals(1uL, router.counters().duplicateLedgerEvents)
    }

    @Test
    fun theFleetRoutesAsCandidatesDo() {
        val overRows = Router(RouterConfig(blockSlots = 64uL, requestSlots = 64uL))
        val overFleet = Router(RouterConfig(blockSlots = 64uL, requestSlots = 64uL))
        val policy = Policy("{}")
        val (selA, selB) = Pair(Selector(16u, 3uL), Selector(16u, 3uL))
        assertThrows<RouteException.NoEndpoints> { overFleet.routeFleet(policy, selB, request, listOf(), 1uL, 0uL) }
        val hashes = listOf(1uL, 2uL, 3uL, 4uL)
        var rows = (0uL until 4uL).map { Row(Worker(it)) }
        // Added out of order: the fleet keeps its rows sorted by worker, as the candidates are.
        for (w in listOf(2uL, 0uL, 3uL, 1uL)) {
            for (r in listOf(overRows, overFleet)) {
                r.addWorker(Worker(w))
                r.applyKvEvents(listOf(KvEvent.Stored(Worker(w), Tier.DEVICE, hashes.take(w.toInt() + 1))))
            }
            overFleet.fleetAdd(Worker(w), 0uL)
        }
        for (id in 1uL..12uL) {
            if (id == 6uL) {
                rows = rows.mapIndexed { i, row -> if (i == 3) row.copy(overloaded = true) else row }
                overFleet.fleetSetOverloaded(Worker(3uL), true)
            }
            val prompt = hashes.take((id % 4uL).toInt() + 1)
            val routed = overRows.route(policy, selA, request, prompt, rows, id, 0uL)
            rows = routed.rows
            assertEquals(routed.selection, overFleet.routeFleet(policy, selB, request, prompt, id, 0uL))
        }
        assertEquals(rows, overFleet.fleetRows())
        assertThrows<RouteException.DuplicateWorker> { overFleet.fleetAdd(Worker(1uL), 0uL) }
        assertThrows<RouteException.UnknownWorker> { overFleet.fleetSetTaints(Worker(9uL), 1uL) }
        overFleet.fleetRemove(Worker(1uL))
        assertEquals(3, overFleet.fleetRows().size)
    }

    @Test
    fun badRouterConfigNamesTheField() {
        val e = assertThrows<RouteException.InvalidArgument> {
            Router(RouterConfig(blockSlots = 100uL, requestSlots = 64uL))
        }
        assert(e.detail.contains("block_slots")) { e.detail }
    }

    @Test
    fun onePolicyManyThreads() {
        val policy = Policy("""{"temperature": 0.7, "seed": 42}""")
        val pool = Executors.newFixedThreadPool(4)
        val jobs = (0 until 4).map {
            pool.submit<Int> {
                Selector(16u, 0uL).use { s -> (0 until 200).count { s.select(policy, request, candidates).row < 2uL } }
            }
        }
        assertEquals(800, jobs.sumOf { it.get() })
        pool.shutdown()
        pool.awaitTermination(10, TimeUnit.SECONDS)
    }
}
