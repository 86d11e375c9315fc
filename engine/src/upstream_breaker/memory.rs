//! In-process breaker store for the embedded deployment and for tests.
//!
//! Entries expire like Redis keys (the TTL given with each write). Expired
//! entries are dropped when read, and swept from the whole map whenever it
//! has doubled since the last sweep, so accounts that stop calling are
//! forgotten even if nobody opens the Breakers page.

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

/// The map is swept when it holds this many entries more than after the
/// last sweep (and at least this many).
const SWEEP_MIN: usize = 1024;

#[derive(Debug, Default)]
struct Entries {
    map: HashMap<BreakerKey, Entry>,
    /// Sweep expired entries when the map grows past this.
    sweep_at: usize,
}

impl std::ops::Deref for Entries {
    type Target = HashMap<BreakerKey, Entry>;
    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl std::ops::DerefMut for Entries {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.map
    }
}

/// Upstream breaker states in a map, with the engine's clock for `now` and expiry.
#[derive(Debug)]
pub struct MemoryBreakerStore {
    clock: SharedClock,
    entries: Mutex<Entries>,
}

impl MemoryBreakerStore {
    pub fn new(clock: SharedClock) -> Self {
        MemoryBreakerStore { clock, entries: Mutex::new(Entries { map: HashMap::new(), sweep_at: SWEEP_MIN }) }
    }

    /// How many entries the map holds, expired ones included (for tests of
    /// the forgetting rule).
    pub fn held(&self) -> usize {
        self.entries().len()
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
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
        if entries.len() >= entries.sweep_at {
            entries.retain(|_, e| e.expires_at > now);
            entries.sweep_at = (entries.len() * 2).max(SWEEP_MIN);
        }
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
