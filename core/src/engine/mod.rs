//! Layer 2, the selection engine: the component traits ([`Filter`], [`Scorer`], [`Picker`]),
//! their composition into a [`Policy`], the caller-owned [`Selector`] that runs one, what a
//! selection returns, and the random source. It uses the vocabulary only, and names no policy:
//! a scorer or a filter offers a faster pass through a capability the engine asks for
//! ([`Scorer::score_all_rows`], [`Filter::check_rows`]).

mod component;
mod outcome;
mod policy;
pub mod rng;
mod selector;

pub(crate) use component::refusal_among;
pub use component::{
    Admission, ComponentError, Filter, Filters, OnePass, Pick, PickInput, PickReason, Picker,
    Scorer, Scorers, Verdict,
};
pub use outcome::{Disposition, Explanation, SelectError, Selection};
pub(crate) use policy::{LEFT_OUT, compact_left_out, mark_tidy, mark_unfiltered, nan_left_out};
pub use policy::{MAX_SCORERS, Policy, PolicyError};
pub use rng::{RandomSource, WyRand};
pub use selector::Selector;
