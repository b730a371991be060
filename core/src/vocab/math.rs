//! The transcendental functions selection uses, from one place.
//!
//! With the `std` feature (the default) `exp` and `tanh` are the platform's (glibc on Linux), the
//! same functions Dynamo's selector calls, so preferred-taint multipliers and sampling
//! probabilities match it bit for bit. Without `std` they come from `libm`, which differs from
//! glibc in the last bits on some inputs (measured by `tests/rng.rs`). `round` and `fabs` are
//! exact either way.

#[cfg(feature = "std")]
#[inline]
pub(crate) fn exp(x: f64) -> f64 {
    x.exp()
}

#[cfg(not(feature = "std"))]
#[inline]
pub(crate) fn exp(x: f64) -> f64 {
    libm::exp(x)
}

#[cfg(feature = "std")]
#[inline]
pub(crate) fn tanh(x: f64) -> f64 {
    x.tanh()
}

#[cfg(not(feature = "std"))]
#[inline]
pub(crate) fn tanh(x: f64) -> f64 {
    libm::tanh(x)
}

/// `round(x)` half away from zero as a count: NaN and values `<= 0` give 0, values beyond
/// `u64::MAX` saturate, exactly as `libm::round(x).max(0.0) as u64`. Below 2^52 it truncates by
/// conversion and compares the fraction, which `x - trunc(x)` gives exactly, with one half: no
/// call and no loop, where `libm::round` is a function of bit manipulations.
#[inline]
pub(crate) fn round_count(x: f64) -> u64 {
    const TWO_52: f64 = 4_503_599_627_370_496.0;
    if x > 0.0 && x < TWO_52 {
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "0 < x < 2^52: the conversion truncates exactly"
        )]
        let whole = x as u64;
        #[allow(clippy::cast_precision_loss, reason = "whole < 2^52 is exact")]
        let fraction = x - whole as f64;
        whole + u64::from(fraction >= 0.5)
    } else {
        // 0, NaN, negatives (clamped to 0 by the saturating conversion) and integers >= 2^52.
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "float-to-int `as` saturates, NaN and negatives give 0"
        )]
        let whole = x as u64;
        whole
    }
}

/// Integers below this convert to `f64` exactly through [`exact_f64`].
pub(crate) const EXACT_LIMIT: u64 = 1 << 52;

/// `x as f64` for `x < 2^52`: `x` placed in the mantissa of `2^52`, minus `2^52`. Exact, and
/// cheaper than the general conversion (an OR and a subtraction, no range branch).
#[allow(clippy::inline_always, reason = "one OR and one subtraction")]
#[inline(always)]
pub(crate) fn exact_f64(x: u64) -> f64 {
    const TWO_52: f64 = 4_503_599_627_370_496.0;
    f64::from_bits(x | TWO_52.to_bits()) - TWO_52
}

#[cfg(test)]
mod tests {
    use super::round_count;
    use std::vec;

    #[test]
    fn round_count_is_libm_round_clamped() {
        let reference = |x: f64| {
            let r = libm::round(x);
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let n = if r > 0.0 { r as u64 } else { 0 };
            n
        };
        let mut edge = vec![
            0.0,
            -0.0,
            0.5,
            1.5,
            2.5,
            -0.5,
            -3.7,
            0.499_999_999_999_999_94,
            f64::MIN_POSITIVE,
            4_503_599_627_370_495.5,
            4_503_599_627_370_496.0,
            9_007_199_254_740_993.0,
            1e19,
            1.8e19,
            1e300,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            f64::MAX,
        ];
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..100_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let bits = state;
            edge.push(f64::from_bits(bits));
            // Halves and near-halves at every scale below 2^53.
            let n = (bits >> 11) as f64;
            edge.push(n + 0.5);
            edge.push(n * 0.25);
            edge.push(f64::from_bits((n + 0.5).to_bits() - 1));
        }
        for x in edge {
            assert_eq!(round_count(x), reference(x), "{x:e} ({:#x})", x.to_bits());
        }
    }
}
