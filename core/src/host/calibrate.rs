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
//! A worker's own [`Speed`] is the fleet's times its **pace**, which moves only on evidence that
//! the worker differs from the fleet by more than its own noise. Each worker keeps the weighted
//! mean and variance of `ln(observed / predicted)` over its observations, and the fleet does over
//! all of them. The worker's mean differs from the fleet's by `d`, known to a standard error `se`
//! (its variance pooled with the fleet's as if [`PRIOR_WEIGHT`] observations had been the
//! fleet's); the pace is `exp(d * (1 - (EVIDENCE * se / d)^2))` when `|d|` exceeds [`EVIDENCE`]
//! standard errors and 1 otherwise, a positive-part James-Stein shrinkage toward the fleet.
//!
//! A slower GPU is slower on every request: its log ratios sit apart from the fleet's with little
//! spread, and its pace follows within a few observations. On a uniform fleet a worker's times
//! differ from the prediction through waits the fit does not see (a request held for KV room, a
//! long decode in the same passes): large and irregular, so the spread they make keeps the pace
//! at 1. A pace that read those waits as speed would steer traffic away from the workers whose
//! requests happened to wait and toward the others, cache misses included; measured on random
//! workloads, a pace of means (observed over predicted, as before this rule) lost to Dynamo's
//! default by up to 70 times (`benches/RESULTS-quality.md`).
//!
//! Everything is a fixed number of `f64`s: no allocation, no clock (times are arguments).

use crate::vocab::Speed;

/// Observations over which a worker's pace is averaged: each weighs `1 - 1/WINDOW` of the next.
pub const WINDOW: f64 = 64.0;

/// The same for the fleet's fit, which sees every worker's observations.
pub const FLEET_WINDOW: f64 = 512.0;

/// How many observations of the fleet's spread a worker's variance starts from.
pub const PRIOR_WEIGHT: f64 = 8.0;

/// How many standard errors a worker's mean log ratio must differ from the fleet's before its
/// pace moves at all.
pub const EVIDENCE: f64 = 2.0;

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

/// How a worker's observed first-token times compare with the fleet's prediction for them: the
/// weighted count, sum and sum of squares of `ln(observed / predicted)`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Pace {
    /// Sum of weights (0: no observation yet).
    n: f64,
    /// Weighted sum of the log ratios.
    sum: f64,
    /// Weighted sum of their squares.
    squares: f64,
}

impl Pace {
    /// The three sums, for a snapshot.
    pub(crate) const fn parts(&self) -> [f64; 3] {
        [self.n, self.sum, self.squares]
    }

    /// A pace from [`Pace::parts`].
    pub(crate) const fn from_parts([n, sum, squares]: [f64; 3]) -> Self {
        Self { n, sum, squares }
    }

    /// Adds one observation and the fleet's prediction for it. A pair without a positive,
    /// finite ratio says nothing about speed and is skipped.
    pub(crate) fn observe(&mut self, observed_ms: f64, predicted_ms: f64, window: f64) {
        let r = libm::log(observed_ms / predicted_ms);
        if !(r.is_finite() && observed_ms > 0.0 && predicted_ms > 0.0) {
            return;
        }
        let keep = 1.0 - 1.0 / window;
        self.n = self.n * keep + 1.0;
        self.sum = self.sum * keep + r;
        self.squares = self.squares * keep + r * r;
    }

    /// The weighted mean log ratio (with `n > 0`).
    fn mean(&self) -> f64 {
        self.sum / self.n
    }

    /// The weighted variance of the log ratios (with `n > 0`), never below 0.
    fn variance(&self) -> f64 {
        let m = self.mean();
        let v = self.squares / self.n - m * m;
        if v > 0.0 { v } else { 0.0 }
    }

    /// The factor to the fleet's times of a worker of this pace in a fleet of `fleet`'s: its
    /// mean log ratio's difference from the fleet's, shrunk by the evidence for it (see the
    /// module's documentation); 1 without observations or without [`EVIDENCE`].
    #[must_use]
    pub fn factor(&self, fleet: &Pace) -> f64 {
        self.factor_against(fleet.spread())
    }

    /// The fleet's side of [`Pace::factor`]: its mean log ratio and variance, `None` without
    /// observations.
    fn spread(&self) -> Option<(f64, f64)> {
        (self.n > 0.0).then(|| (self.mean(), self.variance()))
    }

    /// [`Pace::factor`] against a fleet whose [`Pace::spread`] is `fleet`.
    fn factor_against(&self, fleet: Option<(f64, f64)>) -> f64 {
        let Some((fleet_mean, fleet_variance)) = fleet.filter(|_| self.n > 0.0) else {
            return 1.0;
        };
        let d = self.mean() - fleet_mean;
        let variance =
            (self.variance() * self.n + fleet_variance * PRIOR_WEIGHT) / (self.n + PRIOR_WEIGHT);
        let noise = EVIDENCE * EVIDENCE * variance / self.n;
        if d * d <= noise {
            return 1.0;
        }
        let f = libm::exp((1.0 - noise / (d * d)) * d);
        if f.is_finite() && f > 0.0 { f } else { 1.0 }
    }
}

/// What every worker's speed shares: the fleet's fitted speed and the spread of its pace. A pass
/// over many workers computes it once (`Ledger::fleet_speed`) and each worker's speed from it
/// with [`FleetSpeed::worker`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct FleetSpeed {
    speed: Speed,
    pace: Option<(f64, f64)>,
}

impl FleetSpeed {
    /// The fleet's part, `None` until the fleet has [`MIN_OBSERVATIONS`] and a speed.
    pub(crate) fn new(fleet: &Fit, fleet_pace: &Pace) -> Option<Self> {
        if fleet.seen < MIN_OBSERVATIONS {
            return None;
        }
        Some(Self {
            speed: fleet.speed()?,
            pace: fleet_pace.spread(),
        })
    }

    /// The speed of a worker of `pace`: the fleet's times the worker's [`Pace::factor`].
    pub(crate) fn worker(&self, pace: &Pace) -> Option<Speed> {
        let (s, f) = (self.speed, pace.factor_against(self.pace));
        speed_of(
            s.base_ms * f,
            s.ms_per_prefill_token * f,
            s.ms_per_active_request * f,
        )
    }
}

/// The speed of a worker of `pace` in a fleet whose fit is `fleet` and pace `fleet_pace`: the
/// fleet's speed times the worker's [`Pace::factor`]. `None` until the fleet has
/// [`MIN_OBSERVATIONS`].
#[must_use]
pub fn worker_speed(fleet: &Fit, fleet_pace: &Pace, pace: &Pace) -> Option<Speed> {
    FleetSpeed::new(fleet, fleet_pace)?.worker(pace)
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
        // Two workers: one takes the predicted time, the other twice that, with no noise at all.
        // The fleet's mean log ratio is halfway between theirs; each worker's factor is its own
        // ratio over that, almost in full: the evidence leaves little doubt.
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

    /// Eight workers of one speed whose requests now and then wait up to 30 times their compute
    /// (KV room, a long decode alongside), and one more, three times slower, with the same waits:
    /// each worker's pace, the fleet's, and each worker's plain ratio of observed to predicted
    /// sums over the fleet's (the pace of means this rule replaced, without its prior).
    fn waiting_fleet(seed: u64) -> ([Pace; 9], Pace, [f64; 9]) {
        let mut rng = fastrand::Rng::with_seed(seed);
        let (mut paces, mut fleet) = ([Pace::default(); 9], Pace::default());
        let mut sums = [(0.0, 0.0); 10];
        for i in 0..900 {
            let w = i % 9;
            let predicted = 50.0 + 20.0 * f64::from(rng.u32(0..7));
            let compute = predicted * if w == 8 { 3.0 } else { 1.0 } * (0.9 + 0.2 * rng.f64());
            let wait = if rng.f64() < 0.3 {
                predicted * 30.0 * rng.f64()
            } else {
                0.0
            };
            paces[w].observe(compute + wait, predicted, WINDOW);
            fleet.observe(compute + wait, predicted, FLEET_WINDOW);
            for k in [w, 9] {
                sums[k].0 += compute + wait;
                sums[k].1 += predicted;
            }
        }
        let ratio = |(o, p): (f64, f64)| o / p;
        (
            paces,
            fleet,
            core::array::from_fn(|w| ratio(sums[w]) / ratio(sums[9])),
        )
    }

    #[test]
    fn waits_do_not_read_as_speed_and_a_slower_gpu_does() {
        let mut widest = 1.0f64;
        for seed in 0..20 {
            let (paces, fleet, means) = waiting_fleet(seed);
            for (w, pace) in paces[..8].iter().enumerate() {
                let f = pace.factor(&fleet);
                assert!((0.8..1.25).contains(&f), "seed {seed} worker {w}: {f}");
            }
            let slow = paces[8].factor(&fleet);
            assert!(slow > 1.5, "seed {seed}: {slow}");
            for &m in &means[..8] {
                let off = if m > 1.0 { m } else { 1.0 / m };
                if off > widest {
                    widest = off;
                }
            }
        }
        // The waits alone move a uniform worker's plain ratio by more than that band allows.
        assert!(widest > 1.25, "{widest}");
    }
}
