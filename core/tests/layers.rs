//! The core's layer rule (ARCHITECTURE.md), checked on its source: each layer of `core/src`
//! uses only the layers before it, code inside the crate names items by their layer's path
//! (never a root re-export), and the engine names no policy's type.

use std::fs;
use std::path::{Path, PathBuf};

/// The layers in order; each may use those before it, except that the host's state does not use
/// the policies.
const LAYERS: [&str; 4] = ["vocab", "engine", "policies", "host"];

/// Which layers `layer` may use (itself included).
fn allowed(layer: &str) -> &'static [&'static str] {
    match layer {
        "vocab" => &["vocab"],
        "engine" => &["vocab", "engine"],
        "policies" => &["vocab", "engine", "policies"],
        "host" => &["vocab", "engine", "host"],
        _ => &[],
    }
}

/// One broken rule: file, line (from 1) and what.
#[derive(Debug, PartialEq)]
struct Violation {
    file: String,
    line: usize,
    rule: String,
}

/// The code of a line, without its `//` comment (doc comments included). String literals in the
/// core never hold `//`, so a plain cut is enough.
fn code(line: &str) -> &str {
    line.find("//").map_or(line, |i| &line[..i])
}

/// Every identifier that follows `crate::` in `code`, with `{` for a grouped import.
fn crate_paths(code: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let after = &rest[i + "crate::".len()..];
        let end = after
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        out.push(if end == 0 && after.starts_with('{') {
            "{"
        } else {
            &after[..end]
        });
        rest = &after[end..];
    }
    out
}

/// Whether `word` occurs in `code` as a whole identifier.
fn names(code: &str, word: &str) -> bool {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    code.match_indices(word).any(|(i, _)| {
        let before = code[..i].chars().next_back();
        let after = code[i + word.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

/// The rule's violations in one file of `layer`; `policy_types` are the names the engine must
/// not use.
fn check(file: &str, layer: &str, text: &str, policy_types: &[String]) -> Vec<Violation> {
    let mut found = Vec::new();
    let mut report = |line: usize, rule: String| {
        found.push(Violation {
            file: file.to_owned(),
            line: line + 1,
            rule,
        });
    };
    for (n, line) in text.lines().enumerate() {
        let code = code(line);
        for target in crate_paths(code) {
            if target == "{" || !LAYERS.contains(&target) {
                report(
                    n,
                    format!("`crate::{target}`: name items by their layer's path, not the root"),
                );
            } else if !allowed(layer).contains(&target) {
                report(
                    n,
                    format!("the {layer} layer may not use the {target} layer"),
                );
            }
        }
        if code.contains("super::super") {
            report(
                n,
                "`super::super`: name the layer's path instead".to_owned(),
            );
        }
        if layer == "engine" {
            for name in policy_types {
                if names(code, name) {
                    report(n, format!("the engine names the policy type `{name}`"));
                }
            }
        }
    }
    found
}

/// The public type names the policies layer defines (`pub struct`, `pub enum`, `pub type`).
fn policy_types(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for path in rust_files(&root.join("policies")) {
        let text = fs::read_to_string(&path).unwrap();
        for line in text.lines() {
            let line = line.trim_start();
            for kind in ["pub struct ", "pub enum ", "pub type "] {
                if let Some(rest) = line.strip_prefix(kind) {
                    let end = rest
                        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                        .unwrap_or(rest.len());
                    out.push(rest[..end].to_owned());
                }
            }
        }
    }
    out
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

#[test]
fn every_layer_uses_only_the_layers_before_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let types = policy_types(&root);
    assert!(
        types.iter().any(|t| t == "DefaultCost") && types.iter().any(|t| t == "RoundRobinPicker"),
        "the policy types were not found: {types:?}"
    );
    let mut violations = Vec::new();
    let mut files = 0;
    for entry in fs::read_dir(&root).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            let layer = path.file_name().unwrap().to_str().unwrap().to_owned();
            assert!(
                LAYERS.contains(&layer.as_str()),
                "core/src/{layer}/ is not a layer of ARCHITECTURE.md"
            );
            for file in rust_files(&path) {
                let text = fs::read_to_string(&file).unwrap();
                let name = file.strip_prefix(&root).unwrap().display().to_string();
                violations.extend(check(&name, &layer, &text, &types));
                files += 1;
            }
        } else {
            let name = path.file_name().unwrap().to_str().unwrap();
            assert_eq!(
                name, "lib.rs",
                "core/src/{name} belongs in a layer's directory"
            );
        }
    }
    assert!(files >= 20, "only {files} files were checked");
    assert!(violations.is_empty(), "{violations:#?}");
}

#[test]
fn the_check_reports_each_kind_of_violation() {
    let types = vec!["DefaultCost".to_owned()];
    let text = "use crate::policies::DefaultCost;\n\
                use crate::Selector;\n\
                use crate::{vocab::Row};\n\
                use super::super::x;\n\
                /// [`crate::Selector`] in a doc comment is fine\n\
                use crate::vocab::Row; // crate::host in a comment is fine\n\
                fn f(c: &DefaultCost) {}\n\
                fn g(c: &DefaultCostly) {}\n";
    let found = check("engine/x.rs", "engine", text, &types);
    let lines: Vec<usize> = found.iter().map(|v| v.line).collect();
    assert_eq!(lines, [1, 1, 2, 3, 4, 7], "{found:#?}");
    assert!(found[0].rule.contains("may not use the policies layer"));
    assert!(
        found[1]
            .rule
            .contains("names the policy type `DefaultCost`")
    );
    // The same lines in the policies layer break only the path rules.
    let found = check("policies/x.rs", "policies", text, &types);
    let lines: Vec<usize> = found.iter().map(|v| v.line).collect();
    assert_eq!(lines, [2, 3, 4]);
    // The host may not use the policies.
    assert_eq!(
        check("host/x.rs", "host", "use crate::policies::catalog;", &types).len(),
        1
    );
    assert!(check("host/x.rs", "host", "use crate::engine::Policy;", &types).is_empty());
}
