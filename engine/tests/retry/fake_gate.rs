//! A recording stand-in for the limiter: grants every permit at once (or
//! refuses, when told to) and remembers every call.

use std::sync::Mutex;
use std::time::Duration;

use http::HeaderMap;
use sluice_engine::retry::{CallTarget, GateError, GatePermit, GateRefusal, QuotaGate};

/// Which acquire (1-based) to refuse, and with what.
type Refusal = Option<(usize, fn() -> GateRefusal)>;

#[derive(Debug, Default)]
pub struct FakeGate {
    pub refill_one_token: Duration,
    pub wait_ceiling: Duration,
    pub log: Mutex<Vec<String>>,
    pub penalties: Mutex<Vec<Option<Duration>>>,
    pub observed: Mutex<Vec<HeaderMap>>,
    /// Refuse the n-th acquire (1-based) with this reason.
    pub refuse_at: Mutex<Refusal>,
}

impl FakeGate {
    pub fn new(refill_one_token: Duration, wait_ceiling: Duration) -> Self {
        FakeGate { refill_one_token, wait_ceiling, ..FakeGate::default() }
    }

    pub fn refusing_at(self, n: usize, reason: fn() -> GateRefusal) -> Self {
        *self.refuse_at.lock().expect("lock") = Some((n, reason));
        self
    }

    pub fn log(&self) -> Vec<String> {
        self.log.lock().expect("lock").clone()
    }

    pub fn count(&self, what: &str) -> usize {
        self.log().iter().filter(|l| l.as_str() == what).count()
    }

    pub fn penalties(&self) -> Vec<Option<Duration>> {
        self.penalties.lock().expect("lock").clone()
    }
}

#[async_trait::async_trait]
impl QuotaGate for FakeGate {
    async fn acquire(&self, _target: &CallTarget, _max_wait: Option<Duration>) -> Result<GatePermit, GateRefusal> {
        let n = {
            let mut log = self.log.lock().expect("lock");
            log.push("acquire".into());
            log.iter().filter(|l| l.as_str() == "acquire").count()
        };
        if let Some((at, reason)) = *self.refuse_at.lock().expect("lock") {
            if at == n {
                return Err(reason());
            }
        }
        Ok(GatePermit {
            waited: Duration::ZERO,
            refill_one_token: self.refill_one_token,
            wait_ceiling: self.wait_ceiling,
            lease: None,
        })
    }

    async fn release(&self, _target: &CallTarget, _permit: &GatePermit) -> Result<(), GateError> {
        self.log.lock().expect("lock").push("release".into());
        Ok(())
    }

    async fn penalize(&self, _target: &CallTarget, retry_after: Option<Duration>) -> Result<(), GateError> {
        self.log.lock().expect("lock").push("penalize".into());
        self.penalties.lock().expect("lock").push(retry_after);
        Ok(())
    }

    async fn observe(&self, _target: &CallTarget, headers: &HeaderMap) -> Result<(), GateError> {
        self.log.lock().expect("lock").push("observe".into());
        self.observed.lock().expect("lock").push(headers.clone());
        Ok(())
    }

    async fn record_breaker_refusal(&self, _target: &CallTarget) -> Result<(), GateError> {
        self.log.lock().expect("lock").push("breaker_refusal".into());
        Ok(())
    }
}
