//! `GET /api/projects/{projectId}/usage/history` and `GET /api/usage/history` (issue 37): the
//! samples `usage::history` keeps, as typed points. The query is checked here exactly as
//! [`HistoryQuery`]'s schema says (`HISTORY_TIME_PATTERN`, the step's two names).

use std::sync::Arc;

use super::reply::Reply;
use super::types::{
    BuildPoint, HistoryQuery, HistoryStep, InstancePoint, MachineHistory, MachinePoint,
    ProcessTypePoint, StatusClassCounts, UsageHistory, UsagePoint,
};
use super::{projects, ApiError, ApiRequest, Context};
use crate::error_code::ErrorCode;
use crate::usage::history::{self, MachineSample, ProjectSample, Step, MACHINE};

/// The range asked for: `[from, to)` in Unix seconds and the step.
struct Range {
    from: u64,
    to: u64,
    step: HistoryStep,
}

pub async fn project(
    ctx: &Arc<Context>,
    id_or_slug: &str,
    request: &ApiRequest,
) -> Result<Reply, ApiError> {
    let range = parse_query(request.uri().query(), crate::ids::now_ms() / 1000)?;
    let project = projects::find(ctx, id_or_slug).await?;
    let (id, step, default_cpus) = (
        project.id.clone(),
        step_of(range.step),
        ctx.config.limits.app_cpus,
    );
    let (from, to) = (range.from, range.to);
    let (samples, formation) = ctx
        .store
        .call(move |store| -> crate::store::Result<_> {
            let samples = history::read::<ProjectSample>(store, &id, step, from, to)?;
            Ok((samples, store.formation(&id)?))
        })
        .await?;
    let cpu_limit_cores = samples.last().and_then(|(_, last)| {
        let limit: f64 = last
            .types
            .iter()
            .map(|(name, figures)| {
                let cpus = formation.types.get(name).and_then(|t| t.cpus);
                f64::from(figures.instances) * cpus.unwrap_or(default_cpus)
            })
            .sum();
        (limit > 0.0).then_some(limit)
    });
    Ok(Reply::json(&UsageHistory {
        project_id: project.id,
        step: range.step,
        from: crate::ids::rfc3339(range.from * 1000),
        to: crate::ids::rfc3339(range.to * 1000),
        cpu_limit_cores,
        points: samples.iter().map(|(at, s)| usage_point(*at, s)).collect(),
    }))
}

pub async fn machine(ctx: &Arc<Context>, request: &ApiRequest) -> Result<Reply, ApiError> {
    let range = parse_query(request.uri().query(), crate::ids::now_ms() / 1000)?;
    let (step, from, to) = (step_of(range.step), range.from, range.to);
    let samples = ctx
        .store
        .call(move |store| history::read::<MachineSample>(store, MACHINE, step, from, to))
        .await?;
    Ok(Reply::json(&MachineHistory {
        step: range.step,
        from: crate::ids::rfc3339(range.from * 1000),
        to: crate::ids::rfc3339(range.to * 1000),
        points: samples
            .iter()
            .map(|(at, s)| machine_point(*at, s))
            .collect(),
    }))
}

fn step_of(step: HistoryStep) -> Step {
    match step {
        HistoryStep::Minute => Step::Minute,
        HistoryStep::Hour => Step::Hour,
    }
}

fn cores(cpu_seconds: Option<f64>, minutes: u32) -> Option<f64> {
    cpu_seconds.map(|seconds| seconds / (f64::from(minutes.max(1)) * 60.0))
}

fn usage_point(at: u64, sample: &ProjectSample) -> UsagePoint {
    let [informational, success, redirection, client_error, server_error] = sample.requests;
    let ms = |q: f64| sample.latency_quantile(q).map(|s| (s * 1e6).round() / 1e3);
    let types: Vec<ProcessTypePoint> = sample
        .types
        .iter()
        .map(|(name, figures)| ProcessTypePoint {
            process_type: name.clone(),
            instances: figures.instances,
            memory_bytes: figures.memory.map(|g| g.avg),
            memory_max_bytes: figures.memory.map(|g| g.max),
            memory_limit_bytes: figures.memory_limit_mb << 20,
            cpu_cores: cores(figures.cpu_seconds, sample.minutes),
            by_instance: figures
                .by_instance
                .iter()
                .map(|(instance, own)| InstancePoint {
                    instance: instance.clone(),
                    memory_bytes: own.memory.map(|g| g.avg),
                    memory_max_bytes: own.memory.map(|g| g.max),
                    cpu_cores: cores(own.cpu_seconds, sample.minutes),
                })
                .collect(),
        })
        .collect();
    let limit: u64 = types.iter().map(|t| t.memory_limit_bytes).sum();
    UsagePoint {
        at: crate::ids::rfc3339(at * 1000),
        minutes: sample.minutes,
        requests: StatusClassCounts {
            informational,
            success,
            redirection,
            client_error,
            server_error,
        },
        requests_total: sample.requests.iter().sum(),
        latency_p50_ms: ms(0.5),
        latency_p95_ms: ms(0.95),
        bytes_in: sample.bytes_in,
        bytes_out: sample.bytes_out,
        upstream_errors: sample.upstream_errors,
        memory_bytes: sample.memory.map(|g| g.avg),
        memory_max_bytes: sample.memory.map(|g| g.max),
        memory_limit_bytes: (limit > 0).then_some(limit),
        cpu_cores: cores(sample.cpu_seconds, sample.minutes),
        process_types: types,
        builds: sample
            .builds
            .iter()
            .map(|build| BuildPoint {
                provisioning_id: build.run.clone(),
                duration_seconds: build.seconds,
                result: build.result.clone(),
            })
            .collect(),
    }
}

fn machine_point(at: u64, sample: &MachineSample) -> MachinePoint {
    let cpu = sample.cpu_busy_seconds.zip(sample.cpu_seconds);
    MachinePoint {
        at: crate::ids::rfc3339(at * 1000),
        minutes: sample.minutes,
        cpu_busy: cpu.map(|(busy, all)| if all > 0.0 { busy / all } else { 0.0 }),
        cpus: cores(sample.cpu_seconds, sample.minutes),
        memory_used_bytes: sample.memory_used.map(|g| g.avg),
        memory_max_bytes: sample.memory_used.map(|g| g.max),
        memory_total_bytes: sample.memory_total,
        disk_used_bytes: sample.disk_used,
        disk_total_bytes: sample.disk_total,
        connections: sample.connections.map(|g| g.avg),
        connections_max: sample.connections.map(|g| g.max),
    }
}

fn invalid(message: String) -> ApiError {
    ApiError::new(ErrorCode::InvalidQuery, message)
}

/// `from`, `to` and `step`; anything else, or a value the schema would not take, is
/// `INVALID_QUERY`. A `from` at or after `to` is an empty range, not an error.
fn parse_query(query: Option<&str>, now: u64) -> Result<Range, ApiError> {
    let mut parsed = HistoryQuery::default();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, raw) = pair.split_once('=').unwrap_or((pair, ""));
        let value = crate::http_util::percent_decode(raw.as_bytes())
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .ok_or_else(|| invalid(format!("{key}={raw:?} is not percent-encoded UTF-8")))?;
        match key {
            "from" | "to" => {
                if parse_time(&value).is_none() {
                    return Err(invalid(format!(
                        "{key}={value:?} must be an RFC 3339 time such as 2025-01-31T12:00:00Z"
                    )));
                }
                *(if key == "from" {
                    &mut parsed.from
                } else {
                    &mut parsed.to
                }) = Some(value);
            }
            "step" => {
                parsed.step = Some(match value.as_str() {
                    "minute" => HistoryStep::Minute,
                    "hour" => HistoryStep::Hour,
                    _ => return Err(invalid(format!("step={value:?} must be minute or hour"))),
                })
            }
            other => {
                return Err(invalid(format!(
                    "unknown query parameter {other:?}; use from, to, step"
                )))
            }
        }
    }
    let step = parsed.step.unwrap_or(HistoryStep::Minute);
    // Without `to`: up to now, the minute under way included even in its first second (the
    // range's end is exclusive and `now` is whole seconds).
    let to = parsed.to.as_deref().and_then(parse_time).unwrap_or(now + 1);
    let span = match step {
        HistoryStep::Minute => 3600,
        HistoryStep::Hour => 7 * 24 * 3600,
    };
    let from = parsed
        .from
        .as_deref()
        .and_then(parse_time)
        .unwrap_or(to.saturating_sub(span));
    Ok(Range { from, to, step })
}

/// [`super::types::HISTORY_TIME_PATTERN`] → Unix seconds (a time before 1970 is 0); a day
/// past its month's end counts on into the next month. `None` for anything else.
pub(super) fn parse_time(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = b.get(range)?;
        part.iter()
            .all(u8::is_ascii_digit)
            .then(|| part.iter().fold(0i64, |n, d| n * 10 + i64::from(d - b'0')))
    };
    let fixed = [(4, b'-'), (7, b'-'), (10, b'T'), (13, b':'), (16, b':')];
    if fixed.iter().any(|(i, c)| b.get(*i) != Some(c)) {
        return None;
    }
    let (year, month, day) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
    let (hour, minute, second) = (digits(11..13)?, digits(14..16)?, digits(17..19)?);
    let ok = (1..=12).contains(&month) && (1..=31).contains(&day);
    if !ok || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let mut rest = &text[19..];
    if let Some(fraction) = rest.strip_prefix('.') {
        let len = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if !(1..=9).contains(&len) {
            return None;
        }
        rest = &fraction[len..];
    }
    let offset = match rest.as_bytes() {
        b"Z" => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let field = |a: &u8, b: &u8| {
                (a.is_ascii_digit() && b.is_ascii_digit())
                    .then(|| i64::from(a - b'0') * 10 + i64::from(b - b'0'))
            };
            let (h, m) = (field(h1, h2)?, field(m1, m2)?);
            if h > 23 || m > 59 {
                return None;
            }
            (h * 60 + m) * 60 * if *sign == b'-' { -1 } else { 1 }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, 1) + day - 1;
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset;
    Some(u64::try_from(seconds).unwrap_or(0))
}

/// Days from 1970-01-01 to the given date (proleptic Gregorian; Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_exactly_as_the_pattern_says() {
        for (text, expected) in [
            ("1970-01-01T00:00:00Z", Some(0)),
            ("2024-02-29T12:00:00.5+02:00", Some(1_709_200_800)),
            ("2023-02-31T00:00:00Z", Some(1_677_801_600)), // 2023-03-03
            ("1969-12-31T23:59:59Z", Some(0)),
            ("2024-13-01T00:00:00Z", None),
            ("2024-01-01 00:00:00Z", None),
            ("2024-01-01T00:00:00", None),
            ("2024-01-01T00:00:00.Z", None),
            ("2024-01-01T24:00:00Z", None),
            ("2024-01-01T00:00:00+24:00", None),
            ("٢٠٢٤-01-01T00:00:00Z", None),
        ] {
            assert_eq!(parse_time(text), expected, "{text}");
        }
    }

    #[test]
    fn queries_default_and_refuse() {
        // Up to now inclusive: a minute that began this very second is in.
        let range = parse_query(None, 10_000).unwrap();
        assert_eq!(
            (range.from, range.to, range.step),
            (6_401, 10_001, HistoryStep::Minute)
        );
        let range = parse_query(Some("step=hour&to=1970-01-08T00%3A00%3A00Z"), 0).unwrap();
        assert_eq!((range.from, range.to), (0, 7 * 86_400));
        for bad in ["step=day", "from=yesterday", "limit=5", "from=%zz"] {
            let error = parse_query(Some(bad), 0).err().expect(bad);
            assert_eq!(error.code, ErrorCode::InvalidQuery, "{bad}");
        }
    }
}
