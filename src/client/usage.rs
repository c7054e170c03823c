//! `slipway usage PROJECT [--json]`: one project's figures from
//! `GET /api/projects/{projectId}/usage`, as a short summary (or the JSON itself).

use std::process::ExitCode;

use crate::api::types::ProjectUsage;

use super::http::ApiClient;
use super::{path_segment, ClientError};

pub async fn usage(api: &ApiClient, project: &str, json: bool) -> Result<ExitCode, ClientError> {
    let path = format!("/api/projects/{}/usage", path_segment(project));
    if json {
        return api.print_json(&path).await;
    }
    let usage: ProjectUsage = api.get(&path).await?;
    print!("{}", summary(&usage));
    Ok(ExitCode::SUCCESS)
}

/// The summary `slipway usage` prints.
pub fn summary(usage: &ProjectUsage) -> String {
    let mut out = format!(
        "{} ({}) since {}\n",
        usage.slug, usage.project_id, usage.since
    );
    let classes: Vec<String> = usage
        .requests
        .iter()
        .map(|(class, count)| format!("{class} {count}"))
        .collect();
    out.push_str(&format!(
        "requests       {} ({})\n",
        usage.requests_total,
        classes.join(", ")
    ));
    let histogram = &usage.request_duration;
    if histogram.count > 0 {
        out.push_str(&format!(
            "latency        mean {:.1} ms, p50 ≤ {}, p99 ≤ {}\n",
            histogram.sum_seconds * 1000.0 / histogram.count as f64,
            quantile_bound(usage, 0.5),
            quantile_bound(usage, 0.99),
        ));
    }
    out.push_str(&format!(
        "received       {}\n",
        human_bytes(usage.request_bytes)
    ));
    out.push_str(&format!(
        "sent           {}\n",
        human_bytes(usage.response_bytes)
    ));
    out.push_str(&format!("upstream errors {}\n", usage.upstream_errors));
    out.push_str(&format!("app restarts   {}\n", usage.app_restarts));
    match &usage.app {
        None => out.push_str("app            none (static site or nothing live)\n"),
        Some(app) => out.push_str(&format!(
            "app            {}: memory {}, CPU {}\n",
            app.deployment_id,
            app.memory_bytes
                .map(human_bytes)
                .unwrap_or_else(|| "unknown (no cgroup)".into()),
            app.cpu_seconds
                .map(|s| format!("{s:.2} s"))
                .unwrap_or_else(|| "unknown (no cgroup)".into()),
        )),
    }
    out.push_str(&format!(
        "build cache    {}\n",
        human_bytes(usage.build_cache_bytes)
    ));
    for certificate in &usage.certificates {
        out.push_str(&format!(
            "certificate    {} expires {}\n",
            certificate.domain, certificate.expires_at
        ));
    }
    out
}

/// The smallest bucket bound that holds `quantile` of the requests (`> 10 s` past the last).
fn quantile_bound(usage: &ProjectUsage, quantile: f64) -> String {
    let histogram = &usage.request_duration;
    let wanted = (histogram.count as f64 * quantile).ceil() as u64;
    histogram
        .buckets
        .iter()
        .find(|bucket| bucket.count >= wanted)
        .map(|bucket| format!("{} ms", bucket.le * 1000.0))
        .unwrap_or_else(|| {
            let last = histogram.buckets.last().map(|b| b.le).unwrap_or(0.0);
            format!("> {last} s")
        })
}

/// `512 B`, `23.4 MiB`, … (1024-based).
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}
