//! A task's usage reporter, the task's side of "metrics per task": `task-boot` runs it next
//! to the app for the task's life. Every [`REPORT_EVERY`] it reads its container's cgroup —
//! the task's own, as the engine made it: cgroup v2 with the container's cgroup namespace at
//! `/sys/fs/cgroup` (or the path `/proc/self/cgroup` names), cgroup v1 with the container's
//! own directories bound at `/sys/fs/cgroup/<controller>` — and POSTs it to the daemon's
//! fetch server at `/usage/<deployment>/<capability>` (the capability of its build URL, the
//! server pinned the same way). The daemon keeps the last reading per instance
//! (`readings.rs`). It reads and sends a few hundred bytes.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};

use super::link::{connect, Connection};
use super::readings::{TaskReport, REPORT_EVERY};
use crate::sandbox::CgroupUsage;

/// How long one report may take (connecting included).
const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the container's cgroup is mounted inside it.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Reports until the task ends (never returns).
pub(super) async fn report_forever(url: &str, cert_pem: &str, instance: &str) {
    let Some(path) = url
        .parse::<http::Uri>()
        .ok()
        .and_then(|uri| super::fetch::usage_path(uri.path()))
    else {
        return;
    };
    let boot = crate::ids::hex(&crate::ids::random_bytes::<8>());
    let own_cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut connection = None;
    let mut told = false;
    loop {
        let usage = read(Path::new(CGROUP_ROOT), &own_cgroup);
        let report = TaskReport {
            instance: instance.to_owned(),
            boot: boot.clone(),
            memory_bytes: usage.memory_bytes,
            cpu_seconds: usage.cpu_seconds,
        };
        let body = Bytes::from(serde_json::to_vec(&report).expect("a report serializes"));
        let sent = tokio::time::timeout(
            SEND_TIMEOUT,
            send((url, cert_pem), &path, &mut connection, body),
        )
        .await
        .unwrap_or_else(|_| Err("no answer in time".to_owned()));
        if let Err(error) = sent {
            connection = None;
            // Said once per task (in its log): the figures stay `null` meanwhile.
            if !told {
                eprintln!("slipway task-boot: cannot report this task's usage yet: {error}");
                told = true;
            }
        }
        tokio::time::sleep(REPORT_EVERY).await;
    }
}

/// Sends one report on the kept connection (made anew when there is none or it closed).
async fn send(
    (url, cert_pem): (&str, &str),
    path: &str,
    connection: &mut Option<Connection>,
    body: Bytes,
) -> Result<(), String> {
    if connection.as_ref().is_none_or(|c| c.sender.is_closed()) {
        *connection = Some(connect(url, cert_pem).await?);
    }
    let Connection { sender, authority } = connection.as_mut().expect("connected above");
    sender.ready().await.map_err(|e| e.to_string())?;
    let request = http::Request::post(path)
        .header(http::header::HOST, authority.as_str())
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(body))
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    // The answer is empty; read to its end so the connection can carry the next one.
    let _ = response.into_body().collect().await;
    match status.is_success() {
        true => Ok(()),
        false => Err(format!("the control plane answered {status}")),
    }
}

/// The usage of the cgroup mounted at `root` (`/sys/fs/cgroup`), `own_cgroup` being the
/// text of `/proc/self/cgroup`: cgroup v2 at the `0::` line's path under `root` (`/` in a
/// cgroup namespace of the container's own), else cgroup v1's `memory` and `cpuacct`
/// directories under `root`. Memory is the usage less the inactive file pages; a figure
/// the kernel does not give is `None`.
pub fn read(root: &Path, own_cgroup: &str) -> CgroupUsage {
    let number =
        |path: &Path| -> Option<u64> { std::fs::read_to_string(path).ok()?.trim().parse().ok() };
    let field = |path: &Path, key: &str| -> Option<u64> {
        let text = std::fs::read_to_string(path).ok()?;
        text.lines().find_map(|line| {
            let (name, value) = line.split_once(' ')?;
            (name == key).then(|| value.trim().parse().ok()).flatten()
        })
    };
    let unified = own_cgroup
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .map(|path| root.join(path.trim().trim_start_matches('/')));
    if let Some(dir) = unified.filter(|dir| dir.join("memory.current").exists()) {
        let current = number(&dir.join("memory.current"));
        let inactive = field(&dir.join("memory.stat"), "inactive_file").unwrap_or(0);
        return CgroupUsage {
            memory_bytes: current.map(|bytes| bytes.saturating_sub(inactive)),
            cpu_seconds: field(&dir.join("cpu.stat"), "usage_usec").map(|us| us as f64 / 1e6),
        };
    }
    let memory = root.join("memory");
    let usage = number(&memory.join("memory.usage_in_bytes"));
    let inactive = field(&memory.join("memory.stat"), "total_inactive_file").unwrap_or(0);
    let cpu = ["cpuacct", "cpu,cpuacct", "cpuacct,cpu"]
        .iter()
        .find_map(|dir| number(&root.join(dir).join("cpuacct.usage")));
    CgroupUsage {
        memory_bytes: usage.map(|bytes| bytes.saturating_sub(inactive)),
        cpu_seconds: cpu.map(|ns| ns as f64 / 1e9),
    }
}

#[cfg(test)]
mod tests {
    use super::read;

    fn write(root: &std::path::Path, path: &str, text: &str) {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn cgroup_v2_in_the_containers_own_namespace() {
        let root = tempfile::tempdir().unwrap();
        write(root.path(), "memory.current", "50000000\n");
        write(
            root.path(),
            "memory.stat",
            "anon 1\nfile 9\ninactive_file 8000000\n",
        );
        write(
            root.path(),
            "cpu.stat",
            "usage_usec 2500000\nuser_usec 2000000\n",
        );
        let usage = read(root.path(), "0::/\n");
        assert_eq!(usage.memory_bytes, Some(42_000_000));
        assert_eq!(usage.cpu_seconds, Some(2.5));
    }

    #[test]
    fn cgroup_v2_seen_from_the_hosts_namespace_is_read_at_its_own_path() {
        let root = tempfile::tempdir().unwrap();
        write(root.path(), "docker/abc/memory.current", "3000\n");
        write(root.path(), "docker/abc/cpu.stat", "usage_usec 1000000\n");
        let usage = read(root.path(), "0::/docker/abc\n");
        assert_eq!(usage.memory_bytes, Some(3000));
        assert_eq!(usage.cpu_seconds, Some(1.0));
    }

    #[test]
    fn cgroup_v1_with_the_containers_directories_bound_in() {
        let root = tempfile::tempdir().unwrap();
        write(root.path(), "memory/memory.usage_in_bytes", "30000000\n");
        write(
            root.path(),
            "memory/memory.stat",
            "cache 5\ninactive_file 7\ntotal_inactive_file 1000000\n",
        );
        write(root.path(), "cpuacct/cpuacct.usage", "1500000000\n");
        // A hybrid host: the unified line names a cgroup without controllers.
        let usage = read(root.path(), "4:memory:/docker/abc\n0::/\n");
        assert_eq!(usage.memory_bytes, Some(29_000_000));
        assert_eq!(usage.cpu_seconds, Some(1.5));
        // Nothing mounted: nothing measured.
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(read(empty.path(), "0::/\n"), Default::default());
    }
}
