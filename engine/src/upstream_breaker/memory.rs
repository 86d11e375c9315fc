//! In-process breaker store for the embedded deployment and for tests.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use super::{BreakerError, BreakerKey, BreakerState, BreakerStore, Loaded};
use crate::clock::{SharedClock, Timestamp};

#[derive(Debug)]
struct Entry {
    state: BreakerState,
    version: u64,
    expires_at: Timestamp,
}

/// UpstreamBreaker states in a map, with the engine's clock for `now` and expiry.
#[derive(Debug)]
pub struct MemoryBreakerStore {
    clock: SharedClock,
    entries: Mutex<HashMap<BreakerKey, Entry>>,
}

impl MemoryBreakerStore {
    pub fn new(clock: SharedClock) -> Self {
        MemoryBreakerStore { clock, entries: Mutex::new(HashMap::new()) }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<BreakerKey, Entry>> {
        // A panic while holding the lock leaves whole entries behind (every
        // write replaces one entry), so the map is still consistent.
        self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[async_trait::async_trait]
impl BreakerStore for MemoryBreakerStore {
    async fn load(&self, key: &BreakerKey) -> Result<Loaded, BreakerError> {
        let now = self.clock.now();
        let mut entries = self.entries();
        if entries.get(key).is_some_and(|e| e.expires_at <= now) {
            entries.remove(key);
        }
        Ok(match entries.get(key) {
            Some(e) => Loaded { state: e.state, version: e.version, now },
            None => Loaded { state: BreakerState::default(), version: 0, now },
        })
    }

    async fn compare_and_set(
        &self,
        key: &BreakerKey,
        version: u64,
        state: &BreakerState,
        ttl: Duration,
    ) -> Result<bool, BreakerError> {
        let now = self.clock.now();
        let mut entries = self.entries();
        let current = entries.get(key).filter(|e| e.expires_at > now).map_or(0, |e| e.version);
        if current != version {
            return Ok(false);
        }
        entries.insert(key.clone(), Entry { state: *state, version: version + 1, expires_at: now + ttl });
        Ok(true)
    }

    async fn list(&self) -> Result<(Vec<(BreakerKey, BreakerState)>, Timestamp), BreakerError> {
        let now = self.clock.now();
        let mut entries = self.entries();
        entries.retain(|_, e| e.expires_at > now);
        Ok((entries.iter().map(|(k, e)| (k.clone(), e.state)).collect(), now))
    }

    async fn reset(&self, key: &BreakerKey) -> Result<(), BreakerError> {
        self.entries().remove(key);
        Ok(())
    }
}
