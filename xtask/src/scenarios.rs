//! The golden-corpus runner: evaluates scenario files (`testdata/README.md` describes the format)
//! with libroute-core and reports every mismatch with its expected and actual values.

use std::fmt::Write as _;
use std::path::Path;

use libroute_core::catalog::CatalogPolicy;
use libroute_core::catalog_config::PolicyConfig;
use libroute_core::{
    BlockRange, Cache, DefaultPolicyConfig, Load, PreferredTaint, Request, Role, Row, SelectError,
    Selector, SharedHits, Taint, TaintSet, WorkerKey,
};
use serde::Deserialize;

/// A policy of either configuration format.
enum AnyPolicy {
    Default(libroute_core::DefaultPolicy),
    Catalog(Box<CatalogPolicy>),
}

impl AnyPolicy {
    fn select<const N: usize>(
        &self,
        selector: &mut Selector<N>,
        request: &Request<'_>,
        rows: &[Row],
    ) -> Result<libroute_core::Selection, SelectError> {
        match self {
            AnyPolicy::Default(p) => p.select(selector, request, rows),
            AnyPolicy::Catalog(p) => p.select(selector, request, rows),
        }
    }
}

/// Capacity of the runner's selector: larger than any corpus scenario.
const CAPACITY: usize = 4096;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Scenario {
    name: String,
    #[allow(dead_code, reason = "documentation for readers of the corpus")]
    why: String,
    policy: serde_json::Value,
    request: RequestSpec,
    candidates: Vec<Candidate>,
    expect: Expect,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestSpec {
    prompt_tokens: u64,
    block_size: u32,
    role: Role,
    track_prefill_tokens: bool,
    conditional_disagg: bool,
    has_tier_matches: bool,
    shared_hits: Option<Vec<(u64, u64)>>,
    preferred_taints: Option<Vec<(u32, f64)>>,
    required_taints: Vec<u32>,
    pin: Option<(u64, u32)>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Candidate {
    worker: u64,
    rank: u32,
    taints: Vec<u32>,
    overloaded: bool,
    cache: Option<CacheSpec>,
    load: Option<LoadSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CacheSpec {
    device: u32,
    host: u32,
    disk: u32,
    effective_blocks: Float,
    effective_tokens: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(clippy::struct_field_names, reason = "the corpus format's field names")]
struct LoadSpec {
    active_prefill_tokens: u64,
    active_decode_blocks: u64,
    active_requests: u64,
}

/// A JSON number, or one of the strings `"NaN"`, `"inf"`, `"-inf"` for values JSON cannot spell.
#[derive(Deserialize, Clone, Copy)]
#[serde(untagged)]
enum Float {
    Number(f64),
    Special(Special),
}

#[derive(Deserialize, Clone, Copy)]
enum Special {
    #[serde(rename = "NaN")]
    Nan,
    #[serde(rename = "inf")]
    Inf,
    #[serde(rename = "-inf")]
    NegInf,
}

impl Float {
    fn value(self) -> f64 {
        match self {
            Float::Number(x) => x,
            Float::Special(Special::Nan) => f64::NAN,
            Float::Special(Special::Inf) => f64::INFINITY,
            Float::Special(Special::NegInf) => f64::NEG_INFINITY,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    #[serde(default)]
    costs: Option<Vec<Option<f64>>>,
    #[serde(default)]
    cost_bits: Option<Vec<Option<String>>>,
    #[serde(default)]
    argmin: Option<Vec<(u64, u32)>>,
    #[serde(default)]
    picks: Option<Picks>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Picks {
    seed: u64,
    temperature: f64,
    sequence: Vec<(u64, u32)>,
}

/// The corpus name of a selection error (`testdata/README.md`, "Errors").
pub(crate) fn error_name(e: &SelectError) -> &'static str {
    match e {
        SelectError::NoEndpoints => "no_endpoints",
        SelectError::AllFiltered => "all_filtered",
        SelectError::AllOverloaded => "all_overloaded",
        SelectError::CapacityExceeded { .. } => "capacity_exceeded",
        SelectError::InvalidRequest(_) => "invalid_request",
        SelectError::InvalidRow { .. } => "invalid_row",
        SelectError::DuplicateWorker { .. } => "duplicate_worker",
        SelectError::PinNotAllowed(_) => "pin_not_allowed",
        SelectError::PinOverloaded(_) => "pin_overloaded",
        SelectError::PinIneligible(_) => "pin_ineligible",
        SelectError::NonFiniteCost { .. } => "non_finite_cost",
        SelectError::NonFiniteTotal { .. } => "non_finite_total",
        SelectError::PickOutOfRange { .. } => "pick_out_of_range",
        SelectError::FilterFailed { .. } => "filter_failed",
        SelectError::ScorerFailed { .. } => "scorer_failed",
        SelectError::PickerFailed(_) => "picker_failed",
        SelectError::ExplanationBufferTooSmall { .. } => "buffer_too_small",
        _ => "unknown",
    }
}

fn taint(index: u32) -> Result<Taint, String> {
    Taint::new(index).ok_or_else(|| format!("taint {index} is not below {}", Taint::LIMIT))
}

fn rows_of(candidates: &[Candidate]) -> Result<Vec<Row>, String> {
    candidates
        .iter()
        .map(|c| {
            let mut taints = TaintSet::EMPTY;
            for &t in &c.taints {
                taints = taints.with(taint(t)?);
            }
            let mut row = Row::new(WorkerKey::new(c.worker, c.rank))
                .with_taints(taints)
                .overloaded(c.overloaded);
            if let Some(k) = &c.cache {
                row = row.with_cache(Cache {
                    device_blocks: k.device,
                    host_blocks: k.host,
                    disk_blocks: k.disk,
                    effective_blocks: k.effective_blocks.value(),
                    effective_tokens: k.effective_tokens,
                });
            }
            if let Some(l) = &c.load {
                row = row.with_load(Load {
                    available: true,
                    active_prefill_tokens: l.active_prefill_tokens,
                    active_decode_blocks: l.active_decode_blocks,
                    active_requests: l.active_requests,
                });
            }
            Ok(row)
        })
        .collect()
}

#[allow(
    clippy::too_many_lines,
    reason = "one scenario, checked field by field in format order"
)]
/// Evaluates one scenario line, appending one line per mismatch to `report`.
fn run_one(line: &str, report: &mut String) -> Result<String, String> {
    let s: Scenario =
        serde_json::from_str(line).map_err(|e| format!("unreadable scenario: {e}"))?;
    let name = s.name.clone();
    let mut mismatch =
        |field: &str, expected: &dyn std::fmt::Debug, actual: &dyn std::fmt::Debug| {
            let _ = writeln!(
                report,
                "{name}: {field}: expected {expected:?}, actual {actual:?}"
            );
        };

    // A catalog policy (an object with "type") or the default policy's knobs.
    let catalog = s.policy.get("type").is_some();
    let built = if catalog {
        serde_json::from_value::<PolicyConfig>(s.policy.clone())
            .map_err(|e| e.to_string())
            .and_then(|c| c.build().map_err(|e| e.to_string()))
            .map(|p| (AnyPolicy::Catalog(Box::new(p)), None))
    } else {
        serde_json::from_value::<DefaultPolicyConfig>(s.policy.clone())
            .map_err(|e| e.to_string())
            .and_then(|c| c.knobs().map_err(|e| e.to_string()))
            .and_then(|k| {
                let p = k.build().map_err(|e| e.to_string())?;
                Ok((AnyPolicy::Default(p), Some(k)))
            })
    };
    let (policy, knobs) = match (built, s.expect.error.as_deref()) {
        (Ok(built), _) => built,
        (Err(_), Some("invalid_config")) => return Ok(s.name),
        (Err(e), expected) => {
            mismatch("error", &expected, &format!("invalid_config: {e}"));
            return Ok(s.name);
        }
    };

    let prefs: Vec<PreferredTaint> = s
        .request
        .preferred_taints
        .iter()
        .flatten()
        .map(|&(t, weight)| {
            Ok(PreferredTaint {
                taint: taint(t)?,
                weight,
            })
        })
        .collect::<Result<_, String>>()?;
    let ranges: Vec<BlockRange> = s
        .request
        .shared_hits
        .iter()
        .flatten()
        .map(|&(a, b)| BlockRange::new(a, b))
        .collect();
    let mut required = TaintSet::EMPTY;
    for &t in &s.request.required_taints {
        required = required.with(taint(t)?);
    }
    let r = &s.request;
    let mut request = Request::new(r.prompt_tokens, r.block_size)
        .role(r.role)
        .track_prefill_tokens(r.track_prefill_tokens)
        .conditional_disagg(r.conditional_disagg)
        .has_tier_matches(r.has_tier_matches)
        .required_taints(required)
        .preferred_taints(&prefs);
    if r.shared_hits.is_some() {
        match SharedHits::new(&ranges) {
            Ok(hits) => request = request.shared_hits(hits),
            Err(e) => {
                if s.expect.error.as_deref() != Some("invalid_request") {
                    mismatch("error", &s.expect.error, &format!("invalid_request: {e}"));
                }
                return Ok(s.name);
            }
        }
    }
    if let Some((w, rank)) = r.pin {
        request = request.pin(WorkerKey::new(w, rank));
    }
    let rows = rows_of(&s.candidates)?;
    if rows.len() > CAPACITY {
        return Err(format!(
            "{} rows exceed the runner's capacity {CAPACITY}",
            rows.len()
        ));
    }

    let mut selector = Box::new(Selector::<CAPACITY>::new());
    let outcome = policy.select(&mut selector, &request, &rows);
    let actual_error = outcome.as_ref().err().map(error_name);
    if actual_error != s.expect.error.as_deref() {
        mismatch("error", &s.expect.error, &actual_error);
    }
    let Ok(selection) = outcome else {
        return Ok(s.name);
    };

    let mut costs: Vec<Option<f64>> = vec![None; rows.len()];
    for (row, cost) in selector.last_costs() {
        costs[row] = Some(cost);
    }
    if let Some(expected) = &s.expect.costs {
        for (i, (e, a)) in expected.iter().zip(&costs).enumerate() {
            // Costs are compared exactly; `cost_bits` below also pins -0.0 and the last bit.
            if e != a {
                mismatch(&format!("costs[{i}]"), e, a);
            }
        }
        if expected.len() != costs.len() {
            mismatch("costs.len", &expected.len(), &costs.len());
        }
    }
    if let Some(expected) = &s.expect.cost_bits {
        for (i, (e, a)) in expected.iter().zip(&costs).enumerate() {
            let a = a.map(|c| format!("{:016x}", c.to_bits()));
            if e != &a {
                mismatch(&format!("cost_bits[{i}]"), e, &a);
            }
        }
    }
    let low = costs
        .iter()
        .flatten()
        .copied()
        .fold(f64::INFINITY, |a, b| if b < a { b } else { a });
    let mut argmin: Vec<(u64, u32)> = costs
        .iter()
        .zip(&rows)
        .filter(|(c, _)| **c == Some(low))
        .map(|(_, r)| (r.worker.worker_id, r.worker.dp_rank))
        .collect();
    argmin.sort_unstable();
    if let Some(expected) = &s.expect.argmin {
        if expected != &argmin {
            mismatch("argmin", expected, &argmin);
        }
    }
    if knobs.is_some_and(|k| k.temperature == 0.0)
        && !argmin.contains(&(selection.worker.worker_id, selection.worker.dp_rank))
    {
        mismatch("pick", &argmin, &selection.worker);
    }
    if let Some(picks) = &s.expect.picks {
        let Some(mut seeded) = knobs else {
            return Err(format!(
                "{name}: picks apply to the default policy's knobs, not to a catalog policy"
            ));
        };
        seeded.seed = Some(picks.seed);
        seeded.temperature = picks.temperature;
        let policy = seeded.build().map_err(|e| e.to_string())?;
        let mut selector = Box::new(Selector::<CAPACITY>::new());
        let mut sequence = Vec::with_capacity(picks.sequence.len());
        for _ in 0..picks.sequence.len() {
            let pick = policy
                .select(&mut selector, &request, &rows)
                .map_err(|e| e.to_string())?;
            sequence.push((pick.worker.worker_id, pick.worker.dp_rank));
        }
        if let Some(k) = picks
            .sequence
            .iter()
            .zip(&sequence)
            .position(|(e, a)| e != a)
        {
            mismatch(
                &format!("picks.sequence[{k}..]"),
                &&picks.sequence[k..],
                &&sequence[k..],
            );
        }
    }
    Ok(s.name)
}

/// Totals of a corpus run.
#[derive(Debug, Default)]
pub(crate) struct Summary {
    pub(crate) scenarios: usize,
    pub(crate) failed: usize,
    pub(crate) report: String,
}

/// Runs every scenario of every file.
pub(crate) fn run(paths: &[impl AsRef<Path>]) -> Result<Summary, String> {
    let mut summary = Summary::default();
    for path in paths {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let mut report = String::new();
            run_one(line, &mut report).map_err(|e| format!("{}:{}: {e}", path.display(), n + 1))?;
            summary.scenarios += 1;
            if !report.is_empty() {
                summary.failed += 1;
                summary.report.push_str(&report);
            }
        }
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    fn corpus() -> Vec<PathBuf> {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/scenarios");
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        files
    }

    #[test]
    fn the_golden_corpus_passes() {
        let files = corpus();
        assert!(files.len() >= 4, "{files:?}");
        let summary = super::run(&files).unwrap();
        assert!(summary.scenarios >= 60, "{summary:?}");
        assert_eq!(summary.failed, 0, "\n{}", summary.report);
    }

    #[test]
    fn a_wrong_expectation_is_reported_with_both_values() {
        let files = corpus();
        let line =
            std::fs::read_to_string(files.iter().find(|f| f.ends_with("worked.jsonl")).unwrap())
                .unwrap();
        let first = line
            .lines()
            .next()
            .unwrap()
            .replace("\"costs\":[7.0]", "\"costs\":[7.5]");
        let mut report = String::new();
        super::run_one(&first, &mut report).unwrap();
        assert_eq!(
            report,
            "worked-1-scale-after-credit: costs[0]: expected Some(7.5), actual Some(7.0)\n"
        );
    }
}
