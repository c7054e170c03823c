//! The sleeping apps' families (issue 35): apps asleep now (from the route snapshot), wakes
//! by result, and the wake duration histogram. Operator pages only.

use super::Observatory;
use crate::metrics::exposition::{Exposition, Kind};
use crate::router::Target;

pub(super) fn sleep_families(observatory: &Observatory, page: &mut Exposition) {
    let asleep = observatory
        .routes
        .snapshot()
        .apps
        .values()
        .filter(|target| matches!(target, Some(Target::Asleep(_))))
        .count();
    page.family(
        "slipway_sleeping_apps",
        Kind::Gauge,
        "Apps asleep now (stopped for want of visitors; the next request wakes them).",
    );
    page.sample("slipway_sleeping_apps", &[], asleep as f64);
    let (woke, failed) = observatory.daemon.wakes.counts();
    page.family(
        "slipway_app_wakes_total",
        Kind::Counter,
        "Wakes of sleeping apps, by result.",
    );
    page.sample("slipway_app_wakes_total", &[("result", "ok")], woke as f64);
    page.sample(
        "slipway_app_wakes_total",
        &[("result", "failed")],
        failed as f64,
    );
    page.family(
        "slipway_app_wake_duration_seconds",
        Kind::Histogram,
        "Time from a sleeping app's wake call to its route serving it again.",
    );
    page.histogram(
        "slipway_app_wake_duration_seconds",
        &[],
        &observatory.daemon.wakes.duration(),
    );
}
