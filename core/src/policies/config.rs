//! Policy configuration as serde types: the JSON every host and binding passes.
//!
//! [`DefaultPolicyConfig`] deserializes the default policy's knobs (spec section 3), rejecting
//! unknown keys; [`DefaultPolicyConfig::build`] validates every value and names the knob of any it
//! rejects. The types derive serde without `std`, so any serde format works in `no_std`.

use core::fmt;

use serde::{Deserialize, Serialize};

use crate::engine::Policy;
use crate::policies::{DefaultCost, DefaultPicker, DefaultPolicy};

/// The default policy's knobs as they appear in configuration; every field is optional and
/// defaults as in [`DefaultKnobs::default`].
///
/// # Examples
///
/// ```
/// use libroute_core::DefaultPolicyConfig;
/// let config: DefaultPolicyConfig =
///     serde_json::from_str(r#"{"temperature": 0.5, "seed": 42}"#).unwrap();
/// let knobs = config.knobs().unwrap();
/// assert_eq!(knobs.temperature, 0.5);
/// assert_eq!(knobs.seed, Some(42));
///
/// let bad: DefaultPolicyConfig = serde_json::from_str(r#"{"host_cache_hit_weight": 1.5}"#).unwrap();
/// assert_eq!(
///     bad.knobs().unwrap_err().to_string(),
///     "invalid host_cache_hit_weight = 1.5: must be within [0, 1]"
/// );
/// assert!(serde_json::from_str::<DefaultPolicyConfig>(r#"{"temprature": 1}"#).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DefaultPolicyConfig {
    /// See [`DefaultCost::overlap_score_credit`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap_score_credit: Option<f64>,
    /// See [`DefaultCost::overlap_score_credit_decay`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap_score_credit_decay: Option<f64>,
    /// See [`DefaultCost::prefill_load_scale`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_load_scale: Option<f64>,
    /// See [`DefaultCost::decode_active_request_weight`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_active_request_weight: Option<f64>,
    /// See [`DefaultCost::host_cache_hit_weight`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_cache_hit_weight: Option<f64>,
    /// See [`DefaultCost::disk_cache_hit_weight`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_cache_hit_weight: Option<f64>,
    /// See [`DefaultCost::shared_cache_multiplier`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_cache_multiplier: Option<f64>,
    /// See [`DefaultPicker::temperature`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Present: seeded (replayable) mode with this seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Legacy alias of `prefill_load_scale`; 0 also zeroes the overlap credit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap_score_weight: Option<f64>,
}

/// The default policy's knobs, resolved and valid.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DefaultKnobs {
    /// The cost function's weights.
    pub cost: DefaultCost,
    /// Sampling temperature (`>= 0`, `+inf` allowed).
    pub temperature: f64,
    /// The seed of seeded mode.
    pub seed: Option<u64>,
}

impl Default for DefaultKnobs {
    fn default() -> Self {
        Self {
            cost: DefaultCost::default(),
            temperature: 0.0,
            seed: None,
        }
    }
}

impl DefaultKnobs {
    /// Checks every knob against its range (spec section 3).
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the first invalid knob.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let c = &self.cost;
        let unbounded = [
            (Knob::OverlapScoreCredit, c.overlap_score_credit),
            (Knob::OverlapScoreCreditDecay, c.overlap_score_credit_decay),
            (Knob::PrefillLoadScale, c.prefill_load_scale),
            (
                Knob::DecodeActiveRequestWeight,
                c.decode_active_request_weight,
            ),
        ];
        for (knob, value) in unbounded {
            check(knob, value, false)?;
        }
        let unit = [
            (Knob::HostCacheHitWeight, c.host_cache_hit_weight),
            (Knob::DiskCacheHitWeight, c.disk_cache_hit_weight),
            (Knob::SharedCacheMultiplier, c.shared_cache_multiplier),
        ];
        for (knob, value) in unit {
            check(knob, value, true)?;
        }
        if self.temperature.is_nan() || self.temperature < 0.0 {
            return Err(ConfigError {
                knob: Knob::Temperature,
                value: self.temperature,
                problem: Problem::Negative,
            });
        }
        Ok(())
    }

    /// The default policy with these knobs.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the first invalid knob.
    pub fn build(&self) -> Result<DefaultPolicy, ConfigError> {
        self.validate()?;
        let picker = DefaultPicker {
            temperature: self.temperature,
        };
        Ok(Policy::from_parts((), (self.cost,), picker).with_seed(self.seed))
    }
}

fn check(knob: Knob, value: f64, unit: bool) -> Result<(), ConfigError> {
    let problem = if !value.is_finite() {
        Problem::NotFinite
    } else if value < 0.0 {
        Problem::Negative
    } else if unit && value > 1.0 {
        Problem::AboveOne
    } else {
        return Ok(());
    };
    Err(ConfigError {
        knob,
        value,
        problem,
    })
}

impl DefaultPolicyConfig {
    /// Resolves defaults and the legacy alias, and validates every knob.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the invalid knob, or both knobs of a conflict
    /// (`overlap_score_weight` given with `prefill_load_scale`, or set to 0 with a non-zero
    /// `overlap_score_credit`).
    pub fn knobs(&self) -> Result<DefaultKnobs, ConfigError> {
        let defaults = DefaultKnobs::default();
        let mut cost = DefaultCost {
            overlap_score_credit: self
                .overlap_score_credit
                .unwrap_or(defaults.cost.overlap_score_credit),
            overlap_score_credit_decay: self
                .overlap_score_credit_decay
                .unwrap_or(defaults.cost.overlap_score_credit_decay),
            prefill_load_scale: self
                .prefill_load_scale
                .unwrap_or(defaults.cost.prefill_load_scale),
            decode_active_request_weight: self
                .decode_active_request_weight
                .unwrap_or(defaults.cost.decode_active_request_weight),
            host_cache_hit_weight: self
                .host_cache_hit_weight
                .unwrap_or(defaults.cost.host_cache_hit_weight),
            disk_cache_hit_weight: self
                .disk_cache_hit_weight
                .unwrap_or(defaults.cost.disk_cache_hit_weight),
            shared_cache_multiplier: self
                .shared_cache_multiplier
                .unwrap_or(defaults.cost.shared_cache_multiplier),
        };
        if let Some(weight) = self.overlap_score_weight {
            check(Knob::OverlapScoreWeight, weight, false)?;
            if self.prefill_load_scale.is_some() {
                return Err(ConfigError {
                    knob: Knob::OverlapScoreWeight,
                    value: weight,
                    problem: Problem::Conflicts(Knob::PrefillLoadScale),
                });
            }
            cost.prefill_load_scale = weight;
            if weight == 0.0 {
                if self.overlap_score_credit.is_some_and(|c| c != 0.0) {
                    return Err(ConfigError {
                        knob: Knob::OverlapScoreWeight,
                        value: weight,
                        problem: Problem::Conflicts(Knob::OverlapScoreCredit),
                    });
                }
                cost.overlap_score_credit = 0.0;
            }
        }
        let knobs = DefaultKnobs {
            cost,
            temperature: self.temperature.unwrap_or(defaults.temperature),
            seed: self.seed,
        };
        knobs.validate()?;
        Ok(knobs)
    }

    /// The default policy this configuration describes.
    ///
    /// # Errors
    ///
    /// As [`DefaultPolicyConfig::knobs`].
    pub fn build(&self) -> Result<DefaultPolicy, ConfigError> {
        self.knobs()?.build()
    }
}

/// A knob of the default policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Knob {
    /// `overlap_score_credit`
    OverlapScoreCredit,
    /// `overlap_score_credit_decay`
    OverlapScoreCreditDecay,
    /// `prefill_load_scale`
    PrefillLoadScale,
    /// `decode_active_request_weight`
    DecodeActiveRequestWeight,
    /// `host_cache_hit_weight`
    HostCacheHitWeight,
    /// `disk_cache_hit_weight`
    DiskCacheHitWeight,
    /// `shared_cache_multiplier`
    SharedCacheMultiplier,
    /// `temperature`
    Temperature,
    /// `seed`
    Seed,
    /// `overlap_score_weight` (legacy alias)
    OverlapScoreWeight,
}

impl Knob {
    /// The knob's configuration key.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Knob::OverlapScoreCredit => "overlap_score_credit",
            Knob::OverlapScoreCreditDecay => "overlap_score_credit_decay",
            Knob::PrefillLoadScale => "prefill_load_scale",
            Knob::DecodeActiveRequestWeight => "decode_active_request_weight",
            Knob::HostCacheHitWeight => "host_cache_hit_weight",
            Knob::DiskCacheHitWeight => "disk_cache_hit_weight",
            Knob::SharedCacheMultiplier => "shared_cache_multiplier",
            Knob::Temperature => "temperature",
            Knob::Seed => "seed",
            Knob::OverlapScoreWeight => "overlap_score_weight",
        }
    }
}

impl fmt::Display for Knob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What is wrong with a knob's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Problem {
    /// NaN or infinite.
    NotFinite,
    /// Below 0 (or NaN, for the temperature).
    Negative,
    /// Above 1 for a knob whose range is `[0, 1]`.
    AboveOne,
    /// Given together with a knob it contradicts.
    Conflicts(Knob),
}

/// An invalid knob value, naming the knob.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConfigError {
    /// The knob.
    pub knob: Knob,
    /// The value given.
    pub value: f64,
    /// What is wrong with it.
    pub problem: Problem,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {} = {}: ", self.knob, self.value)?;
        match self.problem {
            Problem::NotFinite => f.write_str("must be finite"),
            Problem::Negative => f.write_str("must be >= 0"),
            Problem::AboveOne => f.write_str("must be within [0, 1]"),
            Problem::Conflicts(other) => write!(f, "conflicts with {other}"),
        }
    }
}

impl core::error::Error for ConfigError {}
