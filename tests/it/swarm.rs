//! Apps on a single-node Docker Swarm (issue 36): a dockerd of the test's own (its own data
//! root, socket and exec root; `--iptables=false`, so the host's firewall and the local
//! sandboxes' rules are untouched), a runtime image made from this host's files (`sh`,
//! `node`, the `slipway` binary; nothing is pulled), a server app deployed with 3 replicas
//! and served through the router, scaled 3 → 1, and its project deleted with nothing of it
//! left in the engine. Skips with a printed reason where dockerd cannot run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{eventually, DaemonOptions, TestDaemon};

/// The gateway of the `docker_gwbridge` the test makes: tasks reach the daemon's build
/// server there.
const GATEWAY: &str = "172.30.0.1";

const SERVER: &str = r#"
require('http').createServer((req, res) => {
  res.end(JSON.stringify({host: require('os').hostname(), v: process.env.V || ''}));
}).listen(process.env.PORT);
"#;

/// A dockerd of the test's own, stopped and removed (with its swarm) when dropped.
struct Dockerd {
    root: PathBuf,
    child: std::process::Child,
}

impl Dockerd {
    fn socket(&self) -> PathBuf {
        self.root.join("docker.sock")
    }

    fn docker(&self, args: &[&str]) -> Result<String, String> {
        let output = Command::new(docker_cli())
            .args(args)
            .env("DOCKER_HOST", format!("unix://{}", self.socket().display()))
            .output()
            .map_err(|e| e.to_string())?;
        match output.status.success() {
            true => Ok(String::from_utf8_lossy(&output.stdout).into_owned()),
            false => Err(String::from_utf8_lossy(&output.stderr).into_owned()),
        }
    }

    /// Starts it, inits the swarm and imports the runtime image; why not, when it cannot.
    fn start() -> Result<Dockerd, String> {
        if !Path::new("/usr/sbin/dockerd").exists() {
            return Err("dockerd is not installed (apt-get install docker.io)".into());
        }
        if !nix::unistd::Uid::effective().is_root() {
            return Err("dockerd needs root".into());
        }
        let root = std::env::temp_dir().join(format!("slipway-swarm-it-{}", std::process::id()));
        std::fs::create_dir_all(&root).map_err(|e| e.to_string())?;
        let log = std::fs::File::create(root.join("dockerd.log")).map_err(|e| e.to_string())?;
        let child = Command::new("/usr/sbin/dockerd")
            .arg(format!("--data-root={}", root.join("data").display()))
            .arg(format!("--exec-root={}", root.join("exec").display()))
            .arg(format!("--pidfile={}", root.join("dockerd.pid").display()))
            .arg(format!("-H=unix://{}", root.join("docker.sock").display()))
            .args(["--iptables=false", "--ip-masq=false", "--bridge=none"])
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start dockerd: {e}"))?;
        let dockerd = Dockerd { root, child };
        let started = std::time::Instant::now();
        while dockerd.docker(&["version"]).is_err() {
            if started.elapsed() > Duration::from_secs(30) {
                return Err(format!("dockerd did not answer: {}", dockerd.log_tail()));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        // Made before the swarm is, so its gateway (where tasks reach the daemon) is known.
        dockerd.docker(&[
            "network",
            "create",
            "--driver=bridge",
            "--subnet=172.30.0.0/16",
            "--opt=com.docker.network.bridge.name=docker_gwbridge",
            "--opt=com.docker.network.bridge.enable_icc=false",
            "docker_gwbridge",
        ])?;
        dockerd.docker(&["swarm", "init", "--advertise-addr", "127.0.0.1"])?;
        dockerd.import_runtime()?;
        Ok(dockerd)
    }

    /// `slipway-runtime:it`: `sh`, `node` and `slipway` with their libraries, from this host.
    fn import_runtime(&self) -> Result<(), String> {
        let rootfs = self.root.join("rootfs");
        let slipway = env!("CARGO_BIN_EXE_slipway");
        for (from, to) in [
            ("/bin/dash", "/bin/sh"),
            ("/usr/bin/node", "/usr/bin/node"),
            (slipway, "/usr/local/bin/slipway"),
        ] {
            copy_with_libraries(Path::new(from), &rootfs, to)?;
        }
        for dir in ["app", "tmp", "proc", "sys", "dev", "etc", "run"] {
            std::fs::create_dir_all(rootfs.join(dir)).map_err(|e| e.to_string())?;
        }
        let status = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "tar -C {} -c . | {} import - slipway-runtime:it >/dev/null",
                rootfs.display(),
                docker_cli()
            ))
            .env("DOCKER_HOST", format!("unix://{}", self.socket().display()))
            .status()
            .map_err(|e| e.to_string())?;
        let _ = std::fs::remove_dir_all(&rootfs);
        match status.success() {
            true => Ok(()),
            false => Err("docker import failed".into()),
        }
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.root.join("dockerd.log")).unwrap_or_default();
        log.lines().rev().take(10).collect::<Vec<_>>().join("\n")
    }

    /// The names of the engine's objects of `kind` (`service`, `secret`, `network`).
    fn names(&self, kind: &str) -> Vec<String> {
        self.docker(&[kind, "ls", "--format", "{{.Name}}"])
            .unwrap_or_default()
            .lines()
            .filter(|n| n.starts_with("slipway-"))
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Dockerd {
    fn drop(&mut self) {
        let _ = self.docker(&["swarm", "leave", "--force"]);
        let _ = self.docker(&["network", "rm", "docker_gwbridge"]);
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
        // Anything dockerd left mounted under its roots, then the roots themselves.
        let _ = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "grep -o ' {0}[^ ]*' /proc/mounts | sort -r | xargs -r -n1 umount -l",
                self.root.display()
            ))
            .status();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Debian's CLI (speaks the daemon's API version), else any.
fn docker_cli() -> &'static str {
    match Path::new("/usr/bin/docker").exists() {
        true => "/usr/bin/docker",
        false => "docker",
    }
}

fn copy_with_libraries(binary: &Path, rootfs: &Path, to: &str) -> Result<(), String> {
    let copy = |from: &Path, to: &Path| -> Result<(), String> {
        std::fs::create_dir_all(to.parent().unwrap()).map_err(|e| e.to_string())?;
        std::fs::copy(from, to)
            .map(|_| ())
            .map_err(|e| format!("{from:?}: {e}"))
    };
    copy(binary, &rootfs.join(to.trim_start_matches('/')))?;
    let ldd = Command::new("ldd")
        .arg(binary)
        .output()
        .map_err(|e| e.to_string())?;
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        if let Some(path) = line.split_whitespace().find(|w| w.starts_with('/')) {
            let real = std::fs::canonicalize(path).map_err(|e| e.to_string())?;
            copy(&real, &rootfs.join(path.trim_start_matches('/')))?;
        }
    }
    Ok(())
}

/// The distinct hosts (task containers) that answer `/` through the router in `tries`.
async fn answering_hosts(daemon: &TestDaemon, slug: &str, tries: usize) -> Vec<String> {
    let mut hosts = std::collections::BTreeSet::new();
    for _ in 0..tries {
        let response = daemon.app_get(slug, "/", &[]).await;
        assert_eq!(response.status, 200, "{}", response.text());
        let answer: Value = response.json();
        hosts.insert(answer["host"].as_str().unwrap().to_owned());
    }
    hosts.into_iter().collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_app_runs_scales_and_goes_on_a_single_node_swarm() {
    let dockerd = match Dockerd::start() {
        Ok(dockerd) => dockerd,
        Err(reason) => {
            eprintln!("skipping the swarm test: {reason}");
            return;
        }
    };
    let fetch_port = std::net::TcpListener::bind((GATEWAY, 0))
        .and_then(|l| l.local_addr())
        .expect("a port on the gateway")
        .port();
    let daemon = TestDaemon::start_with(DaemonOptions::default().extra_toml(&format!(
        "[cluster]\nengine = \"swarm\"\ndocker_socket = \"{}\"\nruntime_image = \
         \"slipway-runtime:it\"\nfetch_listen = \"{GATEWAY}:{fetch_port}\"\n[rate_limits]\nrequests_per_minute = \
         100000\nposts_per_minute_per_endpoint = 100000\n",
        dockerd.socket().display()
    )));
    let files = [("server.js", SERVER, 0o644)];
    let body = json!({"startCommand": "node server.js"});
    daemon.deploy("orbit", &files, body.clone()).await;
    let nodes = daemon.api("GET", "/api/nodes", None).await;
    assert_eq!(nodes.status, 200, "{}", nodes.text());
    let nodes: Value = nodes.json();
    assert_eq!(nodes["nodes"].as_array().unwrap().len(), 1, "{nodes}");
    assert_eq!(nodes["nodes"][0]["engine"], "swarm");
    assert_eq!(nodes["nodes"][0]["state"], "ready");
    assert!(nodes["nodes"][0]["id"]
        .as_str()
        .unwrap()
        .starts_with("nod_"));

    // Three replicas: a deploy with the formation at 3 starts a service of 3 tasks, each
    // reached through the router.
    let scaled = daemon
        .api(
            "PATCH",
            "/api/projects/orbit/formation",
            Some(json!({"web": {"instances": 3}})),
        )
        .await;
    assert_eq!(scaled.status, 200, "{}", scaled.text());
    let started = std::time::Instant::now();
    daemon.deploy("orbit", &files, body).await;
    println!("a 3-replica deploy on swarm took {:?}", started.elapsed());
    assert_eq!(
        dockerd.names("service").len(),
        1,
        "the first deployment's service is gone"
    );
    let hosts = answering_hosts(&daemon, "orbit", 30).await;
    assert_eq!(
        hosts.len(),
        3,
        "every task answers through the router: {hosts:?}"
    );

    // 3 → 1: the route follows the task list.
    let scaled = daemon
        .api(
            "PATCH",
            "/api/projects/orbit/formation",
            Some(json!({"web": {"instances": 1}})),
        )
        .await;
    assert_eq!(scaled.status, 200, "{}", scaled.text());
    let one = eventually(Duration::from_secs(30), || async {
        answering_hosts(&daemon, "orbit", 10).await.len() == 1
    })
    .await;
    assert!(one, "one task answers after scaling to 1");

    // Deleting the project leaves no service, secret or network of it.
    let deleted = daemon.api("DELETE", "/api/projects/orbit", None).await;
    assert!(deleted.status < 300, "{}", deleted.text());
    let gone = eventually(Duration::from_secs(40), || async {
        ["service", "secret", "network"]
            .iter()
            .all(|kind| dockerd.names(kind).is_empty())
    })
    .await;
    assert!(
        gone,
        "left: {:?} {:?} {:?}",
        dockerd.names("service"),
        dockerd.names("secret"),
        dockerd.names("network")
    );
}
