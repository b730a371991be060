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
