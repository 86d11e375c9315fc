//! The Redis connection the quota and breaker stores share the shape of: one
//! node through a reconnecting `ConnectionManager`, or a Redis Cluster through
//! the cluster client, which routes every command (and every `EVALSHA`) to
//! the node owning its key's slot. Both stores hash-tag their keys by
//! account, so each script touches one slot.

#[cfg(feature = "testing")]
pub mod testing;

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, Value};

/// Settings of a deployment's Redis.
#[derive(Clone, Debug)]
pub struct RedisSettings {
    /// `redis://host:port` (one URL), or several for a cluster.
    pub urls: Vec<String>,
    pub cluster: bool,
    /// Key prefix (`SLUICE_REDIS_PREFIX`, default `sluice`).
    pub prefix: String,
    /// Deadline of one store call; an outage is detected within it.
    pub timeout: Duration,
    /// How long a quota bucket's statistics (and its index entry) outlive
    /// its last decision.
    pub idle_retention: Duration,
}

impl RedisSettings {
    pub fn single(url: &str, prefix: &str) -> RedisSettings {
        RedisSettings {
            urls: vec![url.to_owned()],
            cluster: false,
            prefix: prefix.to_owned(),
            timeout: Duration::from_millis(250),
            idle_retention: crate::quota::memory::DEFAULT_IDLE_RETENTION,
        }
    }
}

/// A connection to one node or to a cluster; cheap to clone.
#[derive(Clone)]
pub enum RedisConn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl From<ConnectionManager> for RedisConn {
    fn from(conn: ConnectionManager) -> Self {
        RedisConn::Single(conn)
    }
}

impl RedisConn {
    /// Connect within `settings.timeout`. A connect that takes longer fails
    /// as an I/O timeout, which callers treat like a refused connection.
    pub async fn connect(settings: &RedisSettings) -> Result<RedisConn, RedisError> {
        let t = settings.timeout;
        let timed_out = |_| RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, "connecting to Redis"));
        if settings.cluster {
            let client =
                ClusterClient::builder(settings.urls.clone()).connection_timeout(t).response_timeout(t).build()?;
            let conn = tokio::time::timeout(t, client.get_async_connection()).await.map_err(timed_out)??;
            Ok(RedisConn::Cluster(conn))
        } else {
            let url = settings
                .urls
                .first()
                .ok_or_else(|| RedisError::from((ErrorKind::InvalidClientConfig, "no Redis URL")))?;
            let client = redis::Client::open(url.as_str())?;
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(t))
                .set_response_timeout(Some(t))
                .set_number_of_retries(1)
                .set_max_delay(Duration::from_millis(200));
            let conn =
                tokio::time::timeout(t, ConnectionManager::new_with_config(client, config)).await.map_err(timed_out)??;
            Ok(RedisConn::Single(conn))
        }
    }
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RedisConn::Single(c) => c.req_packed_command(cmd),
            RedisConn::Cluster(c) => c.req_packed_command(cmd),
        }
    }
    fn req_packed_commands<'a>(&'a mut self, cmd: &'a Pipeline, offset: usize, count: usize) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RedisConn::Single(c) => c.req_packed_commands(cmd, offset, count),
            RedisConn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }
    fn get_db(&self) -> i64 {
        0
    }
}
