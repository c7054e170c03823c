//! The test's own dockerd: its own data root, socket and exec root, `--iptables=false` (the
//! host's firewall and the local sandboxes' rules untouched), a single-node swarm, and the
//! runtime image made from this host's files (`sh`, `node`, the `slipway` binary; nothing is
//! pulled). One at a time (`docker_gwbridge` is the host's): [`Dockerd::start`] takes a lock.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The gateway of the `docker_gwbridge` the test makes: tasks reach the daemon's build
/// server there.
pub const GATEWAY: &str = "172.30.0.1";

static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A dockerd of the test's own, stopped and removed (with its swarm) when dropped.
pub struct Dockerd {
    root: PathBuf,
    child: std::process::Child,
    _one: std::sync::MutexGuard<'static, ()>,
}

impl Dockerd {
    pub fn socket(&self) -> PathBuf {
        self.root.join("docker.sock")
    }

    pub fn docker(&self, args: &[&str]) -> Result<String, String> {
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
    /// The dockerd, or `None` with the reason printed where it cannot run (not installed, not
    /// root). Where it is installed and should run but does not start, the test fails.
    pub fn start_or_skip(test: &str) -> Option<Dockerd> {
        if !Path::new("/usr/sbin/dockerd").exists() {
            eprintln!("skipping {test}: dockerd is not installed (apt-get install docker.io)");
            return None;
        }
        if !nix::unistd::Uid::effective().is_root() {
            eprintln!("skipping {test}: dockerd needs root");
            return None;
        }
        let one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        match Dockerd::start(one) {
            Ok(dockerd) => Some(dockerd),
            Err(reason) => panic!("{test}: dockerd is installed but did not start: {reason}"),
        }
    }

    fn start(one: std::sync::MutexGuard<'static, ()>) -> Result<Dockerd, String> {
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
        let dockerd = Dockerd {
            root,
            child,
            _one: one,
        };
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
        // No `/app` or `/tmp`: the tasks' tmpfs mounts make them with their own mode (on a
        // directory the image has, the engine copies its mode up and the app cannot write).
        for dir in ["proc", "sys", "dev", "etc", "run"] {
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
    pub fn names(&self, kind: &str) -> Vec<String> {
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
