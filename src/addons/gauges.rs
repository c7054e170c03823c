//! What an add-on's metrics show beyond its disk, measured with each disk-watch round
//! (`watch.rs`): its open client connections (the established TCP connections to its port in
//! its own network namespace, read from `/proc/<pid>/net/tcp{,6}` of its sandbox's init — no query,
//! no password, the same for PostgreSQL and Redis), the WAL segments staged on its volume and
//! not yet moved into its backups volume (point-in-time recovery's backlog), and from the
//! store its newest backup's outcome and the time of its newest good one.

use super::Addons;
use crate::metrics::addons::BackupFigures;
use crate::store::addon_backups::BackupState;
use crate::store::addons::AddonRecord;
use crate::supervisor::InstanceState;

impl Addons {
    /// Client connections to the running server; `None` when it does not run.
    pub(super) async fn connections(&self, addon: &AddonRecord) -> Option<u64> {
        let pid = self
            .supervisor
            .instances(&addon.id)
            .into_iter()
            .find(|view| view.status.state == InstanceState::Running)
            .map(|view| view.status.pid)?;
        let port = addon.port;
        tokio::task::spawn_blocking(move || {
            // The helper is outside the sandbox; its child, the sandbox's init, is in the
            // add-on's network namespace. Mode none: the host's own table (the add-on has a
            // port of its own there).
            let proc_dir = match pid {
                Some(helper) => {
                    let children =
                        std::fs::read_to_string(format!("/proc/{helper}/task/{helper}/children"))
                            .ok()?;
                    let init = children.split_whitespace().next()?.to_owned();
                    format!("/proc/{init}/net")
                }
                None => "/proc/self/net".to_owned(),
            };
            let tables = ["tcp", "tcp6"]
                .iter()
                .filter_map(|table| std::fs::read_to_string(format!("{proc_dir}/{table}")).ok())
                .map(|text| established_to(&text, port));
            Some(tables.sum())
        })
        .await
        .ok()
        .flatten()
    }

    /// PITR: segments staged on the add-on's volume, not yet in its backups volume.
    pub(super) async fn wal_backlog(&self, addon: &AddonRecord) -> Option<u64> {
        if !addon.pitr {
            return None;
        }
        let staging = self.volume(addon).dir.join(super::pitr::STAGING);
        tokio::task::spawn_blocking(move || {
            let entries = std::fs::read_dir(staging).ok()?;
            Some(
                entries
                    .flatten()
                    .filter(|entry| !entry.file_name().to_string_lossy().starts_with('.'))
                    .count() as u64,
            )
        })
        .await
        .ok()
        .flatten()
    }

    /// Its newest finished backup's outcome and its newest good one's time.
    pub(super) async fn backup_figures(&self, addon: &AddonRecord) -> BackupFigures {
        let id = addon.id.clone();
        let backups = self
            .store
            .call(move |s| s.addon_backups(&id))
            .await
            .unwrap_or_default();
        let finished = backups
            .iter()
            .filter(|b| matches!(b.state, BackupState::Ok | BackupState::Failed));
        BackupFigures {
            last_ok: finished
                .clone()
                .max_by_key(|b| b.created_ms)
                .map(|b| b.state == BackupState::Ok),
            last_good_ms: finished
                .filter(|b| b.state == BackupState::Ok)
                .filter_map(|b| b.finished_ms)
                .max(),
        }
    }
}

/// The established connections to local `port` in a `/proc/net/tcp` table.
fn established_to(table: &str, port: u16) -> u64 {
    let local_port = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let mut fields = line.split_whitespace();
            let local = fields.nth(1).unwrap_or("");
            let state = fields.nth(1).unwrap_or("");
            local.ends_with(&local_port) && state == "01"
        })
        .count() as u64
}

#[cfg(test)]
mod tests {
    use super::established_to;

    #[test]
    fn only_established_connections_to_the_port_count() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:1538 00000000:0000 0A 00000000:00000000 00:00000000 00000000   100        0 1 1
   1: 0610D60A:1538 0510D60A:A1B2 01 00000000:00000000 00:00000000 00000000   100        0 2 1
   2: 0610D60A:1538 0510D60A:A1B4 01 00000000:00000000 00:00000000 00000000   100        0 3 1
   3: 0610D60A:1538 0510D60A:A1B6 06 00000000:00000000 00:00000000 00000000   100        0 4 1
   4: 0610D60A:A1B8 0510D60A:1538 01 00000000:00000000 00:00000000 00000000   100        0 5 1
";
        // 0x1538 = 5432: the listener (0A), two established, one in TIME_WAIT (06), and an
        // outgoing connection to another server's 5432 are told apart.
        assert_eq!(established_to(table, 5432), 2);
        assert_eq!(established_to(table, 6379), 0);
    }
}
