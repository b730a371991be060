//! [`Policy`]: an immutable policy, the default one configured by JSON, one of the catalog's, or
//! the default cost and picker with C components.

use libroute_core::catalog::CatalogPolicy;
use libroute_core::catalog_config::{self, CatalogError, PolicyConfig};
use libroute_core::{
    DefaultPicker, DefaultPolicy, DefaultPolicyConfig, Explanation, Leg, MAX_SCORERS,
    Policy as CorePolicy, Request, Role, Row, Scorers, SelectError, Selection,
    Selector as CoreSelector, WorkerInputs,
};

// The core's generic `Policy` and `Selector` go by other names here: cbindgen, which reads this
// crate for the header, resolves types by their last name.

use crate::components::{
    AbiFilters, AbiScorers, AnyScorer, CFilter, CScorer, libroute_filter, libroute_scorer,
};
use crate::status::{Failure, libroute_status};

/// A policy with custom C components.
type ComposedPolicy = CorePolicy<AbiFilters, AbiScorers, DefaultPicker>;

/// The policy behind a `libroute_policy`: immutable, shared by any number of threads (a policy
/// with C components as far as its callbacks allow).
pub struct Policy {
    pub(crate) kind: Kind,
}

/// The plain default policy keeps the core's monomorphized type (the same machine code as a Rust
/// caller's); a policy with callbacks is composed dynamically.
pub(crate) enum Kind {
    Default(DefaultPolicy),
    Composed(ComposedPolicy),
    /// A policy of the catalog, configured by type (`{"type": ...}`); boxed because its fixed
    /// component storage is some 5 KB.
    Catalog(Box<CatalogPolicy>),
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.kind {
            Kind::Default(_) => "Policy::Default",
            Kind::Composed(_) => "Policy::Composed",
            Kind::Catalog(_) => "Policy::Catalog",
        })
    }
}

/// Runs `$body` with `$p` bound to the concrete core policy behind a [`Policy`].
macro_rules! with_policy {
    ($policy:expr, $p:ident => $body:expr) => {
        match &$policy.kind {
            $crate::host::policy::Kind::Default($p) => $body,
            $crate::host::policy::Kind::Composed($p) => $body,
            $crate::host::policy::Kind::Catalog($p) => $body,
        }
    };
}

impl Policy {
    /// A policy from JSON configuration (UTF-8 bytes): the default policy's knobs (empty text or
    /// `{}` for all defaults), or a catalog policy by type (`{"type": "least_loaded", ...}`).
    ///
    /// # Errors
    ///
    /// `INVALID_JSON`, `UNKNOWN_KEY` (naming the key), `INVALID_KNOB` (naming the knob and its
    /// range), `TOO_MANY_COMPONENTS`.
    pub fn from_json(json: &[u8]) -> Result<Self, Failure> {
        Self::with_components(json, &[], &[])
    }

    /// The default policy: the default knobs from `json`, plus C filters and scorers.
    ///
    /// Crate-only: the callbacks are called with the `user_data` given, which only the C ABI's
    /// caller can vouch for.
    pub(crate) fn with_components(
        json: &[u8],
        filters: &[libroute_filter],
        scorers: &[libroute_scorer],
    ) -> Result<Self, Failure> {
        if is_catalog(json) {
            if !filters.is_empty() || !scorers.is_empty() {
                return Err(Failure::fixed(
                    libroute_status::InvalidArgument,
                    "custom components compose with the default policy's knobs, not with a \
                     catalog policy (a JSON object with \"type\")",
                ));
            }
            return catalog_policy(json);
        }
        let config = if json.is_empty() {
            DefaultPolicyConfig::default()
        } else {
            parse_json::<DefaultPolicyConfig>(json)?
        };
        let knobs = config.knobs().map_err(|e| Failure::new((&e).into(), e))?;
        if filters.is_empty() && scorers.is_empty() {
            return knobs
                .build()
                .map(|p| Policy {
                    kind: Kind::Default(p),
                })
                .map_err(|e| Failure::new((&e).into(), e));
        }
        if 1 + scorers.len() > MAX_SCORERS {
            return Err(Failure::new(
                libroute_status::TooManyComponents,
                format_args!(
                    "{} custom scorers: a policy sums at most {} with the default cost",
                    scorers.len(),
                    MAX_SCORERS - 1
                ),
            ));
        }
        let inputs = |bits: u8, what: &str, i: usize| {
            WorkerInputs::from_bits(bits).ok_or_else(|| {
                Failure::new(
                    libroute_status::InvalidArgument,
                    format_args!("{what} {i} declares undefined input bits {bits:#x}"),
                )
            })
        };
        let mut c_filters = Vec::with_capacity(filters.len());
        for (i, f) in filters.iter().enumerate() {
            let callback = f.callback.ok_or_else(|| {
                Failure::new(
                    libroute_status::NullArgument,
                    format_args!("filter {i} has a NULL callback"),
                )
            })?;
            c_filters.push(CFilter {
                callback,
                user_data: f.user_data,
                inputs: inputs(f.inputs, "filter", i)?,
            });
        }
        let mut all_scorers = vec![AnyScorer::Default(knobs.cost)];
        for (i, s) in scorers.iter().enumerate() {
            let callback = s.callback.ok_or_else(|| {
                Failure::new(
                    libroute_status::NullArgument,
                    format_args!("scorer {i} has a NULL callback"),
                )
            })?;
            all_scorers.push(AnyScorer::C(CScorer {
                callback,
                user_data: s.user_data,
                inputs: inputs(s.inputs, "scorer", i)?,
            }));
        }
        let policy = CorePolicy::new(
            AbiFilters(c_filters),
            AbiScorers(all_scorers),
            DefaultPicker {
                temperature: knobs.temperature,
            },
        )
        .map_err(|e| Failure::new(libroute_status::TooManyComponents, e))?
        .with_seed(knobs.seed);
        Ok(Policy {
            kind: Kind::Composed(policy),
        })
    }

    /// A policy of the catalog, already built.
    pub(crate) fn catalog(policy: CatalogPolicy) -> Self {
        Policy {
            kind: Kind::Catalog(Box::new(policy)),
        }
    }

    /// The union of the input groups the policy's components read for a request of `role`
    /// (with conditional disaggregation or not): what a host must fill in its rows.
    #[must_use]
    pub fn inputs(&self, role: Role, conditional_disagg: bool) -> WorkerInputs {
        let leg = Leg {
            role,
            conditional_disagg,
        };
        with_policy!(self, p => p.inputs(leg))
    }

    /// How many scorers the policy sums (the length of a selection's contributions).
    #[must_use]
    pub fn scorer_count(&self) -> usize {
        with_policy!(self, p => p.scorers().len())
    }

    pub(crate) fn select<const N: usize>(
        &self,
        selector: &mut CoreSelector<N>,
        request: &Request<'_>,
        rows: &[Row],
    ) -> Result<Selection, SelectError> {
        with_policy!(self, p => p.select(selector, request, rows))
    }

    pub(crate) fn select_explained<const N: usize>(
        &self,
        selector: &mut CoreSelector<N>,
        request: &Request<'_>,
        rows: &[Row],
        out: &mut [Explanation],
    ) -> Result<Selection, SelectError> {
        with_policy!(self, p => p.select_explained(selector, request, rows, out))
    }
}

/// Parses a configuration (an unknown key or type gives `UNKNOWN_KEY`, anything else
/// `INVALID_JSON`), classified by the error's kind, not its text.
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(json: &[u8]) -> Result<T, Failure> {
    let text = std::str::from_utf8(json).map_err(|e| {
        Failure::new(
            libroute_status::InvalidJson,
            format_args!("configuration is not UTF-8: {e}"),
        )
    })?;
    catalog_config::parse::<T>(text).map_err(|e| {
        let status = if e.is_unknown_name() {
            libroute_status::UnknownKey
        } else {
            libroute_status::InvalidJson
        };
        Failure::new(status, format_args!("configuration: {e}"))
    })
}

/// The status of a catalog configuration that parsed but does not build: too many components,
/// or a value out of range.
pub(crate) fn catalog_status(e: &CatalogError) -> libroute_status {
    match e.innermost() {
        CatalogError::TooMany { .. } => libroute_status::TooManyComponents,
        _ => libroute_status::InvalidKnob,
    }
}

/// Whether `json` is a catalog policy: an object with a `"type"` key (the default policy's knobs
/// have none).
fn is_catalog(json: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(json)
        .is_ok_and(|object| object.contains_key("type"))
}

/// Builds a catalog policy from its JSON (`{"type": ...}`).
fn catalog_policy(json: &[u8]) -> Result<Policy, Failure> {
    let config: PolicyConfig = parse_json(json)?;
    let policy = config
        .build()
        .map_err(|e| Failure::new(catalog_status(&e), format_args!("policy: {e}")))?;
    Ok(Policy::catalog(policy))
}
