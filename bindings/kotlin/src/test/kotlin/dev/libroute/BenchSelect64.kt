package dev.libroute

import org.junit.jupiter.api.Assumptions.assumeTrue
import org.junit.jupiter.api.Test

/**
 * One select of 64 candidates from Kotlin, the workload of the Rust and Go benchmarks. Skipped
 * unless asked for: `mvn test -Dlibroute.bench=true -Dtest=BenchSelect64` (or `cargo xtask kotlin
 * --bench`). Prints, for each way of passing the rows, the median of 7 timed runs after a warm-up.
 */
class BenchSelect64 {
    private fun fleet(n: Int) = (0 until n).map { i ->
        val half = (i * 37) % 97
        Row(
            Worker(i.toULong()),
            cache = RowCache(0u, effectiveBlocks = half * 0.5, effectiveTokens = (half * 8).toULong()),
            load = RowLoad(((i * 131) % 4096).toULong(), ((i * 17) % 509).toULong(), (i % 13).toULong()),
        )
    }

    @Test
    fun select64() {
        assumeTrue(System.getProperty("libroute.bench") == "true", "benchmark not requested")
        val policy = Policy("{}")
        val selector = Selector(4096u, 0uL)
        val rows = fleet(64)
        val request = Request(promptTokens = 2048uL, blockSize = 16u, role = Role.AGGREGATED)
        val packed = packRows(rows)
        measure("select (Row records)") { selector.select(policy, request, rows) }
        measure("packRows + selectPacked") { selector.selectPacked(policy, request, packRows(rows)) }
        measure("selectPacked (rows kept packed)") { selector.selectPacked(policy, request, packed) }
    }

    private fun measure(what: String, call: () -> Unit) {
        val n = 100_000
        repeat(n) { call() }
        val runs = (0 until 7).map {
            val start = System.nanoTime()
            repeat(n) { call() }
            (System.nanoTime() - start).toDouble() / n
        }.sorted()
        println("kotlin %s, 64 candidates: median %.0f ns (min %.0f, max %.0f) over 7 runs of %d"
            .format(what, runs[3], runs.first(), runs.last(), n))
    }
}
