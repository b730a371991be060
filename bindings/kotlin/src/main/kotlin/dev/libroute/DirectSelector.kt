package dev.libroute

import com.sun.jna.NativeLibrary
import java.lang.ref.Cleaner
import java.nio.ByteBuffer
import java.nio.ByteOrder

/**
 * The JVM fast path for the hot calls: [select], and with a [Router] [route] and [routeAt], over
 * rows held in a direct [ByteBuffer] in the C row layout (the layout of [packRows],
 * [DirectSelector.ROW_BYTES] bytes per row), through JNI rather than uniffi's JNA calls. The rows
 * are read (and by a route, filled) where they lie; the request is encoded into a buffer this
 * object reuses; the outcome comes back in another. Decisions and errors are exactly those of
 * [Selector.select] and [Router.route] (the same C calls, the same `RouteException` and detail),
 * and [Selector.lastCosts] afterwards reports the call's candidates.
 *
 * It holds its own references to [policy], [selector] and [router], so releasing those elsewhere
 * does not free them under it; [close] gives its references back (so does the garbage
 * collector). Thread-safe: calls on one object are serialized (its buffers are per object, and
 * [close] waits for a call in flight), so give each thread its own, as with selectors.
 */
class DirectSelector(
    policy: Policy,
    selector: Selector,
    router: Router? = null,
) : AutoCloseable {
    private val handles = Handles(
        policy.uniffiCloneHandle(), selector.uniffiCloneHandle(), router?.uniffiCloneHandle() ?: 0L,
    )
    private val cleanable = CLEANER.register(this, handles)
    private var request: ByteBuffer = direct(REQUEST_HEADER_BYTES + 16 * 8)
    private var requestAddress: Long = DirectLib.address0(request)
    private val out: ByteBuffer = direct(OUTCOME_BYTES)
    private val outAddress: Long = DirectLib.address0(out)

    /** The last rows buffer and its address: held, so its memory stays where the address says. */
    private var lastRows: ByteBuffer? = null
    private var lastRowsAddress: Long = 0L

    /** The address of [rows]' memory, asked of the JVM only for another buffer than the last. */
    private fun addressOf(rows: ByteBuffer): Long {
        if (rows !== lastRows) {
            lastRowsAddress = DirectLib.address0(rows)
            lastRows = rows
        }
        return lastRowsAddress
    }

    /**
     * Selects one of the rows in [rows] (from its position to its limit, whole rows) for
     * [request]. [rows] must be a direct buffer; its position and limit are not changed.
     *
     * @throws RouteException as [Selector.select] does.
     * @throws IllegalArgumentException when [rows] is not direct, holds a partial row, or is
     *   not 8-byte aligned at its position.
     * @throws IllegalStateException after [close].
     */
    @Synchronized
    fun select(request: Request, rows: ByteBuffer): Selection {
        val count = rowCount(rows)
        val encoded = encode(request, null)
        DirectLib.select0(
            handles.policy, handles.selector, requestAddress, encoded.capacity(),
            addressOf(rows), rows.capacity(), rows.position(), count, outAddress, out.capacity(),
        )
        return decode()
    }

    /**
     * [Router.route] over rows in a direct buffer: looks up [hashes] (the request's chained block
     * hashes) in the router's index, writes the cache and load it finds into the rows in place,
     * selects, and books request [id] on the chosen worker at [now] (prediction units).
     *
     * @throws RouteException as [Router.route] does.
     * @throws IllegalArgumentException as [select], or when [rows] is read-only.
     * @throws IllegalStateException without a router, or after [close].
     */
    fun route(request: Request, hashes: LongArray, rows: ByteBuffer, id: ULong, now: ULong): Selection =
        routeCall(request, hashes, rows, id, false, now.toLong(), 0.0)

    /** [route] with the time in milliseconds, as [Router.routeAt]. */
    fun routeAt(request: Request, hashes: LongArray, rows: ByteBuffer, id: ULong, nowMs: Double): Selection =
        routeCall(request, hashes, rows, id, true, 0L, nowMs)

    @Synchronized
    private fun routeCall(
        request: Request, hashes: LongArray, rows: ByteBuffer, id: ULong, timed: Boolean, now: Long, nowMs: Double,
    ): Selection {
        val count = rowCount(rows)
        check(handles.router != 0L) { "this DirectSelector was made without a Router" }
        require(!rows.isReadOnly) { "rows is read-only: a route writes the cache and load it finds into them" }
        val encoded = encode(request, hashes)
        DirectLib.route0(
            handles.router, handles.policy, handles.selector, requestAddress, encoded.capacity(), hashes.size,
            addressOf(rows), rows.capacity(), rows.position(), count, id.toLong(), timed, now, nowMs,
            outAddress, out.capacity(),
        )
        return decode()
    }

    /** The whole rows from [rows]' position to its limit, checked open, direct and whole. */
    private fun rowCount(rows: ByteBuffer): Int {
        check(!handles.closed) { "this DirectSelector is closed" }
        require(rows.isDirect) { "rows is not a direct ByteBuffer (use ByteBuffer.allocateDirect)" }
        val bytes = rows.remaining()
        require(bytes % ROW_BYTES == 0) {
            "$bytes bytes of rows is not a multiple of the row size $ROW_BYTES"
        }
        return bytes / ROW_BYTES
    }

    /** Gives back this object's references to the policy, selector and router. Idempotent. */
    @Synchronized
    override fun close() {
        lastRows = null
        cleanable.clean()
    }

    private fun encode(r: Request, hashes: LongArray?): ByteBuffer {
        val taints = r.preferredTaints
        val hits = r.sharedHits
        val size = REQUEST_HEADER_BYTES + 16 * (taints.size + (hits?.size ?: 0)) + 8 * (hashes?.size ?: 0)
        if (request.capacity() < size) {
            request = direct(size)
            requestAddress = DirectLib.address0(request)
        }
        val b = request
        var flags = 0
        if (r.trackPrefillTokens) flags = flags or 1
        if (r.conditionalDisagg) flags = flags or 2
        if (r.hasTierMatches) flags = flags or 4
        val pin = r.pin
        if (pin != null) flags = flags or 8
        if (hits != null) flags = flags or 16
        val session = r.session
        if (session != null) flags = flags or 32
        b.putLong(0, r.promptTokens.toLong())
        b.putInt(8, r.blockSize.toInt())
        b.putInt(12, r.role.ordinal)
        b.putInt(16, flags)
        b.putInt(20, pin?.dpRank?.toInt() ?: 0)
        b.putLong(24, pin?.workerId?.toLong() ?: 0L)
        b.putLong(32, r.requiredTaints.toLong())
        b.putLong(40, session?.toLong() ?: 0L)
        b.putInt(48, taints.size)
        b.putInt(52, hits?.size ?: 0)
        var at = REQUEST_HEADER_BYTES
        for (t in taints) {
            b.putInt(at, t.taint.toInt())
            b.putInt(at + 4, 0)
            b.putDouble(at + 8, t.weight)
            at += 16
        }
        for (h in hits.orEmpty()) {
            b.putLong(at, h.start.toLong())
            b.putLong(at + 8, h.end.toLong())
            at += 16
        }
        if (hashes != null) {
            b.position(at)
            b.asLongBuffer().put(hashes)
            b.position(0)
        }
        return b
    }

    private fun decode(): Selection {
        val o = out
        val scorers = o.getInt(28)
        val reason = when (o.getInt(20)) {
            0 -> PickReason.Pinned
            1 -> PickReason.MinCost(o.getInt(24).toUInt())
            2 -> PickReason.Sampled(o.getDouble(40))
            else -> PickReason.Custom
        }
        return Selection(
            row = o.getLong(0).toULong(),
            worker = Worker(o.getLong(8).toULong(), o.getInt(16).toUInt()),
            cost = o.getDouble(32),
            candidates = o.getLong(48).toULong(),
            reason = reason,
            requestBlocks = o.getLong(56).toULong(),
            cachedTokens = o.getLong(64).toULong(),
            contributions = List(scorers) { o.getDouble(OUTCOME_HEADER_BYTES + 8 * it) },
        )
    }

    /** The references this object owns, given back once: by [close] or by the cleaner. */
    private class Handles(val policy: Long, val selector: Long, val router: Long) : Runnable {
        @Volatile var closed = false

        override fun run() {
            closed = true
            DirectLib.release0(policy, selector, router)
        }
    }

    companion object {
        /** Bytes per row: the C `libroute_row`. */
        const val ROW_BYTES = 104

        /** The request's fixed part; its arrays follow (`ffi/uniffi/src/jni.rs`). */
        private const val REQUEST_HEADER_BYTES = 56

        /** The outcome's fixed part; the contributions follow. */
        private const val OUTCOME_HEADER_BYTES = 72

        /** The outcome: its fixed part and up to 16 contributions (`LIBROUTE_MAX_SCORERS`). */
        private const val OUTCOME_BYTES = OUTCOME_HEADER_BYTES + 8 * 16

        private val CLEANER: Cleaner = Cleaner.create()

        private fun direct(bytes: Int): ByteBuffer =
            ByteBuffer.allocateDirect(bytes).order(ByteOrder.LITTLE_ENDIAN)

        /** A direct buffer for [rows] rows in the C layout, little-endian (fill it with [packRows]'s layout). */
        @JvmStatic
        fun allocateRows(rows: Int): ByteBuffer = direct(rows * ROW_BYTES)

        /** [rows] packed into a new direct buffer: what [packRows] makes, off the heap. */
        @JvmStatic
        fun directRows(rows: List<Row>): ByteBuffer {
            val buffer = allocateRows(rows.size)
            buffer.put(packRows(rows))
            buffer.flip()
            return buffer
        }
    }
}

/**
 * The native methods of [DirectSelector], in `libroute_jvm`, which [NativeLoader] loaded for
 * uniffi's bindings and the JVM alike.
 */
internal object DirectLib {
    init {
        packedRowSize() // makes uniffi's bindings load the library, through NativeLoader
        if (NativeLoader.path == null) {
            // A library override, or JNA's own lookup: load that file for the JVM too.
            val name = System.getProperty("uniffi.component.libroute.libraryOverride") ?: "route_jvm"
            val file = NativeLibrary.getInstance(name).file
            if (file == null || !file.isFile) {
                throw UnsatisfiedLinkError(
                    "DirectSelector needs libroute_jvm as a file (in the JAR, or in jna.library.path); " +
                        "JNA found it as $name"
                )
            }
            System.load(file.absolutePath)
        }
    }

    /** Selects; [request], [rows] and [out] are addresses from [address0] of buffers the caller keeps. */
    @JvmStatic
    external fun select0(
        policy: Long,
        selector: Long,
        request: Long,
        requestCapacity: Int,
        rows: Long,
        rowsCapacity: Int,
        rowsOffset: Int,
        rowsCount: Int,
        out: Long,
        outCapacity: Int,
    ): Boolean

    /** The address of a direct buffer's memory. */
    @JvmStatic
    external fun address0(buffer: ByteBuffer): Long

    /** Routes; as [select0], with the router, the hashes after the request's arrays, and the time. */
    @JvmStatic
    external fun route0(
        router: Long,
        policy: Long,
        selector: Long,
        request: Long,
        requestCapacity: Int,
        hashes: Int,
        rows: Long,
        rowsCapacity: Int,
        rowsOffset: Int,
        rowsCount: Int,
        id: Long,
        timed: Boolean,
        now: Long,
        nowMs: Double,
        out: Long,
        outCapacity: Int,
    ): Boolean

    @JvmStatic
    external fun release0(policy: Long, selector: Long, router: Long)
}
