//! Who can be selected: a worker and its data-parallel rank, and the taints a worker carries.

use core::fmt;

/// A worker and its data-parallel rank: the unit a policy selects.
///
/// Ordered by `(worker_id, dp_rank)`, the order seeded selection sorts candidates into.
///
/// # Examples
///
/// ```
/// use libroute_core::WorkerKey;
/// assert!(WorkerKey::new(1, 9) < WorkerKey::new(2, 0));
/// assert_eq!(WorkerKey::from(7), WorkerKey::new(7, 0));
/// ```
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct WorkerKey {
    /// The worker's id, as the host's discovery names it.
    pub worker_id: u64,
    /// The data-parallel rank within the worker (0 when the worker has one rank).
    pub dp_rank: u32,
}

impl WorkerKey {
    /// A worker id with a data-parallel rank.
    #[must_use]
    pub const fn new(worker_id: u64, dp_rank: u32) -> Self {
        Self { worker_id, dp_rank }
    }
}

impl From<u64> for WorkerKey {
    fn from(worker_id: u64) -> Self {
        Self::new(worker_id, 0)
    }
}

impl fmt::Display for WorkerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.worker_id, self.dp_rank)
    }
}

/// A taint: a label a worker carries (`gpu=h100`, `zone=b`), interned by the host into a small
/// index so a worker's taints fit one machine word.
///
/// # Examples
///
/// ```
/// use libroute_core::Taint;
/// assert!(Taint::new(63).is_some());
/// assert!(Taint::new(64).is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Taint(u8);

impl Taint {
    /// How many distinct taints a deployment can use.
    pub const LIMIT: u32 = 64;

    /// The taint with this index, if it is below [`Taint::LIMIT`].
    #[must_use]
    pub const fn new(index: u32) -> Option<Self> {
        if index < Self::LIMIT {
            #[allow(clippy::cast_possible_truncation, reason = "checked above: index < 64")]
            Some(Self(index as u8))
        } else {
            None
        }
    }

    /// The taint's index.
    #[must_use]
    pub const fn index(self) -> u32 {
        self.0 as u32
    }
}

/// A set of taints as a 64-bit mask (bit `i` is taint `i`).
///
/// # Examples
///
/// ```
/// use libroute_core::{Taint, TaintSet};
/// let gpu = Taint::new(3).unwrap();
/// let set = TaintSet::EMPTY.with(gpu);
/// assert!(set.contains(gpu));
/// assert!(set.contains_all(TaintSet::EMPTY));
/// ```
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TaintSet(pub u64);

impl TaintSet {
    /// No taints.
    pub const EMPTY: TaintSet = TaintSet(0);

    /// This set with `taint` added.
    #[must_use]
    pub const fn with(self, taint: Taint) -> Self {
        Self(self.0 | (1 << taint.0))
    }

    /// Whether `taint` is in the set.
    #[must_use]
    pub const fn contains(self, taint: Taint) -> bool {
        self.0 & (1 << taint.0) != 0
    }

    /// Whether every taint of `other` is in this set.
    #[must_use]
    pub const fn contains_all(self, other: TaintSet) -> bool {
        self.0 & other.0 == other.0
    }

    /// The taints of this set and of `other`.
    ///
    /// # Examples
    ///
    /// ```
    /// use libroute_core::TaintSet;
    /// assert_eq!(TaintSet(0b01).union(TaintSet(0b10)), TaintSet(0b11));
    /// ```
    #[must_use]
    pub const fn union(self, other: TaintSet) -> Self {
        Self(self.0 | other.0)
    }
}
