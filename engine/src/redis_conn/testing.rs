//! redis-server processes of a test's own, on spare loopback ports: for
//! outage tests (the shared Redis is never stopped) and a Redis Cluster of
//! three primaries for the stores' contract suites. Killed on drop.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port")
}

/// A redis-server of our own on a spare loopback port, killed on drop.
pub struct OwnRedis {
    pub port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
    extra: Vec<String>,
}

impl OwnRedis {
    pub fn start(extra: &[&str]) -> OwnRedis {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut r =
            OwnRedis { port: free_port(), child: None, dir, extra: extra.iter().map(|s| s.to_string()).collect() };
        r.restart();
        r
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Start (again) on the same port.
    pub fn restart(&mut self) {
        self.stop();
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        self.child = Some(child);
        wait_for_ping(self.port, self.dir.path());
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Poll (with a deadline) until a spawned redis-server answers PING.
pub fn wait_for_ping(port: u16, _dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).expect("url");
    loop {
        if let Ok(mut c) = client.get_connection_with_timeout(Duration::from_millis(200)) {
            if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                return;
            }
        }
        assert!(Instant::now() < deadline, "redis-server on port {port} did not come up");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A Redis Cluster of `n` primaries of our own (no replicas), ready to serve.
pub struct OwnCluster {
    nodes: Vec<OwnRedis>,
}

impl OwnCluster {
    pub fn start(n: usize) -> OwnCluster {
        let nodes: Vec<OwnRedis> = (0..n)
            .map(|_| OwnRedis::start(&["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]))
            .collect();
        let addrs: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let status = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .status()
            .expect("redis-cli --cluster create");
        assert!(status.success(), "redis-cli --cluster create failed");
        // Poll (with a deadline) until every node reports the cluster ready.
        let deadline = Instant::now() + Duration::from_secs(20);
        for n in &nodes {
            let client = redis::Client::open(n.url()).expect("url");
            loop {
                let mut c = client.get_connection().expect("node connection");
                let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut c).expect("cluster info");
                if info.contains("cluster_state:ok") {
                    break;
                }
                assert!(Instant::now() < deadline, "cluster did not become ready");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        OwnCluster { nodes }
    }

    /// One URL per primary.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(OwnRedis::url).collect()
    }
}
