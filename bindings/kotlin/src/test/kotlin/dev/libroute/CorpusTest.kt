package dev.libroute

import java.io.File
import org.json.JSONArray
import org.json.JSONObject
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test

/** The golden corpus (testdata/README.md) through the Kotlin bindings, bit for bit. */
class CorpusTest {
    private val configErrors = setOf("InvalidJson", "UnknownKey", "InvalidKnob")

    private fun number(v: Any): Double = when (v) {
        is String -> v.toDouble() // "NaN", "inf" and "-inf" are spelled as strings
        is Number -> v.toString().toDouble()
        else -> error("not a number: $v")
    }

    private fun String.toDouble(): Double = when (this) {
        "NaN" -> Double.NaN
        "inf" -> Double.POSITIVE_INFINITY
        "-inf" -> Double.NEGATIVE_INFINITY
        else -> java.lang.Double.parseDouble(this)
    }

    private fun mask(taints: JSONArray): ULong =
        (0 until taints.length()).fold(0uL) { m, i -> m or (1uL shl taints.getInt(i)) }

    private fun errorName(e: RouteException): String {
        val name = e.javaClass.simpleName
        return if (name in configErrors) "invalid_config"
        else name.replace(Regex("(?<!^)(?=[A-Z])"), "_").lowercase()
    }

    private fun build(s: JSONObject): Pair<Request, List<Row>> {
        val r = s.getJSONObject("request")
        val preferred = r.optJSONArray("preferred_taints")?.let { a ->
            (0 until a.length()).map {
                val p = a.getJSONArray(it)
                PreferredTaint(p.getInt(0).toUInt(), number(p.get(1)))
            }
        } ?: listOf()
        val hits = r.optJSONArray("shared_hits")?.let { a ->
            (0 until a.length()).map {
                val h = a.getJSONArray(it)
                BlockRange(h.getLong(0).toULong(), h.getLong(1).toULong())
            }
        }
        val pin = r.optJSONArray("pin")?.let { Worker(it.getLong(0).toULong(), it.getInt(1).toUInt()) }
        val request = Request(
            promptTokens = r.getLong("prompt_tokens").toULong(),
            blockSize = r.getInt("block_size").toUInt(),
            role = Role.valueOf(r.getString("role").uppercase()),
            trackPrefillTokens = r.getBoolean("track_prefill_tokens"),
            conditionalDisagg = r.getBoolean("conditional_disagg"),
            hasTierMatches = r.getBoolean("has_tier_matches"),
            requiredTaints = mask(r.getJSONArray("required_taints")),
            preferredTaints = preferred,
            sharedHits = hits,
            pin = pin,
        )
        val candidates = s.getJSONArray("candidates")
        val rows = (0 until candidates.length()).map {
            val c = candidates.getJSONObject(it)
            val cache = c.optJSONObject("cache")?.let { k ->
                RowCache(
                    k.getInt("device").toUInt(), k.getInt("host").toUInt(), k.getInt("disk").toUInt(),
                    number(k.get("effective_blocks")), k.getLong("effective_tokens").toULong(),
                )
            }
            val load = c.optJSONObject("load")?.let { l ->
                RowLoad(
                    l.getLong("active_prefill_tokens").toULong(),
                    l.getLong("active_decode_blocks").toULong(),
                    l.getLong("active_requests").toULong(),
                )
            }
            Row(
                Worker(c.getLong("worker").toULong(), c.getInt("rank").toUInt()),
                mask(c.getJSONArray("taints")), c.getBoolean("overloaded"), cache, load,
            )
        }
        return request to rows
    }

    private fun run(s: JSONObject): List<String> {
        val name = s.getString("name")
        val expect = s.getJSONObject("expect")
        val want = if (expect.isNull("error")) null else expect.optString("error")
        val problems = mutableListOf<String>()
        val policy = try {
            Policy(s.getJSONObject("policy").toString())
        } catch (e: RouteException) {
            if (want != "invalid_config") problems += "$name: error: expected $want, actual $e"
            return problems
        }
        val (request, rows) = build(s)
        val selector = Selector(4096u, 1uL)
        val got = try {
            selector.select(policy, request, rows); null
        } catch (e: RouteException) {
            errorName(e)
        }
        if (got != want) problems += "$name: error: expected $want, actual $got"
        // The packed path must decide, and fail, exactly as the records do.
        val packed = Selector(4096u, 1uL)
        val gotPacked = try {
            packed.selectPacked(policy, request, packRows(rows)); null
        } catch (e: RouteException) {
            errorName(e)
        }
        if (gotPacked != got) problems += "$name: packed error: expected $got, actual $gotPacked"
        // So must the JNI fast path over a direct buffer, with the same selection.
        val direct = Selector(4096u, 1uL)
        val viaJni = try {
            DirectSelector(policy, direct).use { it.select(request, DirectSelector.directRows(rows)) }
        } catch (e: RouteException) {
            errorName(e)
        }
        val expected = if (got == null) Selector(4096u, 1uL).select(policy, request, rows) else null
        if (viaJni is String && viaJni != got) problems += "$name: direct error: expected $got, actual $viaJni"
        if (viaJni is Selection && viaJni != expected) problems += "$name: direct: expected $expected, actual $viaJni"
        if (got != null) return problems
        if (packed.lastCosts() != selector.lastCosts()) problems += "$name: packed costs differ"
        if (direct.lastCosts() != selector.lastCosts()) problems += "$name: direct costs differ"
        val cost = selector.lastCosts().associate { it.row.toInt() to it.cost }
        expect.optJSONArray("cost_bits")?.let { bits ->
            for (i in 0 until bits.length()) {
                val expected = if (bits.isNull(i)) null else bits.getString(i)
                val actual = cost[i]?.let { String.format("%016x", java.lang.Double.doubleToRawLongBits(it)) }
                if (expected != actual) problems += "$name: cost_bits[$i]: expected $expected, actual $actual"
            }
        }
        expect.optJSONArray("argmin")?.let { argmin ->
            val low = cost.values.minOrNull()
            val actual = cost.filterValues { it == low }.keys
                .map { listOf(rows[it].worker.workerId.toLong(), rows[it].worker.dpRank.toLong()) }
                .sortedWith(compareBy({ it[0] }, { it[1] }))
            val expected = (0 until argmin.length()).map {
                val w = argmin.getJSONArray(it); listOf(w.getLong(0), w.getLong(1))
            }
            if (actual != expected) problems += "$name: argmin: expected $expected, actual $actual"
        }
        expect.optJSONObject("picks")?.let { picks ->
            val knobs = s.getJSONObject("policy")
            knobs.put("seed", picks.getLong("seed"))
            knobs.put("temperature", picks.getDouble("temperature"))
            val seeded = Policy(knobs.toString())
            val fresh = Selector(4096u, 1uL)
            val viaJni = DirectSelector(seeded, Selector(4096u, 1uL))
            val directRows = DirectSelector.directRows(rows)
            val sequence = picks.getJSONArray("sequence")
            for (k in 0 until sequence.length()) {
                val w = sequence.getJSONArray(k)
                val chosen = fresh.select(seeded, request, rows).worker
                val direct = viaJni.select(request, directRows).worker
                if (direct != chosen) {
                    problems += "$name: direct picks.sequence[$k]: expected $chosen, actual $direct"
                    break
                }
                if (chosen.workerId.toLong() != w.getLong(0) || chosen.dpRank.toLong() != w.getLong(1)) {
                    problems += "$name: picks.sequence[$k]: expected $w, actual $chosen"
                    break
                }
            }
        }
        return problems
    }

    @Test
    fun goldenCorpusBitForBit() {
        val dir = File(System.getProperty("libroute.corpus") ?: "../../testdata/scenarios")
        val files = dir.listFiles { f -> f.name.endsWith(".jsonl") }?.sorted() ?: listOf()
        assertTrue(files.size >= 4, "corpus not found in $dir")
        val problems = mutableListOf<String>()
        var n = 0
        for (f in files) for (line in f.readLines()) if (line.isNotBlank()) {
            problems += run(JSONObject(line)); n++
        }
        assertTrue(n >= 60, "only $n scenarios")
        assertTrue(problems.isEmpty(), problems.joinToString("\n"))
    }
}
