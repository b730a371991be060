//! One call that does it all for a host: overlap query + select + book.

use core::fmt;

use crate::engine::{Filters, Picker, Scorers};
use crate::engine::{Policy, SelectError, Selection, Selector};
use crate::host::fleet::{Fleet, FleetPlace, Hints, Place, Seen};
use crate::host::index::{
    BlockSlot, NO_BIT, Overlaps, PrefixIndex, WorkerSlot, clear_cache, write_cache,
    write_device_cache, write_device_cache_of,
};
use crate::host::ledger::{Ledger, LedgerError, LoadSlot, RequestSlot};
use crate::host::predict::{PredictionRecord, PredictionSlot, Predictions};
use crate::vocab::WorkerInputs;
use crate::vocab::{Cache, Request, Row, RowFlags};

/// Why [`Router::route`] failed. Nothing was booked.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum RouteError {
    /// The selection failed.
    Select(SelectError),
    /// Booking failed (a duplicate request id is detected before selecting).
    Ledger(LedgerError),
}

impl fmt::Display for RouteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RouteError::Select(e) => write!(f, "selection failed: {e}"),
            RouteError::Ledger(e) => write!(f, "booking failed: {e}"),
        }
    }
}

impl core::error::Error for RouteError {}

/// A host's routing state: the prefix index, the load ledger, and the query scratch.
///
/// [`Router::route`] fills the candidate rows' CACHE inputs from the index (when the policy reads
/// them) and their LOAD inputs from the ledger, adds the request's own new blocks to each row's
/// decode blocks, selects, and books the request on the chosen worker.
///
/// # Examples
///
/// ```
/// use libroute_core::*;
///
/// let index = PrefixIndex::<_, _, 1>::new(vec![BlockSlot::<1>::empty(); 1024], vec![WorkerSlot::empty(); 128]).unwrap();
/// let ledger = Ledger::new(vec![RequestSlot::empty(); 256], vec![LoadSlot::empty(); 128], vec![0u64; 64]).unwrap();
/// let mut router = Router::new(index, ledger, 0.75, 0.25);
/// let (a, b) = (WorkerKey::new(1, 0), WorkerKey::new(2, 0));
/// router.ledger.add_worker(a).unwrap();
/// router.ledger.add_worker(b).unwrap();
/// router.index.apply(&KvEvent::Stored { worker: b, tier: Tier::Device, hashes: &[7, 8, 9] }).unwrap();
///
/// let policy = DefaultKnobs::default().build().unwrap();
/// let mut selector = Selector::<16>::new();
/// let mut rows = [Row::new(a), Row::new(b)];
/// let hashes = [7, 8, 9, 10];
/// let s = router.route(&policy, &mut selector, &Request::new(64, 16), &hashes, &mut rows, 1).unwrap();
/// assert_eq!(s.worker, b); // it holds 3 of the 4 blocks
/// assert_eq!(router.ledger.load(b).unwrap().active_prefill_tokens, 16); // 64 - 48 cached
/// assert_eq!(router.ledger.load(b).unwrap().active_decode_blocks, 1); // one new block
/// ```
#[derive(Debug)]
pub struct Router<B, W, R, L, T, const WORDS: usize> {
    /// The prefix-overlap index, fed by the host's KV events.
    pub index: PrefixIndex<B, W, WORDS>,
    /// The load ledger; the host reports completions and frees to it.
    pub ledger: Ledger<R, L, T>,
    overlaps: Overlaps<WORDS>,
    host_weight: f64,
    disk_weight: f64,
}

impl<B, W, R, L, T, const WORDS: usize> Router<B, W, R, L, T, WORDS>
where
    B: AsRef<[BlockSlot<WORDS>]> + AsMut<[BlockSlot<WORDS>]>,
    W: AsRef<[WorkerSlot]> + AsMut<[WorkerSlot]>,
    R: AsRef<[RequestSlot]> + AsMut<[RequestSlot]>,
    L: AsRef<[LoadSlot]> + AsMut<[LoadSlot]>,
    T: AsRef<[u64]> + AsMut<[u64]>,
{
    /// A router over an index and a ledger; `host_weight` and `disk_weight` turn tier overlaps
    /// into the accounting estimate (use the policy's `host_cache_hit_weight` and
    /// `disk_cache_hit_weight`).
    pub fn new(
        index: PrefixIndex<B, W, WORDS>,
        ledger: Ledger<R, L, T>,
        host_weight: f64,
        disk_weight: f64,
    ) -> Self {
        Self {
            index,
            ledger,
            overlaps: Overlaps::new(),
            host_weight,
            disk_weight,
        }
    }

    /// The weights given at construction: host and disk overlaps' share of a device block.
    #[must_use]
    pub const fn cache_weights(&self) -> (f64, f64) {
        (self.host_weight, self.disk_weight)
    }

    /// Writes the index's and then the ledger's snapshot section to `out`
    /// ([`PrefixIndex::write_snapshot`], [`Ledger::write_snapshot`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use libroute_core::{
    ///     BlockSlot, KvEvent, Ledger, LoadSlot, PrefixIndex, RequestSlot, Router, SnapshotReader,
    ///     Tier, WorkerKey, WorkerSlot,
    /// };
    ///
    /// let index = || PrefixIndex::<_, _, 1>::new(vec![BlockSlot::<1>::empty(); 64], vec![WorkerSlot::empty(); 128]).unwrap();
    /// let ledger = || Ledger::new(vec![RequestSlot::empty(); 64], vec![LoadSlot::empty(); 16], vec![0u64; 16]).unwrap();
    /// let mut router = Router::new(index(), ledger(), 0.75, 0.25);
    /// let w = WorkerKey::new(1, 0);
    /// router.ledger.add_worker(w).unwrap();
    /// router.ledger.book(9, w, 512, 4).unwrap();
    /// router.index.apply(&KvEvent::Stored { worker: w, tier: Tier::Device, hashes: &[5, 6] }).unwrap();
    ///
    /// let mut bytes = Vec::new();
    /// router.write_snapshot(&mut |b: &[u8]| bytes.extend_from_slice(b));
    /// let mut reader = SnapshotReader::new(&bytes);
    /// let index = PrefixIndex::from_snapshot(vec![BlockSlot::<1>::empty(); 64], vec![WorkerSlot::empty(); 128], &mut reader).unwrap();
    /// let ledger = Ledger::from_snapshot(vec![RequestSlot::empty(); 64], vec![LoadSlot::empty(); 16], vec![0u64; 16], &mut reader).unwrap();
    /// reader.finish().unwrap();
    /// let (host, disk) = router.cache_weights();
    /// let copy = Router::new(index, ledger, host, disk);
    /// assert_eq!(copy.ledger.load(w), router.ledger.load(w));
    /// assert_eq!(copy.index.counters(), router.index.counters());
    /// ```
    pub fn write_snapshot(&self, out: &mut impl FnMut(&[u8])) {
        self.index.write_snapshot(out);
        self.ledger.write_snapshot(out);
    }

    /// Queries the overlap of `hashes` (the request's chained block hashes), fills `rows`,
    /// selects with `policy`, and books request `id` on the chosen worker with its uncached
    /// prefill tokens and its new blocks there.
    ///
    /// # Errors
    ///
    /// [`RouteError::Ledger`] with [`LedgerError::DuplicateId`] before anything else happens;
    /// [`RouteError::Select`] for any selection error; [`RouteError::Ledger`] if the chosen worker
    /// cannot be booked (unknown to the ledger, or the ledger is full). Nothing is booked on error.
    pub fn route<F: Filters, S: Scorers, P: Picker, const N: usize>(
        &mut self,
        policy: &Policy<F, S, P>,
        selector: &mut Selector<N>,
        request: &Request<'_>,
        hashes: &[u64],
        rows: &mut [Row],
        id: u64,
    ) -> Result<Selection, RouteError> {
        self.route_placed(policy, selector, request, hashes, rows, &mut [], id)
    }

    /// [`Router::route`] at `now_ms` (milliseconds on the host's clock, the one it passes to
    /// [`Ledger::prefill_complete_at`]): the booking is timed, so its prefill completion
    /// calibrates the chosen worker's [`crate::Speed`], and rows get SPEED inputs from the ledger
    /// when the policy declares them. With `pending`, the request's blocks are also recorded as
    /// predicted on the chosen worker (expiring at `now_ms` plus its TTL, in whole
    /// milliseconds): approximate mode for hosts without KV events, or, beside KV events, the
    /// blocks of requests routed but not yet computed, for policies that declare
    /// [`WorkerInputs::PENDING`].
    ///
    /// # Errors
    ///
    /// As [`Router::route`], and [`LedgerError::InvalidTime`] for a time that is NaN, infinite
    /// or negative; nothing is booked on error.
    #[allow(
        clippy::too_many_arguments,
        reason = "route's arguments plus the time and the prediction store"
    )]
    pub fn route_at<F: Filters, S: Scorers, P: Picker, M, Q, const N: usize>(
        &mut self,
        pending: Option<&mut Predictions<M, Q>>,
        policy: &Policy<F, S, P>,
        selector: &mut Selector<N>,
        request: &Request<'_>,
        hashes: &[u64],
        rows: &mut [Row],
        id: u64,
        now_ms: f64,
    ) -> Result<Selection, RouteError>
    where
        M: AsRef<[PredictionSlot]> + AsMut<[PredictionSlot]>,
        Q: AsRef<[PredictionRecord]> + AsMut<[PredictionRecord]>,
    {
        self.route_placed_at(
            pending,
            policy,
            selector,
            request,
            hashes,
            rows,
            &mut [],
            id,
            now_ms,
        )
    }

    /// [`Router::route`] with `places`: where each row's worker was found in the index and the
    /// ledger by an earlier route, row by row (`places[k]` for `rows[k]`; rows beyond
    /// `places.len()` have none). Each worker is looked for at its place first, and hashed only
    /// when it is not there; the places are updated. A host that routes over the same rows
    /// (the same workers in the same positions) each time keeps one `places` array beside
    /// them, filled with [`Place::empty`] at first, and saves hashing every worker twice per
    /// route. Any place is safe: a slot is used only when it holds the row's worker, so places
    /// from other rows, or stale ones, cost a lookup and change nothing else.
    ///
    /// # Errors
    ///
    /// As [`Router::route`]; nothing is booked on error.
    #[allow(
        clippy::too_many_arguments,
        reason = "route's arguments plus the places"
    )]
    pub fn route_placed<F: Filters, S: Scorers, P: Picker, const N: usize>(
        &mut self,
        policy: &Policy<F, S, P>,
        selector: &mut Selector<N>,
        request: &Request<'_>,
        hashes: &[u64],
        rows: &mut [Row],
        places: &mut [Place],
        id: u64,
    ) -> Result<Selection, RouteError> {
        let rows = Filling::Host(rows, places);
        self.route_inner(policy, selector, request, hashes, rows, id, None)
    }

    /// [`Router::route_at`] with `places` (see [`Router::route_placed`]).
    ///
    /// # Errors
    ///
    /// As [`Router::route_at`]; nothing is booked on error.
    #[allow(
        clippy::too_many_arguments,
        reason = "route_at's arguments plus the places"
    )]
    pub fn route_placed_at<F: Filters, S: Scorers, P: Picker, M, Q, const N: usize>(
        &mut self,
        pending: Option<&mut Predictions<M, Q>>,
        policy: &Policy<F, S, P>,
        selector: &mut Selector<N>,
        request: &Request<'_>,
        hashes: &[u64],
        rows: &mut [Row],
        places: &mut [Place],
        id: u64,
        now_ms: f64,
    ) -> Result<Selection, RouteError>
    where
        M: AsRef<[PredictionSlot]> + AsMut<[PredictionSlot]>,
        Q: AsRef<[PredictionRecord]> + AsMut<[PredictionRecord]>,
    {
        let rows = Filling::Host(rows, places);
        self.route_timed(pending, policy, selector, request, hashes, rows, id, now_ms)
    }

    /// [`Router::route`] over the rows of `fleet`, the workers registered with it, which it
    /// keeps between routes: it writes the same inputs and makes the same selection as
    /// [`Router::route`] over [`Fleet::rows`], finding each worker in the index and the ledger
    /// where it was last time instead of by hashing its key, and reading again only the loads
    /// that changed since the fleet's last route (see [`Fleet`]). The selection's `row` indexes
    /// [`Fleet::rows`]. A policy that does not read CACHE (or SPEED) sees rows without them, not
    /// the last route's.
    ///
    /// # Errors
    ///
    /// As [`Router::route`]; nothing is booked on error.
    ///
    /// # Examples
    ///
    /// ```
    /// use libroute_core::*;
    ///
    /// let index = PrefixIndex::<_, _, 1>::new(vec![BlockSlot::<1>::empty(); 1024], vec![WorkerSlot::empty(); 128]).unwrap();
    /// let ledger = Ledger::new(vec![RequestSlot::empty(); 256], vec![LoadSlot::empty(); 128], vec![0u64; 64]).unwrap();
    /// let mut router = Router::new(index, ledger, 0.75, 0.25);
    /// let mut fleet = Fleet::new(vec![Row::default(); 64], vec![FleetPlace::empty(); 64]).unwrap();
    /// for w in [WorkerKey::new(1, 0), WorkerKey::new(2, 0)] {
    ///     router.ledger.add_worker(w).unwrap();
    ///     fleet.add(w, TaintSet::EMPTY).unwrap();
    /// }
    /// router.index.apply(&KvEvent::Stored { worker: WorkerKey::new(2, 0), tier: Tier::Device, hashes: &[7, 8] }).unwrap();
    ///
    /// let policy = DefaultKnobs::default().build().unwrap();
    /// let mut selector = Selector::<64>::new();
    /// let s = router.route_fleet(&mut fleet, &policy, &mut selector, &Request::new(64, 16), &[7, 8, 9, 10], 1).unwrap();
    /// assert_eq!(s.worker, WorkerKey::new(2, 0));
    /// assert_eq!(fleet.rows()[s.row].cache().device_blocks, 2);
    /// ```
    pub fn route_fleet<F: Filters, S: Scorers, P: Picker, Rs, Ps, const N: usize>(
        &mut self,
        fleet: &mut Fleet<Rs, Ps>,
        policy: &Policy<F, S, P>,
        selector: &mut Selector<N>,
        request: &Request<'_>,
        hashes: &[u64],
        id: u64,
    ) -> Result<Selection, RouteError>
    where
        Rs: AsRef<[Row]> + AsMut<[Row]>,
        Ps: AsRef<[FleetPlace]> + AsMut<[FleetPlace]>,
    {
        let (rows, places, seen) = fleet.parts();
        self.route_inner(
            policy,
            selector,
            request,
            hashes,
            Filling::Fleet(rows, places, seen),
            id,
            None,
        )
    }

    /// [`Router::route_at`] over the rows of `fleet` (see [`Router::route_fleet`]).
    ///
    /// # Errors
    ///
    /// As [`Router::route_at`]; nothing is booked on error.
    #[allow(
        clippy::too_many_arguments,
        reason = "route_fleet's arguments plus the time and the prediction store"
    )]
    pub fn route_fleet_at<F: Filters, S: Scorers, P: Picker, M, Q, Rs, Ps, const N: usize>(
        &mut self,
        pending: Option<&mut Predictions<M, Q>>,
        fleet: &mut Fleet<Rs, Ps>,
        policy: &Policy<F, S, P>,
        selector: &mut Selector<N>,
        request: &Request<'_>,
        hashes: &[u64],
        id: u64,
        now_ms: f64,
    ) -> Result<Selection, RouteError>
    where
        M: AsRef<[PredictionSlot]> + AsMut<[PredictionSlot]>,
        Q: AsRef<[PredictionRecord]> + AsMut<[PredictionRecord]>,
        Rs: AsRef<[Row]> + AsMut<[Row]>,
        Ps: AsRef<[FleetPlace]> + AsMut<[FleetPlace]>,
    {
        let (rows, places, seen) = fleet.parts();
        self.route_timed(
            pending,
            policy,
            selector,
            request,
            hashes,
            Filling::Fleet(rows, places, seen),
            id,
            now_ms,
        )
    }

    #[allow(
        clippy::too_many_arguments,
        reason = "route's arguments plus the time and the prediction store"
    )]
    fn route_timed<F: Filters, S: Scorers, P: Picker, M, Q, const N: usize>(
        &mut self,
        pending: Option<&mut Predictions<M, Q>>,
        policy: &Policy<F, S, P>,
        selector: &mut Selector<N>,
        request: &Request<'_>,
        hashes: &[u64],
        rows: Filling<'_>,
        id: u64,
        now_ms: f64,
    ) -> Result<Selection, RouteError>
    where
        M: AsRef<[PredictionSlot]> + AsMut<[PredictionSlot]>,
        Q: AsRef<[PredictionRecord]> + AsMut<[PredictionRecord]>,
    {
        if !(now_ms.is_finite() && now_ms >= 0.0) {
            return Err(RouteError::Ledger(LedgerError::InvalidTime));
        }
        let whole_ms = whole_ms(now_ms);
        let Some(predictions) = pending else {
            return self.route_inner(policy, selector, request, hashes, rows, id, Some(now_ms));
        };
        predictions.expire(&mut self.index, whole_ms);
        let selection =
            self.route_inner(policy, selector, request, hashes, rows, id, Some(now_ms))?;
        let _ = predictions.record(&mut self.index, selection.worker, hashes, whole_ms);
        Ok(selection)
    }

    #[allow(clippy::too_many_arguments, reason = "route's arguments plus the time")]
    fn route_inner<F: Filters, S: Scorers, P: Picker, const N: usize>(
        &mut self,
        policy: &Policy<F, S, P>,
        selector: &mut Selector<N>,
        request: &Request<'_>,
        hashes: &[u64],
        rows: Filling<'_>,
        id: u64,
        now_ms: Option<f64>,
    ) -> Result<Selection, RouteError> {
        if self.ledger.contains(id) {
            return Err(RouteError::Ledger(LedgerError::DuplicateId(id)));
        }
        let inputs = policy.inputs(request.leg());
        let mut request = *request;
        let cache = inputs.contains(WorkerInputs::CACHE);
        if cache {
            self.index.query(hashes, &mut self.overlaps);
            request.has_tier_matches = self.overlaps.has_tier_matches();
            request.device_matches_only = self.overlaps.device_only();
        }
        let speed = inputs.contains(WorkerInputs::SPEED);
        let blocks = request.request_blocks();
        let (index, ledger, overlaps) = (&self.index, &self.ledger, &self.overlaps);
        let (hw, dw, bs) = (self.host_weight, self.disk_weight, request.block_size);
        // Each row's inputs in one pass (the index's, the ledger's and the request's new
        // blocks), so every row is read and written once.
        let state = (index, ledger, overlaps);
        let rows = match rows {
            Filling::Fleet(rows, places, seen) => {
                fill_fleet(
                    state,
                    rows,
                    places,
                    seen,
                    (cache, speed),
                    (hw, dw, bs),
                    blocks,
                );
                rows
            }
            Filling::Host(rows, []) => {
                // The host's rows without places: every worker hashed. A loop of its own: the
                // placed one with no place to try measured 1.5 us slower at 1,024 rows.
                if cache && device_only(overlaps, hw, dw, bs) {
                    fill_hashed(ledger, rows, blocks, |row| {
                        write_device_cache(overlaps, index.bit_of(row.worker), row, bs);
                    });
                } else if cache {
                    fill_hashed(ledger, rows, blocks, |row| {
                        index.fill_row(overlaps, row, hw, dw, bs);
                    });
                } else {
                    fill_hashed(ledger, rows, blocks, |_| {});
                }
                if speed {
                    ledger.fill_speeds(rows);
                }
                rows
            }
            Filling::Host(rows, places) => {
                fill_placed(state, rows, places, (cache, speed), (hw, dw, bs), blocks);
                rows
            }
        };
        let selection = policy
            .select(selector, &request, rows)
            .map_err(RouteError::Select)?;
        let chosen = &rows[selection.row];
        let prefill = request
            .prompt_tokens
            .saturating_sub(selection.cached_tokens);
        let new_blocks = new_blocks(chosen, blocks);
        match now_ms {
            Some(now) => self
                .ledger
                .book_at(id, selection.worker, prefill, new_blocks, now),
            None => self.ledger.book(id, selection.worker, prefill, new_blocks),
        }
        .map_err(RouteError::Ledger)?;
        Ok(selection)
    }

    /// [`Router::route`] for approximate mode (no KV events): expires the predictions due at
    /// `now`, routes, and records the request's blocks as predicted on the chosen worker. `now`
    /// is in the unit of the predictions' TTL; the core reads no clock.
    ///
    /// # Errors
    ///
    /// As [`Router::route`]. A worker the index cannot take (every worker bit in use) is booked
    /// but not predicted, and the index counts the refusal.
    #[allow(
        clippy::too_many_arguments,
        reason = "route's arguments plus the predictions and the time"
    )]
    pub fn route_predicting<F: Filters, S: Scorers, P: Picker, M, Q, const N: usize>(
        &mut self,
        predictions: &mut Predictions<M, Q>,
        policy: &Policy<F, S, P>,
        selector: &mut Selector<N>,
        request: &Request<'_>,
        hashes: &[u64],
        rows: &mut [Row],
        id: u64,
        now: u64,
    ) -> Result<Selection, RouteError>
    where
        M: AsRef<[PredictionSlot]> + AsMut<[PredictionSlot]>,
        Q: AsRef<[PredictionRecord]> + AsMut<[PredictionRecord]>,
    {
        self.route_predicting_placed(
            predictions,
            policy,
            selector,
            request,
            hashes,
            rows,
            &mut [],
            id,
            now,
        )
    }

    /// [`Router::route_predicting`] with `places` beside the rows (see
    /// [`Router::route_placed`]).
    ///
    /// # Errors
    ///
    /// As [`Router::route_predicting`].
    #[allow(
        clippy::too_many_arguments,
        reason = "route_predicting's arguments plus the places"
    )]
    pub fn route_predicting_placed<F: Filters, S: Scorers, P: Picker, M, Q, const N: usize>(
        &mut self,
        predictions: &mut Predictions<M, Q>,
        policy: &Policy<F, S, P>,
        selector: &mut Selector<N>,
        request: &Request<'_>,
        hashes: &[u64],
        rows: &mut [Row],
        places: &mut [Place],
        id: u64,
        now: u64,
    ) -> Result<Selection, RouteError>
    where
        M: AsRef<[PredictionSlot]> + AsMut<[PredictionSlot]>,
        Q: AsRef<[PredictionRecord]> + AsMut<[PredictionRecord]>,
    {
        predictions.expire(&mut self.index, now);
        let selection = self.route_placed(policy, selector, request, hashes, rows, places, id)?;
        let _ = predictions.record(&mut self.index, selection.worker, hashes, now);
        Ok(selection)
    }

    /// [`Router::route_predicting`] over the rows of `fleet` (see [`Router::route_fleet`]).
    /// Predictions set and expire blocks, not workers' bits, so the fleet keeps its bits across
    /// them (a worker predicted for the first time gets a bit, and the next route reads every
    /// row).
    ///
    /// # Errors
    ///
    /// As [`Router::route_predicting`].
    #[allow(
        clippy::too_many_arguments,
        reason = "route_predicting's arguments, the fleet instead of the rows"
    )]
    pub fn route_fleet_predicting<F: Filters, S: Scorers, P: Picker, M, Q, Rs, Ps, const N: usize>(
        &mut self,
        predictions: &mut Predictions<M, Q>,
        fleet: &mut Fleet<Rs, Ps>,
        policy: &Policy<F, S, P>,
        selector: &mut Selector<N>,
        request: &Request<'_>,
        hashes: &[u64],
        id: u64,
        now: u64,
    ) -> Result<Selection, RouteError>
    where
        M: AsRef<[PredictionSlot]> + AsMut<[PredictionSlot]>,
        Q: AsRef<[PredictionRecord]> + AsMut<[PredictionRecord]>,
        Rs: AsRef<[Row]> + AsMut<[Row]>,
        Ps: AsRef<[FleetPlace]> + AsMut<[FleetPlace]>,
    {
        predictions.expire(&mut self.index, now);
        let selection = self.route_fleet(fleet, policy, selector, request, hashes, id)?;
        let _ = predictions.record(&mut self.index, selection.worker, hashes, now);
        Ok(selection)
    }
}

/// Fills the host's rows' CACHE inputs with `write_cache` (which finds the worker's index bit by
/// hashing its key) and their LOAD inputs, each worker found in the ledger by hashing.
#[allow(clippy::inline_always, reason = "one loop per way of writing CACHE")]
#[inline(always)]
fn fill_hashed<R, L, T>(
    ledger: &Ledger<R, L, T>,
    rows: &mut [Row],
    blocks: u64,
    write_cache: impl Fn(&mut Row),
) where
    R: AsRef<[RequestSlot]> + AsMut<[RequestSlot]>,
    L: AsRef<[LoadSlot]> + AsMut<[LoadSlot]>,
    T: AsRef<[u64]> + AsMut<[u64]>,
{
    for row in rows.iter_mut() {
        write_cache(row);
        ledger.fill_row(row);
        add_new_blocks(row, row.active_decode_blocks, blocks);
    }
}

/// Fills the rows' inputs trying each worker at its place first (the rows beyond `places` are
/// looked up by hashing); a fleet's rows lose the groups the policy does not read. The rows'
/// CACHE inputs are their device counts alone when the query matched only device blocks (the
/// common case; see [`write_device_cache`]): one loop per case.
#[allow(
    clippy::too_many_arguments,
    reason = "the route's state, split by what borrows it"
)]
#[inline]
fn fill_placed<B, W, R, L, T, H: Hints, const WORDS: usize>(
    (index, ledger, overlaps): (
        &PrefixIndex<B, W, WORDS>,
        &Ledger<R, L, T>,
        &Overlaps<WORDS>,
    ),
    rows: &mut [Row],
    places: &mut [H],
    (cache, speed): (bool, bool),
    (hw, dw, bs): (f64, f64, u32),
    blocks: u64,
) where
    B: AsRef<[BlockSlot<WORDS>]> + AsMut<[BlockSlot<WORDS>]>,
    W: AsRef<[WorkerSlot]> + AsMut<[WorkerSlot]>,
    R: AsRef<[RequestSlot]> + AsMut<[RequestSlot]>,
    L: AsRef<[LoadSlot]> + AsMut<[LoadSlot]>,
    T: AsRef<[u64]> + AsMut<[u64]>,
{
    let state = (index, ledger);
    if cache && device_only(overlaps, hw, dw, bs) {
        fill_placed_with(state, rows, places, (cache, speed), blocks, |bit, row| {
            write_device_cache(overlaps, bit, row, bs);
        });
    } else {
        fill_placed_with(state, rows, places, (cache, speed), blocks, |bit, row| {
            write_cache(overlaps, bit, row, hw, dw, bs);
        });
    }
}

/// [`fill_placed`] with `write_cache` writing a row's CACHE inputs from its worker's index bit.
#[allow(clippy::inline_always, reason = "one loop per way of writing CACHE")]
#[inline(always)]
fn fill_placed_with<B, W, R, L, T, H: Hints, const WORDS: usize>(
    (index, ledger): (&PrefixIndex<B, W, WORDS>, &Ledger<R, L, T>),
    rows: &mut [Row],
    places: &mut [H],
    (cache, speed): (bool, bool),
    blocks: u64,
    write_cache: impl Fn(Option<u32>, &mut Row),
) where
    B: AsRef<[BlockSlot<WORDS>]> + AsMut<[BlockSlot<WORDS>]>,
    W: AsRef<[WorkerSlot]> + AsMut<[WorkerSlot]>,
    R: AsRef<[RequestSlot]> + AsMut<[RequestSlot]>,
    L: AsRef<[LoadSlot]> + AsMut<[LoadSlot]>,
    T: AsRef<[u64]> + AsMut<[u64]>,
{
    let fleet = H::FLEET;
    let fleet_speed = if speed { ledger.fleet_speed() } else { None };
    for (i, row) in rows.iter_mut().enumerate() {
        // What a fleet's next route may reuse (see `fill_fleet`); the host's rows keep none.
        let (index_hint, ledger_hint, mut kept) = match places.get_mut(i).map(Hints::split) {
            Some((place, kept)) => (Some(&mut place.index), Some(&mut place.ledger), kept),
            None => (None, None, None),
        };
        // A fleet's row gets no CACHE (or SPEED) when the policy reads none, not the last
        // route's; the host's rows keep what the host wrote there.
        if cache {
            let bit = index.bit_hinted(row.worker, index_hint);
            write_cache(bit, row);
            if let Some((kept_bit, _)) = kept.as_mut() {
                **kept_bit = bit.unwrap_or(NO_BIT);
            }
        } else if fleet {
            clear_cache(row);
        }
        let slot = ledger.fill_row_hinted(row, ledger_hint);
        if let Some((_, kept_decode)) = kept {
            *kept_decode = row.active_decode_blocks;
        }
        add_new_blocks(row, row.active_decode_blocks, blocks);
        // A fleet's row without a speed has zeros there already (its rows start as
        // `Row::new` and lose a speed only here), so only one that had a speed is written
        // when the policy reads none.
        if speed || (fleet && row.flags.contains(RowFlags::HAS_SPEED)) {
            ledger.fill_speed_at(fleet_speed.as_ref(), slot, row);
        }
    }
}

/// Fills a fleet's rows. When the fleet read every row from this index and ledger (and the
/// policy reads no SPEED), only what can have changed is read again: the loads of the workers
/// the ledger noted since, and each row's CACHE inputs from its worker's bit, kept in its place
/// while the index gave no bit to or took none from any worker. Otherwise every row is read as
/// [`fill_placed`] reads it, and what was read is kept for the next route.
#[allow(
    clippy::too_many_arguments,
    reason = "the route's state, split by what borrows it"
)]
#[inline]
fn fill_fleet<B, W, R, L, T, const WORDS: usize>(
    (index, ledger, overlaps): (
        &PrefixIndex<B, W, WORDS>,
        &Ledger<R, L, T>,
        &Overlaps<WORDS>,
    ),
    rows: &mut [Row],
    places: &mut [FleetPlace],
    seen: &mut Seen,
    (cache, speed): (bool, bool),
    (hw, dw, bs): (f64, f64, u32),
    blocks: u64,
) where
    B: AsRef<[BlockSlot<WORDS>]> + AsMut<[BlockSlot<WORDS>]>,
    W: AsRef<[WorkerSlot]> + AsMut<[WorkerSlot]>,
    R: AsRef<[RequestSlot]> + AsMut<[RequestSlot]>,
    L: AsRef<[LoadSlot]> + AsMut<[LoadSlot]>,
    T: AsRef<[u64]> + AsMut<[u64]>,
{
    let bits_now = index.bits_version();
    let bits_kept = !cache
        || seen
            .bits
            .is_some_and(|b| b.same_instance(bits_now) && b == bits_now);
    let changed = seen
        .loads
        .filter(|_| !speed && bits_kept)
        .and_then(|loads| ledger.changed_since(loads));
    let Some(changed) = changed else {
        fill_placed(
            (index, ledger, overlaps),
            rows,
            places,
            (cache, speed),
            (hw, dw, bs),
            blocks,
        );
        if cache {
            seen.bits = Some(bits_now);
        }
        // Rows read with SPEED keep it, which a route that reads none must clear: read every
        // row then.
        seen.loads = (!speed).then(|| ledger.version());
        return;
    };
    for worker in changed {
        if let Ok(i) = rows.binary_search_by_key(&worker, |r| r.worker) {
            let (row, place) = (&mut rows[i], &mut places[i]);
            ledger.fill_row_hinted(row, Some(&mut place.place.ledger));
            place.decode = row.active_decode_blocks;
        }
    }
    seen.loads = Some(ledger.version());
    // One loop per way of writing CACHE, as in `fill_placed`.
    if cache && device_only(overlaps, hw, dw, bs) {
        refill_device(rows, places, overlaps, bs, blocks);
    } else if cache {
        refill(rows, places, blocks, |row, bit| {
            write_cache(overlaps, bit, row, hw, dw, bs);
        });
    } else {
        refill(rows, places, blocks, |row, _| clear_cache(row));
    }
}

/// Whether a route may write its rows' CACHE inputs with [`write_device_cache`]: the query
/// matched device blocks only, and the weights and block size make that exact.
#[inline]
fn device_only<const WORDS: usize>(overlaps: &Overlaps<WORDS>, hw: f64, dw: f64, bs: u32) -> bool {
    overlaps.device_only() && Cache::in_device_is_exact(hw, dw, bs)
}

/// Writes each fleet row's CACHE inputs with `cache` (given the worker's index bit kept in its
/// place) and its decode blocks: those the ledger had, kept in its place, and the request's new
/// ones there.
#[inline]
fn refill(
    rows: &mut [Row],
    places: &[FleetPlace],
    blocks: u64,
    mut cache: impl FnMut(&mut Row, Option<u32>),
) {
    for (row, place) in rows.iter_mut().zip(places) {
        cache(row, (place.bit != NO_BIT).then_some(place.bit));
        add_new_blocks(row, place.decode, blocks);
    }
}

/// [`refill`] writing [`write_device_cache`]'s CACHE inputs from each place's bit as kept
/// ([`write_device_cache_of`]); the decode blocks add the device count just read, not the
/// row's read back.
#[inline]
fn refill_device<const WORDS: usize>(
    rows: &mut [Row],
    places: &[FleetPlace],
    overlaps: &Overlaps<WORDS>,
    block_size: u32,
    blocks: u64,
) {
    for (row, place) in rows.iter_mut().zip(places) {
        let device = write_device_cache_of(overlaps, place.bit, row, block_size);
        if row.flags.contains(RowFlags::HAS_LOAD) {
            let new = blocks.saturating_sub(u64::from(device));
            row.active_decode_blocks = place.decode.saturating_add(new);
        }
    }
}

/// The rows a route fills, the places of their workers from the last route (as many as there
/// are, possibly none), and, for a [`Fleet`]'s rows, what its places were read from.
enum Filling<'a> {
    /// The host's rows, with places for as many as there are.
    Host(&'a mut [Row], &'a mut [Place]),
    /// A fleet's rows.
    Fleet(&'a mut [Row], &'a mut [FleetPlace], &'a mut Seen),
}

/// Writes a row's decode blocks as the spec's `dcb` counts them: `decode`, the worker's in the
/// ledger, plus the request's new blocks there (those not in its device memory); a row without
/// a load projection is left as it is.
#[inline]
fn add_new_blocks(row: &mut Row, decode: u64, blocks: u64) {
    if row.flags.contains(RowFlags::HAS_LOAD) {
        row.active_decode_blocks = decode.saturating_add(new_blocks(row, blocks));
    }
}

/// The request's `blocks` not in the device memory of `row`'s worker: what booking there adds.
#[inline]
fn new_blocks(row: &Row, blocks: u64) -> u64 {
    blocks.saturating_sub(u64::from(row.cache().device_blocks))
}

/// Whole milliseconds of a finite, non-negative time (the predictions' unit in
/// [`Router::route_at`]); saturates above `u64::MAX`.
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "checked finite and non-negative by the caller; `as` saturates"
)]
fn whole_ms(now_ms: f64) -> u64 {
    now_ms as u64
}
