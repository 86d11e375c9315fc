//! Time for the engine: one [`Clock`] trait, a system clock for production and
//! a manual clock that tests advance.
//!
//! Instants are [`Timestamp`]s counted in microseconds since the Unix epoch
//! (never since process start), so state written by one process means the same
//! thing to every other process that reads it.
//!
//! The clock also owns sleeping. Code that must wait (a retry pause, a booked
//! reservation) calls [`Clock::sleep`]; on [`ManualClock`] that advances time
//! at once and records the pause, so scenario tests run instantly and can
//! assert on every wait.

use std::fmt;
use std::future::Future;
use std::ops::{Add, Sub};
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::OnceLock;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// A point in time: microseconds since 1970-01-01T00:00:00Z.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(i64);

impl Timestamp {
    pub const EPOCH: Timestamp = Timestamp(0);

    pub const fn from_micros(micros: i64) -> Self {
        Timestamp(micros)
    }

    pub const fn from_millis(millis: i64) -> Self {
        Timestamp(millis.saturating_mul(1_000))
    }

    pub const fn from_secs(secs: i64) -> Self {
        Timestamp(secs.saturating_mul(1_000_000))
    }

    pub const fn as_micros(self) -> i64 {
        self.0
    }

    /// Milliseconds since the epoch, rounded down.
    pub const fn as_millis(self) -> i64 {
        self.0.div_euclid(1_000)
    }

    /// Whole seconds since the epoch, rounded down.
    pub const fn as_secs(self) -> i64 {
        self.0.div_euclid(1_000_000)
    }

    /// How long after `earlier` this instant is; zero if it is not after it.
    pub fn saturating_duration_since(self, earlier: Timestamp) -> Duration {
        let micros = self.0.saturating_sub(earlier.0);
        Duration::from_micros(u64::try_from(micros).unwrap_or(0))
    }

    pub fn to_system_time(self) -> SystemTime {
        if self.0 >= 0 {
            UNIX_EPOCH + Duration::from_micros(self.0.unsigned_abs())
        } else {
            UNIX_EPOCH - Duration::from_micros(self.0.unsigned_abs())
        }
    }

    pub fn from_system_time(t: SystemTime) -> Self {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => Timestamp(duration_micros(d)),
            Err(e) => Timestamp(-duration_micros(e.duration())),
        }
    }
}

/// A duration in whole microseconds, saturating at `i64::MAX`.
pub fn duration_micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

impl Add<Duration> for Timestamp {
    type Output = Timestamp;
    fn add(self, rhs: Duration) -> Timestamp {
        Timestamp(self.0.saturating_add(duration_micros(rhs)))
    }
}

impl Sub<Duration> for Timestamp {
    type Output = Timestamp;
    fn sub(self, rhs: Duration) -> Timestamp {
        Timestamp(self.0.saturating_sub(duration_micros(rhs)))
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Timestamp({}.{:06})", self.0.div_euclid(1_000_000), self.0.rem_euclid(1_000_000))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&httpdate::fmt_http_date(self.to_system_time()), f)
    }
}

/// A boxed future returned by [`Clock::sleep`].
pub type SleepFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// Where the engine gets the time from, and how it waits.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current instant. Read it once per decision and pass it down.
    fn now(&self) -> Timestamp;

    /// Wait for `duration`. On the system clock this is a tokio timer; on the
    /// manual clock it advances time at once.
    fn sleep(&self, duration: Duration) -> SleepFuture<'_>;
}

/// A shared clock handle.
pub type SharedClock = Arc<dyn Clock>;

/// Wall-clock time and tokio timers.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    /// The wall clock, read cheaply: see [`FastWall`].
    fn now(&self) -> Timestamp {
        static FAST_WALL: OnceLock<FastWall> = OnceLock::new();
        Timestamp::from_micros(FAST_WALL.get_or_init(FastWall::new).now_micros())
    }

    fn sleep(&self, duration: Duration) -> SleepFuture<'_> {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// How long [`FastWall`] extrapolates from the CPU's counter before it reads
/// the operating system's wall clock again.
const REANCHOR_MICROS: i64 = 1_000;

/// The wall clock at the cost of a time-stamp-counter read.
///
/// Every limiter decision reads the clock, and `clock_gettime` was a third of
/// an in-memory decision's time. This reads the CPU's time-stamp counter
/// through `quanta` (a few nanoseconds; `quanta` falls back to the OS's
/// monotonic clock where the counter is not reliable) and adds the offset to
/// the wall clock measured at the last anchor. The anchor is renewed from
/// `SystemTime` at least every millisecond, so the result stays within a
/// millisecond's worth of counter drift (nanoseconds) of `SystemTime::now()`
/// and follows wall-clock steps (NTP, an operator) within a millisecond, as
/// reading `SystemTime` directly did. Like `SystemTime`, it is not monotonic
/// across such steps.
struct FastWall {
    clock: quanta::Clock,
    /// The counter's raw value when this was made.
    origin: u64,
    /// Wall-clock micros minus counter micros at the last anchor.
    offset: AtomicI64,
    /// Counter micros (since `origin`) at the last anchor.
    anchored: AtomicI64,
}

impl FastWall {
    fn new() -> FastWall {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        let wall = Timestamp::from_system_time(SystemTime::now()).as_micros();
        FastWall { clock, origin, offset: AtomicI64::new(wall), anchored: AtomicI64::new(0) }
    }

    fn now_micros(&self) -> i64 {
        // `raw` is one counter read; `delta_as_nanos` scales it (0 if the
        // counter reads below the origin, e.g. another core's counter lags).
        let nanos = self.clock.delta_as_nanos(self.origin, self.clock.raw());
        let mono = i64::try_from(nanos / 1_000).unwrap_or(i64::MAX);
        // Two threads may both re-anchor, or one may pair a new anchor time with
        // the previous offset: either way the value read is at most one
        // interval old, which is nanoseconds of drift.
        if mono.saturating_sub(self.anchored.load(Ordering::Relaxed)) >= REANCHOR_MICROS {
            let wall = Timestamp::from_system_time(SystemTime::now()).as_micros();
            self.offset.store(wall.saturating_sub(mono), Ordering::Relaxed);
            self.anchored.store(mono, Ordering::Relaxed);
            return wall;
        }
        mono.saturating_add(self.offset.load(Ordering::Relaxed))
    }
}

/// A clock that only moves when told to. `sleep` advances it by the requested
/// duration and records the pause so tests can assert on every wait.
#[derive(Debug, Default)]
pub struct ManualClock {
    micros: AtomicI64,
    sleeps: Mutex<Vec<Duration>>,
}

impl ManualClock {
    pub fn new(start: Timestamp) -> Self {
        ManualClock { micros: AtomicI64::new(start.as_micros()), sleeps: Mutex::new(Vec::new()) }
    }

    /// A manual clock starting at a fixed, round instant (2026-01-01T00:00:00Z)
    /// so that test output is stable and window alignment is easy to reason about.
    pub fn at_test_epoch() -> Self {
        ManualClock::new(Timestamp::from_secs(1_767_225_600))
    }

    pub fn advance(&self, by: Duration) {
        self.micros.fetch_add(duration_micros(by), Ordering::SeqCst);
    }

    pub fn set(&self, to: Timestamp) {
        self.micros.store(to.as_micros(), Ordering::SeqCst);
    }

    /// Every duration passed to `sleep` so far, in order.
    pub fn sleeps(&self) -> Vec<Duration> {
        self.sleeps.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.micros.load(Ordering::SeqCst))
    }

    fn sleep(&self, duration: Duration) -> SleepFuture<'_> {
        if let Ok(mut sleeps) = self.sleeps.lock() {
            sleeps.push(duration);
        }
        self.advance(duration);
        Box::pin(std::future::ready(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_convert_between_units_against_the_unix_epoch() {
        let t = Timestamp::from_millis(1_614_265_330_123);
        assert_eq!(t.as_secs(), 1_614_265_330);
        assert_eq!(t.as_millis(), 1_614_265_330_123);
        assert_eq!(t.as_micros(), 1_614_265_330_123_000);
        assert_eq!(Timestamp::from_system_time(t.to_system_time()), t);
    }

    #[test]
    fn duration_since_an_earlier_instant_never_goes_negative() {
        let a = Timestamp::from_secs(10);
        let b = a + Duration::from_millis(1500);
        assert_eq!(b.saturating_duration_since(a), Duration::from_millis(1500));
        assert_eq!(a.saturating_duration_since(b), Duration::ZERO);
    }

    #[tokio::test]
    async fn manual_clock_moves_only_when_told_and_sleep_advances_it() {
        let clock = ManualClock::new(Timestamp::from_secs(100));
        assert_eq!(clock.now(), Timestamp::from_secs(100));
        clock.advance(Duration::from_secs(2));
        assert_eq!(clock.now(), Timestamp::from_secs(102));
        clock.sleep(Duration::from_millis(250)).await;
        assert_eq!(clock.now(), Timestamp::from_millis(102_250));
        assert_eq!(clock.sleeps(), vec![Duration::from_millis(250)]);
    }

    #[test]
    fn system_clock_reads_time_since_the_epoch() {
        // 2020-01-01 as a floor: a clock counting from process start would fail.
        assert!(SystemClock.now() > Timestamp::from_secs(1_577_836_800));
    }

    #[test]
    fn the_system_clock_reads_what_the_os_wall_clock_reads() {
        // Long enough (thousands of OS clock reads) to cross several re-anchors.
        let slack = Duration::from_micros(100);
        for _ in 0..100_000 {
            let before = Timestamp::from_system_time(SystemTime::now());
            let now = SystemClock.now();
            let after = Timestamp::from_system_time(SystemTime::now());
            assert!(before - slack <= now && now <= after + slack, "{before:?} <= {now:?} <= {after:?}");
        }
    }
}
