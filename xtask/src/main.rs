//! `cargo xtask <verb>`: the project's automation, in Rust so it runs wherever cargo does.
//!
//! Verbs:
//!
//! - `ci`: everything CI checks, in order (format, clippy with warnings denied, all tests, the
//!   corpus, the no_std and no-alloc proofs, MSRV, the package check, a short fuzz run, the demo).
//! - `codegen [--check]`: write (or check fresh) the C header and the uniffi bindings.
//! - `scenarios PATH...`: evaluate golden-corpus files with the core; one line per mismatch.
//! - `c-tests`, `consumers`, `go`, `python`, `kotlin [--bench]`, `swift`: each language's tests.
//! - `check`: the no_std proofs (bare-metal link without an allocator, dependency features).
//! - `package`: `cargo package` every publishable crate and check what each would ship.
//! - `fuzz [--time SECONDS] [--runs N] [--target NAME]... [--sanitizer address|none]`: a fuzz
//!   campaign over every target (or those named), from the committed corpora, recorded in
//!   `fuzz/CAMPAIGNS.md`.
//! - `soak [--requests N]`: route N requests (10 million by default) through one `Router`.
//! - `bench`: run the criterion benchmarks.
//! - `aisim`: the engine simulator bridge's own workspace (`aisim/`): format, clippy, tests.
//! - `nats`: the replicas crate's own workspace (`nats/`): installs `nats-server` when missing,
//!   then format, clippy, its tests against a real server, and the replicas example on 1,000
//!   requests of the conversation trace.
//! - `replicas [ARGS]`: the replicas example (`cargo run --release --example replicas` in `nats/`)
//!   with `nats-server` installed first; ARGS go to the example (`-- --help`).

// Why: a command-line tool reports progress and failures on stderr.
#![allow(
    clippy::print_stderr,
    reason = "xtask is a CLI; stderr is its progress log"
)]
// Why: these docs name tools and targets (no_std, cargo-fuzz) as prose, not code items.
#![allow(clippy::doc_markdown, reason = "tool names in prose")]

mod codegen;
mod fuzz;
mod native;
mod scenarios;

/// One named step of `cargo xtask ci`.
type Step<'a> = (&'a str, Box<dyn Fn() -> Result>);

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

pub(crate) type Result<T = ()> = std::result::Result<T, String>;

const USAGE: &str = "usage: cargo xtask <ci | codegen [--check] | scenarios PATH... | check | \
                     dist --prefix DIR | c-tests | consumers | go | python | kotlin [--bench] | swift | \
                     package | fuzz [--time SECONDS] [--runs N] [--target NAME]... [--sanitizer address|none] | \
                     soak [--requests N] | bench | aisim | nats | replicas [ARGS]>";

/// The bare-metal target the no_std proof links for.
const BARE_METAL: &str = "thumbv7em-none-eabihf";

/// The oldest Rust the workspace supports (`rust-version` in Cargo.toml; kept equal by a test).
const MSRV: &str = "1.85.0";

/// Crates `cargo package` must be able to publish.
const PUBLISHABLE: &[(&str, &[&str])] = &[
    (
        "libroute-core",
        &["README.md", "LICENSE-MIT", "LICENSE-APACHE", "src/lib.rs"],
    ),
    (
        "libroute-ffi",
        &[
            "README.md",
            "LICENSE-MIT",
            "LICENSE-APACHE",
            "src/lib.rs",
            "include/libroute.h",
        ],
    ),
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("scenarios") => run_scenarios(&args[1..]),
        Some("codegen") => match &args[1..] {
            [] => codegen::codegen(false),
            [flag] if flag == "--check" => codegen::codegen(true),
            _ => Err("usage: cargo xtask codegen [--check]".to_owned()),
        },
        Some("check") => check(),
        Some("dist") => match &args[1..] {
            [flag, prefix] if flag == "--prefix" => native::dist(Path::new(prefix)),
            _ => Err("usage: cargo xtask dist --prefix DIR".to_owned()),
        },
        Some("c-tests") => native::c_tests(),
        Some("consumers") => native::consumers(),
        Some("go") => native::go_tests(),
        Some("python") => native::python_tests(),
        Some("kotlin") => match &args[1..] {
            [] => native::kotlin_tests(false),
            [flag] if flag == "--bench" => native::kotlin_tests(true),
            _ => Err("usage: cargo xtask kotlin [--bench]".to_owned()),
        },
        Some("swift") => native::swift_tests(),
        Some("package") => package(),
        Some("fuzz") => fuzz::campaign(&args[1..]),
        Some("soak") => soak(&args[1..]),
        Some("bench") => cargo(&["bench", "-p", "libroute-benches"]),
        Some("aisim") => aisim(),
        Some("nats") => nats(),
        Some("replicas") => replicas(&args[1..]),
        _ => Err(USAGE.to_owned()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// How many of the newest output lines `run` keeps for the failure summary of `ci`.
const TAIL_LINES: usize = 60;

/// The newest lines the commands of the current step printed (stdout and stderr interleaved as
/// read), so that `ci` can repeat a failed step's output at the very end of its log, where a
/// truncated CI log still shows it.
static TAIL: std::sync::Mutex<std::collections::VecDeque<String>> =
    std::sync::Mutex::new(std::collections::VecDeque::new());

fn remember(line: String) {
    let mut tail = TAIL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if tail.len() == TAIL_LINES {
        tail.pop_front();
    }
    tail.push_back(line);
}

fn take_tail() -> Vec<String> {
    TAIL.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .drain(..)
        .collect()
}

/// Copies `from` to `to` line by line, remembering each line for the failure summary; returns
/// the lines when `keep`.
fn tee(from: impl std::io::Read, mut to: impl std::io::Write, keep: bool) -> Vec<String> {
    use std::io::BufRead;
    let mut reader = std::io::BufReader::new(from);
    let mut line = Vec::new();
    let mut kept = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return kept,
            Ok(_) => {
                // A closed terminal must not stop the child: keep draining its pipe.
                let _ = to.write_all(&line).and_then(|()| to.flush());
                let text = String::from_utf8_lossy(&line).trim_end().to_owned();
                if keep {
                    kept.push(text.clone());
                }
                remember(text);
            }
        }
    }
}

/// Runs `cmd` with its output passed through (and remembered), and fails naming the command.
pub(crate) fn run(cmd: &mut Command) -> Result {
    run_keeping(cmd, false).0
}

/// [`run`], also returning the lines the command wrote to stderr when `keep`.
pub(crate) fn run_keeping(cmd: &mut Command, keep: bool) -> (Result, Vec<String>) {
    use std::process::Stdio;
    let described = describe(cmd);
    eprintln!("$ {described}");
    remember(format!("$ {described}"));
    let mut child = match cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn() {
        Ok(child) => child,
        Err(e) => return (Err(format!("{described}: {e}")), Vec::new()),
    };
    let (out, err) = (child.stdout.take(), child.stderr.take());
    let (status, kept) = std::thread::scope(|s| {
        if let Some(out) = out {
            s.spawn(|| tee(out, std::io::stdout(), false));
        }
        let kept = err.map(|err| s.spawn(move || tee(err, std::io::stderr(), keep)));
        let status = child.wait();
        let kept = kept.and_then(|h| h.join().ok()).unwrap_or_default();
        (status, kept)
    });
    let result = match status {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!("`{described}` failed with {status}")),
        Err(e) => Err(format!("{described}: {e}")),
    };
    (result, kept)
}

fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

pub(crate) fn cargo(args: &[&str]) -> Result {
    run(Command::new(env!("CARGO")).args(args).current_dir(root()))
}

pub(crate) fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn run_scenarios(paths: &[String]) -> Result {
    if paths.is_empty() {
        return Err("usage: cargo xtask scenarios PATH...".to_owned());
    }
    let summary = scenarios::run(paths)?;
    print!("{}", summary.report);
    println!(
        "{} passed, {} failed",
        summary.scenarios - summary.failed,
        summary.failed
    );
    if summary.failed == 0 {
        Ok(())
    } else {
        Err(format!(
            "{} scenarios disagree with the corpus",
            summary.failed
        ))
    }
}

pub(crate) fn corpus_files() -> Result<Vec<PathBuf>> {
    let dir = root().join("testdata/scenarios");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    Ok(files)
}

/// The no_std proofs of STYLE.md: a bare-metal binary without a global allocator links the core,
/// and the core's normal dependencies enable no `std` or `alloc` feature.
fn check() -> Result {
    let root = root();
    run(Command::new("rustup")
        .args(["target", "add", BARE_METAL])
        .current_dir(&root))
    .map_err(|e| format!("cannot add the {BARE_METAL} target for the no_std proof: {e}"))?;
    cargo(&[
        "build",
        "-p",
        "libroute-core",
        "--no-default-features",
        "--target",
        BARE_METAL,
    ])?;
    let manifest = root.join("xtask/nostd-check/Cargo.toml");
    let target_dir = root.join("target/nostd-check");
    run(Command::new(env!("CARGO"))
        .args([
            "build",
            "--release",
            "--target",
            BARE_METAL,
            "--manifest-path",
        ])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target_dir)
        .current_dir(&root))?;
    let tree = Command::new(env!("CARGO"))
        .args([
            "tree",
            "-p",
            "libroute-core",
            "--no-default-features",
            "-e",
            "normal,features",
            "--prefix",
            "none",
        ])
        .current_dir(&root)
        .output()
        .map_err(|e| format!("cargo tree: {e}"))?;
    let tree = String::from_utf8_lossy(&tree.stdout);
    let leaks: Vec<&str> = tree
        .lines()
        .filter(|l| l.contains("feature \"std\"") || l.contains("feature \"alloc\""))
        .collect();
    if !leaks.is_empty() {
        return Err(format!(
            "libroute-core without default features pulls in std or alloc:\n{}",
            leaks.join("\n")
        ));
    }
    eprintln!(
        "no_std: core links into a {BARE_METAL} binary with no allocator; no std/alloc feature in its tree"
    );
    Ok(())
}

/// `cargo package` for every publishable crate, and a check of what each would ship.
fn package() -> Result {
    // Verify in a target directory of this run's own: cargo treats the packaged crates as
    // immutable registry versions, so a `libroute-core 0.1.0` verified by an earlier run (its
    // extracted source and its build) would otherwise be reused although the sources changed.
    let unique = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let target = root().join(format!("target/package-check-{unique}"));
    let target_arg = target.display().to_string();
    let mut args = vec![
        "package",
        "--workspace",
        "--allow-dirty",
        "--target-dir",
        target_arg.as_str(),
    ];
    // Not crates: the tools, the Python extension, whose package is the wheel the Python step
    // builds and installs, and the JVM's library, whose package is the JAR.
    for excluded in [
        "xtask",
        "libroute-benches",
        "libroute-python",
        "libroute-jvm",
    ] {
        args.extend(["--exclude", excluded]);
    }
    let result = cargo(&args);
    let _ = std::fs::remove_dir_all(&target);
    result?;
    for (krate, files) in PUBLISHABLE {
        let out = Command::new(env!("CARGO"))
            .args(["package", "--list", "--allow-dirty", "-p", krate])
            .current_dir(root())
            .output()
            .map_err(|e| format!("cargo package --list: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "cargo package --list -p {krate}: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let list = String::from_utf8_lossy(&out.stdout);
        for required in *files {
            if !list.lines().any(|l| l == *required) {
                return Err(format!("{krate} would be published without {required}"));
            }
        }
    }
    Ok(())
}

/// `cargo xtask soak [--requests N]`: the soak test (`benches/src/bin/soak.rs`), 10 million
/// requests through one `Router` unless told otherwise.
fn soak(args: &[String]) -> Result {
    let requests = match args {
        [] => "10000000",
        [flag, n] if flag == "--requests" => n.as_str(),
        _ => return Err("usage: cargo xtask soak [--requests N]".to_owned()),
    };
    cargo(&[
        "run",
        "--release",
        "-p",
        "libroute-benches",
        "--bin",
        "soak",
        "--",
        "--requests",
        requests,
    ])
}

/// The engine simulator bridge's workspace (`aisim/`, apart so that aisimulate-core's
/// dependencies stay out of the library's): format, clippy and its tests, the round-robin
/// equality with aisimulate's own composition among them. In release mode: the engine model is
/// slow unoptimized, and `cargo replay --engine aisimulate` reuses the build.
fn aisim() -> Result {
    check_workspace("aisim")
}

/// Format, clippy with warnings denied, and the tests of a workspace of its own (`dir`), in
/// release mode.
fn check_workspace(dir: &str) -> Result {
    let manifest = root().join(dir).join("Cargo.toml");
    let manifest = manifest.display().to_string();
    cargo(&["fmt", "--manifest-path", &manifest, "--", "--check"])?;
    cargo(&[
        "clippy",
        "--release",
        "--manifest-path",
        &manifest,
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ])?;
    cargo(&["test", "--release", "--manifest-path", &manifest])
}

/// The conversation trace beside the repository (`../shared/data`), when it is there.
fn conversation_trace() -> Option<PathBuf> {
    let path = root().join("../shared/data/mooncake_conversation_trace.jsonl");
    path.is_file().then_some(path)
}

/// The replicas crate's workspace (`nats/`, apart so that the NATS client's dependencies stay
/// out of the library's): `nats-server` installed when missing (Debian's package), format,
/// clippy, the tests (each starts its own server on loopback), and the example on 1,000
/// requests of the conversation trace (the synthetic workload when the trace is absent). In
/// release mode, so the example reuses the tests' build.
fn nats() -> Result {
    native::ensure_tool("nats-server", "nats-server")?;
    check_workspace("nats")?;
    let mut args = vec!["--requests".to_owned(), "1000".to_owned()];
    match conversation_trace() {
        Some(trace) => args.insert(0, trace.display().to_string()),
        None => eprintln!(
            "the conversation trace is not at ../shared/data beside the repository: the \
             replicas example runs the built-in synthetic workload"
        ),
    }
    replicas(&args)
}

/// `cargo xtask replicas [ARGS]`: the replicas example, `nats-server` installed first.
fn replicas(args: &[String]) -> Result {
    native::ensure_tool("nats-server", "nats-server")?;
    let manifest = root().join("nats/Cargo.toml");
    let manifest = manifest.display().to_string();
    let mut cmd = vec![
        "run",
        "--quiet",
        "--release",
        "--manifest-path",
        &manifest,
        "--example",
        "replicas",
        "--",
    ];
    // `cargo xtask replicas -- ARGS` passes the `--` through: the example takes ARGS alone.
    let args = match args {
        [first, rest @ ..] if first == "--" => rest,
        _ => args,
    };
    cmd.extend(args.iter().map(String::as_str));
    cargo(&cmd)
}

/// Runs the ffi crate's Rust-side tests of the extern functions under Miri (nightly).
fn miri() -> Result {
    if !succeeds(Command::new("rustup").args(["run", "nightly", "rustc", "--version"])) {
        run(Command::new("rustup").args([
            "toolchain",
            "install",
            "nightly",
            "--profile",
            "minimal",
        ]))
        .map_err(|e| {
            format!("Miri needs a nightly toolchain, which could not be installed: {e}")
        })?;
    }
    run(Command::new("rustup").args([
        "component",
        "add",
        "rust-src",
        "miri",
        "--toolchain",
        "nightly",
    ]))
    .map_err(|e| format!("cannot add Miri to the nightly toolchain: {e}"))?;
    run(Command::new("cargo")
        .args(["+nightly", "miri", "test", "-p", "libroute-ffi", "--lib"])
        .current_dir(root()))
}

/// Installs `MSRV` if rustup can, and checks the core and xtask build with it.
fn msrv() -> Result {
    let toolchain = format!("+{MSRV}");
    if !succeeds(Command::new("rustup").args(["run", MSRV, "rustc", "--version"])) {
        run(Command::new("rustup").args(["toolchain", "install", MSRV, "--profile", "minimal"]))
            .map_err(|e| format!("cannot install the MSRV toolchain {MSRV}: {e}"))?;
    }
    run(Command::new("cargo")
        .args([
            toolchain.as_str(),
            "check",
            "-p",
            "libroute-core",
            "--all-features",
        ])
        .arg("--target-dir")
        .arg(root().join("target/msrv"))
        .current_dir(root()))
}

#[allow(clippy::too_many_lines, reason = "the list of CI steps, in order")]
fn ci() -> Result {
    let steps: Vec<Step<'_>> = vec![
        (
            "toolchain components",
            Box::new(|| {
                run(Command::new("rustup").args(["component", "add", "rustfmt", "clippy"]))
            }),
        ),
        (
            "format",
            Box::new(|| cargo(&["fmt", "--all", "--", "--check"])),
        ),
        (
            "clippy",
            Box::new(|| {
                cargo(&[
                    "clippy",
                    "--workspace",
                    "--all-targets",
                    "--",
                    "-D",
                    "warnings",
                ])?;
                // The fuzz targets live in their own workspace; checking them here (stable, no
                // sanitizer) catches an API change they missed long before the fuzz step.
                let fuzz = root().join("fuzz/Cargo.toml").display().to_string();
                cargo(&[
                    "clippy",
                    "--manifest-path",
                    &fuzz,
                    "--lib",
                    "--bins",
                    "--tests",
                    "--",
                    "-D",
                    "warnings",
                ])
            }),
        ),
        (
            "clippy (core without std)",
            Box::new(|| {
                cargo(&[
                    "clippy",
                    "-p",
                    "libroute-core",
                    "--no-default-features",
                    "--",
                    "-D",
                    "warnings",
                ])
            }),
        ),
        (
            "tests",
            Box::new(|| cargo(&["test", "--workspace", "--all-targets"])),
        ),
        (
            "fuzz regressions (every finding's input, replayed on stable)",
            Box::new(|| {
                let fuzz = root().join("fuzz/Cargo.toml").display().to_string();
                cargo(&["test", "--manifest-path", &fuzz])
            }),
        ),
        (
            "doc tests",
            Box::new(|| cargo(&["test", "--workspace", "--doc"])),
        ),
        (
            "docs build without warnings",
            Box::new(|| {
                run(Command::new(env!("CARGO"))
                    .args(["doc", "--no-deps", "-p", "libroute-core"])
                    .env("RUSTDOCFLAGS", "-D warnings")
                    .current_dir(root()))
            }),
        ),
        (
            "corpus is fresh",
            Box::new(|| {
                run(Command::new("python3")
                    .arg(root().join("testdata/generate.py"))
                    .arg("--check"))
            }),
        ),
        (
            "corpus",
            Box::new(|| {
                run_scenarios(
                    &corpus_files()?
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>(),
                )
            }),
        ),
        (
            "C and C++ tests (ASan + UBSan, valgrind)",
            Box::new(native::c_tests),
        ),
        (
            "Go (vet, race, cgocheck2, fuzz)",
            Box::new(native::go_tests),
        ),
        // Steps that build the same release library sit side by side. The ffi crate's staticlib
        // and cdylib carry no hash in their names, so a build for another set of packages
        // (`-p libroute-uniffi`, `-p libroute-jvm`) overwrites them and the next `-p libroute-ffi`
        // compiles them again (about 22 s each time here): Go then the installed consumers use
        // the ffi crate alone, the binding generator then Kotlin use it under uniffi.
        (
            "install, pkg-config and CMake consumers",
            Box::new(native::consumers),
        ),
        (
            "Python (pip install, pytest)",
            Box::new(native::python_tests),
        ),
        (
            "codegen --check (header is fresh)",
            Box::new(|| codegen::codegen(true)),
        ),
        (
            "Kotlin (mvn install, and a Maven consumer of the JAR)",
            Box::new(|| native::kotlin_tests(false)),
        ),
        (
            "Swift (where a toolchain exists)",
            Box::new(native::swift_tests),
        ),
        ("Miri (ffi extern functions)", Box::new(miri)),
        ("no_std proofs", Box::new(check)),
        ("MSRV", Box::new(msrv)),
        ("package", Box::new(package)),
        (
            "fuzz (short, from the committed corpora)",
            // 6 s per target (ten targets) keeps the whole CI run under 30 minutes on 2
            // cores; campaigns (`cargo xtask fuzz`) are where coverage grows.
            Box::new(|| fuzz::short(6)),
        ),
        (
            "soak (short: 500,000 requests)",
            Box::new(|| soak(&["--requests".to_owned(), "500000".to_owned()])),
        ),
        (
            "demo",
            Box::new(|| cargo(&["run", "--quiet", "-p", "libroute-benches", "--bin", "demo"])),
        ),
        (
            "replay (the main command, built-in workload)",
            Box::new(|| {
                cargo(&[
                    "run",
                    "--quiet",
                    "--release",
                    "-p",
                    "libroute-benches",
                    "--bin",
                    "replay",
                ])
            }),
        ),
        (
            "engine simulator bridge (aisim: format, clippy, tests)",
            Box::new(aisim),
        ),
        (
            "replicas over NATS JetStream (nats: format, clippy, tests, example)",
            Box::new(nats),
        ),
        (
            "engine replay (cargo replay --engine aisimulate, 300 requests)",
            Box::new(|| {
                cargo(&[
                    "run",
                    "--quiet",
                    "--release",
                    "-p",
                    "libroute-benches",
                    "--bin",
                    "replay",
                    "--",
                    "--engine",
                    "aisimulate",
                    "--requests",
                    "300",
                ])
            }),
        ),
    ];
    let started = Instant::now();
    let mut passed = 0;
    let mut failures = Vec::new();
    for (name, step) in &steps {
        eprintln!("\n==> {name}");
        take_tail();
        let t = Instant::now();
        match step() {
            Ok(()) => {
                passed += 1;
                eprintln!("<== {name}: ok ({:.0} s)", t.elapsed().as_secs_f64());
            }
            Err(e) => {
                eprintln!("<== {name}: FAILED: {e}");
                failures.push((*name, e, take_tail()));
            }
        }
    }
    eprintln!("\nci finished in {:.0} s", started.elapsed().as_secs_f64());
    // Repeat each failure with the end of its output last, where a truncated log still shows it.
    for (name, error, tail) in &failures {
        eprintln!(
            "\n---- failed step: {name}\n---- its last {} output lines:",
            tail.len()
        );
        for line in tail {
            eprintln!("    {line}");
        }
        eprintln!("---- {name}: {error}");
    }
    println!("ci: {passed} passed, {} failed", failures.len());
    if failures.is_empty() {
        Ok(())
    } else {
        let names: Vec<&str> = failures.iter().map(|(name, ..)| *name).collect();
        Err(format!("ci steps failed: {}", names.join(", ")))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_failed_command_is_named_and_its_output_kept_for_the_summary() {
        let err = super::run(
            std::process::Command::new("sh")
                .args(["-c", "echo to-stdout; echo to-stderr >&2; exit 3"]),
        )
        .unwrap_err();
        assert!(err.contains("sh -c") && err.contains('3'), "{err}");
        let tail = super::take_tail();
        assert!(tail.iter().any(|l| l == "to-stdout"), "{tail:?}");
        assert!(tail.iter().any(|l| l == "to-stderr"), "{tail:?}");
    }

    #[test]
    fn msrv_matches_the_workspace_rust_version() {
        let manifest = std::fs::read_to_string(super::root().join("Cargo.toml")).unwrap();
        let declared = manifest
            .lines()
            .find_map(|l| l.strip_prefix("rust-version = \""))
            .and_then(|l| l.strip_suffix('"'))
            .unwrap();
        assert_eq!(format!("{declared}.0"), super::MSRV);
    }
}
