//! A fake "internet" for the firewall tests: a network namespace the test creates, reached from
//! the host through a veth with public-looking documentation addresses (198.51.100.0/24 and
//! 2001:db8::/32, which no sandbox rule blocks as private), so that sandboxes can be shown what
//! they may and may not reach without any traffic leaving the machine. Sockets are bound
//! inside it from a thread that entered the namespace.

use std::fs::File;
use std::net::{Ipv4Addr, Ipv6Addr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// The namespace, its link to the host, and its addresses.
pub struct Outside {
    netns: String,
    /// The namespace the host end of the link is in (`None`: the host's own).
    behind: Option<String>,
    host_interface: String,
    /// The host's end of the link: a host address outside every private range.
    pub host_address: Ipv4Addr,
    /// The namespace's own address, as if it were a server on the internet.
    pub address: Ipv4Addr,
    pub address_v6: Ipv6Addr,
    /// Connections accepted by [`Outside::listen`] listeners, kept open.
    accepted: Arc<Mutex<Vec<TcpStream>>>,
}

impl Outside {
    /// Creates the namespace and its link; panics if `ip` fails (the caller runs as root with
    /// a working sandbox runner, so `ip` and network namespaces exist).
    pub fn create() -> Outside {
        Outside::create_behind(None)
    }

    /// [`Outside::create`], linked to the network namespace `behind` (a machine of the test's
    /// own) instead of the host: the link's other end and its address are there.
    pub fn create_behind(behind: Option<&str>) -> Outside {
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let netns = format!("slwt-outside-{pid}-{n}");
        let host_interface = format!("swto{}", (pid % 100_000) * 10 + n % 10);
        let block = (((pid % 16) * 4 + n % 4) * 4) as u8;
        let host_address = Ipv4Addr::new(198, 51, 100, block + 1);
        let address = Ipv4Addr::new(198, 51, 100, block + 2);
        let address_v6 = Ipv6Addr::new(0x2001, 0xdb8, u16::from(block), 0, 0, 0, 0, 2);
        let outside = Outside {
            netns,
            behind: behind.map(str::to_owned),
            host_interface,
            host_address,
            address,
            address_v6,
            accepted: Arc::default(),
        };
        let (ns, host) = (&outside.netns, &outside.host_interface);
        let v6_prefix = format!("2001:db8:{block:x}::");
        let at = behind.map_or(String::new(), |machine| format!("-n {machine} "));
        for args in [
            format!("netns add {ns}"),
            format!("{at}link add {host} type veth peer name eth0 netns {ns}"),
            format!("{at}addr add {host_address}/30 dev {host}"),
            format!("{at}-6 addr add {v6_prefix}1/64 dev {host} nodad"),
            format!("{at}link set {host} up"),
            format!("-n {ns} link set lo up"),
            format!("-n {ns} addr add {address}/30 dev eth0"),
            format!("-n {ns} -6 addr add {address_v6}/64 dev eth0 nodad"),
            format!("-n {ns} link set eth0 up"),
            format!("-n {ns} route add default via {host_address}"),
        ] {
            let status = Command::new("ip").args(args.split(' ')).status().unwrap();
            assert!(status.success(), "ip {args} failed");
        }
        outside
    }

    /// Runs `bind` on a thread that has entered the namespace; what it creates stays there.
    fn inside<T: Send + 'static>(&self, bind: impl FnOnce() -> T + Send + 'static) -> T {
        let netns = File::open(format!("/run/netns/{}", self.netns)).unwrap();
        std::thread::spawn(move || {
            nix::sched::setns(netns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            bind()
        })
        .join()
        .unwrap()
    }

    /// A TCP server on `port` (IPv4 and IPv6) that accepts every connection and keeps it.
    pub fn listen(&self, port: u16) {
        let listener = self.inside(move || TcpListener::bind(("::", port)).unwrap());
        let accepted = Arc::clone(&self.accepted);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                accepted.lock().unwrap().push(stream);
            }
        });
    }

    /// A UDP socket on `port`, to see whether anything arrives.
    pub fn udp(&self, port: u16) -> UdpSocket {
        let socket = self.inside(move || UdpSocket::bind((Ipv4Addr::UNSPECIFIED, port)).unwrap());
        socket.set_nonblocking(true).unwrap();
        socket
    }

    pub fn accepted(&self) -> usize {
        self.accepted.lock().unwrap().len()
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        self.accepted.lock().unwrap().clear();
        let mut link = Command::new("ip");
        if let Some(machine) = &self.behind {
            link.args(["-n", machine]);
        }
        let _ = link.args(["link", "del", &self.host_interface]).status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.netns])
            .status();
    }
}

/// A Python script for a step: `probe NAME HOST PORT` lines on stdin become one line each,
/// "NAME open" or "NAME blocked <error>"; `udp NAME HOST PORT` sends one datagram and prints
/// "NAME sent". A listener on the step's own loopback is probed first as "own-loopback".
pub const PROBE_SCRIPT: &str = r#"
import socket, sys
own = socket.socket(); own.bind(("127.0.0.1", 0)); own.listen(1)
def probe(name, host, port):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect((host, int(port)))
        print(name, "open", flush=True)
    except OSError as e:
        print(name, "blocked", type(e).__name__, e.errno, flush=True)
    finally:
        s.close()
def udp(name, host, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.sendto(b"hello", (host, int(port)))
        print(name, "sent", flush=True)
    except OSError as e:
        print(name, "blocked", type(e).__name__, e.errno, flush=True)
probe("own-loopback", "127.0.0.1", own.getsockname()[1])
for line in sys.argv[1].split(";"):
    kind, name, host, port = line.split()
    (probe if kind == "probe" else udp)(name, host, port)
print("probes-done", flush=True)
"#;

/// The shell command that runs [`PROBE_SCRIPT`] on `probes` ("probe NAME HOST PORT;...").
pub fn probe_command(probes: &[String]) -> String {
    format!(
        "python3 -c '{}' '{}'",
        PROBE_SCRIPT.replace('\'', "\""),
        probes.join(";")
    )
}

/// The verdict a probe printed ("open", "blocked", "sent"), or `None` if it did not run.
pub fn verdict<'a>(output: &'a str, name: &str) -> Option<&'a str> {
    output
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|rest| rest.split(' ').next())
}
