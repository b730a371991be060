//! Layer 3, the policies: Dynamo's default cost and picker with their knobs, and the catalog of
//! builtins with its JSON configuration. They use the vocabulary and the engine's traits; the
//! engine knows none of them.

pub mod catalog;
#[cfg(feature = "std")]
pub mod catalog_config;
mod config;
mod default;
#[cfg(feature = "std")]
mod json;

pub use config::{ConfigError, DefaultKnobs, DefaultPolicyConfig, Knob, Problem};
pub use default::{DefaultCost, DefaultPicker, DefaultPolicy};
