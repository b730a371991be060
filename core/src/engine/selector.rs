//! The caller-owned [`Selector`]: fixed-capacity buffers and the random streams, all the state a
//! selection writes.

use core::fmt;

use super::policy::{LEFT_OUT, MAX_SCORERS};
use super::rng::WyRand;

/// Caller-owned scratch for selections: buffers of capacity `N` and the random stream.
///
/// One selector per thread; a policy is shared. Selecting over more than `N` rows is an error
/// ([`SelectError::CapacityExceeded`](super::SelectError::CapacityExceeded)), never a truncation. Its size is about
/// `N * (4 + 8 * (MAX_SCORERS + 2))` bytes, so large capacities belong in a `static` or a `Box`.
///
/// # Examples
///
/// ```
/// use libroute_core::Selector;
/// let selector = Selector::<64>::new();
/// assert_eq!(selector.capacity(), 64);
/// ```
#[derive(Clone)]
pub struct Selector<const N: usize> {
    pub(super) order: [u32; N],
    pub(super) costs: [[f64; N]; MAX_SCORERS],
    pub(super) totals: [f64; N],
    pub(super) work: [f64; N],
    pub(super) unseeded: WyRand,
    pub(super) seeded: Option<(u64, WyRand)>,
    pub(super) last: Last,
    /// Picks asked for so far ([`crate::PickInput::turn`]).
    pub(super) turn: u64,
    /// How many leading `totals` are known to be zeros, the totals of a policy without scorers.
    pub(super) zeros: usize,
}

/// Where the last successful selection left its per-candidate totals.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Last {
    /// How many entries of `order` (and of the cost columns) the candidates are among: the
    /// candidates alone, or every row when those that are not candidates were left in place,
    /// marked [`LEFT_OUT`].
    pub(super) entries: usize,
    pub(super) candidates: usize,
    /// With exactly one scorer the totals are that scorer's column.
    pub(super) in_first_column: bool,
}

impl<const N: usize> fmt::Debug for Selector<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Selector")
            .field("capacity", &N)
            .field("seeded", &self.seeded)
            .finish_non_exhaustive()
    }
}

impl<const N: usize> Default for Selector<N> {
    fn default() -> Self {
        Self::new()
    }
}

/// The default state of the unseeded stream when the host gives no entropy.
const DEFAULT_ENTROPY: u64 = 0x6c69_6272_6f75_7465; // "libroute"

impl<const N: usize> Selector<N> {
    /// An empty selector whose unseeded stream starts from a fixed state. Use
    /// [`Selector::with_entropy`] to give each thread its own stream.
    #[must_use]
    pub const fn new() -> Self {
        Self::with_entropy(DEFAULT_ENTROPY)
    }

    /// An empty selector whose unseeded stream starts from `entropy` (from the host's OS RNG, a
    /// clock, a thread id: the core reads none of these itself).
    #[must_use]
    pub const fn with_entropy(entropy: u64) -> Self {
        const {
            assert!(N > 0, "Selector capacity N must be at least 1");
            assert!(
                N <= 1 << 31,
                "Selector capacity N must be at most 2^31 (row indices with a spare bit)"
            );
        }
        Self {
            order: [0; N],
            costs: [[0.0; N]; MAX_SCORERS],
            totals: [0.0; N],
            work: [0.0; N],
            unseeded: WyRand::with_seed(entropy),
            seeded: None,
            last: Last {
                entries: 0,
                candidates: 0,
                in_first_column: false,
            },
            turn: 0,
            zeros: N,
        }
    }

    /// The capacity `N`.
    #[must_use]
    pub const fn capacity(&self) -> usize {
        N
    }

    /// Restarts the seeded stream and the turn count ([`crate::PickInput::turn`]): the next
    /// selection draws and takes turns as if it were the first.
    pub fn reset_seeded(&mut self) {
        self.seeded = None;
        self.turn = 0;
    }

    /// Every candidate of the last successful selection, in the order the picker saw them: the
    /// host row index and its total cost. Empty after a failed selection.
    ///
    /// # Examples
    ///
    /// ```
    /// use libroute_core::{DefaultKnobs, Load, Request, Row, Selector, WorkerKey};
    /// let policy = DefaultKnobs::default().build().unwrap();
    /// let rows = [1, 2].map(|id| Row::new(WorkerKey::new(id, 0)).with_load(Load { active_decode_blocks: id, ..Load::default() }));
    /// let mut selector = Selector::<4>::new();
    /// policy.select(&mut selector, &Request::new(32, 16), &rows).unwrap();
    /// assert_eq!(selector.last_costs().collect::<Vec<_>>(), [(0, 3.0), (1, 4.0)]);
    /// ```
    #[must_use = "iterators are lazy"]
    pub fn last_costs(&self) -> impl ExactSizeIterator<Item = (usize, f64)> + '_ {
        let entries = self.last.entries;
        let totals = if self.last.in_first_column {
            &self.costs[0][..entries]
        } else {
            &self.totals[..entries]
        };
        LastCosts {
            entries: self.order[..entries].iter().zip(totals),
            left: self.last.candidates,
        }
    }

    pub(super) fn view(&mut self) -> Scratch<'_> {
        self.last = Last::default();
        Scratch {
            order: &mut self.order,
            costs: self.costs.as_flattened_mut(),
            capacity: N,
            totals: &mut self.totals,
            work: &mut self.work,
            last: &mut self.last,
            turn: &mut self.turn,
            zeros: &mut self.zeros,
        }
    }
}

/// The selector's buffers with `N` erased, so the hot code is compiled once.
pub(super) struct Scratch<'a> {
    pub(super) order: &'a mut [u32],
    pub(super) costs: &'a mut [f64],
    pub(super) capacity: usize,
    pub(super) totals: &'a mut [f64],
    pub(super) work: &'a mut [f64],
    pub(super) last: &'a mut Last,
    pub(super) turn: &'a mut u64,
    pub(super) zeros: &'a mut usize,
}

/// [`Selector::last_costs`]: the candidates among the entries, passing over those marked
/// [`LEFT_OUT`] (rows left in place that are not candidates).
struct LastCosts<'a> {
    entries: core::iter::Zip<core::slice::Iter<'a, u32>, core::slice::Iter<'a, f64>>,
    /// Candidates not yet returned.
    left: usize,
}

impl Iterator for LastCosts<'_> {
    type Item = (usize, f64);

    fn next(&mut self) -> Option<(usize, f64)> {
        let (&i, &cost) = self.entries.find(|&(&i, _)| i & LEFT_OUT == 0)?;
        self.left -= 1;
        Some((i as usize, cost))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for LastCosts<'_> {}
