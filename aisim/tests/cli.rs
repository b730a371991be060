//! The command's bad-input paths: every mistake is named, nothing panics, the exit code says so.

use std::process::Command;

fn engine_replay(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_engine-replay"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn fails_naming(args: &[&str], expected: &str) {
    let (ok, _, err) = engine_replay(args);
    assert!(!ok, "{args:?} succeeded");
    assert!(err.contains(expected), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
}

fn trace_file(name: &str, text: &str) -> String {
    let path = std::env::temp_dir().join(format!("libroute-aisim-{}-{name}", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn a_malformed_trace_line_is_named_with_its_line_number() {
    let good = r#"{"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [1, 2]}"#;
    let path = trace_file(
        "bad.jsonl",
        &format!("{good}\n\n{{\"timestamp\": 5, \"input_length\": \n"),
    );
    fails_naming(&[&path], "trace line 3");
    let path = trace_file(
        "short.jsonl",
        &format!(
            "{good}\n{}\n",
            r#"{"timestamp": 1, "input_length": 1025, "output_length": 4, "hash_ids": [1, 2]}"#
        ),
    );
    fails_naming(&[&path], "trace line 2: input_length 1025");
    let path = trace_file(
        "negative.jsonl",
        r#"{"timestamp": -1, "input_length": 6, "output_length": 4, "hash_ids": [1]}"#,
    );
    fails_naming(&[&path], "trace line 1: timestamp -1");
    fails_naming(&["/nonexistent/trace.jsonl"], "/nonexistent/trace.jsonl");
}

#[test]
fn unknown_policies_and_options_are_named() {
    fails_naming(&["--only", "nope"], "no policy named \"nope\"");
    fails_naming(&["--frobnicate"], "unknown option --frobnicate");
    fails_naming(&["--backend", "trt"], "--backend: \"trt\"");
    fails_naming(&["--timing", "fast"], "--timing: \"fast\"");
    fails_naming(&["--workers", "0"], "--workers must be at least 1");
    fails_naming(&["--workers", "65"], "at most 64 workers");
    fails_naming(&["--load", "-1"], "--load must be a positive number");
    fails_naming(
        &["--kv-blocks", "x"],
        "--kv-blocks: \"x\" is not a valid number",
    );
    let policies = trace_file(
        "policies.json",
        r#"{"mine": {"type": "default", "temprature": 1}}"#,
    );
    fails_naming(&["--policies", &policies], "policy mine");
    fails_naming(&["--policies", &policies], "temprature");
}

#[test]
fn a_short_replay_prints_the_table() {
    let (ok, out, err) = engine_replay(&[
        "--requests",
        "200",
        "--only",
        "default,round_robin",
        "--backend",
        "sglang",
        "--sweep",
        "1,2",
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("load x1:") && out.contains("load x2:"),
        "{out}"
    );
    for column in ["hit", "ceiling", "ttft p90", "itl", "out tok/s", "lost"] {
        assert!(out.contains(column), "{column}: {out}");
    }
    assert_eq!(
        out.lines().filter(|l| l.starts_with("default ")).count(),
        2,
        "{out}"
    );
    assert!(err.contains("engine replay 4/4"), "{err}");
}

#[test]
fn json_output_carries_aisimulates_report_and_the_bridges_books() {
    let (ok, out, err) = engine_replay(&["--requests", "150", "--only", "default", "--json"]);
    assert!(ok, "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    let run = &doc["runs"][0];
    assert_eq!(run["report"]["policy"], "default");
    assert_eq!(run["aisimulate"]["num_requests"], 150);
    let books = &run["aisimulate"]["libroute_bridge"];
    assert_eq!(books["placed"], 150);
    assert_eq!(books["freed"], 150);
    assert_eq!(books["booked_at_end"], 0);
}
