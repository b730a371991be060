//! Fuzz campaigns that accumulate: every cargo-fuzz target starts from its committed corpus
//! (`fuzz/corpus/<target>/`) with its dictionary (`fuzz/dict/<target>.dict`, when it has one); a
//! campaign merges what it found back into the committed corpus, minimized with `cargo fuzz
//! cmin`, and appends what it did to `fuzz/CAMPAIGNS.md`. CI's short run starts from the same
//! corpora and writes nothing back.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::{Result, root, run, run_keeping, succeeds};

const USAGE: &str = "usage: cargo xtask fuzz [--time SECONDS] [--runs N] [--target NAME]... [--sanitizer address|none]";

/// What a campaign runs: each target for at most `seconds` and at most `runs` inputs, with
/// AddressSanitizer unless `no_sanitizer`.
struct Plan {
    seconds: Option<u64>,
    runs: Option<u64>,
    targets: Vec<String>,
    no_sanitizer: bool,
}

/// `cargo xtask fuzz`: a campaign, recorded (60 s per target when neither limit is given).
pub(crate) fn campaign(args: &[String]) -> Result {
    let mut plan = Plan {
        seconds: None,
        runs: None,
        targets: Vec::new(),
        no_sanitizer: false,
    };
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .ok_or_else(|| format!("{flag} needs a value; {USAGE}"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| format!("{flag} takes a whole number, not {value:?}"))
        };
        match flag.as_str() {
            "--time" => plan.seconds = Some(number()?),
            "--runs" => plan.runs = Some(number()?),
            "--target" => plan.targets.push(value.clone()),
            "--sanitizer" => match value.as_str() {
                "address" => plan.no_sanitizer = false,
                // For targets whose code has no `unsafe` (everything but `abi` and `config`,
                // which reach the C ABI's): bounds, overflow and debug checks stay on, at two to
                // three times ASan's speed.
                "none" => plan.no_sanitizer = true,
                other => return Err(format!("--sanitizer is address or none, not {other:?}")),
            },
            _ => return Err(format!("unknown option {flag:?}; {USAGE}")),
        }
    }
    if plan.seconds.is_none() && plan.runs.is_none() {
        plan.seconds = Some(60);
    }
    fuzz(&plan, true)
}

/// CI's short run: every target for `seconds` from the committed corpora, nothing recorded.
pub(crate) fn short(seconds: u64) -> Result {
    let plan = Plan {
        seconds: Some(seconds),
        runs: None,
        targets: Vec::new(),
        no_sanitizer: false,
    };
    fuzz(&plan, false)
}

/// What one target's run did, from libFuzzer's final statistics.
#[derive(Default)]
struct Outcome {
    executions: u64,
    exec_per_sec: u64,
    edges: u64,
    features: u64,
    new_entries: u64,
    corpus_before: usize,
    corpus_after: usize,
    seconds: u64,
    findings: Vec<String>,
}

fn fuzz(plan: &Plan, record: bool) -> Result {
    let dir = root().join("fuzz");
    if !succeeds(Command::new(env!("CARGO")).args(["fuzz", "--version"])) {
        run(Command::new(env!("CARGO")).args([
            "install",
            "cargo-fuzz",
            "--version",
            "^0.13",
            "--locked",
        ]))
        .map_err(|e| format!("cargo-fuzz is not installed and could not be: {e}"))?;
    }
    let nightly = succeeds(Command::new("rustup").args(["run", "nightly", "rustc", "--version"]));
    let asan = nightly && !plan.no_sanitizer;
    let mut targets = names(&dir.join("fuzz_targets"), "rs")?;
    if let Some(unknown) = plan.targets.iter().find(|t| !targets.contains(t)) {
        return Err(format!(
            "no fuzz target {unknown:?}; the targets are {}",
            targets.join(", ")
        ));
    }
    if !plan.targets.is_empty() {
        targets.retain(|t| plan.targets.contains(t));
    }
    let sanitizer = if asan { "address" } else { "none" };
    let mut outcomes = Vec::new();
    let mut failures = Vec::new();
    for target in &targets {
        eprintln!(
            "fuzz: {target} ({}, sanitizer {sanitizer}){}",
            limits(plan),
            if nightly {
                ""
            } else {
                " on stable: no nightly toolchain"
            }
        );
        let (outcome, result) = run_target(&dir, target, plan, nightly, asan, record)?;
        if let Err(e) = result {
            failures.push(format!("{target}: {e}"));
        }
        outcomes.push((target.clone(), outcome));
    }
    // The same rows the record gets, also when nothing is recorded.
    eprintln!(
        "fuzz: {}",
        CAMPAIGNS_COLUMNS.lines().next().unwrap_or_default()
    );
    for (target, o) in &outcomes {
        eprintln!("fuzz: {}", o.row(&today(), target, sanitizer));
    }
    if record {
        append_campaign(&dir.join("CAMPAIGNS.md"), sanitizer, &outcomes)?;
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "fuzzing failed (each finding is in fuzz/artifacts/<target>/; replay it with \
             `cargo fuzz run <target> <file>` and add it to fuzz/regressions/): {}",
            failures.join("; ")
        ))
    }
}

fn limits(plan: &Plan) -> String {
    match (plan.seconds, plan.runs) {
        (Some(s), Some(r)) => format!("{s} s or {r} runs"),
        (Some(s), None) => format!("{s} s"),
        (None, Some(r)) => format!("{r} runs"),
        (None, None) => "no limit".to_owned(),
    }
}

fn findings(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

/// Runs one target: libFuzzer writes new inputs into a scratch corpus and reads the committed one
/// beside it; a recorded campaign then merges the scratch corpus in and minimizes the result.
fn run_target(
    dir: &Path,
    target: &str,
    plan: &Plan,
    nightly: bool,
    asan: bool,
    record: bool,
) -> Result<(Outcome, Result)> {
    let committed = dir.join("corpus").join(target);
    let scratch = dir.join("target/scratch-corpus").join(target);
    let artifacts = dir.join("artifacts").join(target);
    let _ = std::fs::remove_dir_all(&scratch);
    for d in [&committed, &scratch, &artifacts] {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    let artifacts_before = names(&artifacts, "")?;
    let mut outcome = Outcome {
        corpus_before: names(&committed, "")?.len(),
        ..Outcome::default()
    };
    let mut cmd = fuzz_command(dir, "run", target, nightly, asan);
    cmd.arg(&scratch).arg(&committed).arg("--");
    let dict = dir.join("dict").join(format!("{target}.dict"));
    if dict.exists() {
        cmd.arg(format!("-dict={}", dict.display()));
    }
    if let Some(s) = plan.seconds {
        cmd.arg(format!("-max_total_time={s}"));
    }
    if let Some(r) = plan.runs {
        cmd.arg(format!("-runs={r}"));
    }
    cmd.arg("-print_final_stats=1");
    let started = Instant::now();
    let (result, lines) = run_keeping(&mut cmd, true);
    outcome.seconds = started.elapsed().as_secs();
    read_stats(&lines, &mut outcome);
    outcome.findings = names(&artifacts, "")?
        .into_iter()
        .filter(|a| !artifacts_before.contains(a))
        .collect();
    if record && result.is_ok() {
        for entry in names(&scratch, "")? {
            std::fs::copy(scratch.join(&entry), committed.join(&entry))
                .map_err(|e| format!("{entry}: {e}"))?;
        }
        run(fuzz_command(dir, "cmin", target, nightly, asan).arg(&committed))?;
    }
    outcome.corpus_after = names(&committed, "")?.len();
    Ok((outcome, result))
}

/// `cargo fuzz` from `fuzz/`: on nightly when there is a nightly toolchain, otherwise on stable;
/// with AddressSanitizer when `asan`.
fn fuzz_command(dir: &Path, verb: &str, target: &str, nightly: bool, asan: bool) -> Command {
    let mut cmd = Command::new("cargo");
    if nightly {
        cmd.arg("+nightly");
    }
    cmd.args(["fuzz", verb]);
    if !asan {
        // Apart from the ASan build, so runs of both kinds do not rebuild each other's.
        cmd.args(["-s", "none", "--target-dir"])
            .arg(dir.join("target/no-sanitizer"));
    }
    cmd.arg(target).current_dir(dir);
    cmd
}

/// libFuzzer's final statistics (`-print_final_stats=1`) and its last status line's coverage.
fn read_stats(lines: &[String], o: &mut Outcome) {
    let stat = |name: &str| {
        lines.iter().rev().find_map(|l| {
            l.strip_prefix(name)?
                .trim_start_matches(':')
                .trim()
                .parse::<u64>()
                .ok()
        })
    };
    o.executions = stat("stat::number_of_executed_units").unwrap_or(0);
    o.exec_per_sec = stat("stat::average_exec_per_sec").unwrap_or(0);
    o.new_entries = stat("stat::new_units_added").unwrap_or(0);
    let field = |line: &str, key: &str| {
        let rest = &line[line.find(key)? + key.len()..];
        rest.split_whitespace().next()?.parse::<u64>().ok()
    };
    if let Some(last) = lines.iter().rev().find(|l| l.contains(" cov: ")) {
        o.edges = field(last, " cov: ").unwrap_or(0);
        o.features = field(last, " ft: ").unwrap_or(0);
    }
}

/// The file names in `dir` (those ending in `.{ext}`, without it, when `ext` is not empty),
/// sorted.
fn names(dir: &Path, ext: &str) -> Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| {
            let path: PathBuf = e.ok()?.path();
            if !path.is_file() {
                return None;
            }
            if ext.is_empty() {
                return Some(path.file_name()?.to_string_lossy().into_owned());
            }
            (path.extension()? == ext)
                .then(|| path.file_stem().map(|s| s.to_string_lossy().into_owned()))?
        })
        .collect();
    names.sort();
    Ok(names)
}

const CAMPAIGNS_HEADER: &str = "# Fuzz campaigns

Each row is one target's run in a campaign (`cargo xtask fuzz --time S` or `--runs N`; see
README, \"Fuzzing\"), appended by the xtask. A run starts from the committed corpus
(`fuzz/corpus/<target>/`) and the target's dictionary (`fuzz/dict/`), writes new inputs to a
scratch corpus, and merges them back minimized with `cargo fuzz cmin`, so the next campaign starts
where this one stopped. Edges and features are libFuzzer's `cov` and `ft` at the end of the run
(edges of the instrumented code reached; features also count hit-count buckets and compared
values), counted in the build that ran: they compare only between runs with the same sanitizer
(ASan's instrumentation has edges of its own). New entries are the inputs the run added to its
scratch corpus before minimization.
Findings are the artifacts a run wrote; each one becomes a regression test
(`fuzz/tests/regressions.rs`).

";

/// The record's column heads and alignment.
const CAMPAIGNS_COLUMNS: &str = "| Date | Target | Sanitizer | Seconds | Executions | Exec/s | Edges | Features | New entries | Corpus (before -> after cmin) | Findings |
|---|---|---|---:|---:|---:|---:|---:|---:|---|---|
";

impl Outcome {
    /// This run's row of the record.
    fn row(&self, date: &str, target: &str, sanitizer: &str) -> String {
        format!(
            "| {date} | {target} | {sanitizer} | {} | {} | {} | {} | {} | {} | {} -> {} | {} |",
            self.seconds,
            self.executions,
            self.exec_per_sec,
            self.edges,
            self.features,
            self.new_entries,
            self.corpus_before,
            self.corpus_after,
            findings(&self.findings)
        )
    }
}

/// Today's date (UTC), as `date` prints it.
fn today() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%d"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map_or_else(|| "unknown".to_owned(), |d| d.trim().to_owned())
}

fn append_campaign(path: &Path, sanitizer: &str, outcomes: &[(String, Outcome)]) -> Result {
    use std::io::Write as _;
    let date = today();
    let mut text = String::new();
    if !path.exists() {
        text.push_str(CAMPAIGNS_HEADER);
        text.push_str(CAMPAIGNS_COLUMNS);
    }
    for (target, o) in outcomes {
        let _ = writeln!(text, "{}", o.row(&date, target, sanitizer));
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| format!("{}: {e}", path.display()))
}
