//! The generator reproduces `fastrand` 2.4.1 bit for bit; and how far `libm`'s `exp`/`tanh` (the
//! no-`std` build's) stray from the platform's (the `std` build's, and Dynamo's).

use libroute_core::rng::{index, unit_f64};
use libroute_core::{RandomSource, WyRand};

#[test]
fn wyrand_matches_fastrand_2_4_1() {
    for seed in [0, 1, 42, 0xdead_beef, u64::MAX] {
        let mut ours = WyRand::with_seed(seed);
        let mut theirs = fastrand::Rng::with_seed(seed);
        for _ in 0..10_000 {
            assert_eq!(ours.next_u64(), theirs.u64(..));
        }
    }
}

#[test]
fn index_matches_fastrand_usize_range() {
    for seed in [3, 42, 99] {
        let mut ours = WyRand::with_seed(seed);
        let mut theirs = fastrand::Rng::with_seed(seed);
        for n in (1..2000u64).chain([u64::MAX / 3, u64::MAX, (1 << 63) + 1]) {
            let n_usize = usize::try_from(n).unwrap();
            assert_eq!(
                index(&mut ours, n),
                theirs.usize(0..n_usize) as u64,
                "seed {seed}, n {n}"
            );
        }
    }
}

#[test]
fn unit_f64_matches_fastrand_f64() {
    let mut ours = WyRand::with_seed(42);
    let mut theirs = fastrand::Rng::with_seed(42);
    for _ in 0..100_000 {
        let (a, b) = (unit_f64(&mut ours), theirs.f64());
        assert_eq!(a.to_bits(), b.to_bits());
        assert!((0.0..1.0).contains(&a));
    }
}

#[test]
fn any_rand_core_rng_is_a_source() {
    struct Counter(u64);
    impl rand_core::TryRng for Counter {
        type Error = core::convert::Infallible;
        fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
            Ok(0)
        }
        fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
            self.0 += 1;
            Ok(self.0)
        }
        fn try_fill_bytes(&mut self, _: &mut [u8]) -> Result<(), Self::Error> {
            Ok(())
        }
    }
    let mut c = Counter(0);
    let source: &mut dyn RandomSource = &mut c;
    assert_eq!(source.next_u64(), 1);
    assert_eq!(source.next_u64(), 2);
}

#[test]
#[allow(
    clippy::print_stderr,
    reason = "the measurement is the point of this test"
)]
fn libm_exp_and_tanh_stay_within_3_ulp_of_the_platform() {
    // Softmax exponents lie in [-1/T, 0]; taint sums are small. Walk both densely.
    let mut rng = fastrand::Rng::with_seed(7);
    let (mut exp_differ, mut exp_ulps, mut tanh_differ, mut tanh_ulps) = (0, 0u64, 0, 0u64);
    for _ in 0..1_000_000 {
        let x = -rng.f64() * 1000.0;
        let (a, b) = (libm::exp(x).to_bits(), x.exp().to_bits());
        if a != b {
            exp_differ += 1;
            exp_ulps = exp_ulps.max(a.abs_diff(b));
        }
        let t = (rng.f64() - 0.5) * 20.0;
        let (a, b) = (libm::tanh(t).to_bits(), t.tanh().to_bits());
        if a != b {
            tanh_differ += 1;
            tanh_ulps = tanh_ulps.max(a.abs_diff(b));
        }
    }
    // These figures are quoted in the crate docs ("Crate features"); the bounds keep them true.
    eprintln!(
        "exp differs on {exp_differ}/1e6 (max {exp_ulps} ulp), tanh on {tanh_differ}/1e6 (max {tanh_ulps} ulp)"
    );
    assert!(
        exp_differ < 80_000 && exp_ulps <= 3,
        "libm::exp drifted further from the platform"
    );
    assert!(
        tanh_differ < 50_000 && tanh_ulps <= 3,
        "libm::tanh drifted further from the platform"
    );
}
