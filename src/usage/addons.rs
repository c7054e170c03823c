//! The add-ons' families on the Prometheus page: `slipway_addon_up` (its server runs under the
//! supervisor, not restarting) and `slipway_addon_disk_used_bytes` (as the disk watch last
//! measured it), labelled by add-on id and project slug; only the add-ons of the page's
//! projects. Left out when there is none.

use super::{Observatory, ProjectFigures};
use crate::metrics::exposition::{Exposition, Kind};
use crate::supervisor::InstanceState;

pub(super) fn addon_families(
    observatory: &Observatory,
    page: &mut Exposition,
    projects: &[ProjectFigures],
) {
    let disks: Vec<(String, String, u64)> = observatory
        .daemon
        .addon_disks
        .snapshot()
        .into_iter()
        .filter_map(|(id, disk)| {
            let figures = projects.iter().find(|f| f.record.id == disk.project_id)?;
            Some((id, figures.record.slug.clone(), disk.used_bytes))
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
    page.family(
        "slipway_addon_disk_used_bytes",
        Kind::Gauge,
        "Bytes used on the add-on's data volume (measured every addons.disk_check_interval_s).",
    );
    for (id, slug, used) in &disks {
        let labels = [("addon", id.as_str()), ("project", slug.as_str())];
        page.sample("slipway_addon_disk_used_bytes", &labels, *used as f64);
    }
}
