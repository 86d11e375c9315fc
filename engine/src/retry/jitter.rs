//! Backoff shapes: the pause after failed attempt `n` (1-based), drawn from
//! one uniform number `u` in `[0, 1)` that the caller takes from an injected
//! RNG ([`draw_unit`]), so every shape is a pure function of its inputs.
//!
//! With `e = base × 2^(n−1)` and `c = min(cap, e)`:
//!
//! | shape | pause | range |
//! |---|---|---|
//! | `additive` (the default policy) | `min(cap, e + u × base)` | `[e, e + base)`, capped |
//! | `none` | `c` | exactly `c` |
//! | `full` | `u × c` | `[0, c)` |
//! | `equal` | `c × (0.5 + u / 2)` | `[c/2, c)`; VTEX's `min(maxDelay, base × 2^attempt) × U(0.5, 1.0)` with its 0-based `attempt = n − 1` |
//! | `decorrelated` | `min(cap, base + u × (3 × previous − base))`, `previous` = the last pause (`base` before the first) | `[base, 3 × previous)`, capped |
//!
//! The cap bounds every pause; no shape ever exceeds it, and the mean pause
//! never shrinks from one attempt to the next.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use rand::{Rng, RngCore};
use serde::{Deserialize, Serialize};

/// How the pause after a failure is drawn around the exponential backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Jitter {
    /// `base × 2^(n−1) + U[0, base)`: Sluice's default since the first release.
    Additive,
    /// No jitter: exactly the capped exponential.
    None,
    /// Anywhere from zero to the capped exponential.
    Full,
    /// The upper half of the capped exponential.
    Equal,
    /// Each pause drawn between the base and three times the last one.
    Decorrelated,
}

impl Jitter {
    pub const ALL: [Jitter; 5] = [Jitter::Additive, Jitter::None, Jitter::Full, Jitter::Equal, Jitter::Decorrelated];

    pub const fn as_str(self) -> &'static str {
        match self {
            Jitter::Additive => "additive",
            Jitter::None => "none",
            Jitter::Full => "full",
            Jitter::Equal => "equal",
            Jitter::Decorrelated => "decorrelated",
        }
    }

    /// The pause after failed attempt `attempt` (1-based), at most `cap`.
    /// `previous` is the pause before it (only `decorrelated` reads it);
    /// `u` is the uniform draw in `[0, 1)` (clamped into it).
    pub fn backoff(self, attempt: u32, base: Duration, cap: Duration, previous: Option<Duration>, u: f64) -> Duration {
        let u = if u.is_finite() { u.clamp(0.0, MAX_UNIT) } else { 0.0 };
        let capped = exponential(base, attempt).min(cap);
        let pause = match self {
            // Below one base even where rounding to nanoseconds would reach it.
            Jitter::Additive => exponential(base, attempt).saturating_add(base.mul_f64(u).min(base.saturating_sub(Duration::from_nanos(1)))),
            Jitter::None => capped,
            Jitter::Full => capped.mul_f64(u),
            Jitter::Equal => capped.mul_f64(0.5 + u / 2.0),
            Jitter::Decorrelated => {
                let previous = previous.unwrap_or(base).max(base).min(cap);
                let spread = previous.saturating_mul(3).saturating_sub(base);
                base.saturating_add(spread.mul_f64(u))
            }
        };
        pause.min(cap)
    }
}

impl fmt::Display for Jitter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Jitter {
    type Err = String;

    fn from_str(s: &str) -> Result<Jitter, String> {
        Jitter::ALL.into_iter().find(|j| j.as_str() == s).ok_or_else(|| {
            let names: Vec<&str> = Jitter::ALL.iter().map(|j| j.as_str()).collect();
            format!("'{s}' is not a jitter shape; use one of {}", names.join(", "))
        })
    }
}

/// The largest `u` kept: just below one, so `[0, 1)` stays half-open.
const MAX_UNIT: f64 = 1.0 - f64::EPSILON;

/// No pause is longer than a day (the longest allowed budget).
pub const MAX_BACKOFF: Duration = Duration::from_secs(86_400);

/// `base × 2^(attempt−1)`, at most [`MAX_BACKOFF`].
pub fn exponential(base: Duration, attempt: u32) -> Duration {
    // 2^40 × the smallest base (1 ms) is already far past the cap.
    let exponent = attempt.saturating_sub(1).min(40);
    let nanos = base.as_nanos() << exponent;
    match u64::try_from(nanos) {
        Ok(n) if nanos < MAX_BACKOFF.as_nanos() => Duration::from_nanos(n),
        _ => MAX_BACKOFF,
    }
}

/// One uniform draw in `[0, 1)`.
pub fn draw_unit(rng: &mut dyn RngCore) -> f64 {
    rng.random::<f64>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    /// VTEX's worked formula, `Math.floor(min(maxDelay, baseDelay × 2^attempt) ×
    /// (0.5 + random × 0.5))` with base 1 s and cap 60 s, for its 0-based
    /// `attempt` and `random` in [0, 1): the `equal` shape at `n = attempt + 1`
    /// and `u = random`. VTEX's comments: attempt 0 ≈ 500–1000 ms … attempt 4
    /// ≈ 8000–16000 ms; from attempt 6 the cap holds it at 30–60 s.
    #[test]
    fn the_equal_shape_reproduces_the_vtex_formula() {
        let cases: [(u32, f64, u64); 12] = [
            (0, 0.0, 500),
            (0, 0.5, 750),
            (0, 0.9999, 999),
            (1, 0.0, 1_000),
            (1, 0.25, 1_250),
            (2, 0.5, 3_000),
            (3, 0.75, 7_000),
            (4, 0.0, 8_000),
            (4, 0.9999, 15_999),
            (5, 0.5, 24_000),
            (6, 0.0, 30_000),
            (9, 0.5, 45_000),
        ];
        for (attempt, random, want_ms) in cases {
            let vtex = (MS(1_000 << attempt.min(20)).min(MS(60_000)).as_millis() as f64 * (0.5 + random * 0.5)).floor() as u64;
            assert_eq!(vtex, want_ms, "the table itself: attempt {attempt}, random {random}");
            let ours = Jitter::Equal.backoff(attempt + 1, MS(1_000), MS(60_000), None, random);
            assert_eq!(ours.as_millis() as u64, want_ms, "attempt {attempt}, random {random}: {ours:?}");
        }
    }

    #[test]
    fn additive_is_the_default_policys_base_times_two_to_the_n_plus_up_to_one_base() {
        let p = |n, u| Jitter::Additive.backoff(n, MS(500), MAX_BACKOFF, None, u);
        assert_eq!(p(1, 0.0), MS(500));
        assert_eq!(p(2, 0.25), MS(1_125));
        assert_eq!(p(3, 0.5), MS(2_250));
        assert!(p(3, 1.0) < MS(2_500), "u is kept below one");
    }

    #[test]
    fn names_round_trip_and_unknown_ones_are_refused_with_the_choices() {
        for j in Jitter::ALL {
            assert_eq!(j.as_str().parse::<Jitter>(), Ok(j));
            assert_eq!(serde_json::to_value(j).expect("json"), serde_json::json!(j.as_str()));
        }
        let err = "gaussian".parse::<Jitter>().expect_err("unknown");
        assert!(err.contains("additive, none, full, equal, decorrelated"), "{err}");
    }

    /// Every pause of one shape for attempts 1..=n, drawing from `rng`,
    /// feeding each pause back as `previous`.
    fn sequence(j: Jitter, base: Duration, cap: Duration, n: u32, rng: &mut rand::rngs::StdRng) -> Vec<Duration> {
        let mut previous = None;
        (1..=n)
            .map(|attempt| {
                let d = j.backoff(attempt, base, cap, previous, draw_unit(rng));
                previous = Some(d);
                d
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Each shape's pause stays in its documented band and under the cap.
        #[test]
        fn every_shape_stays_within_its_bounds_and_the_cap(
            base_ms in 1u64..5_000, cap_factor in 1u64..200, attempt in 1u32..30, u in 0.0f64..1.0, prev_ms in 0u64..1_000_000,
        ) {
            let (base, cap) = (MS(base_ms), MS(base_ms * cap_factor));
            let e = exponential(base, attempt);
            let c = e.min(cap);
            let previous = MS(prev_ms);
            for j in Jitter::ALL {
                let d = j.backoff(attempt, base, cap, Some(previous), u);
                prop_assert!(d <= cap, "{j}: {d:?} over the cap {cap:?}");
                match j {
                    Jitter::Additive => {
                        prop_assert!(d >= c, "{j}: {d:?} < {c:?}");
                        prop_assert!(d <= (e + base).min(cap));
                    }
                    Jitter::None => prop_assert_eq!(d, c),
                    Jitter::Full => prop_assert!(d <= c),
                    Jitter::Equal => prop_assert!(d >= c / 2 && d <= c, "{j}: {d:?} outside [{:?}, {c:?}]", c / 2),
                    Jitter::Decorrelated => {
                        let prev = previous.max(base).min(cap);
                        prop_assert!(d >= base.min(cap), "{j}: {d:?} under the base");
                        prop_assert!(d <= (prev * 3).min(cap), "{j}: {d:?} over three times {prev:?}");
                    }
                }
            }
        }

        /// For one draw, a later attempt never gets a shorter pause, except
        /// for `decorrelated`, whose pause depends on the one before.
        #[test]
        fn for_a_fixed_draw_pauses_never_shrink_with_the_attempt(
            base_ms in 1u64..5_000, cap_factor in 1u64..200, attempt in 1u32..40, u in 0.0f64..1.0,
        ) {
            let (base, cap) = (MS(base_ms), MS(base_ms * cap_factor));
            for j in [Jitter::Additive, Jitter::None, Jitter::Full, Jitter::Equal] {
                prop_assert!(j.backoff(attempt + 1, base, cap, None, u) >= j.backoff(attempt, base, cap, None, u), "{j}");
            }
        }
    }

    /// The mean pause never shrinks from one attempt to the next, for every
    /// shape (decorrelated included, fed its own previous pauses), until the
    /// cap holds it. Means over 4000 seeded sequences; a drop is flagged only
    /// beyond five standard errors of the difference, so the test does not
    /// flake while a real decrease (a wrong formula) is far beyond that.
    #[test]
    fn the_mean_pause_is_monotone_non_decreasing_until_the_cap() {
        const RUNS: usize = 4_000;
        const ATTEMPTS: u32 = 12;
        for (base, cap) in [(MS(100), MS(60_000)), (MS(1_000), MS(60_000)), (MS(500), MS(3_000))] {
            for j in Jitter::ALL {
                let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
                let runs: Vec<Vec<f64>> = (0..RUNS)
                    .map(|_| sequence(j, base, cap, ATTEMPTS, &mut rng).iter().map(|d| d.as_secs_f64()).collect())
                    .collect();
                let stats = |n: usize| {
                    let xs: Vec<f64> = runs.iter().map(|r| r[n]).collect();
                    let mean = xs.iter().sum::<f64>() / RUNS as f64;
                    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (RUNS - 1) as f64;
                    (mean, var / RUNS as f64)
                };
                for n in 1..ATTEMPTS as usize {
                    let ((m0, se0), (m1, se1)) = (stats(n - 1), stats(n));
                    let tolerance = 5.0 * (se0 + se1).sqrt();
                    assert!(m1 >= m0 - tolerance, "{j}, base {base:?}, cap {cap:?}: mean at attempt {} is {m1} < {m0} at {}", n + 1, n);
                    assert!(m1 <= cap.as_secs_f64() + 1e-9, "{j}: mean {m1} over the cap");
                }
                // Until the cap binds, the mean really grows (not merely stays).
                let (first, second) = (stats(0).0, stats(1).0);
                if exponential(base, 2) < cap && j != Jitter::None {
                    assert!(second > first, "{j}: the mean did not grow from attempt 1 ({first}) to 2 ({second})");
                }
            }
        }
    }
}
