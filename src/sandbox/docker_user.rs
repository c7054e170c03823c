//! Running next to dockerd (issue 36). dockerd with its firewall on (its default) jumps from
//! `table ip filter`'s FORWARD chain to its `DOCKER-USER` chain first and, when it turned IPv4
//! forwarding on itself, sets FORWARD's policy to DROP. nftables runs every base chain on the
//! hook and an accept in the runner's own table does not outweigh a drop there: sandbox
//! egress, replies and add-on links would stop.
//!
//! When that chain exists, the runner puts two rules at its top that accept what comes from
//! and goes to its own interfaces (`-i <prefix>+`, `-o <prefix>+`). What a sandbox may reach
//! is still decided by the runner's host table and each sandbox's own table, whose drops
//! still apply. The rules go in through the `iptables` binary, the tool dockerd itself uses:
//! nft-native rules inside iptables-nft's tables can make iptables refuse the table, and
//! dockerd with it. [`super::ns`] checks them with the host table, before every spawn and
//! every [`CHECK`] (a dockerd started after the daemon), and removes them at shutdown.

use std::io;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::shared::Shared;

/// dockerd's chain for the operator's own rules, evaluated first in FORWARD.
pub const CHAIN: &str = "DOCKER-USER";

/// How often the runner checks its rules in [`CHAIN`] (one `iptables -S`): a dockerd started
/// after the daemon cuts sandbox egress for at most this long.
pub const CHECK: Duration = Duration::from_secs(5);

/// At most this long for the xtables lock (iptables-legacy; iptables-nft takes no lock), so
/// that a spawn never hangs on another program's iptables call.
const WAIT: [&str; 2] = ["-w", "5"];

/// What [`ensure`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ensured {
    /// No [`CHAIN`] (no dockerd firewall, or no `iptables`): nothing to do.
    NoChain,
    /// Both rules were in place.
    Present,
    /// At least one rule was missing and is now inserted.
    Added,
}

/// The two rules, as `iptables` arguments after the chain: accept from and to every
/// interface starting with `prefix`.
pub fn rules(prefix: &str) -> [[String; 4]; 2] {
    let interfaces = format!("{prefix}+");
    ["-i", "-o"].map(|direction| {
        [
            direction.to_owned(),
            interfaces.clone(),
            "-j".to_owned(),
            "ACCEPT".to_owned(),
        ]
    })
}

/// The full `iptables` argument list for `action` (`-I`, `-D`) on `rule` in [`CHAIN`].
pub fn command_args(action: &str, rule: &[String; 4]) -> Vec<String> {
    let mut args: Vec<String> = WAIT
        .iter()
        .chain(&[action, CHAIN])
        .map(|a| a.to_string())
        .collect();
    args.extend(rule.iter().cloned());
    args
}

/// How many times each of [`rules`] appears in `listing` (the output of
/// `iptables -S DOCKER-USER`).
pub fn count_in(listing: &str, prefix: &str) -> [usize; 2] {
    rules(prefix).map(|rule| {
        let line = format!("-A {CHAIN} {}", rule.join(" "));
        listing.lines().filter(|l| l.trim_end() == line).count()
    })
}

/// Inserts whichever of the two rules is missing from [`CHAIN`], if the chain exists.
pub fn ensure(prefix: &str) -> io::Result<Ensured> {
    let Some(listing) = list()? else {
        return Ok(Ensured::NoChain);
    };
    let mut added = false;
    for (rule, count) in rules(prefix).iter().zip(count_in(&listing, prefix)) {
        if count == 0 {
            iptables(&command_args("-I", rule))?;
            added = true;
        }
    }
    Ok(if added {
        Ensured::Added
    } else {
        Ensured::Present
    })
}

/// Deletes this runner's rules (every copy of them) from [`CHAIN`]; others' stay.
pub fn remove(prefix: &str) -> io::Result<()> {
    let Some(listing) = list()? else {
        return Ok(());
    };
    for (rule, count) in rules(prefix).iter().zip(count_in(&listing, prefix)) {
        for _ in 0..count {
            iptables(&command_args("-D", rule))?;
        }
    }
    Ok(())
}

/// `iptables -S DOCKER-USER`, or `None` if the chain (or `iptables`) is not there.
fn list() -> io::Result<Option<String>> {
    let output = match base_command()
        .args(WAIT)
        .args(["-S", CHAIN])
        .stdin(Stdio::null())
        .output()
    {
        Ok(output) => output,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    Ok(output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned()))
}

fn iptables(args: &[String]) -> io::Result<()> {
    let output = base_command().args(args).stdin(Stdio::null()).output()?;
    if !output.status.success() {
        return Err(io::Error::other(format!(
            "iptables {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(())
}

impl Shared {
    /// Makes dockerd's `DOCKER-USER` chain, if there is one, accept the sandboxes' interfaces
    /// (see the module's doc).
    pub(super) fn ensure_docker_user(&self) {
        if self.stopped.load(Ordering::SeqCst) {
            return;
        }
        match ensure(&self.interface_prefix) {
            Ok(found) => {
                if found == Ensured::Added {
                    tracing::info!(
                        prefix = %self.interface_prefix,
                        "dockerd's firewall found: accepting sandbox interfaces in DOCKER-USER"
                    );
                }
                self.docker_user_failing.store(false, Ordering::SeqCst);
            }
            Err(error) => {
                if !self.docker_user_failing.swap(true, Ordering::SeqCst) {
                    tracing::warn!(%error, "dockerd's firewall found, but the sandbox rules could not be added: sandbox egress is cut");
                }
            }
        }
    }
}

fn base_command() -> Command {
    let mut command = Command::new("iptables");
    command.env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
    command
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rules_accept_the_runners_interfaces_both_ways() {
        let [from, to] = rules("sw12ab");
        assert_eq!(
            command_args("-I", &from).join(" "),
            "-w 5 -I DOCKER-USER -i sw12ab+ -j ACCEPT"
        );
        assert_eq!(
            command_args("-D", &to).join(" "),
            "-w 5 -D DOCKER-USER -o sw12ab+ -j ACCEPT"
        );
    }

    #[test]
    fn only_this_runners_rules_are_counted() {
        // As `iptables -S DOCKER-USER` prints it, with another daemon's rules in it.
        let listing = "-N DOCKER-USER\n\
                       -A DOCKER-USER -o sw12ab+ -j ACCEPT\n\
                       -A DOCKER-USER -i sw99ff+ -j ACCEPT\n\
                       -A DOCKER-USER -o sw12ab+ -j ACCEPT\n\
                       -A DOCKER-USER -i sw12abc+ -j ACCEPT\n\
                       -A DOCKER-USER -j RETURN\n";
        assert_eq!(count_in(listing, "sw12ab"), [0, 2]);
        assert_eq!(count_in(listing, "sw99ff"), [1, 0]);
        assert_eq!(
            count_in("-N DOCKER-USER\n-A DOCKER-USER -j RETURN\n", "sw12ab"),
            [0, 0]
        );
    }
}
