//! Online calibration of a worker's first-token time: how long a request booked on it takes to
//! finish its prefill, learned from what the ledger already sees.
//!
//! A request booked at time `t0` on a worker with `x` prefill tokens to compute there (the ones
//! queued before it and its own uncached ones) and `n` active requests (itself included) finishes
//! its prefill at `t1`. Every such observation `(x, n, t1 - t0)` feeds an exponentially weighted
//! least-squares fit of
//!
//! ```text
//! first token ms = base_ms + ms_per_prefill_token * x + ms_per_active_request * n
//! ```
//!
//! The active requests stand for the decode work a prefill shares the worker's passes with: in
//! `vLLM`'s and `SGLang`'s schedulers every pass carries one token of each running sequence, and the
//! pass's time grows with their context.
//!
//! One fit serves the whole fleet: every worker's observations feed it. Old observations fade
//! (each weighs `1 - 1/window` of the one after it), so the fit follows a fleet whose speed
//! changes with its load. The three parameters are kept at or above 0: a slope the data cannot
//! support is dropped and the rest refitted without it. The prefill slope is the exception: it is
//! what makes queued work count as waiting, so when the observations cannot identify it (all of
//! one size, as a fleet's first requests often are, or a time that falls as the work grows) the
//! fit goes through the origin and the whole time is put on the tokens.
//!
//! A worker's own [`Speed`] is the fleet's times its **pace**: the sum of its observed times over
//! the sum of what the fleet's fit predicted for them, pulled toward 1 as if [`PRIOR_WEIGHT`]
//! more observations had matched the prediction. A worker on a slower GPU drifts to its own
//! pace; on a uniform fleet every pace stays near 1, so the noise of one worker's few
//! observations does not reorder workers (a per-worker regression would: its intercept and
//! slopes swing with every sample).
//!
//! Everything is a fixed number of `f64`s: no allocation, no clock (times are arguments).

use crate::vocab::Speed;

/// Observations over which a worker's pace is averaged: each weighs `1 - 1/WINDOW` of the next.
pub const WINDOW: f64 = 64.0;

/// The same for the fleet's fit, which sees every worker's observations.
pub const FLEET_WINDOW: f64 = 512.0;

/// How many observations at the fleet's prediction a worker's pace starts from.
pub const PRIOR_WEIGHT: f64 = 8.0;

/// Observations the fleet needs before any speed is reported.
pub const MIN_OBSERVATIONS: u64 = 8;

/// Exponentially weighted sums of `(1, x, d, t)` and their products: a least-squares fit.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Fit {
    /// Observations made, saturating.
    seen: u64,
    /// Sum of weights.
    n: f64,
    x: f64,
    d: f64,
    t: f64,
    xx: f64,
    xd: f64,
    dd: f64,
    xt: f64,
    dt: f64,
}

impl Fit {
    /// The observation count and the nine sums, for a snapshot.
    pub(crate) const fn parts(&self) -> (u64, [f64; 9]) {
        (
            self.seen,
            [
                self.n, self.x, self.d, self.t, self.xx, self.xd, self.dd, self.xt, self.dt,
            ],
        )
    }

    /// A fit from [`Fit::parts`].
    pub(crate) const fn from_parts(seen: u64, sums: [f64; 9]) -> Self {
        let [n, x, d, t, xx, xd, dd, xt, dt] = sums;
        Self {
            seen,
            n,
            x,
            d,
            t,
            xx,
            xd,
            dd,
            xt,
            dt,
        }
    }

    /// Adds one observation, fading the earlier ones by `1 - 1/window`.
    #[allow(
        clippy::cast_precision_loss,
        reason = "token and block counts far below 2^53"
    )]
    pub(crate) fn observe(&mut self, x: u64, d: u64, t_ms: f64, window: f64) {
        let keep = 1.0 - 1.0 / window;
        let (x, d) = (x as f64, d as f64);
        self.seen = self.seen.saturating_add(1);
        self.n = self.n * keep + 1.0;
        self.x = self.x * keep + x;
        self.d = self.d * keep + d;
        self.t = self.t * keep + t_ms;
        self.xx = self.xx * keep + x * x;
        self.xd = self.xd * keep + x * d;
        self.dd = self.dd * keep + d * d;
        self.xt = self.xt * keep + x * t_ms;
        self.dt = self.dt * keep + d * t_ms;
    }

    /// The weighted sum of observations.
    #[must_use]
    pub fn weight(&self) -> f64 {
        self.n
    }

    /// The least-squares speed with every parameter at or above 0, `None` without observations.
    #[must_use]
    pub fn speed(&self) -> Option<Speed> {
        if self.n.partial_cmp(&0.0) != Some(core::cmp::Ordering::Greater) {
            return None;
        }
        let n = self.n;
        let (mx, md, mt) = (self.x / n, self.d / n, self.t / n);
        // Centered second moments (covariances times n).
        let cxx = self.xx - n * mx * mx;
        let cdd = self.dd - n * md * md;
        let cxd = self.xd - n * mx * md;
        let cxt = self.xt - n * mx * mt;
        let cdt = self.dt - n * md * mt;
        let slope = |c: f64, v: f64| if v > 1e-9 * n { c / v } else { 0.0 };
        let det = cxx * cdd - cxd * cxd;
        // Solve the 2x2 system only when it is well conditioned (both variances present and not
        // collinear); otherwise fit the prefill slope alone.
        let (mut a, mut b) = if cxx > 1e-9 * n && cdd > 1e-9 * n && det > 1e-9 * cxx * cdd {
            ((cxt * cdd - cdt * cxd) / det, (cdt * cxx - cxt * cxd) / det)
        } else {
            (slope(cxt, cxx), 0.0)
        };
        // Keep both slopes >= 0: refit with the negative one dropped.
        if b < 0.0 {
            a = slope(cxt, cxx);
            b = 0.0;
        }
        // The prefill slope is what turns queued work into waiting time, so it is never left
        // out: when the data cannot support it (every observation of about the same size, as in
        // a fleet's first requests, or a slope that falls with the work), the whole time is put
        // on the tokens, a fit through the origin with the other slope dropped.
        if !(cxx > IDENTIFIED * self.xx && a > 0.0) {
            if self.xx > 0.0 && self.xt > 0.0 {
                return speed_of(0.0, self.xt / self.xx, 0.0);
            }
            a = 0.0;
            b = slope(cdt, cdd);
            if b < 0.0 {
                b = 0.0;
            }
        }
        let base = mt - a * mx - b * md;
        speed_of(if base > 0.0 { base } else { 0.0 }, a, b)
    }
}

/// The share of the observations' mean square that their variance in prefill tokens must reach
/// for [`Fit::speed`] to tell a fixed part from a per-token part (a spread of about 0.1% of the
/// sizes: below it, the slope would be fitted to rounding and noise).
const IDENTIFIED: f64 = 1e-6;

/// The speed of these parts, when it is a valid one.
fn speed_of(base_ms: f64, ms_per_prefill_token: f64, ms_per_active_request: f64) -> Option<Speed> {
    let speed = Speed {
        base_ms,
        ms_per_prefill_token,
        ms_per_active_request,
    };
    speed.is_valid().then_some(speed)
}

/// How a worker's observed first-token times compare with the fleet's prediction for them.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Pace {
    /// Sum of weights.
    n: f64,
    /// Weighted sum of observed times, ms.
    observed: f64,
    /// Weighted sum of the fleet's predictions for them, ms.
    predicted: f64,
}

impl Pace {
    /// The three sums, for a snapshot.
    pub(crate) const fn parts(&self) -> [f64; 3] {
        [self.n, self.observed, self.predicted]
    }

    /// A pace from [`Pace::parts`].
    pub(crate) const fn from_parts([n, observed, predicted]: [f64; 3]) -> Self {
        Self {
            n,
            observed,
            predicted,
        }
    }

    /// Adds one observation and the fleet's prediction for it (when the fleet had one).
    pub(crate) fn observe(&mut self, observed_ms: f64, predicted_ms: f64, window: f64) {
        let keep = 1.0 - 1.0 / window;
        self.n = self.n * keep + 1.0;
        self.observed = self.observed * keep + observed_ms;
        self.predicted = self.predicted * keep + predicted_ms;
    }

    /// Observed over predicted, 1 without observations.
    fn ratio(&self) -> f64 {
        if self.n > 0.0 && self.predicted > 0.0 && self.observed > 0.0 {
            self.observed / self.predicted
        } else {
            1.0
        }
    }

    /// The factor to the fleet's times of a worker of this pace in a fleet of `fleet`'s: how
    /// much slower than the prediction this worker has been, relative to the whole fleet (whose
    /// fit was still learning when it made the predictions), with [`PRIOR_WEIGHT`] mean
    /// predictions observed at the fleet's ratio; 1 without observations.
    #[must_use]
    pub fn factor(&self, fleet: &Pace) -> f64 {
        if !(self.n > 0.0 && self.predicted > 0.0) {
            return 1.0;
        }
        let fleet_ratio = fleet.ratio();
        let prior = PRIOR_WEIGHT * self.predicted / self.n;
        (self.observed + prior * fleet_ratio) / (self.predicted + prior) / fleet_ratio
    }
}

/// The speed of a worker of `pace` in a fleet whose fit is `fleet` and pace `fleet_pace`: the
/// fleet's speed times the worker's [`Pace::factor`]. `None` until the fleet has
/// [`MIN_OBSERVATIONS`].
#[must_use]
pub fn worker_speed(fleet: &Fit, fleet_pace: &Pace, pace: &Pace) -> Option<Speed> {
    if fleet.seen < MIN_OBSERVATIONS {
        return None;
    }
    let s = fleet.speed()?;
    let f = pace.factor(fleet_pace);
    speed_of(
        s.base_ms * f,
        s.ms_per_prefill_token * f,
        s.ms_per_active_request * f,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exact_linear_worker_is_recovered() {
        let mut fit = Fit::default();
        for i in 0..200u64 {
            let (x, d) = ((i * 37) % 5000, (i * 11) % 300);
            fit.observe(x, d, 20.0 + 0.05 * x as f64 + 0.3 * d as f64, WINDOW);
        }
        let s = fit.speed().unwrap();
        assert!((s.base_ms - 20.0).abs() < 1e-6, "{s:?}");
        assert!((s.ms_per_prefill_token - 0.05).abs() < 1e-9, "{s:?}");
        assert!((s.ms_per_active_request - 0.3).abs() < 1e-9, "{s:?}");
    }

    #[test]
    fn parameters_stay_non_negative_and_constant_sizes_keep_the_prefill_slope() {
        let mut fit = Fit::default();
        for i in 0..50u64 {
            // Time falls with decode blocks: no physical reading, so that slope is dropped.
            fit.observe(1000 + i, 100 + i, 500.0 - 2.0 * i as f64, WINDOW);
        }
        let s = fit.speed().unwrap();
        assert!(s.is_valid());
        assert_eq!(s.ms_per_active_request, 0.0);
        assert!(s.ms_per_prefill_token > 0.0, "{s:?}");
        // Every observation of one size (a fleet's first requests often are): a fixed part and a
        // per-token part cannot be told apart, and the time goes on the tokens, so that queued
        // work still counts as waiting time.
        let mut flat = Fit::default();
        for _ in 0..10 {
            flat.observe(100, 5, 42.0, WINDOW);
        }
        let s = flat.speed().unwrap();
        assert_eq!(s.base_ms, 0.0, "{s:?}");
        assert!((s.ms_per_prefill_token - 0.42).abs() < 1e-12, "{s:?}");
        assert_eq!(s.ms_per_active_request, 0.0);
        // Time that falls as the work grows has no physical reading either: through the origin.
        let mut falling = Fit::default();
        for i in 0..20u64 {
            falling.observe(100 + 10 * i, 5, 100.0 - i as f64, WINDOW);
        }
        let s = falling.speed().unwrap();
        assert_eq!((s.base_ms, s.ms_per_active_request), (0.0, 0.0), "{s:?}");
        assert!(s.ms_per_prefill_token > 0.0, "{s:?}");
        // No work at all: nothing to put the time on, so it stays a base.
        let mut idle = Fit::default();
        for _ in 0..10 {
            idle.observe(0, 0, 7.0, WINDOW);
        }
        let s = idle.speed().unwrap();
        assert!((s.base_ms - 7.0).abs() < 1e-12, "{s:?}");
        assert_eq!(s.ms_per_prefill_token, 0.0, "{s:?}");
        assert_eq!(Fit::default().speed(), None);
    }

    #[test]
    fn a_worker_starts_at_the_fleet_speed_and_drifts_to_its_own_pace() {
        let mut fleet = Fit::default();
        for i in 0..100u64 {
            fleet.observe(i * 100, 0, 10.0 + 0.02 * (i * 100) as f64, FLEET_WINDOW);
        }
        let fleet_pace = Pace::default();
        let s = worker_speed(&fleet, &fleet_pace, &Pace::default()).unwrap();
        assert!((s.ms_per_prefill_token - 0.02).abs() < 1e-9, "{s:?}");
        // Two workers: one takes the predicted time, the other twice that. The fleet's ratio is
        // their mean, 1.5; each worker's factor is its own ratio over the fleet's.
        let (mut fast, mut slow, mut both) = (Pace::default(), Pace::default(), Pace::default());
        for i in 0..300u64 {
            let predicted = 10.0 + 0.02 * (i % 50 * 100) as f64;
            fast.observe(predicted, predicted, WINDOW);
            slow.observe(2.0 * predicted, predicted, WINDOW);
            both.observe(predicted, predicted, FLEET_WINDOW);
            both.observe(2.0 * predicted, predicted, FLEET_WINDOW);
        }
        let (f, s) = (fast.factor(&both), slow.factor(&both));
        assert!((s / f - 2.0).abs() < 0.2, "{f} {s}");
        assert!(f < 1.0 && s > 1.0, "{f} {s}");
        assert_eq!(worker_speed(&Fit::default(), &both, &slow), None);
        assert_eq!(Pace::default().factor(&both), 1.0);
        // Alone, a worker's factor is 1 whatever the fleet's fit predicted.
        assert!((slow.factor(&slow) - 1.0).abs() < 1e-12);
    }
}
