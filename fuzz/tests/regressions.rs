//! Every fuzz finding, replayed from its minimized input (`fuzz/regressions/<target>/`) through
//! the target that found it, with what was wrong. A new finding goes here as soon as it is fixed:
//! `cargo fuzz tmin <target> <artifact>`, copy the result under `fuzz/regressions/<target>/`, and
//! add a test below. `cargo xtask ci` runs these on stable (`cargo test --manifest-path
//! fuzz/Cargo.toml`).

/// The `select` target found this in CI's short run (November 2026; recorded in commit a1f79ef): a policy composed from
/// unvalidated knobs, `prefill_load_scale = -inf`, reached the default cost's one-pass loop,
/// whose bound on the weights checked only the upper limit (`w <= 1e270`). Its load term was then
/// `-inf * 0 = NaN` or `-inf`, and the selection returned a non-finite cost. The bound now
/// requires `0 <= w <= 1e270` (`DefaultCost::costs_are_bounded`); other knobs go to the general
/// pipeline, which names the non-finite cost as an error. (This input was re-found by fuzzing
/// with the old bound put back.)
#[test]
fn select_unvalidated_negative_infinite_load_scale() {
    libroute_fuzz::select::run(include_bytes!(
        "../regressions/select/unvalidated-negative-infinite-load-scale"
    ));
}

/// The `catalog` target found this in CI's short run (2026-12-01, fixed in commit 6545b39): the
/// `ttft` scorer added a worker's queued prefill tokens to the request's uncached ones, and its
/// active requests to 1, in unchecked `u64` arithmetic, so counters near `u64::MAX` overflowed:
/// a panic in debug builds, a wrapped, tiny estimate in release. The sums now saturate, and such
/// a worker is the slowest. (This input was re-found by fuzzing with the old sums put back.)
#[test]
fn catalog_ttft_counters_near_the_integer_limit() {
    libroute_fuzz::catalog::run(include_bytes!(
        "../regressions/catalog/ttft-counters-near-the-integer-limit"
    ));
}
