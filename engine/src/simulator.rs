//! The schedule simulator: when does each request of a
//! ready queue get its permit, and how many of them would the upstream refuse?
//!
//! Time starts at "second zero" (the Unix epoch, so fixed windows start at
//! multiples of their length). All workers and the whole queue are ready after
//! a common initial pause. Each request goes to the worker that can send it
//! soonest (ties: the lower worker number). Workers either keep their own local
//! limit (the classic failure: four workers with 3 per 10 s each send 12 into
//! one window) or share one limiter. The permits are then replayed against the
//! upstream limit, in time order, to count the requests it would refuse
//! (refused requests do not spend upstream quota). The simulator computes
//! permit times, not response times: no latency, no connections.
//!
//! It reuses the limiter's pure decision code, so what it shows is what the
//! limiter does.
//!
//! Two lanes: every n-th request of the queue may be *important* (a price
//! correction among routine stock syncs). Without lanes the shared limiter
//! books the queue in order, so the first important request waits for every
//! routine one ahead of it. With lanes (shared limiter only) the important
//! requests ask as `high` and the routine ones as `low`: low requests take a
//! permit only when one is free now (a refused one asks again at its
//! `retry_after`), so they never hold the slots the important ones need. The
//! report gives the first important permit both ways.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::quota::decision::{decide, BucketState, Decision};
use crate::quota::lane::Priority;
use crate::quota::rule::{Limit, RuleError};

/// How the workers are limited.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode", content = "limit")]
pub enum WorkerMode {
    /// Every worker keeps this limit on its own.
    LocalLimits(Limit),
    /// All workers share one limiter with this limit.
    SharedLimiter(Limit),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimulationInput {
    /// The upstream's limit (fixed window from second zero, or token bucket).
    pub upstream: Limit,
    pub workers: u32,
    pub mode: WorkerMode,
    /// Requests ready at the start.
    pub queue: u32,
    /// Common pause before any worker starts.
    pub initial_pause: Duration,
    /// Every n-th request of the queue (the n-th, the 2n-th, …) is
    /// important; 0: none is.
    #[serde(default)]
    pub important_every: u32,
    /// Important requests ask as `high`, the others as `low` (needs the
    /// shared limiter); otherwise every request is `normal`.
    #[serde(default)]
    pub lanes: bool,
}

impl SimulationInput {
    fn important(&self, request: u32) -> bool {
        self.important_every > 0 && (request + 1) % self.important_every == 0
    }
}

/// One permit of the schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimulatedPermit {
    /// 0-based position in the queue.
    pub request: u32,
    /// 0-based worker number.
    pub worker: u32,
    /// Offset from second zero.
    pub at: Duration,
    /// The upstream would refuse it (429).
    pub over_limit: bool,
    /// One of the queue's important requests.
    pub important: bool,
}

/// When the first important request gets its permit, from second zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FirstImportant {
    /// Every request `normal`: the queue is booked in order.
    pub without_lanes: Duration,
    /// Important requests `high`, the others `low`; `None` with local limits.
    pub with_lanes: Option<Duration>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimulationReport {
    /// In queue order.
    pub permits: Vec<SimulatedPermit>,
    pub over_limit: u32,
    /// From second zero to the last permit (initial pause included): how stale
    /// the last record is when its update goes out.
    pub drain_time: Duration,
    /// `None` when no request is important.
    pub first_important: Option<FirstImportant>,
}

impl SimulationReport {
    /// The most permits issued inside one window of length `window`, windows
    /// counted from second zero: 12 where the upstream allows 3, in the four-workers example.
    pub fn busiest_window(&self, window: Duration) -> u32 {
        let width = window.as_micros().max(1);
        let mut per_window: std::collections::HashMap<u128, u32> = std::collections::HashMap::new();
        for p in &self.permits {
            *per_window.entry(p.at.as_micros() / width).or_default() += 1;
        }
        per_window.into_values().max().unwrap_or(0)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimulationError {
    #[error("workers: must be between 1 and 1000")]
    Workers,
    #[error("queue: must be between 0 and 100000")]
    Queue,
    #[error("upstream {0}")]
    Upstream(#[source] RuleError),
    #[error("worker limit {0}")]
    WorkerLimit(#[source] RuleError),
    #[error("lanes: need the shared limiter (local limits know no lanes)")]
    LanesNeedSharedLimiter,
}

/// Simulate the schedule. Pure: same input, same report.
pub fn simulate(input: &SimulationInput) -> Result<SimulationReport, SimulationError> {
    if !(1..=1000).contains(&input.workers) {
        return Err(SimulationError::Workers);
    }
    if input.queue > 100_000 {
        return Err(SimulationError::Queue);
    }
    input.upstream.validate().map_err(SimulationError::Upstream)?;
    let (worker_limit, shared) = match input.mode {
        WorkerMode::LocalLimits(l) => (l, false),
        WorkerMode::SharedLimiter(l) => (l, true),
    };
    worker_limit.validate().map_err(SimulationError::WorkerLimit)?;
    if input.lanes && !shared {
        return Err(SimulationError::LanesNeedSharedLimiter);
    }

    let mut permits = if input.lanes {
        lanes_schedule(input, &worker_limit)
    } else {
        in_order_schedule(input, &worker_limit, shared)
    };
    // The schedule shown, and the other one for comparison.
    let first = |permits: &[SimulatedPermit]| permits.iter().filter(|p| p.important).map(|p| p.at).min();
    let first_important = first(&permits).map(|shown| FirstImportant {
        without_lanes: match input.lanes {
            true => first(&in_order_schedule(input, &worker_limit, shared)).unwrap_or(shown),
            false => shown,
        },
        with_lanes: match (input.lanes, shared) {
            (true, _) => Some(shown),
            (false, true) => first(&lanes_schedule(input, &worker_limit)),
            (false, false) => None,
        },
    });

    // Replay against the upstream in time order (stable: queue order on ties).
    let mut order: Vec<usize> = (0..permits.len()).collect();
    order.sort_by_key(|&i| permits[i].at);
    let mut upstream = BucketState::default();
    let mut over_limit = 0;
    for i in order {
        let at = Timestamp::EPOCH + permits[i].at;
        if let Decision::Refused { .. } = decide(&mut upstream, at, &input.upstream, 1, Duration::ZERO) {
            permits[i].over_limit = true;
            over_limit += 1;
        }
    }
    let drain_time = permits.iter().map(|p| p.at).max().unwrap_or(input.initial_pause);
    Ok(SimulationReport { permits, over_limit, drain_time, first_important })
}

/// Longer than any wait a validated limit can book: "no ceiling".
const FOREVER: Duration = Duration::from_secs(u32::MAX as u64);

/// Every request `normal`, booked in queue order: with a shared limiter the
/// workers take turns and the limiter alone decides the time; with local
/// limits each request goes to the worker that can send it soonest.
fn in_order_schedule(input: &SimulationInput, worker_limit: &Limit, shared: bool) -> Vec<SimulatedPermit> {
    let start = Timestamp::EPOCH + input.initial_pause;
    let mut states = vec![BucketState::default(); if shared { 1 } else { input.workers as usize }];
    let mut permits = Vec::with_capacity(input.queue as usize);
    for request in 0..input.queue {
        let (worker, wait) = if shared {
            (request % input.workers, granted(decide(&mut states[0], start, worker_limit, 1, FOREVER)))
        } else {
            let mut best: Option<(u32, Duration)> = None;
            for (w, state) in states.iter().enumerate() {
                let wait = granted(decide(&mut state.clone(), start, worker_limit, 1, FOREVER));
                if best.is_none_or(|(_, b)| wait < b) {
                    best = Some((w as u32, wait));
                }
            }
            let (w, _) = best.unwrap_or((0, Duration::ZERO));
            (w, granted(decide(&mut states[w as usize], start, worker_limit, 1, FOREVER)))
        };
        let at = input.initial_pause + wait;
        permits.push(SimulatedPermit { request, worker, at, over_limit: false, important: input.important(request) });
    }
    permits
}

/// Important requests `high` (booked at once, in queue order), the others
/// `low`: each asks when the previous one got its permit and, refused, again
/// at its `retry_after`, so it takes only slots that are free at that moment.
fn lanes_schedule(input: &SimulationInput, limit: &Limit) -> Vec<SimulatedPermit> {
    let start = Timestamp::EPOCH + input.initial_pause;
    let mut state = BucketState::default();
    let mut at = vec![Duration::ZERO; input.queue as usize];
    for request in (0..input.queue).filter(|&r| input.important(r)) {
        at[request as usize] = granted(Priority::High.decide(&mut state, start, limit, 1, FOREVER));
    }
    let mut now = start;
    for request in (0..input.queue).filter(|&r| !input.important(r)) {
        loop {
            match Priority::Low.decide(&mut state, now, limit, 1, FOREVER) {
                Decision::Granted { .. } => break,
                Decision::Refused { retry_after } => now = now + retry_after,
            }
        }
        at[request as usize] = now.saturating_duration_since(start);
    }
    (0..input.queue)
        .map(|request| SimulatedPermit {
            request,
            worker: request % input.workers,
            at: input.initial_pause + at[request as usize],
            over_limit: false,
            important: input.important(request),
        })
        .collect()
}

fn granted(d: Decision) -> Duration {
    match d {
        Decision::Granted { wait } => wait,
        // Unreachable with an unbounded ceiling; a refusal would mean "never".
        Decision::Refused { retry_after } => retry_after,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEN: Duration = Duration::from_secs(10);

    fn at_secs(report: &SimulationReport) -> Vec<u64> {
        report.permits.iter().map(|p| p.at.as_secs()).collect()
    }

    /// Four workers with a local limit of 3 per 10 s each, 12 requests ready.
    fn four_local_workers() -> SimulationInput {
        SimulationInput {
            upstream: Limit::fixed_window(3, TEN),
            workers: 4,
            mode: WorkerMode::LocalLimits(Limit::fixed_window(3, TEN)),
            queue: 12,
            initial_pause: Duration::ZERO,
            important_every: 0,
            lanes: false,
        }
    }

    #[test]
    fn four_workers_with_local_limits_send_twelve_into_one_window_of_three() {
        let input = four_local_workers();
        let report = simulate(&input).expect("valid input");
        assert_eq!(at_secs(&report), vec![0; 12]);
        assert_eq!(report.over_limit, 9);
        assert_eq!(report.busiest_window(TEN), 12);
        assert_eq!(report.drain_time, Duration::ZERO);
        let per_worker: Vec<usize> = (0..4).map(|w| report.permits.iter().filter(|p| p.worker == w).count()).collect();
        assert_eq!(per_worker, vec![3, 3, 3, 3]);
    }

    #[test]
    fn the_shared_limiter_spreads_the_queue_over_windows_from_second_zero() {
        let input = SimulationInput {
            upstream: Limit::fixed_window(3, TEN),
            workers: 4,
            mode: WorkerMode::SharedLimiter(Limit::fixed_window(3, TEN)),
            queue: 12,
            initial_pause: Duration::from_secs(4),
            important_every: 0,
            lanes: false,
        };
        let report = simulate(&input).expect("valid input");
        // The pause ends at 4 s, inside the first window, which still has 3 slots.
        assert_eq!(at_secs(&report), vec![4, 4, 4, 10, 10, 10, 20, 20, 20, 30, 30, 30]);
        assert_eq!(report.over_limit, 0);
        assert_eq!(report.busiest_window(TEN), 3);
        assert_eq!(report.drain_time, Duration::from_secs(30));
    }

    #[test]
    fn the_token_bucket_is_modelled_too() {
        let upstream = Limit::token_bucket(1, Duration::from_secs(1), 3);
        let input = SimulationInput {
            upstream,
            workers: 2,
            mode: WorkerMode::LocalLimits(upstream),
            queue: 6,
            initial_pause: Duration::ZERO,
            important_every: 0,
            lanes: false,
        };
        let report = simulate(&input).expect("valid input");
        assert_eq!(at_secs(&report), vec![0, 0, 0, 0, 0, 0]);
        assert_eq!(report.over_limit, 3);
        let shared = simulate(&SimulationInput { mode: WorkerMode::SharedLimiter(upstream), ..input }).expect("valid");
        assert_eq!(at_secs(&shared), vec![0, 0, 0, 1, 2, 3]);
        assert_eq!(shared.over_limit, 0);
    }

    #[test]
    fn with_lanes_the_first_important_request_gets_the_next_free_slot() {
        // 40 per second (one every 25 ms), 8 workers, 10 000 routine syncs with
        // every 1 000th an important price correction.
        let limit = Limit::token_bucket(40, Duration::from_secs(1), 40);
        let input = SimulationInput {
            upstream: limit,
            workers: 8,
            mode: WorkerMode::SharedLimiter(limit),
            queue: 10_000,
            initial_pause: Duration::ZERO,
            important_every: 1000,
            lanes: false,
        };
        let in_order = simulate(&input).expect("valid input");
        // Request 999 is booked behind 999 others: 40 at once, then one every 25 ms.
        let expected = Duration::from_millis(25 * (999 - 39));
        assert_eq!(in_order.first_important, Some(FirstImportant { without_lanes: expected, with_lanes: Some(Duration::ZERO) }));

        let lanes = simulate(&SimulationInput { lanes: true, ..input }).expect("valid input");
        assert_eq!(lanes.first_important, in_order.first_important);
        let important: Vec<Duration> = lanes.permits.iter().filter(|p| p.important).map(|p| p.at).collect();
        assert_eq!(important.len(), 10);
        assert!(important.iter().all(|&at| at == Duration::ZERO), "{important:?}");
        // Lanes change the order, not the total: nothing over the limit, and the
        // queue drains one emission interval later (low leaves the burst's last token).
        assert_eq!((lanes.over_limit, lanes.drain_time), (0, in_order.drain_time + Duration::from_millis(25)));
    }

    #[test]
    fn lanes_need_the_shared_limiter() {
        let input = SimulationInput { important_every: 4, lanes: true, ..four_local_workers() };
        assert_eq!(simulate(&input), Err(SimulationError::LanesNeedSharedLimiter));
        let report = simulate(&SimulationInput { lanes: false, ..input }).expect("valid input");
        assert_eq!(report.first_important, Some(FirstImportant { without_lanes: Duration::ZERO, with_lanes: None }));
    }

    #[test]
    fn bad_input_gets_a_clear_error() {
        let input = SimulationInput {
            upstream: Limit::fixed_window(0, TEN),
            workers: 4,
            mode: WorkerMode::SharedLimiter(Limit::fixed_window(3, TEN)),
            queue: 12,
            initial_pause: Duration::ZERO,
            important_every: 0,
            lanes: false,
        };
        assert_eq!(simulate(&input), Err(SimulationError::Upstream(RuleError::Tokens)));
        assert_eq!(simulate(&SimulationInput { workers: 0, ..input }), Err(SimulationError::Workers));
    }
}
