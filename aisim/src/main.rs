//! `cargo replay --engine aisimulate`: the replay of `cargo replay`, with NVIDIA's engine
//! simulator (aisimulate-core) in place of libroute's own fleet model.
//!
//! Each policy of the catalog routes the workload through simulated vLLM or SGLang workers, its
//! prefix index fed by the engines' own KV events (or, with `--approximate`, by the router's
//! predictions); the table shows what aisimulate measured. See `--help`.

// Why: a command-line tool: the table goes to stdout, progress and errors to stderr.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a command-line tool"
)]

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Instant;

use aisimulate_core::engine::Backend;
use libroute_aisim::bridge::Mode;
use libroute_aisim::run::{self, Engine, Routing, Summary, Timing};
use libroute_benches::sim::{self, Fleet, Synthetic, Trace};

const HELP: &str = "\
cargo replay --engine aisimulate [TRACE.jsonl] [options]

Replays a Mooncake-format trace (timestamp ms, input_length, output_length, hash_ids), or with no
TRACE the built-in synthetic workload, through NVIDIA's engine simulator (aisimulate-core 0.13:
continuous batching, chunked prefill, prefix caching with LRU eviction, KV events) under each
policy of libroute's catalog, routed by libroute's router, and prints cache hit rate (beside the
workload's ceiling), prefill imbalance, TTFT, inter-token latency and throughput.

Engine:     --backend vllm|sglang (vllm)  --workers N (8)  --kv-blocks N (16384 per worker)
            --block-size N (64 tokens)  --max-num-seqs N (256)  --max-batched-tokens N (8192)
            --timing polynomial|fixed:PREFILL_MS,DECODE_MS (polynomial: aisimulate's fitted
            curves, no GPU or profile data needed)
Load:       --load X (1: arrival times are divided by X)  --sweep X,Y,... (loads to compare)
            --limit N (replay only the first N requests)
Routing:    --approximate (no KV events: route on predictions, TTL --prediction-ttl-ms N, 120000)
Policies:   --policies FILE.json ({\"name\": {\"type\": ...}, ...}, added to the builtins)
            --only NAME,NAME,... (run only these)
Trace:      --block-tokens N (512: tokens per hash_id)
Synthetic:  --requests N (4000) --apps N (4) --system-blocks N (8) --sessions N (400)
            --zipf X (1.1) --turn-blocks N (2) --max-turns N (8) --rate X (20 per s)
            --output-tokens X (200) --seed N (42)
Output:     --json (machine-readable, with aisimulate's full report per run)  --svg DIR (hit
            rate, TTFT p90 and, with --sweep, TTFT p90 against load, as SVG files)";

struct Options {
    trace: Option<String>,
    engine: Engine,
    synthetic: Synthetic,
    block_tokens: u32,
    load: f64,
    sweep: Vec<f64>,
    limit: Option<usize>,
    approximate: bool,
    prediction_ttl_ms: u64,
    policies_file: Option<String>,
    only: Option<Vec<String>>,
    json: bool,
    svg: Option<String>,
}

fn timing(v: &str) -> Result<Timing, String> {
    if v == "polynomial" {
        return Ok(Timing::Polynomial);
    }
    let bad =
        || format!("--timing: {v:?} is neither `polynomial` nor `fixed:PREFILL_MS,DECODE_MS`");
    let (prefill, decode) = v
        .strip_prefix("fixed:")
        .and_then(|ms| ms.split_once(','))
        .ok_or_else(bad)?;
    let (prefill_ms, decode_ms): (f64, f64) = (
        prefill.parse().map_err(|_| bad())?,
        decode.parse().map_err(|_| bad())?,
    );
    if !(prefill_ms.is_finite() && decode_ms.is_finite() && prefill_ms >= 0.0 && decode_ms >= 0.0) {
        return Err(format!(
            "--timing: pass times must be finite and non-negative, not {v:?}"
        ));
    }
    Ok(Timing::Fixed {
        prefill_ms,
        decode_ms,
    })
}

#[allow(clippy::too_many_lines, reason = "one flag per arm")]
fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        trace: None,
        engine: Engine::default(),
        synthetic: Synthetic::default(),
        block_tokens: 512,
        load: 1.0,
        sweep: Vec::new(),
        limit: None,
        approximate: false,
        prediction_ttl_ms: 120_000,
        policies_file: None,
        only: None,
        json: false,
        svg: None,
    };
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        let mut value = || -> Result<&str, String> {
            i += 1;
            args.get(i)
                .map(String::as_str)
                .ok_or_else(|| format!("{a} needs a value"))
        };
        match a {
            "--backend" => {
                o.engine.backend = match value()? {
                    "vllm" => Backend::Vllm,
                    "sglang" => Backend::Sglang,
                    other => {
                        return Err(format!(
                            "--backend: {other:?} is not a backend (vllm or sglang)"
                        ));
                    }
                }
            }
            "--workers" => o.engine.workers = sim::number(a, value()?)?,
            "--kv-blocks" => o.engine.kv_blocks = sim::number(a, value()?)?,
            "--block-size" => o.engine.block_size = sim::number(a, value()?)?,
            "--max-num-seqs" => o.engine.max_num_seqs = sim::number(a, value()?)?,
            "--max-batched-tokens" => o.engine.max_num_batched_tokens = sim::number(a, value()?)?,
            "--timing" => o.engine.timing = timing(value()?)?,
            "--load" => o.load = sim::number(a, value()?)?,
            "--sweep" => {
                o.sweep = value()?
                    .split(',')
                    .map(|v| sim::number("--sweep", v))
                    .collect::<Result<_, _>>()?;
            }
            "--limit" => o.limit = Some(sim::number(a, value()?)?),
            "--approximate" => o.approximate = true,
            "--prediction-ttl-ms" => o.prediction_ttl_ms = sim::number(a, value()?)?,
            "--policies" => o.policies_file = Some(value()?.to_owned()),
            "--only" => o.only = Some(value()?.split(',').map(str::to_owned).collect()),
            "--json" => o.json = true,
            "--svg" => o.svg = Some(value()?.to_owned()),
            "--block-tokens" => o.block_tokens = sim::number(a, value()?)?,
            flag if Synthetic::FLAGS.contains(&flag) => o.synthetic.set(flag, value()?)?,
            flag if flag.starts_with('-') => {
                return Err(format!("unknown option {flag}\n\n{HELP}"));
            }
            path => {
                if o.trace.replace(path.to_owned()).is_some() {
                    return Err("give at most one trace".to_owned());
                }
            }
        }
        i += 1;
    }
    let positive = [("--load", o.load), ("--rate", o.synthetic.rate_per_s)];
    for (flag, v) in positive {
        if !(v.is_finite() && v > 0.0) {
            return Err(format!("{flag} must be a positive number, not {v}"));
        }
    }
    if o.sweep.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
        return Err("--sweep loads must be positive numbers".to_owned());
    }
    let counts = [
        ("--workers", o.engine.workers),
        ("--kv-blocks", o.engine.kv_blocks),
        ("--block-size", o.engine.block_size),
        ("--max-num-seqs", o.engine.max_num_seqs),
        ("--max-batched-tokens", o.engine.max_num_batched_tokens),
        ("--block-tokens", o.block_tokens as usize),
    ];
    for (flag, v) in counts {
        if v == 0 {
            return Err(format!("{flag} must be at least 1"));
        }
    }
    if o.engine.workers > libroute_aisim::bridge::MAX_SCHEDULERS {
        return Err(format!(
            "--workers: the bridge routes over at most {} workers",
            libroute_aisim::bridge::MAX_SCHEDULERS
        ));
    }
    if o.limit == Some(0) {
        return Err("--limit must be at least 1".to_owned());
    }
    o.synthetic.block_tokens = o.block_tokens;
    Ok(o)
}

fn policies(o: &Options) -> Result<Vec<(String, String)>, String> {
    let fleet = Fleet {
        cache_blocks: o.engine.kv_blocks as u64,
        ..Fleet::default()
    };
    let all = sim::choose_policies(
        sim::builtin_policies(&fleet),
        o.policies_file.as_deref(),
        o.only.as_deref(),
    )?;
    // Every policy is built once here, so a bad one is named before any replay starts.
    for (name, json) in &all {
        sim::policy(json).map_err(|e| format!("policy {name}: {e}"))?;
    }
    Ok(all)
}

/// The summaries as a table, in the shape of `cargo replay`'s.
fn table(rows: &[Summary]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<20} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>9} {:>6}",
        "policy",
        "hit",
        "ceiling",
        "imbalance",
        "ttft mean",
        "ttft p50",
        "ttft p90",
        "ttft p99",
        "itl",
        "out tok/s",
        "lost"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{:<20} {:>7.1}% {:>7.1}% {:>9.2} {:>7.0}ms {:>7.0}ms {:>7.0}ms {:>7.0}ms {:>6.1}ms {:>9.0} {:>6}",
            r.policy,
            100.0 * r.hit_rate,
            100.0 * r.hit_rate_ceiling,
            r.imbalance,
            r.ttft_mean_ms,
            r.ttft_p50_ms,
            r.ttft_p90_ms,
            r.ttft_p99_ms,
            r.itl_mean_ms,
            r.output_tok_s,
            r.lost
        );
    }
    out
}

#[allow(
    clippy::too_many_lines,
    reason = "the command's flow: read, replay, print, plot"
)]
fn main_inner() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{HELP}");
        return Ok(());
    }
    let o = parse(&args)?;
    let mut trace: Trace = match &o.trace {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
            sim::parse_mooncake(&text, o.block_tokens).map_err(|e| format!("{path}: {e}"))?
        }
        None => o.synthetic.generate(),
    };
    if let Some(limit) = o.limit {
        trace.requests.truncate(limit);
    }
    if trace.requests.is_empty() {
        return Err("the workload has no requests".to_owned());
    }
    let policies = policies(&o)?;
    let loads = if o.sweep.is_empty() {
        vec![o.load]
    } else {
        o.sweep.clone()
    };
    let source = o
        .trace
        .clone()
        .unwrap_or_else(|| "the built-in synthetic workload".to_owned());
    let ceiling = run::ceiling(&trace, o.engine.block_size).map_err(|e| e.to_string())?;
    let routing = Routing {
        mode: if o.approximate {
            Mode::Approximate {
                ttl_ms: o.prediction_ttl_ms,
            }
        } else {
            Mode::Exact
        },
    };
    let total = loads.len() * policies.len();
    let mut runs: Vec<(f64, Summary, serde_json::Value)> = Vec::new();
    let started = Instant::now();
    for (n, (load, (name, json))) in loads
        .iter()
        .flat_map(|l| policies.iter().map(move |p| (*l, p)))
        .enumerate()
    {
        eprintln!(
            "engine replay {}/{total}: {name} at load x{load} ({} requests, {:.0} s so far)",
            n + 1,
            trace.requests.len(),
            started.elapsed().as_secs_f64()
        );
        let (report, stats) = run::replay_libroute(&trace, load, &o.engine, json, routing)
            .map_err(|e| format!("policy {name} at load x{load}: {e:#}"))?;
        let summary = Summary::new(name, &report, ceiling, o.engine.workers);
        let mut full = serde_json::to_value(&report).map_err(|e| e.to_string())?;
        full["libroute_bridge"] = serde_json::to_value(stats).map_err(|e| e.to_string())?;
        runs.push((load, summary, full));
    }
    eprintln!(
        "engine replay: {total} replays in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    if o.json {
        let out: Vec<serde_json::Value> = runs
            .iter()
            .map(|(load, s, full)| serde_json::json!({"load": load, "report": s, "aisimulate": full}))
            .collect();
        let doc = serde_json::json!({
            "trace": source,
            "engine": o.engine,
            "mode": if o.approximate { "approximate" } else { "exact" },
            "runs": out,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?
        );
    } else {
        let backend = match o.engine.backend {
            Backend::Sglang => "SGLang",
            _ => "vLLM",
        };
        println!(
            "libroute engine replay (aisimulate-core 0.13): {} requests from {source}; {} {backend} \
             workers x {} blocks of {} tokens, {} timing, {} mode",
            trace.requests.len(),
            o.engine.workers,
            o.engine.kv_blocks,
            o.engine.block_size,
            match o.engine.timing {
                Timing::Polynomial => "polynomial".to_owned(),
                Timing::Fixed {
                    prefill_ms,
                    decode_ms,
                } => format!("fixed {prefill_ms}/{decode_ms} ms"),
            },
            if o.approximate {
                "approximate"
            } else {
                "exact"
            }
        );
        for load in &loads {
            let rows: Vec<Summary> = runs
                .iter()
                .filter(|(l, ..)| l == load)
                .map(|(_, s, _)| s.clone())
                .collect();
            println!("\nload x{load}:");
            print!("{}", table(&rows));
        }
        println!(
            "\nhit: prompt tokens found in the chosen worker's KV cache at admission (ceiling: one \
             infinite shared cache). imbalance: max/mean uncached prompt tokens per worker per 10 s \
             window. ttft, itl (mean per-request inter-token latency) and throughput as aisimulate \
             measured them. lost: requests the engine rejected."
        );
    }
    if let Some(dir) = &o.svg {
        std::fs::create_dir_all(dir).map_err(|e| format!("{dir}: {e}"))?;
        let last = loads[loads.len() - 1];
        let at: Vec<&Summary> = runs
            .iter()
            .filter(|(l, ..)| *l == last)
            .map(|(_, s, _)| s)
            .collect();
        let write = |name: &str, svg: String| {
            let path = format!("{dir}/{name}");
            std::fs::write(&path, svg).map_err(|e| format!("{path}: {e}"))?;
            eprintln!("engine replay: wrote {path}");
            Ok::<(), String>(())
        };
        write(
            "hit-rate.svg",
            sim::svg_bars(
                &format!("Prompt tokens served from cache (%), aisimulate, load x{last}"),
                &at.iter()
                    .map(|r| (r.policy.clone(), 100.0 * r.hit_rate))
                    .collect::<Vec<_>>(),
                Some(100.0 * ceiling),
            ),
        )?;
        write(
            "ttft-p90.svg",
            sim::svg_bars(
                &format!("TTFT p90 (ms), aisimulate, load x{last}"),
                &at.iter()
                    .map(|r| (r.policy.clone(), r.ttft_p90_ms))
                    .collect::<Vec<_>>(),
                None,
            ),
        )?;
        if loads.len() > 1 {
            let series: Vec<(String, Vec<(f64, f64)>)> = policies
                .iter()
                .map(|(name, _)| {
                    (
                        name.clone(),
                        runs.iter()
                            .filter(|(_, s, _)| &s.policy == name)
                            .map(|(l, s, _)| (*l, s.ttft_p90_ms))
                            .collect(),
                    )
                })
                .collect();
            write(
                "ttft-p90-vs-load.svg",
                sim::svg_lines(
                    "TTFT p90 (ms) against offered load (x), aisimulate",
                    &series,
                ),
            )?;
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    match main_inner() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("engine replay: {e}");
            ExitCode::FAILURE
        }
    }
}
