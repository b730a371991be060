package dev.libroute

import java.nio.ByteBuffer
import java.nio.ByteOrder
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertThrows
import org.junit.jupiter.api.Test

/** The JNI fast path: the same decisions and errors as Selector.select, and its own misuse. */
class DirectSelectorTest {
    private val request = Request(promptTokens = 64uL, blockSize = 16u, role = Role.AGGREGATED)

    private fun row(id: Int, device: Int, requests: Int = 0) = Row(
        Worker(id.toULong()),
        cache = RowCache(device.toUInt(), effectiveBlocks = device.toDouble(), effectiveTokens = (device * 16).toULong()),
        load = RowLoad(0uL, 0uL, requests.toULong()),
    )

    @Test
    fun selectsAsTheRecordsDoWithEveryRequestField() {
        val policy = Policy("""{"temperature": 0.5, "seed": 11}""")
        val rows = (1..40).map { row(it, it % 5, it % 7) }.toMutableList()
        val full = Request(
            promptTokens = 160uL, blockSize = 16u, role = Role.AGGREGATED, hasTierMatches = true,
            requiredTaints = 0uL, preferredTaints = listOf(PreferredTaint(3u, 0.5), PreferredTaint(9u, -1.0)),
            sharedHits = listOf(BlockRange(0uL, 2uL), BlockRange(4uL, 6uL)), session = 77uL,
        )
        val a = Selector(64u, 1uL)
        val b = Selector(64u, 1uL)
        val buffer = DirectSelector.directRows(rows)
        DirectSelector(policy, b).use { direct ->
            repeat(50) { assertEquals(a.select(policy, full, rows), direct.select(full, buffer)) }
            val pinned = request.copy(pin = Worker(7uL))
            assertEquals(a.select(policy, pinned, rows), direct.select(pinned, buffer))
        }
        assertEquals(a.lastCosts(), b.lastCosts())
    }

    @Test
    fun readsFromThePositionWithoutMovingIt() {
        val rows = listOf(row(1, 0), row(2, 3), row(3, 1))
        val buffer = DirectSelector.allocateRows(4)
        buffer.position(DirectSelector.ROW_BYTES) // row 0 of the buffer is not a candidate
        buffer.put(packRows(rows))
        buffer.position(DirectSelector.ROW_BYTES)
        DirectSelector(Policy("{}"), Selector(4u, 1uL)).use { direct ->
            val s = direct.select(request, buffer)
            assertEquals(Worker(2uL), s.worker)
            assertEquals(1uL, s.row)
            assertEquals(DirectSelector.ROW_BYTES, buffer.position())
        }
    }

    @Test
    fun failuresAreTheSelectorsExceptions() {
        DirectSelector(Policy("{}"), Selector(2u, 1uL)).use { direct ->
            val none = assertThrows(RouteException.NoEndpoints::class.java) {
                direct.select(request, DirectSelector.allocateRows(0))
            }
            assertEquals("no endpoints: no eligible worker among the rows", none.detail)
            val many = assertThrows(RouteException.CapacityExceeded::class.java) {
                direct.select(request, DirectSelector.directRows(listOf(row(1, 0), row(2, 0), row(3, 0))))
            }
            assertEquals("3 rows exceed the selector's capacity of 2", many.detail)
            val nan = DirectSelector.directRows(listOf(row(1, 1), row(2, 1)))
            nan.putDouble(DirectSelector.ROW_BYTES + 40, Double.NaN)
            assertThrows(RouteException.InvalidRow::class.java) { direct.select(request, nan) }
        }
    }

    @Test
    fun misuseIsAnIllegalArgumentOrState() {
        val policy = Policy("{}")
        val selector = Selector(4u, 1uL)
        val direct = DirectSelector(policy, selector)
        val heap = ByteBuffer.allocate(DirectSelector.ROW_BYTES).order(ByteOrder.LITTLE_ENDIAN)
        assertThrows(IllegalArgumentException::class.java) { direct.select(request, heap) }
        val partial = ByteBuffer.allocateDirect(DirectSelector.ROW_BYTES + 1)
        assertThrows(IllegalArgumentException::class.java) { direct.select(request, partial) }
        val odd = DirectSelector.allocateRows(2)
        odd.position(4)
        odd.limit(4 + DirectSelector.ROW_BYTES)
        val misaligned = assertThrows(IllegalArgumentException::class.java) { direct.select(request, odd) }
        assertEquals("rows at byte 4 is not 8-byte aligned", misaligned.message)
        // Its own references keep the selector usable after the caller's are gone.
        selector.close()
        assertEquals(Worker(1uL), direct.select(request, DirectSelector.directRows(listOf(row(1, 1)))).worker)
        direct.close()
        direct.close()
        assertThrows(IllegalStateException::class.java) {
            direct.select(request, DirectSelector.directRows(listOf(row(1, 1))))
        }
    }

    @Test
    fun aReleasedSelectorIsClosed() {
        val selector = Selector(4u, 1uL)
        DirectSelector(Policy("{}"), selector).use { direct ->
            selector.release()
            assertThrows(RouteException.Closed::class.java) {
                direct.select(request, DirectSelector.directRows(listOf(row(1, 1))))
            }
        }
    }

    /** Two routers fed the same events: one routed through uniffi, one through the fast path. */
    private fun twinRouters(): Pair<Router, Router> {
        val routers = Router(RouterConfig(blockSlots = 256uL, requestSlots = 64uL)) to
            Router(RouterConfig(blockSlots = 256uL, requestSlots = 64uL))
        for (r in routers.toList()) {
            for (w in 1..6) r.addWorker(Worker(w.toULong()))
            r.applyKvEvents(
                (1..6).map { w -> KvEvent.Stored(Worker(w.toULong()), Tier.DEVICE, (1..w).map { it.toULong() }) },
            )
        }
        return routers
    }

    @Test
    fun routesAsTheRouterDoesAndFillsTheRowsInPlace() {
        val (viaUniffi, viaJni) = twinRouters()
        val policy = Policy("""{"temperature": 0.3, "seed": 5}""")
        val rows = (1..6).map { Row(Worker(it.toULong())) }
        val a = Selector(8u, 1uL)
        val b = Selector(8u, 1uL)
        DirectSelector(policy, b, viaJni).use { direct ->
            for (id in 1uL..20uL) {
                val req = Request(promptTokens = 64uL + 16uL * (id % 5uL), blockSize = 16u, role = Role.AGGREGATED)
                val hashes = (1..(4 + (id % 5uL).toInt())).map { it.toULong() }
                val expected = viaUniffi.route(policy, a, req, hashes, rows, id, id)
                val buffer = DirectSelector.directRows(rows)
                val got = direct.route(req, hashes.map { it.toLong() }.toLongArray(), buffer, id, id)
                assertEquals(expected.selection, got)
                assertEquals(a.lastCosts(), b.lastCosts())
                // The router wrote what it found into the buffer: the rows uniffi returned.
                val filled = ByteArray(buffer.remaining())
                buffer.duplicate().get(filled)
                // Bytes 12 to 15 of a row are padding, which the router may copy as it finds it.
                for (r in filled.indices step DirectSelector.ROW_BYTES) for (k in 12..15) filled[r + k] = 0
                assertEquals(packRows(expected.routed()).toList(), filled.toList())
            }
            assertEquals(viaUniffi.counters(), viaJni.counters())
            val dup = assertThrows(RouteException.DuplicateRequest::class.java) {
                direct.route(request, longArrayOf(), DirectSelector.directRows(rows), 3uL, 99uL)
            }
            assertEquals(
                assertThrows(RouteException.DuplicateRequest::class.java) {
                    viaUniffi.route(policy, a, request, listOf(), rows, 3uL, 99uL)
                }.detail,
                dup.detail,
            )
            val timed = direct.routeAt(request, longArrayOf(1, 2), DirectSelector.directRows(rows), 100uL, 5_000.0)
            assertEquals(timed, viaUniffi.routeAt(policy, a, request, listOf(1uL, 2uL), rows, 100uL, 5_000.0).selection)
            val readOnly = DirectSelector.directRows(rows).asReadOnlyBuffer()
            assertThrows(IllegalArgumentException::class.java) {
                direct.route(request, longArrayOf(), readOnly, 101uL, 0uL)
            }
        }
        DirectSelector(policy, b).use { noRouter ->
            assertThrows(IllegalStateException::class.java) {
                noRouter.route(request, longArrayOf(), DirectSelector.directRows(rows), 1uL, 0uL)
            }
        }
    }

    @Test
    fun oneObjectFromManyThreadsIsSerialized() {
        // Prompts longer than any cached prefix: each request has one cheapest row, so the answer does
        // not depend on the random stream, only on the request each thread encodes.
        val rows = (1..32).map { row(it, it, (it * 7) % 5) }
        val buffer = DirectSelector.directRows(rows)
        val policy = Policy("{}")
        val requests = (0 until 4).map {
            Request(promptTokens = 600uL + 300uL * it.toULong(), blockSize = 16u, role = Role.AGGREGATED)
        }
        val expected = requests.map { Selector(32u, 1uL).select(policy, it, rows) }
        val direct = DirectSelector(policy, Selector(32u, 1uL))
        val pool = java.util.concurrent.Executors.newFixedThreadPool(4)
        val results = requests.map { r ->
            pool.submit<Set<Selection>> { List(2_000) { direct.select(r, buffer.duplicate()) }.toSet() }
        }.map { it.get() }
        pool.shutdown()
        assertEquals(expected.map { setOf(it) }, results)
        direct.close()
    }

    private fun Routed.routed(): List<Row> = rows
}
