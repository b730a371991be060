//! Every fuzz finding, replayed from its minimized input (`fuzz/regressions/<target>/`) through
//! the target that found it, with what was wrong. A new finding goes here as soon as it is fixed:
//! `cargo fuzz tmin <target> <artifact>`, copy the result under `fuzz/regressions/<target>/`, and
//! add a test below. `cargo xtask ci` runs these on stable (`cargo test --manifest-path
//! fuzz/Cargo.toml`).

/// The short fuzz run in CI found this (November 2026, commit a1f79ef): a policy composed from
/// unvalidated knobs, `prefill_load_scale = -inf`, reached the default cost's one-pass loop,
/// whose bound on the weights checked only the upper limit (`w <= 1e270`). Its load term was then
/// `-inf * 0 = NaN` or `-inf`, and the selection returned a non-finite cost. The bound now
/// requires `0 <= w <= 1e270` (`DefaultCost::costs_are_bounded`); other knobs go to the general
/// pipeline, which names the non-finite cost as an error.
#[test]
fn select_unvalidated_negative_infinite_load_scale() {
    libroute_fuzz::select::run(include_bytes!(
        "../regressions/select/unvalidated-negative-infinite-load-scale"
    ));
}
