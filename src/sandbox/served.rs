//! The endpoints the host forwards sandbox→sandbox traffic to: the host table's
//! [`firewall::SERVED_SET`], kept by the namespaced runner (`ns.rs` adds a step's endpoint
//! before its link comes up, `step.rs` removes it when the step ends). Counted, so that a
//! step restarted on its pinned link (the same endpoint) before the previous one's cleanup
//! ran never loses its element to that cleanup.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddrV4;
use std::sync::Mutex;

use super::firewall;

pub(super) struct Served {
    /// The host table.
    table: String,
    /// Each endpoint in the set, and how many live steps serve it.
    counts: Mutex<HashMap<SocketAddrV4, usize>>,
}

impl Served {
    pub(super) fn new(table: &str) -> Served {
        Served {
            table: table.to_owned(),
            counts: Mutex::default(),
        }
    }

    /// One more step serves `endpoint`: the first puts it in the set.
    pub(super) fn add(&self, endpoint: SocketAddrV4) -> io::Result<()> {
        let mut counts = self
            .counts
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let count = counts.entry(endpoint).or_insert(0);
        if *count == 0 {
            let script = firewall::served_elements(&self.table, true, &[endpoint]);
            if let Err(error) = firewall::nft_apply(&script, None) {
                counts.remove(&endpoint);
                return Err(io::Error::other(format!(
                    "could not open {endpoint} to other sandboxes: {error}"
                )));
            }
        }
        *count += 1;
        Ok(())
    }

    /// One step fewer serves `endpoint`: the last takes it out of the set.
    pub(super) fn remove(&self, endpoint: SocketAddrV4) {
        let mut counts = self
            .counts
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let Some(count) = counts.get_mut(&endpoint) else {
            return;
        };
        *count -= 1;
        if *count > 0 {
            return;
        }
        counts.remove(&endpoint);
        let script = firewall::served_elements(&self.table, false, &[endpoint]);
        if let Err(error) = firewall::nft_apply(&script, None) {
            // Gone with the table (a flush) is fine: a restored table starts without it.
            tracing::warn!(%error, %endpoint, "could not close a served endpoint");
        }
    }

    /// The script that puts every endpoint back into a restored host table.
    pub(super) fn script(&self) -> String {
        let counts = self
            .counts
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let endpoints: Vec<SocketAddrV4> = counts.keys().copied().collect();
        firewall::served_elements(&self.table, true, &endpoints)
    }
}
