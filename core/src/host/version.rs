//! Which index or ledger, in which state, a [`Fleet`](crate::Fleet)'s copied inputs came from.
//!
//! A fleet keeps its rows' LOAD inputs and its workers' index bits between routes and refreshes
//! only what changed since it last read them. It may trust what it kept only if the ledger (or
//! index) it routes with now is the very one it read, and knows what changed since. Addresses do
//! not tell: a ledger dropped and another built in its place would look the same. So every ledger
//! and index gets an instance number no other one in the process has, and counts its changes.

#[cfg(target_has_atomic = "ptr")]
use core::sync::atomic::{AtomicUsize, Ordering};

/// The instance number that never matches: a fleet seeing it always reads everything.
pub(crate) const UNTRUSTED: usize = usize::MAX;

/// The next instance number, for as long as numbers last.
#[cfg(target_has_atomic = "ptr")]
static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A fresh instance number, different from every one handed out before; [`UNTRUSTED`] once they
/// run out (after `usize::MAX` instances, only possible on small targets) or on targets without
/// atomics, so a fleet then refreshes everything on every route rather than trust a reused one.
pub(crate) fn new_instance() -> usize {
    #[cfg(target_has_atomic = "ptr")]
    {
        NEXT.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
            n.checked_add(1).filter(|&next| next != UNTRUSTED)
        })
        .unwrap_or(UNTRUSTED)
    }
    #[cfg(not(target_has_atomic = "ptr"))]
    {
        UNTRUSTED
    }
}

/// A state of one instance: its number and how many changes it had made then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Version {
    pub(crate) instance: usize,
    pub(crate) changes: u64,
}

impl Version {
    /// Whether state `self`, which a fleet read, is of the same instance as `now` and one that
    /// can be trusted.
    pub(crate) fn same_instance(self, now: Version) -> bool {
        self.instance == now.instance && self.instance != UNTRUSTED
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instances_differ_and_untrusted_never_matches() {
        let (a, b) = (new_instance(), new_instance());
        assert_ne!(a, b);
        let v = |instance| Version {
            instance,
            changes: 3,
        };
        assert!(v(a).same_instance(v(a)));
        assert!(!v(a).same_instance(v(b)));
        assert!(!v(UNTRUSTED).same_instance(v(UNTRUSTED)));
    }
}
