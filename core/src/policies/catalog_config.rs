//! Configuration of the catalog (feature `std`): one policy by type and parameters, and named
//! instances assigned to roles. The same JSON works from Rust, C and every binding.
//!
//! One policy:
//!
//! ```json
//! {"type": "dynamo_two_tier", "spread": 32, "ratio": 1.1, "coverage": 0.5, "seed": 7}
//! ```
//!
//! Types: `default` (the default policy's knobs, as [`crate::DefaultPolicyConfig`]),
//! `round_robin`, `random`, `power_of_two` (`k`, `metric`), `least_loaded` (`metric`),
//! `dynamo_two_tier` (`spread`, `ratio`, `coverage`), `sglang_cache_aware` (`abs_threshold`,
//! `rel_threshold`, `match_threshold`), `llm_d` (`prefix_weight`, `kv_utilization_weight`,
//! `queue_weight`, `kv_capacity_blocks`, `host_credit`, `disk_credit`), libroute's own `ttft`
//! (`speed`, `others_weight`, `affinity_share`, `affinity_slack`, `kv_capacity_blocks`), and
//! `composed` (`filters`, `scorers`, `picker`). Every type but `default` also takes `filters` (a
//! list of `require_taints`, `overload`, `allow_list`) and `seed`.
//!
//! Named instances per role (omitted roles use the default policy):
//!
//! ```json
//! {"instances": [{"name": "cache-first", "policy": {"type": "sglang_cache_aware"}},
//!                {"name": "balanced", "policy": {"type": "least_loaded"}}],
//!  "roles": {"prefill": "cache-first", "decode": "balanced"}}
//! ```
//!
//! Unknown types and parameters are rejected by the parser, naming them; invalid values by
//! [`PolicyConfig::build`], naming the parameter and the instance.

use std::boxed::Box;
use std::fmt;
use std::string::String;
use std::vec::Vec;

use serde::Deserialize;

use super::json::names;
pub use super::json::parse;
use crate::engine::{MAX_SCORERS, Policy, PolicyError};
use crate::policies::ConfigError;
use crate::policies::DefaultPicker;
use crate::policies::DefaultPolicyConfig;
use crate::policies::catalog::{
    AllowList, BuiltinFilter, BuiltinPicker, BuiltinScorer, CatalogPolicy, DynamoTwoTier,
    FirstToken, FirstTokenPart, KvUtilizationScore, LeastLoaded, List, LoadMetric, MAX_ALLOWED,
    MAX_FILTERS, MinCostPicker, OverloadLimits, PowerOfChoices, PrefixScore, QueueScore,
    RandomPicker, RequireTaints, RoundRobinPicker, SessionAffinity, SglangCacheAware,
    WeightedScorer,
};
use crate::vocab::{Role, Speed, Taint, TaintSet};

/// Why a catalog configuration was rejected, naming the key, parameter or instance.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum CatalogError {
    /// The text is not JSON.
    Json {
        /// Line of the error, from 1.
        line: usize,
        /// Column of the error, from 1.
        column: usize,
        /// The parser's description.
        message: String,
    },
    /// A key the object does not take.
    UnknownKey {
        /// The key given.
        key: String,
        /// The keys the object takes.
        expected: &'static [&'static str],
    },
    /// A `"type"` (or other variant name) that does not exist.
    UnknownType {
        /// The name given.
        name: String,
        /// The names that exist.
        expected: &'static [&'static str],
    },
    /// JSON of the wrong shape: a value of the wrong type, a missing key.
    Shape {
        /// What was expected and found.
        message: String,
    },
    /// A parameter outside its range.
    OutOfRange {
        /// The parameter (`coverage`, `speed.base_ms`, `k`).
        parameter: &'static str,
        /// The value given.
        value: f64,
        /// The range it must be in.
        range: Range,
    },
    /// An invalid default-cost knob (in a `default` policy or scorer).
    Knob(ConfigError),
    /// `temperature` or `seed` given to a `default` scorer, where they mean nothing: they belong
    /// to the picker and the policy.
    MisplacedKnob {
        /// The knob.
        knob: &'static str,
    },
    /// A taint index that is not below 64.
    Taint {
        /// The index given.
        index: u32,
    },
    /// More items than a fixed-capacity list holds.
    TooMany {
        /// What (`scorers`, `filters`, `allow_list workers`).
        what: &'static str,
        /// How many were given.
        given: usize,
        /// How many fit.
        most: usize,
    },
    /// An instance with an empty name.
    EmptyName,
    /// Two instances with the same name.
    DuplicateName {
        /// The name.
        name: String,
    },
    /// A role assigned to an instance that is not defined.
    UnknownInstance {
        /// The role (`prefill`, `decode`, `aggregated`, `encode`).
        role: &'static str,
        /// The instance named.
        name: String,
    },
    /// An error inside a named instance.
    InInstance {
        /// The instance's name.
        instance: String,
        /// What is wrong in it.
        error: Box<CatalogError>,
    },
}

/// The range a parameter must be in ([`CatalogError::OutOfRange`]).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Range {
    /// Any finite value.
    Finite,
    /// Finite and at least this.
    AtLeast(f64),
    /// Finite and within `[lo, hi]`.
    Within(f64, f64),
}

impl CatalogError {
    /// The error inside any [`CatalogError::InInstance`] wrappers.
    #[must_use]
    pub fn innermost(&self) -> &CatalogError {
        match self {
            CatalogError::InInstance { error, .. } => error.innermost(),
            other => other,
        }
    }

    /// Whether the configuration names a key or type that does not exist (C's
    /// `LIBROUTE_UNKNOWN_KEY`), as opposed to malformed JSON or an invalid value.
    #[must_use]
    pub fn is_unknown_name(&self) -> bool {
        matches!(
            self.innermost(),
            CatalogError::UnknownKey { .. } | CatalogError::UnknownType { .. }
        )
    }
}

impl fmt::Display for CatalogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CatalogError::Json {
                line,
                column,
                message,
            } => write!(f, "not JSON at line {line}, column {column}: {message}"),
            CatalogError::UnknownKey { key, expected } => {
                write!(
                    f,
                    "unknown key {key:?}, expected one of {}",
                    names(expected)
                )
            }
            CatalogError::UnknownType { name, expected } => {
                write!(
                    f,
                    "unknown type {name:?}, expected one of {}",
                    names(expected)
                )
            }
            CatalogError::Shape { message } => f.write_str(message),
            CatalogError::OutOfRange {
                parameter,
                value,
                range,
            } => {
                write!(f, "{parameter} = {value}: ")?;
                match range {
                    Range::Finite => f.write_str("must be finite"),
                    Range::AtLeast(lo) => write!(f, "must be at least {lo}"),
                    Range::Within(lo, hi) => write!(f, "must be within [{lo}, {hi}]"),
                }
            }
            CatalogError::Knob(e) => e.fmt(f),
            CatalogError::MisplacedKnob { knob } => write!(
                f,
                "default scorer: {knob} belongs to the picker or the policy, not a scorer"
            ),
            CatalogError::Taint { index } => {
                write!(f, "require_taints: taint {index} is not below 64")
            }
            CatalogError::TooMany { what, given, most } => {
                write!(f, "{given} {what}, at most {most}")
            }
            CatalogError::EmptyName => f.write_str("an instance has an empty name"),
            CatalogError::DuplicateName { name } => write!(f, "two instances are named {name:?}"),
            CatalogError::UnknownInstance { role, name } => write!(
                f,
                "role {role} names instance {name:?}, which is not defined"
            ),
            CatalogError::InInstance { instance, error } => {
                write!(f, "instance {instance:?}: {error}")
            }
        }
    }
}

impl From<ConfigError> for CatalogError {
    fn from(e: ConfigError) -> Self {
        CatalogError::Knob(e)
    }
}

impl From<PolicyError> for CatalogError {
    fn from(e: PolicyError) -> Self {
        match e {
            PolicyError::TooManyScorers { given } => CatalogError::TooMany {
                what: "scorers",
                given,
                most: MAX_SCORERS,
            },
        }
    }
}

impl std::error::Error for CatalogError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CatalogError::Knob(e) => Some(e),
            CatalogError::InInstance { error, .. } => Some(error.as_ref()),
            _ => None,
        }
    }
}

/// A filter as configured.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum FilterConfig {
    /// [`RequireTaints`]: taint indices (0 to 63) every candidate must carry.
    RequireTaints {
        /// The taints.
        taints: Vec<u32>,
    },
    /// [`OverloadLimits`]: rows above any limit set are removed as overloaded.
    Overload {
        /// Most active KV blocks.
        #[serde(default)]
        max_active_blocks: Option<u64>,
        /// Most outstanding prefill tokens.
        #[serde(default)]
        max_prefill_tokens: Option<u64>,
        /// Most active requests.
        #[serde(default)]
        max_requests: Option<u64>,
    },
    /// [`AllowList`]: only these worker ids (at most 64).
    AllowList {
        /// The worker ids.
        workers: Vec<u64>,
    },
}

impl FilterConfig {
    fn build(&self) -> Result<BuiltinFilter, CatalogError> {
        Ok(match self {
            FilterConfig::RequireTaints { taints } => {
                let mut set = TaintSet::EMPTY;
                for &t in taints {
                    let taint = Taint::new(t).ok_or(CatalogError::Taint { index: t })?;
                    set = set.with(taint);
                }
                BuiltinFilter::RequireTaints(RequireTaints(set))
            }
            FilterConfig::Overload {
                max_active_blocks,
                max_prefill_tokens,
                max_requests,
            } => BuiltinFilter::OverloadLimits(OverloadLimits {
                max_active_blocks: *max_active_blocks,
                max_prefill_tokens: *max_prefill_tokens,
                max_requests: *max_requests,
            }),
            FilterConfig::AllowList { workers } => {
                BuiltinFilter::AllowList(AllowList::new(workers).ok_or({
                    CatalogError::TooMany {
                        what: "allow_list workers",
                        given: workers.len(),
                        most: MAX_ALLOWED,
                    }
                })?)
            }
        })
    }
}

fn one() -> f64 {
    1.0
}

/// A scorer as configured; every one takes a `weight` (default 1) its costs are multiplied by.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ScorerConfig {
    /// Dynamo's default cost with the default policy's knobs (`temperature` and `seed` belong to
    /// the picker and the instance, and are rejected here).
    Default {
        /// Weight.
        #[serde(default = "one")]
        weight: f64,
        /// The cost's knobs.
        #[serde(default)]
        knobs: DefaultPolicyConfig,
    },
    /// [`LeastLoaded`].
    LeastLoaded {
        /// Weight.
        #[serde(default = "one")]
        weight: f64,
        /// The load figure, default `active_requests`.
        #[serde(default)]
        metric: LoadMetric,
    },
    /// [`DynamoTwoTier`].
    DynamoTwoTier {
        /// Weight.
        #[serde(default = "one")]
        weight: f64,
        /// Default 32.
        #[serde(default)]
        spread: Option<u64>,
        /// Default 1.1.
        #[serde(default)]
        ratio: Option<f64>,
        /// Default 0.5.
        #[serde(default)]
        coverage: Option<f64>,
    },
    /// [`SglangCacheAware`].
    SglangCacheAware {
        /// Weight.
        #[serde(default = "one")]
        weight: f64,
        /// Default 64.
        #[serde(default)]
        abs_threshold: Option<u64>,
        /// Default 1.5.
        #[serde(default)]
        rel_threshold: Option<f64>,
        /// Default 0.3.
        #[serde(default)]
        match_threshold: Option<f64>,
    },
    /// [`PrefixScore`].
    Prefix {
        /// Weight.
        #[serde(default = "one")]
        weight: f64,
        /// Credit of a host block, default 0.8.
        #[serde(default)]
        host: Option<f64>,
        /// Credit of a disk block, default 0.5.
        #[serde(default)]
        disk: Option<f64>,
    },
    /// [`KvUtilizationScore`].
    KvUtilization {
        /// Weight.
        #[serde(default = "one")]
        weight: f64,
        /// Each worker's KV capacity in blocks.
        capacity_blocks: u64,
    },
    /// [`QueueScore`].
    Queue {
        /// Weight.
        #[serde(default = "one")]
        weight: f64,
    },
    /// [`SessionAffinity`].
    SessionAffinity {
        /// Weight.
        #[serde(default = "one")]
        weight: f64,
    },
}

/// [`DynamoTwoTier`]'s parameters as configured.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct TwoTierParams {
    spread: Option<u64>,
    ratio: Option<f64>,
    coverage: Option<f64>,
}

/// [`SglangCacheAware`]'s parameters as configured.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[allow(clippy::struct_field_names, reason = "SGLang's own parameter names")]
struct SglangParams {
    abs_threshold: Option<u64>,
    rel_threshold: Option<f64>,
    match_threshold: Option<f64>,
}

/// `value` if it lies in `range`, else the error naming `parameter`.
fn check(parameter: &'static str, value: f64, range: Range) -> Result<f64, CatalogError> {
    let ok = value.is_finite()
        && match range {
            Range::Finite => true,
            Range::AtLeast(lo) => value >= lo,
            Range::Within(lo, hi) => (lo..=hi).contains(&value),
        };
    if ok {
        Ok(value)
    } else {
        Err(CatalogError::OutOfRange {
            parameter,
            value,
            range,
        })
    }
}

fn finite(parameter: &'static str, value: f64) -> Result<f64, CatalogError> {
    check(parameter, value, Range::Finite)
}

fn within(parameter: &'static str, value: f64, lo: f64, hi: f64) -> Result<f64, CatalogError> {
    check(parameter, value, Range::Within(lo, hi))
}

fn at_least(parameter: &'static str, value: f64, lo: f64) -> Result<f64, CatalogError> {
    check(parameter, value, Range::AtLeast(lo))
}

/// A count that must be at least 1 (a capacity, a number of choices).
fn at_least_one<T: PartialEq + Default>(
    parameter: &'static str,
    value: T,
) -> Result<T, CatalogError> {
    if value == T::default() {
        return Err(CatalogError::OutOfRange {
            parameter,
            value: 0.0,
            range: Range::AtLeast(1.0),
        });
    }
    Ok(value)
}

impl TwoTierParams {
    fn build(self) -> Result<DynamoTwoTier, CatalogError> {
        let d = DynamoTwoTier::default();
        Ok(DynamoTwoTier {
            spread: self.spread.unwrap_or(d.spread),
            ratio: at_least("ratio", self.ratio.unwrap_or(d.ratio), 1.0)?,
            coverage: within("coverage", self.coverage.unwrap_or(d.coverage), 0.0, 1.0)?,
        })
    }
}

impl SglangParams {
    fn build(self) -> Result<SglangCacheAware, CatalogError> {
        let d = SglangCacheAware::default();
        Ok(SglangCacheAware {
            abs_threshold: self.abs_threshold.unwrap_or(d.abs_threshold),
            rel_threshold: at_least(
                "rel_threshold",
                self.rel_threshold.unwrap_or(d.rel_threshold),
                1.0,
            )?,
            match_threshold: within(
                "match_threshold",
                self.match_threshold.unwrap_or(d.match_threshold),
                0.0,
                1.0,
            )?,
        })
    }
}

impl ScorerConfig {
    fn build(&self) -> Result<WeightedScorer, CatalogError> {
        let (weight, scorer) = match self {
            ScorerConfig::Default { weight, knobs } => {
                if knobs.temperature.is_some() || knobs.seed.is_some() {
                    return Err(CatalogError::MisplacedKnob {
                        knob: if knobs.temperature.is_some() {
                            "temperature"
                        } else {
                            "seed"
                        },
                    });
                }
                let knobs = knobs.knobs().map_err(CatalogError::from)?;
                (*weight, BuiltinScorer::Default(knobs.cost))
            }
            ScorerConfig::LeastLoaded { weight, metric } => (
                *weight,
                BuiltinScorer::LeastLoaded(LeastLoaded { metric: *metric }),
            ),
            ScorerConfig::DynamoTwoTier {
                weight,
                spread,
                ratio,
                coverage,
            } => (
                *weight,
                BuiltinScorer::DynamoTwoTier(
                    TwoTierParams {
                        spread: *spread,
                        ratio: *ratio,
                        coverage: *coverage,
                    }
                    .build()?,
                ),
            ),
            ScorerConfig::SglangCacheAware {
                weight,
                abs_threshold,
                rel_threshold,
                match_threshold,
            } => (
                *weight,
                BuiltinScorer::SglangCacheAware(
                    SglangParams {
                        abs_threshold: *abs_threshold,
                        rel_threshold: *rel_threshold,
                        match_threshold: *match_threshold,
                    }
                    .build()?,
                ),
            ),
            ScorerConfig::Prefix { weight, host, disk } => {
                let d = PrefixScore::default();
                (
                    *weight,
                    BuiltinScorer::Prefix(PrefixScore {
                        host: within("host", host.unwrap_or(d.host), 0.0, 1.0)?,
                        disk: within("disk", disk.unwrap_or(d.disk), 0.0, 1.0)?,
                    }),
                )
            }
            ScorerConfig::KvUtilization {
                weight,
                capacity_blocks,
            } => (
                *weight,
                BuiltinScorer::KvUtilization(KvUtilizationScore {
                    capacity_blocks: at_least_one(
                        "kv_utilization.capacity_blocks",
                        *capacity_blocks,
                    )?,
                }),
            ),
            ScorerConfig::Queue { weight } => (*weight, BuiltinScorer::Queue(QueueScore)),
            ScorerConfig::SessionAffinity { weight } => {
                (*weight, BuiltinScorer::SessionAffinity(SessionAffinity))
            }
        };
        Ok(WeightedScorer {
            scorer,
            weight: finite("weight", weight)?,
        })
    }
}

/// A worker speed as configured: all three parts, each finite and `>= 0`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpeedConfig {
    /// Fixed part of a first token, ms.
    pub base_ms: f64,
    /// Per prefill token queued or computed, ms.
    pub ms_per_prefill_token: f64,
    /// Per active decode block, ms.
    pub ms_per_active_request: f64,
}

impl SpeedConfig {
    fn build(self) -> Result<Speed, CatalogError> {
        Ok(Speed {
            base_ms: at_least("speed.base_ms", self.base_ms, 0.0)?,
            ms_per_prefill_token: at_least(
                "speed.ms_per_prefill_token",
                self.ms_per_prefill_token,
                0.0,
            )?,
            ms_per_active_request: at_least(
                "speed.ms_per_active_request",
                self.ms_per_active_request,
                0.0,
            )?,
        })
    }
}

/// A picker as configured.
#[derive(Debug, Clone, Copy, PartialEq, Default, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum PickerConfig {
    /// The minimum cost with uniform ties (also called max score).
    #[default]
    MinCost,
    /// Dynamo's default picker with a temperature.
    Softmax {
        /// Sampling temperature, at least 0.
        temperature: f64,
    },
    /// Uniformly random.
    Random,
    /// Round-robin.
    RoundRobin,
    /// Power of `k` choices (default 2).
    PowerOfChoices {
        /// Candidates drawn, at least 1.
        #[serde(default)]
        k: Option<u32>,
    },
}

impl PickerConfig {
    fn build(self) -> Result<BuiltinPicker, CatalogError> {
        Ok(match self {
            PickerConfig::MinCost => BuiltinPicker::MinCost(MinCostPicker),
            PickerConfig::Softmax { temperature } => {
                if temperature.is_nan() || temperature < 0.0 {
                    return Err(CatalogError::OutOfRange {
                        parameter: "temperature",
                        value: temperature,
                        range: Range::AtLeast(0.0),
                    });
                }
                BuiltinPicker::Default(DefaultPicker { temperature })
            }
            PickerConfig::Random => BuiltinPicker::Random(RandomPicker),
            PickerConfig::RoundRobin => BuiltinPicker::RoundRobin(RoundRobinPicker),
            PickerConfig::PowerOfChoices { k } => {
                let k = at_least_one("k", k.unwrap_or(2))?;
                BuiltinPicker::PowerOfChoices(PowerOfChoices { k })
            }
        })
    }
}

/// One policy: a type and its parameters (see the module documentation).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum PolicyConfig {
    /// The default policy (Dynamo's default), with its knobs.
    Default(DefaultPolicyConfig),
    /// Round-robin over the candidates.
    RoundRobin {
        /// Filters applied first.
        #[serde(default)]
        filters: Vec<FilterConfig>,
        /// Seeded mode's seed.
        #[serde(default)]
        seed: Option<u64>,
    },
    /// A uniformly random candidate.
    Random {
        /// Filters applied first.
        #[serde(default)]
        filters: Vec<FilterConfig>,
        /// Seeded mode's seed.
        #[serde(default)]
        seed: Option<u64>,
    },
    /// Power of `k` choices by a load figure.
    PowerOfTwo {
        /// Candidates drawn, default 2.
        #[serde(default)]
        k: Option<u32>,
        /// The load figure, default `active_requests`.
        #[serde(default)]
        metric: LoadMetric,
        /// Filters applied first.
        #[serde(default)]
        filters: Vec<FilterConfig>,
        /// Seeded mode's seed.
        #[serde(default)]
        seed: Option<u64>,
    },
    /// The least loaded candidate by a load figure, ties drawn uniformly.
    LeastLoaded {
        /// The load figure, default `active_requests`.
        #[serde(default)]
        metric: LoadMetric,
        /// Filters applied first.
        #[serde(default)]
        filters: Vec<FilterConfig>,
        /// Seeded mode's seed.
        #[serde(default)]
        seed: Option<u64>,
    },
    /// Dynamo's two-tier cost function.
    DynamoTwoTier {
        /// Default 32.
        #[serde(default)]
        spread: Option<u64>,
        /// Default 1.1.
        #[serde(default)]
        ratio: Option<f64>,
        /// Default 0.5.
        #[serde(default)]
        coverage: Option<f64>,
        /// Filters applied first.
        #[serde(default)]
        filters: Vec<FilterConfig>,
        /// Seeded mode's seed.
        #[serde(default)]
        seed: Option<u64>,
    },
    /// `SGLang`'s cache-aware policy.
    SglangCacheAware {
        /// Default 64.
        #[serde(default)]
        abs_threshold: Option<u64>,
        /// Default 1.5.
        #[serde(default)]
        rel_threshold: Option<f64>,
        /// Default 0.3.
        #[serde(default)]
        match_threshold: Option<f64>,
        /// Filters applied first.
        #[serde(default)]
        filters: Vec<FilterConfig>,
        /// Seeded mode's seed.
        #[serde(default)]
        seed: Option<u64>,
    },
    /// llm-d's weighted normalized scorers with a max-score picker.
    LlmD {
        /// Weight of the prefix score, default 1.
        #[serde(default = "one")]
        prefix_weight: f64,
        /// Weight of the KV utilization score, default 1 (used with `kv_capacity_blocks`).
        #[serde(default = "one")]
        kv_utilization_weight: f64,
        /// Weight of the queue score, default 1.
        #[serde(default = "one")]
        queue_weight: f64,
        /// Each worker's KV capacity in blocks; without it the utilization scorer is left out.
        #[serde(default)]
        kv_capacity_blocks: Option<u64>,
        /// Credit of a host block, default 0.8.
        #[serde(default)]
        host_credit: Option<f64>,
        /// Credit of a disk block, default 0.5.
        #[serde(default)]
        disk_credit: Option<f64>,
        /// Filters applied first.
        #[serde(default)]
        filters: Vec<FilterConfig>,
        /// Seeded mode's seed.
        #[serde(default)]
        seed: Option<u64>,
    },
    /// libroute's own: the estimated time to first token, the delay to the requests behind,
    /// and an affinity gate ([`FirstToken`]), with a min-cost picker.
    Ttft {
        /// A measured speed for every worker, overriding the rows' (which a router learns).
        #[serde(default)]
        speed: Option<SpeedConfig>,
        /// Weight of the delay to the requests behind, default 1.
        #[serde(default)]
        others_weight: Option<f64>,
        /// Share of the longest cached prefix that passes the affinity gate, default 0.5.
        #[serde(default)]
        affinity_share: Option<f64>,
        /// The affinity gate's penalty as a share of the best estimate, default 0.5.
        #[serde(default)]
        affinity_slack: Option<f64>,
        /// The workers' KV cache capacity in blocks of the request's block size, at least 1;
        /// when given, the estimate adds the wait for KV room
        /// ([`FirstToken::kv_capacity_blocks`]). Default: unknown, no such wait.
        #[serde(default)]
        kv_capacity_blocks: Option<u64>,
        /// Filters applied first.
        #[serde(default)]
        filters: Vec<FilterConfig>,
        /// Seeded mode's seed.
        #[serde(default)]
        seed: Option<u64>,
    },
    /// Filters, weighted scorers and a picker of your choice.
    Composed {
        /// Filters applied first (at most 8).
        #[serde(default)]
        filters: Vec<FilterConfig>,
        /// Scorers whose weighted costs are summed (at most 8).
        #[serde(default)]
        scorers: Vec<ScorerConfig>,
        /// The picker, default `min_cost`.
        #[serde(default)]
        picker: PickerConfig,
        /// Seeded mode's seed.
        #[serde(default)]
        seed: Option<u64>,
    },
}

fn assemble(
    filters: &[FilterConfig],
    scorers: &[ScorerConfig],
    picker: PickerConfig,
    seed: Option<u64>,
) -> Result<CatalogPolicy, CatalogError> {
    let mut s = List::<WeightedScorer, MAX_SCORERS>::new();
    for config in scorers {
        s.push(config.build()?).map_err(|_| CatalogError::TooMany {
            what: "scorers",
            given: scorers.len(),
            most: MAX_SCORERS,
        })?;
    }
    assemble_built(filters, &s, picker, seed)
}

fn assemble_built(
    filters: &[FilterConfig],
    scorers: &List<WeightedScorer, MAX_SCORERS>,
    picker: PickerConfig,
    seed: Option<u64>,
) -> Result<CatalogPolicy, CatalogError> {
    let mut f = List::<BuiltinFilter, MAX_FILTERS>::new();
    for config in filters {
        f.push(config.build()?).map_err(|_| CatalogError::TooMany {
            what: "filters",
            given: filters.len(),
            most: MAX_FILTERS,
        })?;
    }
    let policy = Policy::new(f, scorers.clone(), picker.build()?).map_err(CatalogError::from)?;
    Ok(policy.with_seed(seed))
}

impl PolicyConfig {
    /// The policy this configuration describes.
    ///
    /// # Errors
    ///
    /// A [`CatalogError`] naming the invalid parameter.
    #[allow(clippy::too_many_lines, reason = "one arm per policy type")]
    pub fn build(&self) -> Result<CatalogPolicy, CatalogError> {
        match self {
            PolicyConfig::Default(knobs) => {
                let knobs = knobs.knobs().map_err(CatalogError::from)?;
                let scorer = WeightedScorer {
                    scorer: BuiltinScorer::Default(knobs.cost),
                    weight: 1.0,
                };
                let mut scorers = List::new();
                let _ = scorers.push(scorer);
                Ok(Policy::new(
                    List::new(),
                    scorers,
                    BuiltinPicker::Default(DefaultPicker {
                        temperature: knobs.temperature,
                    }),
                )
                .map_err(CatalogError::from)?
                .with_seed(knobs.seed))
            }
            PolicyConfig::RoundRobin { filters, seed } => {
                assemble(filters, &[], PickerConfig::RoundRobin, *seed)
            }
            PolicyConfig::Random { filters, seed } => {
                assemble(filters, &[], PickerConfig::Random, *seed)
            }
            PolicyConfig::PowerOfTwo {
                k,
                metric,
                filters,
                seed,
            } => assemble(
                filters,
                &[ScorerConfig::LeastLoaded {
                    weight: 1.0,
                    metric: *metric,
                }],
                PickerConfig::PowerOfChoices { k: *k },
                *seed,
            ),
            PolicyConfig::LeastLoaded {
                metric,
                filters,
                seed,
            } => assemble(
                filters,
                &[ScorerConfig::LeastLoaded {
                    weight: 1.0,
                    metric: *metric,
                }],
                PickerConfig::MinCost,
                *seed,
            ),
            PolicyConfig::DynamoTwoTier {
                spread,
                ratio,
                coverage,
                filters,
                seed,
            } => assemble(
                filters,
                &[ScorerConfig::DynamoTwoTier {
                    weight: 1.0,
                    spread: *spread,
                    ratio: *ratio,
                    coverage: *coverage,
                }],
                PickerConfig::MinCost,
                *seed,
            ),
            PolicyConfig::SglangCacheAware {
                abs_threshold,
                rel_threshold,
                match_threshold,
                filters,
                seed,
            } => assemble(
                filters,
                &[ScorerConfig::SglangCacheAware {
                    weight: 1.0,
                    abs_threshold: *abs_threshold,
                    rel_threshold: *rel_threshold,
                    match_threshold: *match_threshold,
                }],
                PickerConfig::MinCost,
                *seed,
            ),
            PolicyConfig::LlmD {
                prefix_weight,
                kv_utilization_weight,
                queue_weight,
                kv_capacity_blocks,
                host_credit,
                disk_credit,
                filters,
                seed,
            } => {
                let mut scorers = std::vec![ScorerConfig::Prefix {
                    weight: *prefix_weight,
                    host: *host_credit,
                    disk: *disk_credit,
                }];
                if let Some(capacity_blocks) = kv_capacity_blocks {
                    scorers.push(ScorerConfig::KvUtilization {
                        weight: *kv_utilization_weight,
                        capacity_blocks: *capacity_blocks,
                    });
                }
                scorers.push(ScorerConfig::Queue {
                    weight: *queue_weight,
                });
                assemble(filters, &scorers, PickerConfig::MinCost, *seed)
            }
            PolicyConfig::Ttft {
                speed,
                others_weight,
                affinity_share,
                affinity_slack,
                kv_capacity_blocks,
                filters,
                seed,
            } => {
                let d = FirstToken::new(FirstTokenPart::Queue);
                let kv_capacity_blocks = kv_capacity_blocks
                    .map(|c| at_least_one("kv_capacity_blocks", c))
                    .transpose()?
                    .unwrap_or(d.kv_capacity_blocks);
                let model = FirstToken {
                    speed: speed.map(SpeedConfig::build).transpose()?,
                    others_weight: at_least(
                        "others_weight",
                        others_weight.unwrap_or(d.others_weight),
                        0.0,
                    )?,
                    affinity_share: within(
                        "affinity_share",
                        affinity_share.unwrap_or(d.affinity_share),
                        0.0,
                        1.0,
                    )?,
                    affinity_slack: at_least(
                        "affinity_slack",
                        affinity_slack.unwrap_or(d.affinity_slack),
                        0.0,
                    )?,
                    kv_capacity_blocks,
                    ..d
                };
                let mut scorers = List::<WeightedScorer, MAX_SCORERS>::new();
                for part in [
                    FirstTokenPart::Queue,
                    FirstTokenPart::Prefill,
                    FirstTokenPart::Decode,
                    FirstTokenPart::DelayToOthers,
                    FirstTokenPart::Affinity,
                ] {
                    let _ = scorers.push(WeightedScorer {
                        scorer: BuiltinScorer::FirstToken(FirstToken { part, ..model }),
                        weight: 1.0,
                    });
                }
                assemble_built(filters, &scorers, PickerConfig::MinCost, *seed)
            }
            PolicyConfig::Composed {
                filters,
                scorers,
                picker,
                seed,
            } => assemble(filters, scorers, *picker, *seed),
        }
    }
}

/// A named policy instance.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceConfig {
    /// Its name, unique in the set.
    pub name: String,
    /// The policy.
    pub policy: PolicyConfig,
}

/// Which instance serves each role; an omitted role uses the default policy.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RolesConfig {
    /// Prefill workers of disaggregated serving.
    #[serde(default)]
    pub prefill: Option<String>,
    /// Decode workers of disaggregated serving.
    #[serde(default)]
    pub decode: Option<String>,
    /// Aggregated workers.
    #[serde(default)]
    pub aggregated: Option<String>,
    /// Encoder workers.
    #[serde(default)]
    pub encode: Option<String>,
}

/// Named instances and their roles.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySetConfig {
    /// The instances.
    #[serde(default)]
    pub instances: Vec<InstanceConfig>,
    /// The role assignment.
    #[serde(default)]
    pub roles: RolesConfig,
}

/// Built policies, one per role.
#[derive(Debug, Clone)]
pub struct PolicySet {
    names: [String; 4],
    /// One per role, in [`role_slot`] order.
    policies: Vec<CatalogPolicy>,
}

const ROLE_NAMES: [&str; 4] = ["prefill", "decode", "aggregated", "encode"];

fn role_slot(role: Role) -> usize {
    match role {
        Role::Prefill => 0,
        Role::Decode => 1,
        Role::Aggregated => 2,
        Role::Encode => 3,
    }
}

impl PolicySetConfig {
    /// Builds every instance and assigns them to roles.
    ///
    /// # Errors
    ///
    /// A [`CatalogError`]: an invalid parameter (naming the instance), a duplicate or empty name,
    /// a role naming no instance.
    pub fn build(&self) -> Result<PolicySet, CatalogError> {
        let mut built: Vec<(&str, CatalogPolicy)> = Vec::new();
        for instance in &self.instances {
            if instance.name.is_empty() {
                return Err(CatalogError::EmptyName);
            }
            if built.iter().any(|(n, _)| *n == instance.name) {
                return Err(CatalogError::DuplicateName {
                    name: instance.name.clone(),
                });
            }
            let policy = instance
                .policy
                .build()
                .map_err(|error| CatalogError::InInstance {
                    instance: instance.name.clone(),
                    error: Box::new(error),
                })?;
            built.push((&instance.name, policy));
        }
        let default = PolicyConfig::Default(DefaultPolicyConfig::default()).build()?;
        let r = &self.roles;
        let assigned = [&r.prefill, &r.decode, &r.aggregated, &r.encode];
        let mut names: [String; 4] = Default::default();
        let mut policies = std::vec![default; 4];
        for (slot, name) in assigned.iter().enumerate() {
            let Some(name) = name else {
                names[slot] = "default".into();
                continue;
            };
            let (_, policy) = built.iter().find(|(n, _)| n == name).ok_or_else(|| {
                CatalogError::UnknownInstance {
                    role: ROLE_NAMES[slot],
                    name: name.clone(),
                }
            })?;
            names[slot].clone_from(name);
            policies[slot] = policy.clone();
        }
        Ok(PolicySet { names, policies })
    }
}

impl PolicySet {
    /// The policy for requests of `role`.
    #[must_use]
    pub fn policy(&self, role: Role) -> &CatalogPolicy {
        &self.policies[role_slot(role)]
    }

    /// The name of the instance serving `role` (`"default"` when none was assigned).
    #[must_use]
    pub fn instance_name(&self, role: Role) -> &str {
        &self.names[role_slot(role)]
    }
}
