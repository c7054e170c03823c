//! The add-ons' families on the Prometheus page: `slipway_addon_up` (its server runs under the
//! supervisor, not restarting), and as the disk watch last measured them
//! `slipway_addon_disk_used_bytes`, `slipway_addon_connections`,
//! `slipway_addon_wal_backlog_segments` (PITR), `slipway_addon_last_backup_ok` and
//! `slipway_addon_last_good_backup_timestamp_seconds` (backup age: `time() - …`); labelled by
//! add-on id and project slug; only the add-ons of the page's projects. Left out when there
//! is none.

use super::{Observatory, ProjectFigures};
use crate::metrics::addons::AddonDisk;
use crate::metrics::exposition::{Exposition, Kind};
use crate::supervisor::InstanceState;

/// One gauge's value for an add-on (`None`: not shown for it).
type Reading = fn(&AddonDisk) -> Option<f64>;

pub(super) fn addon_families(
    observatory: &Observatory,
    page: &mut Exposition,
    projects: &[ProjectFigures],
) {
    let disks: Vec<(String, String, AddonDisk)> = observatory
        .daemon
        .addon_disks
        .snapshot()
        .into_iter()
        .filter_map(|(id, disk)| {
            let figures = projects.iter().find(|f| f.record.id == disk.project_id)?;
            Some((id, figures.record.slug.clone(), disk))
        })
        .collect();
    if disks.is_empty() {
        return;
    }
    page.family(
        "slipway_addon_up",
        Kind::Gauge,
        "1 while the add-on's server runs (not starting or restarting).",
    );
    for (id, slug, _) in &disks {
        let up = observatory
            .supervisor
            .instances(id)
            .iter()
            .any(|view| view.status.state == InstanceState::Running);
        let labels = [("addon", id.as_str()), ("project", slug.as_str())];
        page.sample("slipway_addon_up", &labels, f64::from(u8::from(up)));
    }
    let gauges: [(&str, &str, Reading); 5] = [
        (
            "slipway_addon_disk_used_bytes",
            "Bytes used on the add-on's data volume (measured every addons.disk_check_interval_s).",
            |d| Some(d.used_bytes as f64),
        ),
        (
            "slipway_addon_connections",
            "Established client connections to the add-on's server.",
            |d| d.connections.map(|n| n as f64),
        ),
        (
            "slipway_addon_wal_backlog_segments",
            "PITR: WAL segments archived on the add-on's volume, not yet moved into its backups volume.",
            |d| d.wal_backlog.map(|n| n as f64),
        ),
        (
            "slipway_addon_last_backup_ok",
            "1 when the add-on's newest finished backup was proven good, 0 when it failed.",
            |d| d.backups.last_ok.map(|ok| f64::from(u8::from(ok))),
        ),
        (
            "slipway_addon_last_good_backup_timestamp_seconds",
            "When the add-on's newest good backup finished (Unix seconds; its age is time() minus this).",
            |d| d.backups.last_good_ms.map(|ms| ms as f64 / 1000.0),
        ),
    ];
    for (name, help, value) in gauges {
        let samples: Vec<_> = disks
            .iter()
            .filter_map(|(id, slug, disk)| Some((id, slug, value(disk)?)))
            .collect();
        if samples.is_empty() {
            continue;
        }
        page.family(name, Kind::Gauge, help);
        for (id, slug, value) in samples {
            page.sample(
                name,
                &[("addon", id.as_str()), ("project", slug.as_str())],
                value,
            );
        }
    }
}
