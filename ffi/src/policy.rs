//! `libroute_policy`: an immutable policy, the default one configured by JSON, one of the
//! catalog's, or the default cost and picker with C components.

use std::ffi::c_char;

use libroute_core::catalog::CatalogPolicy;
use libroute_core::catalog_config::{self, CatalogError, PolicyConfig};
use libroute_core::{
    DefaultPicker, DefaultPolicy, DefaultPolicyConfig, Explanation, Leg, MAX_SCORERS, Policy,
    Request, Row, Scorers, SelectError, Selection, Selector, WorkerInputs,
};

use crate::components::{
    AbiFilters, AbiScorers, AnyScorer, CFilter, CScorer, libroute_filter, libroute_scorer,
};
use crate::handle::{Handle, slice};
use crate::status::{boundary, fail, libroute_status};
use crate::vocab::{flag, role};

/// A policy with custom C components.
type ComposedPolicy = Policy<AbiFilters, AbiScorers, DefaultPicker>;

/// The policy behind a handle: the plain default policy keeps the core's monomorphized type (the
/// same machine code as a Rust caller's), a policy with callbacks is composed dynamically.
pub(crate) enum AbiPolicy {
    Default(DefaultPolicy),
    Composed(ComposedPolicy),
    /// A policy of the catalog, configured by type (`{"type": ...}`); boxed because its fixed
    /// component storage is some 5 KB.
    Catalog(Box<CatalogPolicy>),
}

/// Runs `$body` with `$p` bound to the concrete policy behind an [`AbiPolicy`].
macro_rules! with_policy {
    ($policy:expr, $p:ident => $body:expr) => {
        match $policy {
            AbiPolicy::Default($p) => $body,
            AbiPolicy::Composed($p) => $body,
            AbiPolicy::Catalog($p) => $body,
        }
    };
}

impl AbiPolicy {
    pub(crate) fn scorer_count(&self) -> usize {
        with_policy!(self, p => p.scorers().len())
    }

    pub(crate) fn inputs(&self, leg: Leg) -> WorkerInputs {
        with_policy!(self, p => p.inputs(leg))
    }

    pub(crate) fn select<const N: usize>(
        &self,
        selector: &mut Selector<N>,
        request: &Request<'_>,
        rows: &[Row],
    ) -> Result<Selection, SelectError> {
        with_policy!(self, p => p.select(selector, request, rows))
    }

    pub(crate) fn select_explained<const N: usize>(
        &self,
        selector: &mut Selector<N>,
        request: &Request<'_>,
        rows: &[Row],
        out: &mut [Explanation],
    ) -> Result<Selection, SelectError> {
        with_policy!(self, p => p.select_explained(selector, request, rows, out))
    }
}

/// An immutable policy: the default cost and picker configured by JSON, plus any custom filters
/// and scorers. Create with `libroute_policy_new` or `libroute_policy_new_default`; free with
/// `libroute_policy_free`.
#[derive(Debug)]
pub struct libroute_policy {
    _private: [u8; 0],
}

impl Handle for libroute_policy {
    type Target = AbiPolicy;
    const NAME: &'static str = "policy";
}

/// Parses the knobs JSON of a default policy; errors are recorded with their detail.
fn parse_config(json: &[u8]) -> Result<DefaultPolicyConfig, libroute_status> {
    parse_json(json)
}

/// Parses a configuration; errors are recorded with their detail (an unknown key or type gives
/// `UNKNOWN_KEY`, anything else `INVALID_JSON`), classified by the error's kind, not its text.
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(
    json: &[u8],
) -> Result<T, libroute_status> {
    let text = std::str::from_utf8(json).map_err(|e| {
        fail(
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
        fail(status, format_args!("configuration: {e}"))
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
fn catalog_policy(json: &[u8]) -> Result<Box<AbiPolicy>, libroute_status> {
    let config: PolicyConfig = parse_json(json)?;
    let policy = config
        .build()
        .map_err(|e| fail(catalog_status(&e), format_args!("policy: {e}")))?;
    Ok(Box::new(AbiPolicy::Catalog(Box::new(policy))))
}

/// Builds the policy: the default knobs from `json` plus C components.
///
/// # Safety
///
/// Pointer arguments as documented on `libroute_policy_new_with_components`.
unsafe fn build_policy(
    json: *const c_char,
    json_len: usize,
    filters: *const libroute_filter,
    filters_len: usize,
    scorers: *const libroute_scorer,
    scorers_len: usize,
) -> Result<Box<AbiPolicy>, libroute_status> {
    // SAFETY: the caller's contract: `json` holds `json_len` bytes when non-NULL.
    let json = unsafe { slice(json.cast::<u8>(), json_len) }.ok_or_else(|| {
        fail(
            libroute_status::NullArgument,
            "json is NULL with a non-zero length",
        )
    })?;
    if is_catalog(json) {
        if filters_len != 0 || scorers_len != 0 {
            return Err(fail(
                libroute_status::InvalidArgument,
                "custom components compose with the default policy's knobs, not with a catalog \
                 policy (a JSON object with \"type\")",
            ));
        }
        return catalog_policy(json);
    }
    let config = if json.is_empty() {
        DefaultPolicyConfig::default()
    } else {
        parse_config(json)?
    };
    let knobs = config.knobs().map_err(|e| fail((&e).into(), e))?;
    // SAFETY: the caller's contract for both arrays.
    let (filters, scorers) = unsafe { (slice(filters, filters_len), slice(scorers, scorers_len)) };
    let filters = filters.ok_or_else(|| {
        fail(
            libroute_status::NullArgument,
            "filters is NULL with a non-zero length",
        )
    })?;
    let scorers = scorers.ok_or_else(|| {
        fail(
            libroute_status::NullArgument,
            "scorers is NULL with a non-zero length",
        )
    })?;
    if filters.is_empty() && scorers.is_empty() {
        return knobs
            .build()
            .map(|p| Box::new(AbiPolicy::Default(p)))
            .map_err(|e| fail((&e).into(), e));
    }
    if 1 + scorers.len() > MAX_SCORERS {
        return Err(fail(
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
            fail(
                libroute_status::InvalidArgument,
                format_args!("{what} {i} declares undefined input bits {bits:#x}"),
            )
        })
    };
    let mut c_filters = Vec::with_capacity(filters.len());
    for (i, f) in filters.iter().enumerate() {
        let callback = f.callback.ok_or_else(|| {
            fail(
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
            fail(
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
    let policy = Policy::new(
        AbiFilters(c_filters),
        AbiScorers(all_scorers),
        DefaultPicker {
            temperature: knobs.temperature,
        },
    )
    .map_err(|e| fail(libroute_status::TooManyComponents, e))?
    .with_seed(knobs.seed);
    Ok(Box::new(AbiPolicy::Composed(policy)))
}

/// Creates the default policy from JSON configuration: an object of the default policy's knobs
/// (`overlap_score_credit`, `overlap_score_credit_decay`, `prefill_load_scale`,
/// `decode_active_request_weight`, `host_cache_hit_weight`, `disk_cache_hit_weight`,
/// `shared_cache_multiplier`, `temperature`, `seed`, and the legacy `overlap_score_weight`), as
/// UTF-8 bytes `json[0..json_len]` (no terminating NUL needed). An empty text means all defaults.
///
/// On success `*out` owns a new policy: free it with `libroute_policy_free`.
///
/// Errors: `NULL_ARGUMENT`, `INVALID_JSON`, `UNKNOWN_KEY` (the detail names the key),
/// `INVALID_KNOB` (the detail names the knob and its range).
///
/// # Safety
///
/// `json` must point to `json_len` readable bytes (it may be NULL when `json_len` is 0); `out` must
/// be valid for a pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_policy_new(
    json: *const c_char,
    json_len: usize,
    out: *mut *mut libroute_policy,
) -> libroute_status {
    // SAFETY: forwarded under this function's own contract, with no components.
    unsafe {
        libroute_policy_new_with_components(
            json,
            json_len,
            std::ptr::null(),
            0,
            std::ptr::null(),
            0,
            out,
        )
    }
}

/// Creates the default policy with every knob at its default. On success `*out` owns a new
/// policy: free it with `libroute_policy_free`.
///
/// # Safety
///
/// `out` must be valid for a pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_policy_new_default(
    out: *mut *mut libroute_policy,
) -> libroute_status {
    // SAFETY: an empty configuration and no components; `out` under this function's contract.
    unsafe { libroute_policy_new(std::ptr::null(), 0, out) }
}

/// Creates a policy: the default cost and picker configured by `json` (as in
/// `libroute_policy_new`), the `filters` run in order before scoring, and the `scorers` whose
/// costs are added to the default cost (at most 7). The arrays are copied; the callbacks and
/// their `user_data` must stay valid until the policy is freed.
///
/// On success `*out` owns a new policy: free it with `libroute_policy_free`.
///
/// # Safety
///
/// `json` as in `libroute_policy_new`; `filters` and `scorers` must point to `filters_len` and
/// `scorers_len` elements (NULL allowed for length 0); `out` must be valid for a pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_policy_new_with_components(
    json: *const c_char,
    json_len: usize,
    filters: *const libroute_filter,
    filters_len: usize,
    scorers: *const libroute_scorer,
    scorers_len: usize,
    out: *mut *mut libroute_policy,
) -> libroute_status {
    boundary(|| {
        non_null!(out, "out");
        // SAFETY: forwarded under this function's contract.
        match unsafe { build_policy(json, json_len, filters, filters_len, scorers, scorers_len) } {
            Ok(policy) => {
                // SAFETY: `out` is non-NULL and, by contract, valid for a write.
                unsafe { out.write(libroute_policy::into_handle(policy)) };
                libroute_status::Ok
            }
            Err(status) => status,
        }
    })
}

/// Frees a policy. `NULL` does nothing.
///
/// # Safety
///
/// `policy` must be NULL or a pointer returned by a `libroute_policy_new*` function that has not
/// been freed, and no other thread may be using it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_policy_free(policy: *mut libroute_policy) {
    // SAFETY: by contract the pointer is NULL or a live policy handle, freed once.
    unsafe { libroute_policy::free(policy) };
}

/// Writes the union of the input groups the policy's components read for a request of `role`
/// (and conditional disaggregation) as `LIBROUTE_INPUT_*` bits to `*out`. Without
/// `LIBROUTE_INPUT_CACHE` the host need not compute cache overlaps for such requests.
///
/// # Safety
///
/// `policy` must be a live policy; `out` valid for a byte write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_policy_inputs(
    policy: *const libroute_policy,
    role: u32,
    conditional_disagg: u8,
    out: *mut u8,
) -> libroute_status {
    boundary(|| {
        non_null!(out, "out");
        // SAFETY: by contract `policy` is NULL or live.
        let policy = match unsafe { libroute_policy::get(policy) } {
            Ok(policy) => policy,
            Err(status) => return status,
        };
        let leg = match (
            self::role(role),
            flag(conditional_disagg, "conditional_disagg"),
        ) {
            (Ok(role), Ok(conditional_disagg)) => Leg {
                role,
                conditional_disagg,
            },
            (Err(s), _) | (_, Err(s)) => return s,
        };
        // SAFETY: `out` is non-NULL and valid for a write by contract.
        unsafe { out.write(policy.inputs(leg).bits()) };
        libroute_status::Ok
    })
}
