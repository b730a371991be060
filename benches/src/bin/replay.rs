//! `cargo replay`: replays a request trace through a simulated fleet under each policy of
//! libroute's catalog and compares cache hit rate, load balance and latency.
//!
//! With no trace it runs the built-in synthetic workload. See `--help` and `benches/src/sim.rs`
//! for the model and every constant.

// Why: a command-line tool: the table goes to stdout, progress and errors to stderr.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a command-line tool"
)]

use std::io::Write as _;
use std::process::ExitCode;

use libroute_benches::sim::{self, Fleet, Report, Synthetic, Trace};

const HELP: &str = "\
cargo replay [TRACE.jsonl] [options]
cargo replay --engine aisimulate [TRACE.jsonl] [options]   (see cargo replay --engine aisimulate --help)

Replays a Mooncake-format trace (timestamp ms, input_length, output_length, hash_ids), or with no
TRACE the built-in synthetic workload, through a simulated fleet under each policy, and prints
cache hit rate (beside the trace's ceiling), load imbalance, TTFT and inter-token proxies.

Fleet:      --workers N (8)  --cache-blocks N (2048)  --block-tokens N (512)
            --prefill-base-ms X (5)  --prefill-ms-per-token X (0.05)
            --decode-base-ms X (10)  --decode-ms-per-token X (0.0002)
            --load X (1: arrival times are divided by X)  --sweep X,Y,... (loads to compare)
            --approximate (route on predictions, TTL --prediction-ttl-ms N, 120000)
Policies:   --policies FILE.json ({\"name\": {\"type\": ...}, ...}, added to the builtins)
            --only NAME,NAME,... (run only these)
Synthetic:  --requests N (4000) --apps N (4) --system-blocks N (8) --sessions N (400)
            --zipf X (1.1) --turn-blocks N (2) --max-turns N (8) --rate X (20 per s) --output-tokens X (200)
            --seed N (42)
Output:     --json (machine-readable reports)  --svg DIR (hit rate, TTFT p90 and, with --sweep,
            TTFT p90 against load, as SVG files)
Engine:     --engine fleet (this fleet model, the default) or aisimulate (NVIDIA's engine
            simulator, aisimulate-core, through the bridge in aisim/: built on first use)";

struct Options {
    trace: Option<String>,
    fleet: Fleet,
    synthetic: Synthetic,
    block_tokens: u32,
    sweep: Vec<f64>,
    policies_file: Option<String>,
    only: Option<Vec<String>>,
    json: bool,
    svg: Option<String>,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        trace: None,
        fleet: Fleet::default(),
        synthetic: Synthetic::default(),
        block_tokens: 512,
        sweep: Vec::new(),
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
            "--workers" => o.fleet.workers = sim::number(a, value()?)?,
            "--cache-blocks" => o.fleet.cache_blocks = sim::number(a, value()?)?,
            "--block-tokens" => o.block_tokens = sim::number(a, value()?)?,
            "--prefill-base-ms" => o.fleet.prefill_base_ms = sim::number(a, value()?)?,
            "--prefill-ms-per-token" => o.fleet.prefill_ms_per_token = sim::number(a, value()?)?,
            "--decode-base-ms" => o.fleet.decode_base_ms = sim::number(a, value()?)?,
            "--decode-ms-per-token" => o.fleet.decode_ms_per_token = sim::number(a, value()?)?,
            "--load" => o.fleet.load = sim::number(a, value()?)?,
            "--sweep" => {
                o.sweep = value()?
                    .split(',')
                    .map(|v| sim::number("--sweep", v))
                    .collect::<Result<_, _>>()?;
            }
            "--approximate" => o.fleet.approximate = true,
            "--prediction-ttl-ms" => o.fleet.prediction_ttl_ms = sim::number(a, value()?)?,
            "--policies" => o.policies_file = Some(value()?.to_owned()),
            "--only" => o.only = Some(value()?.split(',').map(str::to_owned).collect()),
            "--json" => o.json = true,
            "--svg" => o.svg = Some(value()?.to_owned()),
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
    let positive = [("--load", o.fleet.load), ("--rate", o.synthetic.rate_per_s)];
    for (flag, v) in positive {
        if !(v.is_finite() && v > 0.0) {
            return Err(format!("{flag} must be a positive number, not {v}"));
        }
    }
    if o.sweep.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
        return Err("--sweep loads must be positive numbers".to_owned());
    }
    if o.block_tokens == 0 || o.fleet.cache_blocks == 0 {
        return Err("--block-tokens and --cache-blocks must be at least 1".to_owned());
    }
    o.synthetic.block_tokens = o.block_tokens;
    Ok(o)
}

fn policies(o: &Options) -> Result<Vec<(String, String)>, String> {
    sim::choose_policies(
        sim::builtin_policies(&o.fleet),
        o.policies_file.as_deref(),
        o.only.as_deref(),
    )
}

#[allow(
    clippy::too_many_lines,
    reason = "the command's flow: read, replay, print, plot"
)]
fn run(args: &[String]) -> Result<(), String> {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{HELP}");
        return Ok(());
    }
    let o = parse(args)?;
    let trace: Trace = match &o.trace {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
            sim::parse_mooncake(&text, o.block_tokens)?
        }
        None => o.synthetic.generate(),
    };
    let policies = policies(&o)?;
    let loads = if o.sweep.is_empty() {
        vec![o.fleet.load]
    } else {
        o.sweep.clone()
    };
    let source = o
        .trace
        .clone()
        .unwrap_or_else(|| "the built-in synthetic workload".to_owned());
    let mut runs: Vec<(f64, Report)> = Vec::new();
    let total = loads.len() * policies.len();
    for (n, (load, (name, json))) in loads
        .iter()
        .flat_map(|l| policies.iter().map(move |p| (*l, p)))
        .enumerate()
    {
        if total > 1 {
            eprint!(
                "\rreplay: {}/{total} {name} at load {load}          ",
                n + 1
            );
            let _ = std::io::stderr().flush();
        }
        let policy = sim::policy(json).map_err(|e| format!("policy {name}: {e}"))?;
        let fleet = Fleet { load, ..o.fleet };
        runs.push((load, sim::replay(name, &trace, &fleet, &policy)?));
    }
    if total > 1 {
        eprintln!();
    }
    if o.json {
        let out: Vec<serde_json::Value> = runs
            .iter()
            .map(|(load, r)| serde_json::json!({"load": load, "report": r}))
            .collect();
        let doc = serde_json::json!({"trace": source, "fleet": o.fleet, "runs": out});
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?
        );
    } else {
        println!(
            "libroute replay: {} requests from {source}; {} workers x {} blocks of {} tokens, {} mode",
            trace.requests.len(),
            o.fleet.workers,
            o.fleet.cache_blocks,
            trace.block_tokens,
            if o.fleet.approximate {
                "approximate"
            } else {
                "exact"
            }
        );
        for load in &loads {
            let reports: Vec<Report> = runs
                .iter()
                .filter(|(l, _)| l == load)
                .map(|(_, r)| r.clone())
                .collect();
            println!("\nload x{load}:");
            print!("{}", sim::table(&reports));
        }
        println!(
            "\nhit: prompt tokens served from cache (ceiling: one infinite shared cache). imbalance: \
             max/mean busy time per 10 s window. ttft: queue wait + prefill. itl: decode time per \
             output token. lost: requests larger than a worker's cache (not admitted)."
        );
    }
    if let Some(dir) = &o.svg {
        std::fs::create_dir_all(dir).map_err(|e| format!("{dir}: {e}"))?;
        let last = loads[loads.len() - 1];
        let at: Vec<&Report> = runs
            .iter()
            .filter(|(l, _)| *l == last)
            .map(|(_, r)| r)
            .collect();
        let write = |name: &str, svg: String| {
            let path = format!("{dir}/{name}");
            std::fs::write(&path, svg).map_err(|e| format!("{path}: {e}"))?;
            eprintln!("replay: wrote {path}");
            Ok::<(), String>(())
        };
        write(
            "hit-rate.svg",
            sim::svg_bars(
                &format!("Prompt tokens served from cache (%), load x{last}"),
                &at.iter()
                    .map(|r| (r.policy.clone(), 100.0 * r.hit_rate))
                    .collect::<Vec<_>>(),
                at.first().map(|r| 100.0 * r.hit_rate_ceiling),
            ),
        )?;
        write(
            "ttft-p90.svg",
            sim::svg_bars(
                &format!("TTFT p90 (ms), load x{last}"),
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
                            .filter(|(_, r)| &r.policy == name)
                            .map(|(l, r)| (*l, r.ttft_p90_ms))
                            .collect(),
                    )
                })
                .collect();
            write(
                "ttft-p90-vs-load.svg",
                sim::svg_lines("TTFT p90 (ms) against offered load (x)", &series),
            )?;
        }
    }
    Ok(())
}

/// Runs the engine replay of `aisim/` (its own workspace, so aisimulate-core's dependencies
/// stay out of this one) with `args`, through cargo so it is built when missing or stale.
fn engine_replay(args: &[String]) -> ExitCode {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("aisim")
        .join("Cargo.toml");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = std::process::Command::new(&cargo)
        .args(["run", "--release", "--manifest-path"])
        .arg(&manifest)
        .args(["--bin", "engine-replay", "--"])
        .args(args)
        .status();
    match status {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!(
                "replay: cannot run {} for the engine replay ({}): {e}",
                cargo.to_string_lossy(),
                manifest.display()
            );
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(at) = args.iter().position(|a| a == "--engine") {
        let Some(engine) = args.get(at + 1).cloned() else {
            eprintln!("replay: --engine needs a value (fleet or aisimulate)");
            return ExitCode::FAILURE;
        };
        args.drain(at..at + 2);
        match engine.as_str() {
            "fleet" => {}
            "aisimulate" => return engine_replay(&args),
            other => {
                eprintln!("replay: --engine: {other:?} is not an engine (fleet or aisimulate)");
                return ExitCode::FAILURE;
            }
        }
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("replay: {e}");
            ExitCode::FAILURE
        }
    }
}
