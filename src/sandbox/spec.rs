//! The message the daemon sends to the `slipway sandbox-exec` helper through its stdin pipe,
//! how it is framed, and the descriptors the helper starts with. Written by [`super::ns`],
//! read by [`super::exec`]; nothing else crosses from the daemon into the helper (never argv,
//! never the environment).

use std::io::{self, Read};
use std::net::Ipv4Addr;
use std::os::fd::RawFd;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::firewall::FirewallSpec;
use super::LimitedDir;

/// The largest spec the helper accepts (the environment is the only part that can grow).
pub(crate) const MAX_SPEC_BYTES: usize = 4 << 20;

/// The uid and gid the project's code has inside the sandbox.
pub(crate) const SANDBOX_ID: u32 = 1000;

/// Everything the helper needs to build one sandbox and run one command in it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct HelperSpec {
    pub command: String,
    pub env: Vec<(String, String)>,
    /// The host uid and gid that `1000` inside maps to.
    pub host_id: u32,
    pub view: FilesystemView,
    /// Which directories of the view must be on which disk-limited filesystem.
    pub limited_dirs: Vec<LimitedDir>,
    /// `cgroup.procs` files the sandbox init is written into before it starts.
    pub cgroup_procs: Vec<PathBuf>,
    pub network: NetworkSpec,
    pub hostname: String,
    /// Upstream DNS servers for the generated `resolv.conf`.
    pub nameservers: Vec<Ipv4Addr>,
    /// Set for apps, which outlive the daemon: the helper ignores its lifeline's hang-up,
    /// keeps the log pipes' read ends ([`HELD_LOG_FDS`]) open so the app never writes into a
    /// pipe nobody holds, and writes how the command ended into this file before it exits.
    pub exit_file: Option<PathBuf>,
    /// The command runs under the terminal whose slave the daemon passed at [`TTY_FD`] (its
    /// stdin, stdout, stderr and controlling terminal, in a session of its own).
    #[serde(default)]
    pub tty: bool,
}

/// Where an app's helper holds the read ends of its stdout and stderr pipes (from the daemon
/// that started it; they are named pipes next to the exit file, which a daemon that adopts
/// the app opens again).
pub(crate) const HELD_LOG_FDS: [i32; 2] = [3, 4];

/// Where every helper gets the write end of its "reachable" pipe: it writes one byte there
/// once the sandbox's link is up and its firewall installed (see `sandbox::Reachable`).
pub(crate) const REACHABLE_FD: i32 = 5;

/// Where a helper whose step runs under a terminal gets that terminal's slave (the daemon
/// keeps the master): the only way the terminal reaches the sandbox, which has no
/// `/dev/pts`. The helper's own stdout and stderr are the slave too, so that a sandbox that
/// cannot be built says why on the terminal.
pub(crate) const TTY_FD: i32 = 6;

/// Makes the helper `command` start with each `(fd, number)` of `held` open at `number`
/// ([`REACHABLE_FD`], [`HELD_LOG_FDS`], [`TTY_FD`]; at most three, an app never having a
/// terminal); everything else the daemon holds is close-on-exec.
pub(crate) fn pass_fds(command: &mut std::process::Command, held: Vec<(RawFd, i32)>) {
    crate::sys::process::dup_at_exec(command, held);
}

/// Which host directories appear at `/app` and `/data`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum FilesystemView {
    /// The workspace read-write at `/app`, the project's build cache (if any) at `/cache`.
    Build {
        workspace: PathBuf,
        cache: Option<PathBuf>,
    },
    /// The build output read-only at `/app`, the data dir read-write at `/data`.
    App { output: PathBuf, data_dir: PathBuf },
}

/// One /30 link between the host and the sandbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct NetworkSpec {
    /// The host end of the veth pair (the sandbox end is always `eth0`).
    pub host_interface: String,
    pub host_address: Ipv4Addr,
    pub sandbox_address: Ipv4Addr,
    /// What the table inside the sandbox's network namespace needs.
    pub firewall: FirewallSpec,
}

/// Frames a spec as a little-endian `u32` length followed by JSON.
pub(crate) fn encode(spec: &HelperSpec) -> io::Result<Vec<u8>> {
    let body = serde_json::to_vec(spec).map_err(io::Error::other)?;
    if body.len() > MAX_SPEC_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "the step spec is {} bytes, more than the {MAX_SPEC_BYTES} allowed",
                body.len()
            ),
        ));
    }
    let mut framed = Vec::with_capacity(body.len() + 4);
    framed.extend_from_slice(&(body.len() as u32).to_le_bytes());
    framed.extend_from_slice(&body);
    Ok(framed)
}

/// Reads one framed spec; the stream stays open afterwards (it is the helper's lifeline).
pub(crate) fn decode(mut reader: impl Read) -> io::Result<HelperSpec> {
    let mut length = [0u8; 4];
    reader.read_exact(&mut length)?;
    let length = u32::from_le_bytes(length) as usize;
    if length > MAX_SPEC_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "the spec is too large",
        ));
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body)?;
    serde_json::from_slice(&body).map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_survives_the_frame() {
        let spec = HelperSpec {
            command: "echo hi".into(),
            env: vec![("A".into(), "b c".into())],
            host_id: 200_001,
            view: FilesystemView::Build {
                workspace: "/w".into(),
                cache: Some("/c".into()),
            },
            limited_dirs: vec![LimitedDir {
                path: "/w".into(),
                device: 7 << 8,
            }],
            cgroup_procs: vec!["/sys/fs/cgroup/pids/x/cgroup.procs".into()],
            network: NetworkSpec {
                host_interface: "sw0".into(),
                host_address: Ipv4Addr::new(10, 0, 0, 1),
                sandbox_address: Ipv4Addr::new(10, 0, 0, 2),
                firewall: FirewallSpec {
                    host_addresses: vec![Ipv4Addr::new(192, 0, 2, 1)],
                    subnet: (Ipv4Addr::new(10, 0, 0, 0), 24),
                    allow_smtp: false,
                    reach: vec!["10.0.0.6:5432".parse().unwrap()],
                    serve_port: Some(6379),
                },
            },
            hostname: "sandbox".into(),
            nameservers: vec![Ipv4Addr::new(9, 9, 9, 9)],
            exit_file: Some("/data/run/app.exit".into()),
            tty: false,
        };
        let framed = encode(&spec).unwrap();
        let decoded = decode(&framed[..]).unwrap();
        assert_eq!(decoded.command, "echo hi");
        assert_eq!(decoded.env, spec.env);
        assert_eq!(decoded.limited_dirs, spec.limited_dirs);
        assert_eq!(decoded.network.sandbox_address, Ipv4Addr::new(10, 0, 0, 2));
        let firewall = &decoded.network.firewall;
        assert_eq!(firewall.reach, spec.network.firewall.reach);
        assert_eq!(firewall.serve_port, Some(6379));
    }

    #[test]
    fn a_truncated_spec_is_an_error() {
        let framed = [10u8, 0, 0, 0, b'{'];
        assert!(decode(&framed[..]).is_err());
    }
}
