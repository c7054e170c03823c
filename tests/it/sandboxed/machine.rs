//! A machine of the test's own: a network namespace (reached from the host over a veth with
//! addresses in 198.19.0.0/16) in which a daemon and a dockerd run, so that what they
//! do to the firewall (dockerd's FORWARD policy, the runner's tables) stays there and the
//! sandboxed tests running next to it on the host never see it. [`MachineDockerd`] is a
//! dockerd with its firewall on (the default), its own data root, exec root and socket.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// The namespace and its link to the host.
pub struct Machine {
    pub name: String,
    host_interface: String,
    /// The machine's address on its link to the host.
    pub address: Ipv4Addr,
}

impl Machine {
    /// Creates it with IPv4 forwarding off, as a machine boots (dockerd turns it on and, for
    /// that, sets the FORWARD policy to DROP). Panics if `ip` fails (the caller runs as root
    /// where the namespaced sandbox can run).
    pub fn create() -> Machine {
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let name = format!("slwt-machine-{pid}-{n}");
        // `sw` + a non-hex letter: never a runner's interface prefix, left out of the host
        // addresses the network tests probe.
        let host_interface = format!("swtm{}", (pid % 100_000) * 10 + n % 10);
        // 198.19.0.0/16 (benchmarking, RFC 2544): not a range a host's own network uses
        // (TEST-NET-1 was: this machine's eth0 is 192.0.2.2/24).
        let block = ((n % 64) * 4) as u8;
        let host_address = Ipv4Addr::new(198, 19, (pid % 256) as u8, block + 1);
        let address = Ipv4Addr::new(198, 19, (pid % 256) as u8, block + 2);
        let in_use = addresses_in_use();
        assert!(
            !in_use.contains(&format!(" {host_address}/")),
            "{host_address} is already in use on this host:\n{in_use}"
        );
        let machine = Machine {
            name,
            host_interface,
            address,
        };
        let (ns, host) = (&machine.name, &machine.host_interface);
        for args in [
            format!("netns add {ns}"),
            format!("link add {host} type veth peer name uplink netns {ns}"),
            format!("addr add {host_address}/30 dev {host}"),
            format!("link set {host} up"),
            format!("-n {ns} link set lo up"),
            format!("-n {ns} addr add {address}/30 dev uplink"),
            format!("-n {ns} link set uplink up"),
        ] {
            let status = Command::new("ip").args(args.split(' ')).status().unwrap();
            assert!(status.success(), "ip {args} failed");
        }
        let off = machine.run("sysctl", &["-qw", "net.ipv4.ip_forward=0"]);
        assert!(off.is_ok(), "{off:?}");
        machine
    }

    /// `program args` inside the machine: its stdout, or its stderr as the error.
    pub fn run(&self, program: &str, args: &[&str]) -> Result<String, String> {
        let output = self
            .command(program)
            .args(args)
            .output()
            .map_err(|e| format!("{program}: {e}"))?;
        match output.status.success() {
            true => Ok(String::from_utf8_lossy(&output.stdout).into_owned()),
            false => Err(String::from_utf8_lossy(&output.stderr).into_owned()),
        }
    }

    /// `iptables -S <chain>` inside the machine (empty if the chain is not there).
    pub fn iptables_chain(&self, chain: &str) -> String {
        self.run("iptables", &["-w", "-S", chain])
            .unwrap_or_default()
    }

    fn command(&self, program: &str) -> Command {
        let mut command = Command::new("nsenter");
        command
            .arg(format!("--net=/run/netns/{}", self.name))
            .arg(program);
        command
    }
}

/// `ip -4 -o addr` of the host.
fn addresses_in_use() -> String {
    let output = Command::new("ip")
        .args(["-4", "-o", "addr"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).into_owned()
}

impl Drop for Machine {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_interface])
            .status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// dockerd inside a [`Machine`], stopped and its roots removed when dropped.
pub struct MachineDockerd {
    root: PathBuf,
    child: Child,
}

impl MachineDockerd {
    /// Starts it and waits until it answers and its firewall is in place (FORWARD's policy
    /// DROP, the jump to DOCKER-USER); why not, when it does not.
    pub fn start(machine: &Machine) -> Result<MachineDockerd, String> {
        // Short: containerd's socket path under the exec root must fit a sockaddr_un.
        let root = PathBuf::from(format!("/tmp/slwt-dk{}", machine.host_interface));
        std::fs::create_dir_all(&root).map_err(|e| e.to_string())?;
        let log = std::fs::File::create(root.join("dockerd.log")).map_err(|e| e.to_string())?;
        let child = machine
            .command("/usr/sbin/dockerd")
            .arg(format!("--data-root={}", root.join("data").display()))
            .arg(format!("--exec-root={}", root.join("exec").display()))
            .arg(format!("--pidfile={}", root.join("dockerd.pid").display()))
            .arg(format!("-H=unix://{}", root.join("docker.sock").display()))
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start dockerd: {e}"))?;
        let dockerd = MachineDockerd { root, child };
        let started = Instant::now();
        loop {
            let forward = machine.iptables_chain("FORWARD");
            let firewall = forward.contains("-P FORWARD DROP")
                && forward.contains("-A FORWARD -j DOCKER-USER");
            if firewall && dockerd.answers() {
                return Ok(dockerd);
            }
            if started.elapsed() > Duration::from_secs(60) {
                return Err(format!(
                    "no answer or no firewall after 60 s (FORWARD: {forward:?}); log:\n{}",
                    dockerd.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn answers(&self) -> bool {
        let cli = match Path::new("/usr/bin/docker").exists() {
            true => "/usr/bin/docker",
            false => "docker",
        };
        Command::new(cli)
            .arg("version")
            .env(
                "DOCKER_HOST",
                format!("unix://{}", self.root.join("docker.sock").display()),
            )
            .output()
            .is_ok_and(|output| output.status.success())
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.root.join("dockerd.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().rev().take(15).collect();
        lines.into_iter().rev().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for MachineDockerd {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while !matches!(self.child.try_wait(), Ok(Some(_))) {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "grep -o ' {0}/[^ ]*' /proc/mounts | sort -r | xargs -r -n1 umount -l",
                self.root.display()
            ))
            .status();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
