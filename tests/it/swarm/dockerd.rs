//! The test's own dockerd: its own data root, socket and exec root, `--iptables=false` (the
//! host's firewall and the local sandboxes' rules untouched) and a single-node swarm. The
//! daemon makes its runtime image on it (nothing is pulled). One at a time (`docker_gwbridge`
//! is the host's): [`Dockerd::start_or_skip`] takes a lock, across processes too. The two-node test adds a worker
//! in a network namespace of its own ([`Dockerd::worker_in`]), which joins by
//! `slipway node join`.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::netns::Netns;

/// The gateway of the `docker_gwbridge` the test makes: tasks reach the daemon's build
/// server there.
pub const GATEWAY: &str = "172.30.0.1";

static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Held while a test's swarm exists: this process's lock and a lock file's, so test runs of
/// two checkouts (or a CI run next to a developer's) wait for each other too.
pub struct OneAtATime {
    _file: nix::fcntl::Flock<std::fs::File>,
    _guard: std::sync::MutexGuard<'static, ()>,
}

impl OneAtATime {
    fn take() -> OneAtATime {
        let guard = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let path = std::env::temp_dir().join("slipway-swarm-tests.lock");
        let file = std::fs::File::create(&path).expect("the swarm tests' lock file");
        let file = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
            .unwrap_or_else(|(_, e)| panic!("cannot lock {path:?}: {e}"));
        OneAtATime {
            _file: file,
            _guard: guard,
        }
    }
}

/// A dockerd of the test's own, stopped and removed (with its swarm) when dropped.
pub struct Dockerd {
    root: PathBuf,
    child: std::process::Child,
    /// The swarm's address (a manager's `ip:port`; empty for a worker until it joins).
    pub swarm_addr: String,
    _one: Option<OneAtATime>,
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
        Dockerd::manager_or_skip(test, IpAddr::from([127, 0, 0, 1]))
    }

    /// A manager whose swarm listens on and advertises `ip` (a port of its own).
    pub fn manager_or_skip(test: &str, ip: IpAddr) -> Option<Dockerd> {
        if !Dockerd::can_run(test) {
            return None;
        }
        let one = OneAtATime::take();
        match Dockerd::start(one, ip) {
            Ok(dockerd) => Some(dockerd),
            Err(reason) => panic!("{test}: dockerd is installed but did not start: {reason}"),
        }
    }

    /// Whether a dockerd can run here; if not, says why the test skips.
    pub fn can_run(test: &str) -> bool {
        if !Path::new("/usr/sbin/dockerd").exists() {
            eprintln!("skipping {test}: dockerd is not installed (apt-get install docker.io)");
            return false;
        }
        if !nix::unistd::Uid::effective().is_root() {
            eprintln!("skipping {test}: dockerd needs root");
            return false;
        }
        true
    }

    /// Spawns `command` (dockerd, or what execs it) with its log in `root`, and waits until
    /// it answers.
    fn spawn(
        root: PathBuf,
        mut command: Command,
        one: Option<OneAtATime>,
    ) -> Result<Dockerd, String> {
        std::fs::create_dir_all(&root).map_err(|e| e.to_string())?;
        let log = std::fs::File::create(root.join("dockerd.log")).map_err(|e| e.to_string())?;
        let child = command
            .arg(format!("--data-root={}", root.join("data").display()))
            .arg(format!("--exec-root={}", root.join("exec").display()))
            .arg(format!("--pidfile={}", root.join("dockerd.pid").display()))
            .arg(format!("-H=unix://{}", root.join("docker.sock").display()))
            // A task's image is made on its node: never try a registry for it.
            .env("DOCKER_SERVICE_PREFER_OFFLINE_IMAGE", "1")
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start dockerd: {e}"))?;
        let dockerd = Dockerd {
            root,
            child,
            swarm_addr: String::new(),
            _one: one,
        };
        let started = std::time::Instant::now();
        while dockerd.docker(&["version"]).is_err() {
            if started.elapsed() > Duration::from_secs(30) {
                return Err(format!("dockerd did not answer: {}", dockerd.log_tail()));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(dockerd)
    }

    fn start(one: OneAtATime, ip: IpAddr) -> Result<Dockerd, String> {
        let root = std::env::temp_dir().join(format!("slipway-swarm-it-{}", std::process::id()));
        let mut command = Command::new("/usr/sbin/dockerd");
        command.args(["--iptables=false", "--ip-masq=false", "--bridge=none"]);
        let mut dockerd = Dockerd::spawn(root, command, Some(one))?;
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
        // Ports of its own (not 2377 and 4789: a dockerd of the machine's may hold them).
        let port = || {
            std::net::TcpListener::bind((ip, 0))
                .and_then(|l| l.local_addr())
                .map_err(|e| e.to_string())
        };
        let listen = port()?.to_string();
        let data_path_port = port()?.port().to_string();
        dockerd.docker(&[
            "swarm",
            "init",
            "--advertise-addr",
            &listen,
            "--listen-addr",
            &listen,
            "--data-path-port",
            &data_path_port,
        ])?;
        dockerd.swarm_addr = listen;
        Ok(dockerd)
    }

    /// A dockerd in `netns`, as another machine: its own data root, its own hostname (a UTS
    /// namespace), a mount namespace whose `/sys` is the network namespace's (the host's
    /// cgroup tree bound into it), its firewall and masquerading on (they are the
    /// namespace's own). Not in a swarm: it joins by `slipway node join`.
    pub fn worker_in(netns: &Netns, hostname: &str) -> Result<Dockerd, String> {
        let root = std::env::temp_dir().join(format!(
            "slipway-swarm-it-{}-{hostname}",
            std::process::id()
        ));
        std::fs::create_dir_all(root.join("cgroup")).map_err(|e| e.to_string())?;
        let setup = format!(
            "mount --rbind /sys/fs/cgroup {cg} && mount -t sysfs sysfs /sys && \
             mount --rbind {cg} /sys/fs/cgroup && hostname {hostname} && exec \"$@\"",
            cg = root.join("cgroup").display()
        );
        let mut command = Command::new("nsenter");
        command
            .arg(format!("--net=/run/netns/{}", netns.name))
            .args(["unshare", "--mount", "--uts", "--propagation", "private"])
            .args([
                "sh",
                "-c",
                &setup,
                "sh",
                "/usr/sbin/dockerd",
                "--bridge=none",
            ]);
        Dockerd::spawn(root, command, None)
    }

    /// The worker join token.
    pub fn worker_token(&self) -> Result<String, String> {
        Ok(self
            .docker(&["swarm", "join-token", "-q", "worker"])?
            .trim()
            .to_owned())
    }

    /// Stops it now (its tasks stop with it), as `systemctl stop docker` would.
    pub fn stop(&mut self) {
        if !matches!(self.child.try_wait(), Ok(None)) {
            return; // already stopped (and reaped: its pid may be another's now)
        }
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let started = std::time::Instant::now();
        while started.elapsed() < Duration::from_secs(40) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
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
        self.stop();
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
