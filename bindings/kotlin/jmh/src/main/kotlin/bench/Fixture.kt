package bench

import dev.libroute.DirectSelector
import dev.libroute.Policy
import dev.libroute.Request
import dev.libroute.Role
import dev.libroute.Row
import dev.libroute.RowCache
import dev.libroute.RowLoad
import dev.libroute.Selection
import dev.libroute.Selector
import dev.libroute.Worker
import dev.libroute.packRows

/**
 * The Rust, Go and Python benchmarks' workload (benches/src/lib.rs): the default policy, a
 * 2,048-token request, 64 candidates with a cache entry and a load each. One way of passing the
 * rows per method, for `SelectBench`.
 */
class Fixture : AutoCloseable {
    private val policy = Policy("{}")
    private val selector = Selector(4096u, 0uL)
    private val rows = (0 until 64).map { i ->
        val half = (i * 37) % 97
        Row(
            Worker(i.toULong()),
            cache = RowCache(0u, effectiveBlocks = half * 0.5, effectiveTokens = (half * 8).toULong()),
            load = RowLoad(((i * 131) % 4096).toULong(), ((i * 17) % 509).toULong(), (i % 13).toULong()),
        )
    }
    private val request = Request(promptTokens = 2048uL, blockSize = 16u, role = Role.AGGREGATED)
    private val direct = DirectSelector(policy, selector)
    private val buffer = DirectSelector.directRows(rows)
    private val packed = packRows(rows)

    /** The JNI fast path over rows kept in a direct buffer. */
    fun direct(): Selection = direct.select(request, buffer)

    /** uniffi (JNA) with rows kept packed. */
    fun packed(): Selection = selector.selectPacked(policy, request, packed)

    /** uniffi (JNA) with `Row` records. */
    fun records(): Selection = selector.select(policy, request, rows)

    override fun close() {
        direct.close()
        selector.close()
        policy.close()
    }
}
