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

use core::fmt;

use crate::vocab::{Row, TaintSet, WorkerKey};

/// Where a fleet's worker was found in the router's tables last time: slot positions, checked
/// against the worker's key before use, so a stale one costs a lookup and nothing else. Storage
/// for a [`Fleet`] is filled with [`Place::empty`].
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
/// `vec![Row::default(); n]` and `vec![Place::empty(); n]`, or arrays.
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
/// let mut fleet = Fleet::new(vec![Row::default(); 8], vec![Place::empty(); 8]).unwrap();
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
    Ps: AsRef<[Place]> + AsMut<[Place]>,
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
        places[0] = Place::empty();
        self.len = end;
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

    /// The rows and their places, for the router to fill.
    pub(crate) fn parts(&mut self) -> (&mut [Row], &mut [Place]) {
        let len = self.len;
        (
            &mut self.rows.as_mut()[..len],
            &mut self.places.as_mut()[..len],
        )
    }
}
