//! Processes of the suite's control plane: loopback ports, tokens and kubeconfigs, one
//! process group with a watchdog, and reading an operator's /metrics.

use std::hash::{BuildHasher, Hasher};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::START_TIMEOUT;

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

pub fn random_token() -> String {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    let a = h.finish();
    h.write_u64(a);
    format!("{a:016x}{:016x}", h.finish())
}

pub fn kubeconfig(server: &str, token: &str, namespace: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\n\
         clusters: [{{name: e2e, cluster: {{server: \"{server}\", insecure-skip-tls-verify: true}}}}]\n\
         users: [{{name: e2e, user: {{token: \"{token}\"}}}}]\n\
         contexts: [{{name: e2e, context: {{cluster: e2e, user: e2e, namespace: {namespace}}}}}]\n\
         current-context: e2e\n"
    )
}

pub async fn config_from(path: &Path) -> Result<kube::Config, String> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|e| e.to_string())?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| e.to_string())
}

pub fn version_of(bin: &Path) -> String {
    Command::new(bin)
        .arg("--version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or_default()
                .to_string()
        })
        .unwrap_or_else(|e| format!("{}: {e}", bin.display()))
}

/// Waits until `check` holds, polling; `Err` names what did not happen in time.
pub async fn poll<F, Fut>(what: &str, mut check: F) -> Result<(), String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + START_TIMEOUT;
    while !check().await {
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "timed out after {START_TIMEOUT:?} waiting for {what}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(())
}

pub struct Spawner {
    pub dir: PathBuf,
    pub group: Option<i32>,
}

impl Spawner {
    /// Starts `bin` in the control plane's process group, its output in `<name>.log`.
    pub fn spawn(&mut self, name: &str, bin: &Path, args: &[String]) -> Result<Child, String> {
        self.spawn_with(name, bin, args, &[])
    }

    pub fn spawn_with(
        &mut self,
        name: &str,
        bin: &Path,
        args: &[String],
        env: &[(&str, String)],
    ) -> Result<Child, String> {
        let log = std::fs::File::create(self.dir.join(format!("{name}.log")))
            .map_err(|e| format!("{name}.log: {e}"))?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let child = Command::new(bin)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .process_group(self.group.unwrap_or(0))
            .spawn()
            .map_err(|e| format!("start {}: {e}", bin.display()))?;
        self.group.get_or_insert(child.id() as i32);
        Ok(child)
    }

    /// Ends the whole group and removes the folder once `watched` (this process) is gone.
    pub fn watchdog(&self, watched: u32) -> Result<(), String> {
        let group = self.group.ok_or("nothing started")?;
        // `E2E_KEEP_LOGS=1` keeps the folder (logs, etcd data) for a look afterwards.
        let remove = match std::env::var("E2E_KEEP_LOGS").as_deref() {
            Ok("1") => String::new(),
            _ => format!("; rm -rf '{}'", self.dir.display()),
        };
        let script = format!(
            "while kill -0 {watched} 2>/dev/null; do sleep 1; done; kill -TERM -{group} 2>/dev/null; \
             sleep 5; kill -KILL -{group} 2>/dev/null{remove}"
        );
        Command::new("bash")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map(|_| ())
            .map_err(|e| format!("watchdog: {e}"))
    }
}

/// The body of `GET /metrics` from an operator process (HTTP/1.0: no chunking).
pub async fn scrape(addr: SocketAddr) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream =
        tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(addr))
            .await
            .ok()?
            .ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .ok()?;
    let mut body = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut body))
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8_lossy(&body).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.contains(" 200 ").then(|| body.to_string())
}

/// The sum of every sample of `name` (all its label sets) in a Prometheus text exposition.
pub fn sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
