//! The workers a router routes to, registered once and kept between routes as candidate rows.
//!
//! [`Router::route`](crate::Router::route) takes the host's rows each time and finds every row's
//! worker in the index's and the ledger's worker tables by hashing its key: two hash lookups per
//! worker per route, whose probe branch the processor cannot predict. A [`Fleet`] keeps the rows
//! and, beside each, where its worker was found last time (a [`Place`]); the router's
//! [`route_fleet`](crate::Router::route_fleet) checks the worker's key at that slot first (one
//! read and one comparison that almost always succeed) and hashes only when the worker moved or
//! is not there. The rows stay sorted by worker, the canonical order, so a seeded selection over
//! them never sorts.
//!
//! A fleet also keeps what it read: its rows' LOAD inputs, and beside each row (a
//! [`FleetPlace`]) the worker's index bit and decode blocks. Between two routes only a few loads
//! change (the requests booked, completed and freed), and workers rarely get or lose an index
//! bit; the ledger notes the worker of each of its latest load changes and the index counts its
//! bit changes, so the next route reads again only the rows of the workers noted and takes every
//! other row's overlap through the bit it kept. Both carry an instance number no other ledger or
//! index in the process has: a fleet trusts what it kept only for the very ledger and index it
//! read, and reads every row when they are others, when more changes happened than the ledger
//! remembers, when a worker was added to the fleet, and for policies that read SPEED (a speed
//! calibration moves every worker's).

use core::fmt;

use crate::host::index::NO_BIT;
use crate::host::version::Version;
use crate::vocab::{Row, TaintSet, WorkerKey};

/// Where a worker was found in the router's tables last time: slot positions, checked against
/// the worker's key before use, so a stale one costs a lookup and nothing else. Kept beside the
/// host's rows for [`Router::route_placed`](crate::Router::route_placed), filled with
/// [`Place::empty`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    pub(crate) index: u32,
    pub(crate) ledger: u32,
}

impl Place {
    /// No position known yet.
    #[must_use]
    pub const fn empty() -> Self {
        Self {
            index: u32::MAX,
            ledger: u32::MAX,
        }
    }
}

impl Default for Place {
    fn default() -> Self {
        Self::empty()
    }
}

/// What a [`Fleet`] keeps beside each row: the worker's [`Place`], and its index bit and decode
/// blocks as the router last read them, trusted only while the fleet knows that index and ledger
/// have not changed them. Storage for a fleet is filled with [`FleetPlace::empty`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetPlace {
    pub(crate) place: Place,
    /// The worker's bit in the index, [`NO_BIT`] when the index does not know it.
    pub(crate) bit: u32,
    /// The worker's active decode blocks in the ledger, before a route adds its own.
    pub(crate) decode: u64,
}

impl FleetPlace {
    /// Nothing known yet.
    #[must_use]
    pub const fn empty() -> Self {
        Self {
            place: Place::empty(),
            bit: NO_BIT,
            decode: 0,
        }
    }
}

impl Default for FleetPlace {
    fn default() -> Self {
        Self::empty()
    }
}

/// A [`Place`], alone or in a [`FleetPlace`], as the router's row loop fills it.
pub(crate) trait Hints {
    /// Whether it is a fleet's: its rows lose the groups the policy does not read, and what was
    /// read is kept.
    const FLEET: bool;
    /// The place, and for a fleet's, where the bit and the decode blocks read are kept.
    fn split(&mut self) -> (&mut Place, Option<(&mut u32, &mut u64)>);
}

impl Hints for Place {
    const FLEET: bool = false;
    #[inline]
    fn split(&mut self) -> (&mut Place, Option<(&mut u32, &mut u64)>) {
        (self, None)
    }
}

impl Hints for FleetPlace {
    const FLEET: bool = true;
    #[inline]
    fn split(&mut self) -> (&mut Place, Option<(&mut u32, &mut u64)>) {
        (&mut self.place, Some((&mut self.bit, &mut self.decode)))
    }
}

/// Which states of the index and the ledger a fleet's places and rows were read from: the bits
/// in its places are the index's in state `bits`, and its rows' LOAD inputs (with the places'
/// decode blocks) the ledger's in state `loads`. `None`: not read, or no longer trusted.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Seen {
    pub(crate) bits: Option<Version>,
    pub(crate) loads: Option<Version>,
}

/// Why a [`Fleet`] refused a call. Nothing changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FleetError {
    /// The rows' and the places' storage differ in length.
    StorageMismatch {
        /// Rows of storage given.
        rows: usize,
        /// Places of storage given.
        places: usize,
    },
    /// Every row of the storage holds a worker.
    Full {
        /// The fleet's capacity.
        capacity: usize,
    },
    /// The worker is in the fleet already.
    Duplicate(WorkerKey),
    /// The worker is not in the fleet.
    UnknownWorker(WorkerKey),
}

impl fmt::Display for FleetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FleetError::StorageMismatch { rows, places } => write!(
                f,
                "fleet storage has {rows} rows and {places} places; it needs as many of each"
            ),
            FleetError::Full { capacity } => {
                write!(f, "the fleet is full ({capacity} workers)")
            }
            FleetError::Duplicate(w) => write!(
                f,
                "worker {} rank {} is in the fleet already",
                w.worker_id, w.dp_rank
            ),
            FleetError::UnknownWorker(w) => write!(
                f,
                "worker {} rank {} is not in the fleet",
                w.worker_id, w.dp_rank
            ),
        }
    }
}

impl core::error::Error for FleetError {}

/// The workers a [`Router`](crate::Router) routes to, as candidate rows it keeps between routes,
/// over caller storage: `rows` and `places` of the same length (the capacity), for example
/// `vec![Row::default(); n]` and `vec![FleetPlace::empty(); n]`, or arrays.
///
/// The host adds a worker with its taints and removes it when it leaves, marks it overloaded or
/// not, and routes with [`Router::route_fleet`](crate::Router::route_fleet), which writes every
/// row's CACHE, LOAD (and, for policies that read them, SPEED) inputs as
/// [`Router::route`](crate::Router::route) does. [`Fleet::rows`] are in canonical order (sorted
/// by worker), and a [`crate::Selection`]'s `row` indexes them.
///
/// # Examples
///
/// ```
/// use libroute_core::*;
///
/// let mut fleet = Fleet::new(vec![Row::default(); 8], vec![FleetPlace::empty(); 8]).unwrap();
/// fleet.add(WorkerKey::new(2, 0), TaintSet::EMPTY).unwrap();
/// fleet.add(WorkerKey::new(1, 0), TaintSet::EMPTY).unwrap();
/// assert_eq!(fleet.rows()[0].worker, WorkerKey::new(1, 0)); // canonical order
/// assert_eq!(fleet.add(WorkerKey::new(1, 0), TaintSet::EMPTY), Err(FleetError::Duplicate(WorkerKey::new(1, 0))));
/// fleet.set_overloaded(WorkerKey::new(2, 0), true).unwrap();
/// assert!(fleet.rows()[1].is_overloaded());
/// fleet.remove(WorkerKey::new(1, 0)).unwrap();
/// assert_eq!(fleet.len(), 1);
/// ```
pub struct Fleet<Rs, Ps> {
    rows: Rs,
    places: Ps,
    len: usize,
    seen: Seen,
}

impl<Rs, Ps> fmt::Debug for Fleet<Rs, Ps> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fleet")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl<Rs, Ps> Fleet<Rs, Ps>
where
    Rs: AsRef<[Row]> + AsMut<[Row]>,
    Ps: AsRef<[FleetPlace]> + AsMut<[FleetPlace]>,
{
    /// An empty fleet over `rows` and `places`, which must have the same length: the most
    /// workers it holds.
    ///
    /// # Errors
    ///
    /// [`FleetError::StorageMismatch`] when the lengths differ.
    pub fn new(rows: Rs, places: Ps) -> Result<Self, FleetError> {
        let (r, p) = (rows.as_ref().len(), places.as_ref().len());
        if r != p {
            return Err(FleetError::StorageMismatch { rows: r, places: p });
        }
        Ok(Self {
            rows,
            places,
            len: 0,
            seen: Seen::default(),
        })
    }

    /// The most workers the fleet holds.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.rows.as_ref().len()
    }

    /// The number of workers.
    #[must_use]
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether the fleet has no worker.
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The rows, one per worker, sorted by worker; their inputs are those of the last route.
    #[must_use]
    pub fn rows(&self) -> &[Row] {
        &self.rows.as_ref()[..self.len]
    }

    /// The row of `worker`.
    #[must_use]
    pub fn get(&self, worker: WorkerKey) -> Option<&Row> {
        let i = self.position(worker).ok()?;
        Some(&self.rows()[i])
    }

    /// Where `worker` is in [`Fleet::rows`], or where it would go.
    fn position(&self, worker: WorkerKey) -> Result<usize, usize> {
        self.rows().binary_search_by_key(&worker, |r| r.worker)
    }

    /// Adds `worker` with `taints`, neither overloaded nor with any input yet.
    ///
    /// # Errors
    ///
    /// [`FleetError::Duplicate`] when it is in the fleet, [`FleetError::Full`] when the fleet
    /// is full.
    pub fn add(&mut self, worker: WorkerKey, taints: TaintSet) -> Result<(), FleetError> {
        let Err(at) = self.position(worker) else {
            return Err(FleetError::Duplicate(worker));
        };
        if self.len == self.capacity() {
            return Err(FleetError::Full {
                capacity: self.capacity(),
            });
        }
        let end = self.len + 1;
        let rows = &mut self.rows.as_mut()[at..end];
        rows.rotate_right(1);
        rows[0] = Row::new(worker).with_taints(taints);
        let places = &mut self.places.as_mut()[at..end];
        places.rotate_right(1);
        places[0] = FleetPlace::empty();
        self.len = end;
        // The new row has read nothing yet: the next route reads every row.
        self.seen = Seen::default();
        Ok(())
    }

    /// Removes `worker`.
    ///
    /// # Errors
    ///
    /// [`FleetError::UnknownWorker`] when it is not in the fleet.
    pub fn remove(&mut self, worker: WorkerKey) -> Result<(), FleetError> {
        let at = self
            .position(worker)
            .map_err(|_| FleetError::UnknownWorker(worker))?;
        let len = self.len;
        self.rows.as_mut()[at..len].rotate_left(1);
        self.places.as_mut()[at..len].rotate_left(1);
        self.len -= 1;
        Ok(())
    }

    /// Replaces `worker`'s taints.
    ///
    /// # Errors
    ///
    /// [`FleetError::UnknownWorker`] when it is not in the fleet.
    pub fn set_taints(&mut self, worker: WorkerKey, taints: TaintSet) -> Result<(), FleetError> {
        self.row_mut(worker)?.taints = taints;
        Ok(())
    }

    /// Marks `worker` overloaded (skipped with the overload reason) or not.
    ///
    /// # Errors
    ///
    /// [`FleetError::UnknownWorker`] when it is not in the fleet.
    pub fn set_overloaded(
        &mut self,
        worker: WorkerKey,
        overloaded: bool,
    ) -> Result<(), FleetError> {
        let row = self.row_mut(worker)?;
        *row = row.overloaded(overloaded);
        Ok(())
    }

    fn row_mut(&mut self, worker: WorkerKey) -> Result<&mut Row, FleetError> {
        let at = self
            .position(worker)
            .map_err(|_| FleetError::UnknownWorker(worker))?;
        Ok(&mut self.rows.as_mut()[at])
    }

    /// The rows, their places and what they were read from, for the router to fill.
    pub(crate) fn parts(&mut self) -> (&mut [Row], &mut [FleetPlace], &mut Seen) {
        let len = self.len;
        (
            &mut self.rows.as_mut()[..len],
            &mut self.places.as_mut()[..len],
            &mut self.seen,
        )
    }
}
