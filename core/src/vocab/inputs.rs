//! Declared inputs and the views that enforce them.
//!
//! Every component declares the [`WorkerInputs`] groups it reads. The selector hands it views
//! ([`RequestView`], [`RowView`], [`Candidates`]) built with that declaration, whose accessors
//! return `None` ("absent") for any group the component did not declare. The union of all
//! declarations, [`crate::Policy::inputs`], tells a host whether it must compute cache overlaps at
//! all.

use core::fmt;

use crate::vocab::{
    Cache, Leg, Load, PreferredTaint, Request, Role, Row, RowRule, SharedHits, Speed, TaintSet,
    WorkerKey,
};

/// A set of input groups (spec section 1).
///
/// # Examples
///
/// ```
/// use libroute_core::WorkerInputs;
/// let both = WorkerInputs::CACHE | WorkerInputs::LOAD;
/// assert!(both.contains(WorkerInputs::LOAD));
/// assert!(!both.contains(WorkerInputs::PREFERRED_TAINT));
/// assert_eq!(both.to_string(), "CACHE | LOAD");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WorkerInputs(u8);

impl WorkerInputs {
    /// No inputs beyond worker identity and the request's own fields.
    pub const NONE: WorkerInputs = WorkerInputs(0);
    /// Overlap per tier, the accounting estimate, whether the request has tier matches, and
    /// shared-cache hits.
    pub const CACHE: WorkerInputs = WorkerInputs(1);
    /// The load projection: availability, active prefill tokens, active decode blocks, active
    /// requests.
    pub const LOAD: WorkerInputs = WorkerInputs(2);
    /// The worker's taints and the preferred-taint multiplier.
    pub const PREFERRED_TAINT: WorkerInputs = WorkerInputs(4);
    /// The worker's measured speed ([`crate::Speed`]): how long its first tokens take.
    pub const SPEED: WorkerInputs = WorkerInputs(8);
    /// Cache overlaps that also count the blocks of requests already routed to each worker and
    /// not yet computed there (a host that records them: [`crate::Router::route_at`]).
    pub const PENDING: WorkerInputs = WorkerInputs(16);
    /// Every group.
    pub const ALL: WorkerInputs = WorkerInputs(31);

    /// The set with these bits, or `None` if `bits` has a bit no group defines.
    #[must_use]
    pub const fn from_bits(bits: u8) -> Option<Self> {
        if bits & !Self::ALL.0 == 0 {
            Some(Self(bits))
        } else {
            None
        }
    }

    /// The bits of this set.
    #[must_use]
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// Whether every group of `other` is in this set.
    #[must_use]
    pub const fn contains(self, other: WorkerInputs) -> bool {
        self.0 & other.0 == other.0
    }

    /// Both sets.
    #[must_use]
    pub const fn union(self, other: WorkerInputs) -> Self {
        Self(self.0 | other.0)
    }
}

impl core::ops::BitOr for WorkerInputs {
    type Output = WorkerInputs;
    fn bitor(self, rhs: Self) -> Self {
        self.union(rhs)
    }
}

impl core::ops::BitOrAssign for WorkerInputs {
    fn bitor_assign(&mut self, rhs: Self) {
        *self = self.union(rhs);
    }
}

impl fmt::Debug for WorkerInputs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WorkerInputs({self})")
    }
}

impl fmt::Display for WorkerInputs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            return f.write_str("NONE");
        }
        let mut first = true;
        for (flag, name) in [
            (Self::CACHE, "CACHE"),
            (Self::LOAD, "LOAD"),
            (Self::PREFERRED_TAINT, "PREFERRED_TAINT"),
            (Self::SPEED, "SPEED"),
            (Self::PENDING, "PENDING"),
        ] {
            if self.contains(flag) {
                if !first {
                    f.write_str(" | ")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        Ok(())
    }
}

/// The request, as a component that declared `inputs` may see it.
///
/// The request's own shape (prompt, block size, role, tracking) is always visible; tier matches
/// and shared hits need `CACHE`, preferred taints need `PREFERRED_TAINT`.
#[derive(Debug, Clone, Copy)]
pub struct RequestView<'a> {
    request: &'a Request<'a>,
    inputs: WorkerInputs,
    pinned: bool,
    rule: RowRule,
}

impl<'a> RequestView<'a> {
    /// A view of `request` for a component that declared `inputs`.
    #[must_use]
    pub const fn new(request: &'a Request<'a>, inputs: WorkerInputs) -> Self {
        Self {
            request,
            inputs,
            pinned: request.pin.is_some(),
            rule: RowRule::NONE,
        }
    }

    /// This view with the rule of the policy's filters for a scorer's one pass to admit by
    /// ([`RequestView::row_rule`]).
    #[must_use]
    pub(crate) const fn with_row_rule(self, rule: RowRule) -> Self {
        Self { rule, ..self }
    }

    /// The rule a scorer's one-pass admission applies besides the required taints and the
    /// host's overload marks: the policy's filters as one [`RowRule`], given only to a scorer
    /// that said it applies it (`Scorer::applies_row_rules`); [`RowRule::NONE`] otherwise.
    #[must_use]
    pub const fn row_rule(&self) -> RowRule {
        self.rule
    }

    /// The groups this view exposes.
    #[must_use]
    pub const fn inputs(&self) -> WorkerInputs {
        self.inputs
    }

    /// `P`: prompt tokens.
    #[must_use]
    pub const fn prompt_tokens(&self) -> u64 {
        self.request.prompt_tokens
    }

    /// `bs`: block size in tokens (at least 1 once the request is checked).
    #[must_use]
    pub const fn block_size(&self) -> u32 {
        self.request.block_size
    }

    /// `RB`: request blocks, at least 1.
    #[must_use]
    pub const fn request_blocks(&self) -> u64 {
        self.request.request_blocks()
    }

    /// The role of the pool being selected from.
    #[must_use]
    pub const fn role(&self) -> Role {
        self.request.role
    }

    /// Whether the request's prefill tokens are tracked.
    #[must_use]
    pub const fn track_prefill_tokens(&self) -> bool {
        self.request.track_prefill_tokens
    }

    /// Whether conditional disaggregation is on.
    #[must_use]
    pub const fn conditional_disagg(&self) -> bool {
        self.request.conditional_disagg
    }

    /// The leg being selected for (what components' declared inputs depend on).
    #[must_use]
    pub const fn leg(&self) -> Leg {
        self.request.leg()
    }

    /// Taints a worker must carry to be eligible (always visible: eligibility is the
    /// selector's own first step).
    #[must_use]
    pub const fn required_taints(&self) -> TaintSet {
        self.request.required_taints
    }

    /// Whether the request is pinned (selection reduced to one row).
    #[must_use]
    pub const fn is_pinned(&self) -> bool {
        self.pinned
    }

    /// Whether the request has any tier overlap entry (`CACHE`).
    #[must_use]
    pub const fn has_tier_matches(&self) -> Option<bool> {
        if self.inputs.contains(WorkerInputs::CACHE) {
            Some(self.request.has_tier_matches)
        } else {
            None
        }
    }

    /// Whether the request's tier matches are all in device memory
    /// ([`Request::device_matches_only`]), `None` when CACHE is not declared.
    #[must_use]
    pub const fn device_matches_only(&self) -> Option<bool> {
        if self.inputs.contains(WorkerInputs::CACHE) {
            Some(self.request.device_matches_only)
        } else {
            None
        }
    }

    /// The request's session id, if it has one (every component may read it).
    #[must_use]
    pub const fn session(&self) -> Option<u64> {
        self.request.session
    }

    /// Shared-cache hits (`CACHE`), `None` when absent or not declared.
    #[must_use]
    pub const fn shared_hits(&self) -> Option<SharedHits<'a>> {
        if self.inputs.contains(WorkerInputs::CACHE) {
            self.request.shared_hits
        } else {
            None
        }
    }

    /// Preferred taints (`PREFERRED_TAINT`).
    #[must_use]
    pub const fn preferred_taints(&self) -> Option<&'a [PreferredTaint]> {
        if self.inputs.contains(WorkerInputs::PREFERRED_TAINT) {
            Some(self.request.preferred_taints)
        } else {
            None
        }
    }

    /// The preferred taints that feed the multiplier: none when not declared, or when the
    /// request is pinned (spec section 2: the multiplier is absent for a pinned request).
    pub(crate) const fn multiplier_taints(&self) -> &'a [PreferredTaint] {
        if self.pinned || !self.inputs.contains(WorkerInputs::PREFERRED_TAINT) {
            &[]
        } else {
            self.request.preferred_taints
        }
    }
}

/// One candidate row, as a component that declared `inputs` may see it.
#[derive(Debug, Clone, Copy)]
pub struct RowView<'a> {
    row: &'a Row,
    inputs: WorkerInputs,
    preferred: &'a [PreferredTaint],
}

impl<'a> RowView<'a> {
    /// A view of `row` under `request`'s declaration.
    #[must_use]
    pub const fn new(request: &RequestView<'a>, row: &'a Row) -> Self {
        Self {
            row,
            inputs: request.inputs,
            preferred: request.multiplier_taints(),
        }
    }

    /// The host's row, unmasked: for foreign (C) components, which promise to read only the
    /// groups they declared (see [`Candidates::raw`]).
    #[must_use]
    pub const fn raw(&self) -> &'a Row {
        self.row
    }

    /// The worker and rank.
    #[must_use]
    pub const fn worker(&self) -> WorkerKey {
        self.row.worker
    }

    /// The CACHE inputs (zeros when the row has no cache entry); `None` unless declared.
    #[inline]
    #[must_use]
    pub const fn cache(&self) -> Option<Cache> {
        if self.inputs.contains(WorkerInputs::CACHE) {
            Some(self.row.cache())
        } else {
            None
        }
    }

    /// The LOAD inputs (`available == false` and zeros when missing); `None` unless declared.
    #[inline]
    #[must_use]
    pub const fn load(&self) -> Option<Load> {
        if self.inputs.contains(WorkerInputs::LOAD) {
            Some(self.row.load())
        } else {
            None
        }
    }

    /// The measured speed (`None` when the row has none); `None` unless `SPEED` is declared.
    #[inline]
    #[must_use]
    pub const fn speed(&self) -> Option<Speed> {
        if self.inputs.contains(WorkerInputs::SPEED) {
            self.row.speed()
        } else {
            None
        }
    }

    /// The worker's taints; `None` unless `PREFERRED_TAINT` is declared.
    #[must_use]
    pub const fn taints(&self) -> Option<TaintSet> {
        if self.inputs.contains(WorkerInputs::PREFERRED_TAINT) {
            Some(self.row.taints)
        } else {
            None
        }
    }

    /// `m = exp(-tanh(sum of matching preferred-taint weights))`, 1.0 when none match; `None`
    /// when not declared, when the request has no preferred taints, or when it is pinned.
    #[inline]
    #[must_use]
    pub fn taint_multiplier(&self) -> Option<f64> {
        taint_multiplier(self.preferred, self.row.taints)
    }
}

/// The candidates that survived filtering, in the order scorers and pickers see them.
///
/// Position `k` is the `k`-th candidate of this selection; [`Candidates::row_index`] maps it back
/// to the host's row index.
#[derive(Debug, Clone, Copy)]
pub struct Candidates<'a> {
    rows: &'a [Row],
    order: &'a [u32],
    request: RequestView<'a>,
}

impl<'a> Candidates<'a> {
    /// The candidates `order` (indices into `rows`) under `request`'s declaration.
    ///
    /// # Panics
    ///
    /// Accessors panic if `order` holds an index outside `rows`; the selector never builds such a
    /// view.
    #[must_use]
    pub const fn new(request: RequestView<'a>, rows: &'a [Row], order: &'a [u32]) -> Self {
        Self {
            rows,
            order,
            request,
        }
    }

    /// How many candidates there are.
    #[must_use]
    pub const fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether there are none.
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The request view these candidates are seen under.
    #[must_use]
    pub const fn request(&self) -> &RequestView<'a> {
        &self.request
    }

    /// The host's row index of candidate `k`.
    #[must_use]
    pub const fn row_index(&self, k: usize) -> usize {
        self.order[k] as usize
    }

    /// Candidate `k`.
    #[inline]
    #[must_use]
    pub fn get(&self, k: usize) -> RowView<'a> {
        RowView::new(&self.request, &self.rows[self.order[k] as usize])
    }

    /// The host's rows and the candidate order (indices into the rows), unmasked.
    ///
    /// For components that cannot be given masked views: builtin scorers that hoist the
    /// declared-input checks out of their loop, and foreign (C) components that receive the
    /// host's own row array. Such a component promises to read only the groups it declared;
    /// nothing else enforces it.
    #[must_use]
    pub const fn raw(&self) -> (&'a [Row], &'a [u32]) {
        (self.rows, self.order)
    }

    /// Every candidate, in order.
    #[must_use = "iterators are lazy"]
    pub fn iter(&self) -> impl ExactSizeIterator<Item = RowView<'a>> + '_ {
        let request = self.request;
        let rows = self.rows;
        self.order
            .iter()
            .map(move |&i| RowView::new(&request, &rows[i as usize]))
    }
}

/// `exp(-tanh(sum of the weights of preferred taints the worker carries))`, `None` without
/// preferred taints.
#[inline]
pub(crate) fn taint_multiplier(preferred: &[PreferredTaint], taints: TaintSet) -> Option<f64> {
    if preferred.is_empty() {
        return None;
    }
    let mut sum = 0.0;
    for p in preferred {
        if taints.contains(p.taint) {
            sum += p.weight;
        }
    }
    Some(crate::vocab::math::exp(-crate::vocab::math::tanh(sum)))
}
