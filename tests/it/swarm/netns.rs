//! A network namespace of the test's own, joined to the host by a veth pair: the host end
//! `10.215.N.1/24`, the namespace end `10.215.N.2/24`, N from the test's pid (not 10.213: a
//! local daemon's default sandbox subnet; not 10.214: the sandboxed tests'). A second
//! "machine" for the two-node swarm test; removed (with the pair) when dropped.

use std::net::Ipv4Addr;
use std::process::Command;

pub struct Netns {
    pub name: String,
    /// The host end's interface name.
    pub host_link: String,
    pub host_ip: Ipv4Addr,
    pub inner_ip: Ipv4Addr,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let output = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    match output.status.success() {
        true => Ok(()),
        false => Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        )),
    }
}

impl Netns {
    pub fn create() -> Result<Netns, String> {
        let pid = std::process::id();
        let subnet = 16 + (pid % 200) as u8;
        let netns = Netns {
            name: format!("slipway-node2-{pid}"),
            host_link: format!("swn2h{}", pid % 100_000),
            host_ip: Ipv4Addr::new(10, 215, subnet, 1),
            inner_ip: Ipv4Addr::new(10, 215, subnet, 2),
        };
        let inner_link = format!("swn2n{}", pid % 100_000);
        ip(&["netns", "add", &netns.name])?;
        ip(&[
            "link",
            "add",
            &netns.host_link,
            "type",
            "veth",
            "peer",
            "name",
            &inner_link,
            "netns",
            &netns.name,
        ])?;
        ip(&[
            "addr",
            "add",
            &format!("{}/24", netns.host_ip),
            "dev",
            &netns.host_link,
        ])?;
        ip(&["link", "set", &netns.host_link, "up"])?;
        let inside = |args: &[&str]| {
            let mut all = vec!["-n", netns.name.as_str()];
            all.extend_from_slice(args);
            ip(&all)
        };
        inside(&[
            "addr",
            "add",
            &format!("{}/24", netns.inner_ip),
            "dev",
            &inner_link,
        ])?;
        inside(&["link", "set", &inner_link, "up"])?;
        inside(&["link", "set", "lo", "up"])?;
        Ok(netns)
    }

    /// Cuts the namespace off the host, as a machine that loses its network.
    pub fn cut(&self) -> Result<(), String> {
        ip(&["link", "set", &self.host_link, "down"])
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["link", "del", &self.host_link]);
        let _ = ip(&["netns", "del", &self.name]);
    }
}
