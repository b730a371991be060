//! Layer 1, the vocabulary: who can be selected ([`WorkerKey`], taints), what is routed
//! ([`Request`]), what a host knows of each candidate ([`Row`]) and which of it a component may
//! read ([`WorkerInputs`] and the views). It uses no other layer.

mod inputs;
pub(crate) mod math;
mod request;
mod row;
mod worker;

pub(crate) use inputs::taint_multiplier;
pub use inputs::{Candidates, RequestView, RowView, WorkerInputs};
pub use request::{
    BlockRange, Label, Leg, PreferredTaint, Request, RequestError, Role, SharedHits,
};
pub use row::{Cache, Load, Row, RowField, RowFlags, RowRule, Speed};
pub(crate) use row::{RowLimits, any_invalid_speed, for_each_odd_row, tidy_reference};
pub use worker::{Taint, TaintSet, WorkerKey};
