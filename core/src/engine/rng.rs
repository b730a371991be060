//! Deterministic randomness: the wyrand generator and the two draws pickers make.
//!
//! Randomness enters a selection only through a [`RandomSource`] the caller owns (inside a
//! [`crate::Selector`], or passed to [`crate::Policy::select_with_rng`]). Any `rand_core::Rng`
//! is a `RandomSource`, so a host can bring its own generator; the draws below turn its `u64`
//! stream into an index or a unit float exactly the way `fastrand` 2.4.1 does, so that with
//! [`WyRand`] the picks are bit-for-bit those of Dynamo's seeded selector.

use core::convert::Infallible;

/// A source of uniformly random `u64`s: what pickers draw from.
///
/// Implemented for every [`rand_core::Rng`], including [`WyRand`].
pub trait RandomSource {
    /// The next uniformly random `u64`.
    fn next_u64(&mut self) -> u64;
}

impl<R: rand_core::Rng + ?Sized> RandomSource for R {
    #[inline]
    fn next_u64(&mut self) -> u64 {
        rand_core::Rng::next_u64(self)
    }
}

/// The wyrand generator, exactly as `fastrand` 2.4.1 implements it (the wyhash v4.2 constants;
/// older 2.x releases used other constants and produce other sequences).
///
/// # Examples
///
/// ```
/// use libroute_core::{RandomSource, WyRand};
/// let mut a = WyRand::with_seed(42);
/// let mut b = WyRand::with_seed(42);
/// assert_eq!(a.next_u64(), b.next_u64());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WyRand {
    state: u64,
}

impl WyRand {
    /// A generator whose stream is fixed by `seed` (as `fastrand::Rng::with_seed`).
    #[must_use]
    pub const fn with_seed(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next `u64` of the stream.
    #[inline]
    pub fn gen_u64(&mut self) -> u64 {
        const WY_CONST_0: u64 = 0x2d35_8dcc_aa6c_78a5;
        const WY_CONST_1: u64 = 0x8bb8_4b93_962e_acc9;
        let s = self.state.wrapping_add(WY_CONST_0);
        self.state = s;
        let t = u128::from(s) * u128::from(s ^ WY_CONST_1);
        #[allow(
            clippy::cast_possible_truncation,
            reason = "taking the low and high halves"
        )]
        let (lo, hi) = (t as u64, (t >> 64) as u64);
        lo ^ hi
    }
}

impl rand_core::TryRng for WyRand {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        #[allow(
            clippy::cast_possible_truncation,
            reason = "the low half, as fastrand::u32(..)"
        )]
        Ok(self.gen_u64() as u32)
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        Ok(self.gen_u64())
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        for chunk in dst.chunks_mut(8) {
            let bytes = self.gen_u64().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
        Ok(())
    }
}

/// A uniform index in `0..n`, as `fastrand::Rng::usize(0..n)` on a 64-bit target (Lemire's
/// nearly-divisionless method, rejecting the biased low products).
///
/// # Panics
///
/// Panics if `n == 0`: an empty range has no index. Pickers only draw for `n >= 1`.
///
/// # Examples
///
/// ```
/// use libroute_core::{rng::index, WyRand};
/// let mut rng = WyRand::with_seed(7);
/// assert!(index(&mut rng, 3) < 3);
/// ```
#[inline]
pub fn index(rng: &mut (impl RandomSource + ?Sized), n: u64) -> u64 {
    assert!(n > 0, "index drawn from an empty range");
    let mut r = rng.next_u64();
    let mut product = u128::from(r) * u128::from(n);
    #[allow(
        clippy::cast_possible_truncation,
        reason = "the low half of the product"
    )]
    let mut lo = product as u64;
    if lo < n {
        let threshold = n.wrapping_neg() % n;
        while lo < threshold {
            r = rng.next_u64();
            product = u128::from(r) * u128::from(n);
            #[allow(
                clippy::cast_possible_truncation,
                reason = "the low half of the product"
            )]
            {
                lo = product as u64;
            }
        }
    }
    #[allow(
        clippy::cast_possible_truncation,
        reason = "the high half of the product"
    )]
    let hi = (product >> 64) as u64;
    hi
}

/// A uniform float in `[0, 1)`, as `fastrand::Rng::f64()`: the top 63 bits scaled by `2^-63`,
/// redrawn in the (never observed) case that rounding reaches 1.0.
///
/// # Examples
///
/// ```
/// use libroute_core::{rng::unit_f64, WyRand};
/// let u = unit_f64(&mut WyRand::with_seed(1));
/// assert!((0.0..1.0).contains(&u));
/// ```
#[inline]
pub fn unit_f64(rng: &mut (impl RandomSource + ?Sized)) -> f64 {
    const SCALE: f64 = 1.0 / (1u64 << 63) as f64;
    loop {
        let x = (rng.next_u64() >> 1) as f64 * SCALE;
        if x < 1.0 {
            return x;
        }
    }
}
