//! One log line per period for a fault that repeats on every request or step.
//!
//! While the database is unreachable, every intake call and every worker step
//! fails the same way. An error line per failure would bury the log (and the
//! disk) under thousands of identical lines a second; operators of a
//! restarting database want to see that it is down, how often it bit, and
//! when it came back. [`LogThrottle::hit`] says whether to write now and how
//! many like it were kept quiet since the last line.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a repeating fault is written to the log at most.
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(10);

/// Lets one line through per `period`; counts the rest.
#[derive(Debug)]
pub struct LogThrottle {
    period: Duration,
    state: Mutex<ThrottleState>,
}

#[derive(Debug, Default)]
struct ThrottleState {
    last: Option<Instant>,
    quiet: u64,
}

impl LogThrottle {
    pub const fn new(period: Duration) -> LogThrottle {
        LogThrottle { period, state: Mutex::new(ThrottleState { last: None, quiet: 0 }) }
    }

    /// One more occurrence now. `Some(n)` when it is to be written, `n` being
    /// how many were kept quiet since the last line; `None` to stay quiet.
    pub fn hit(&self) -> Option<u64> {
        self.hit_at(Instant::now())
    }

    /// Warn `what: err` unless a line was written within the period.
    pub fn warn(&self, what: &str, err: &dyn std::error::Error) {
        if let Some(quiet) = self.hit() {
            tracing::warn!(error = error_chain(err), similar_since_last = quiet, "{what}");
        }
    }

    /// [`LogThrottle::hit`] at a given instant (tests).
    pub fn hit_at(&self, now: Instant) -> Option<u64> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match s.last {
            Some(last) if now.saturating_duration_since(last) < self.period => {
                s.quiet += 1;
                None
            }
            _ => {
                s.last = Some(now);
                Some(std::mem::take(&mut s.quiet))
            }
        }
    }
}

/// Log that the database could not be reached, at most once per
/// [`DEFAULT_PERIOD`] for the whole process, as a warning: the fault is
/// outside Sluice, callers were told to retry, and nothing was lost.
pub fn database_unreachable(context: &str, err: &dyn std::error::Error) {
    static THROTTLE: LogThrottle = LogThrottle::new(DEFAULT_PERIOD);
    THROTTLE.warn(&format!("{context}: the database is unreachable; retrying"), err);
}

/// `err` and its causes, `: `-separated.
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_period_and_the_quiet_ones_are_counted() {
        let t = LogThrottle::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(t.hit_at(t0), Some(0), "the first occurrence is written");
        for ms in [1, 500, 9_999] {
            assert_eq!(t.hit_at(t0 + Duration::from_millis(ms)), None, "quiet within the period ({ms} ms)");
        }
        assert_eq!(t.hit_at(t0 + Duration::from_secs(10)), Some(3), "the next line says how many were kept quiet");
        assert_eq!(t.hit_at(t0 + Duration::from_secs(11)), None);
        assert_eq!(t.hit_at(t0 + Duration::from_secs(25)), Some(1));
    }
}
