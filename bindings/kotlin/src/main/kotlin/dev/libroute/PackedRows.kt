package dev.libroute

import java.nio.ByteBuffer
import java.nio.ByteOrder

/**
 * Packs rows for [Selector.selectPacked]: the C `libroute_row` layout, little-endian, one row per
 * [packedRowSize] bytes. Passing rows packed costs one copy instead of a field-by-field conversion
 * of each [Row] record; both make the same decision.
 */
fun packRows(rows: List<Row>): ByteArray {
    val size = packedRowSize().toInt()
    check(size == 104) { "the packed row layout changed: $size bytes" }
    val buf = ByteBuffer.allocate(size * rows.size).order(ByteOrder.LITTLE_ENDIAN)
    for (r in rows) {
        var flags = if (r.overloaded) 4 else 0
        val c = r.cache
        val l = r.load
        val s = r.speed
        if (c != null) flags = flags or 1
        if (l != null) flags = flags or 2
        if (s != null) flags = flags or 8
        buf.putLong(r.worker.workerId.toLong())
        buf.putInt(r.worker.dpRank.toInt())
        buf.putInt(0) // padding
        buf.putLong(r.taints.toLong())
        buf.putInt(flags)
        buf.putInt(c?.deviceBlocks?.toInt() ?: 0)
        buf.putInt(c?.hostBlocks?.toInt() ?: 0)
        buf.putInt(c?.diskBlocks?.toInt() ?: 0)
        buf.putDouble(c?.effectiveBlocks ?: 0.0)
        buf.putLong(c?.effectiveTokens?.toLong() ?: 0L)
        buf.putLong(l?.activePrefillTokens?.toLong() ?: 0L)
        buf.putLong(l?.activeDecodeBlocks?.toLong() ?: 0L)
        buf.putLong(l?.activeRequests?.toLong() ?: 0L)
        buf.putDouble(s?.baseMs ?: 0.0)
        buf.putDouble(s?.msPerPrefillToken ?: 0.0)
        buf.putDouble(s?.msPerActiveRequest ?: 0.0)
    }
    return buf.array()
}
