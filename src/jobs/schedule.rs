//! Cron schedules: the five-field syntax, and the next due instant as a pure function of
//! (schedule, time zone, instant).
//!
//! # Syntax
//!
//! Five fields separated by spaces: `minute hour day-of-month month day-of-week`. Each field
//! is a comma-separated list of `*`, `N`, `A-B`, `*/S`, `A-B/S` or `N/S` (from N to the
//! field's maximum in steps of S). Months may be written `jan`..`dec` and weekdays
//! `sun`..`sat`, in any case; day-of-week runs 0-7, where 0 and 7 are both Sunday. The macros
//! `@yearly` (or `@annually`), `@monthly`, `@weekly`, `@daily` (or `@midnight`) and `@hourly`
//! stand for `0 0 1 1 *`, `0 0 1 * *`, `0 0 * * 0`, `0 0 * * *` and `0 * * * *`; `@reboot`
//! is rejected, since a schedule must name times. Jobs always fire at second 0. A range whose
//! start is after its end wraps round the field's end: `22-2` is 22, 23, 0, 1 and 2 o'clock,
//! `fri-mon` Friday to Monday.
//!
//! As in Vixie cron, when both day-of-month and day-of-week are restricted, a day is due if
//! EITHER matches (`0 0 13 * 5` runs on every 13th and on every Friday); when either of them
//! is `*`, only the other counts. A field counts as `*` when it starts with `*`, as in Vixie
//! cron: `0 0 */10 * 1` runs on the 1st, 11th, 21st and 31st only when that day is a Monday.
//!
//! # Time zones
//!
//! - A schedule names wall-clock times in its zone.
//! - A wall time that does not exist (the hour skipped when clocks go forward, e.g. 02:30 in
//!   America/New_York on 2026-03-08) fires once at the instant the gap ends (03:00 local, the
//!   first instant after the gap): once, even if several of the schedule's times fell in the
//!   gap.
//! - A wall time that occurs twice (the hour repeated when clocks go back) fires once, at its
//!   first occurrence, EXCEPT when the hour field covers every hour (`*`, or a list, range or
//!   step that includes all 24 hours): then each real occurrence fires (`30 * * * *` fires at
//!   01:30 EDT and again at 01:30 EST), so hourly jobs keep running every real hour.
//! - The instants returned are strictly increasing and never duplicated.
//!
//! A schedule with no due time within the next [`HORIZON_YEARS`] years (such as `0 0 30 2 *`)
//! has no next due time.

use std::fmt;

use jiff::civil::{Date, DateTime};
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{SignedDuration, Timestamp};

/// How far past `after` [`Schedule::next_after`] looks before it answers `None`. Long enough
/// for any schedule that can happen at all in practice (a leap-day job across 2100, a
/// Feb 29 that must also be a Sunday), and cheap: whole months and days are skipped.
pub const HORIZON_YEARS: i16 = 30;

/// The macros and the five fields each stands for.
pub(super) const MACROS: [(&str, &str); 7] = [
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];

const MACRO_LIST: &str = "@yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly";

const FIELD_LIST: &str = "minute hour day-of-month month day-of-week";

/// Every hour of the day, as an hour bit set.
const ALL_HOURS: u64 = (1 << 24) - 1;

/// What one of the five fields accepts.
pub(super) struct FieldSpec {
    label: &'static str,
    pub(super) min: u8,
    pub(super) max: u8,
    /// Names for `min`, `min + 1`, …, matched case-insensitively.
    pub(super) names: &'static [&'static str],
    /// What the names are, for error messages (empty when the field has none).
    names_hint: &'static str,
}

pub(super) const MINUTE: FieldSpec = FieldSpec {
    label: "field 1 (minute)",
    min: 0,
    max: 59,
    names: &[],
    names_hint: "",
};
pub(super) const HOUR: FieldSpec = FieldSpec {
    label: "field 2 (hour)",
    min: 0,
    max: 23,
    names: &[],
    names_hint: "",
};
pub(super) const DAY_OF_MONTH: FieldSpec = FieldSpec {
    label: "field 3 (day-of-month)",
    min: 1,
    max: 31,
    names: &[],
    names_hint: "",
};
pub(super) const MONTH: FieldSpec = FieldSpec {
    label: "field 4 (month)",
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
    names_hint: " or a month name (jan-dec)",
};
pub(super) const DAY_OF_WEEK: FieldSpec = FieldSpec {
    label: "field 5 (day-of-week)",
    min: 0,
    max: 7,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
    names_hint: " or a weekday name (sun-sat)",
};

/// Why a schedule or a time zone name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("the schedule is empty: expected 5 fields ({FIELD_LIST}) or one of {MACRO_LIST}")]
    Empty,
    #[error("expected 5 fields ({FIELD_LIST}), found {found}")]
    FieldCount { found: usize },
    #[error("@reboot is not supported: a schedule must name times; use 5 fields ({FIELD_LIST}) or one of {MACRO_LIST}")]
    Reboot,
    #[error("unknown macro {text:?}: use one of {MACRO_LIST}")]
    UnknownMacro { text: String },
    #[error("{field}: empty item in the list {text:?}")]
    EmptyItem { field: &'static str, text: String },
    #[error("{field}: {text:?} is not a number{expected}")]
    InvalidValue {
        field: &'static str,
        text: String,
        expected: &'static str,
    },
    #[error("{field}: {value} is out of range {min}-{max}")]
    OutOfRange {
        field: &'static str,
        value: String,
        min: u8,
        max: u8,
    },
    #[error("{field}: step {text:?} is not a number")]
    InvalidStep { field: &'static str, text: String },
    #[error("{field}: step {step} is out of range 1-{max} (in {item:?})")]
    StepOutOfRange {
        field: &'static str,
        step: String,
        max: u8,
        item: String,
    },
    #[error("unknown time zone {name:?}: it is not in the host's time zone database; use an IANA name such as \"Europe/Berlin\", or \"UTC\"")]
    UnknownZone { name: String },
}

/// A parsed cron schedule. Each field is a bit set: bit N set means value N matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// The text as given, trimmed, with single spaces.
    text: String,
    minutes: u64,
    hours: u64,
    days: u64,
    months: u64,
    /// Sunday is bit 0 (a 7 in the text is folded into it).
    weekdays: u64,
    /// Day-of-month started with `*` (Vixie's DOM_STAR).
    days_star: bool,
    /// Day-of-week started with `*` (Vixie's DOW_STAR).
    weekdays_star: bool,
}

impl Schedule {
    /// Parses five fields or a macro (see the module docs).
    pub fn parse(text: &str) -> Result<Schedule, ScheduleError> {
        let normal = text.split_whitespace().collect::<Vec<_>>().join(" ");
        if normal.is_empty() {
            return Err(ScheduleError::Empty);
        }
        let fields_text = if normal.starts_with('@') {
            expand_macro(&normal)?
        } else {
            normal.as_str()
        };
        let fields: Vec<&str> = fields_text.split(' ').collect();
        let [minute, hour, day, month, weekday] = fields[..] else {
            return Err(ScheduleError::FieldCount {
                found: fields.len(),
            });
        };
        let mut weekdays = parse_field(&DAY_OF_WEEK, weekday)?;
        if weekdays & (1 << 7) != 0 {
            weekdays = (weekdays & !(1 << 7)) | 1;
        }
        Ok(Schedule {
            minutes: parse_field(&MINUTE, minute)?,
            hours: parse_field(&HOUR, hour)?,
            days: parse_field(&DAY_OF_MONTH, day)?,
            months: parse_field(&MONTH, month)?,
            weekdays,
            days_star: day.starts_with('*'),
            weekdays_star: weekday.starts_with('*'),
            text: normal,
        })
    }

    /// The first due instant strictly after `after`, in `zone`; `None` if there is none
    /// within [`HORIZON_YEARS`] years (e.g. `0 0 30 2 *`).
    ///
    /// Walks the schedule's wall-clock times in order from the earliest wall time that can
    /// still occur after `after` (earlier than `after`'s own wall time when clocks go back
    /// soon after it), maps each to its instant(s), and keeps the smallest one past `after`.
    /// It stops at the first wall time whose earliest instant is past `after`: no later wall
    /// time can happen before that.
    pub fn next_after(&self, zone: &TimeZone, after: Timestamp) -> Option<Timestamp> {
        let start = walk_start(zone, after);
        let limit = horizon(start.date());
        let every_hour = self.hours & ALL_HOURS == ALL_HOURS;
        let mut best: Option<Timestamp> = None;
        let mut from = start;
        while let Some(civil) = self.first_civil_from(from, limit) {
            let Some((first, second)) = occurrences(zone, civil, every_hour) else {
                break;
            };
            for instant in std::iter::once(first).chain(second) {
                if instant > after && best.is_none_or(|best| instant < best) {
                    best = Some(instant);
                }
            }
            if first > after {
                break;
            }
            let Ok(next) = civil.checked_add(SignedDuration::from_mins(1)) else {
                break;
            };
            from = next;
        }
        best
    }

    /// The next `n` due instants after `after` (fewer if the schedule runs out).
    pub fn upcoming(&self, zone: &TimeZone, after: Timestamp, n: usize) -> Vec<Timestamp> {
        let mut due = Vec::with_capacity(n.min(1024));
        let mut cursor = after;
        while due.len() < n {
            let Some(next) = self.next_after(zone, cursor) else {
                break;
            };
            due.push(next);
            cursor = next;
        }
        due
    }

    /// The first wall-clock time at or after `from` (rounded up to a whole minute) that the
    /// schedule names, on or before the date `limit`.
    fn first_civil_from(&self, from: DateTime, limit: Date) -> Option<DateTime> {
        let from = if from.second() != 0 || from.subsec_nanosecond() != 0 {
            from.checked_add(SignedDuration::from_mins(1)).ok()?
        } else {
            from
        };
        let (mut date, mut hour, mut minute) = (from.date(), from.hour(), from.minute());
        while date <= limit {
            if !has_bit(self.months, date.month()) {
                date = self.next_month_start(date)?;
            } else {
                if self.day_matches(date) {
                    if let Some((h, m)) = self.time_from(hour, minute) {
                        return Some(date.at(h, m, 0, 0));
                    }
                }
                date = date.tomorrow().ok()?;
            }
            (hour, minute) = (0, 0);
        }
        None
    }

    /// The first day of the next month (after `date`'s) that the schedule names.
    fn next_month_start(&self, date: Date) -> Option<Date> {
        let (year, month) = match next_bit(self.months, date.month() + 1) {
            Some(month) => (date.year(), month),
            None => (date.year().checked_add(1)?, next_bit(self.months, 1)?),
        };
        Date::new(year, month, 1).ok()
    }

    /// Whether `date`'s day matches, by the Vixie rule (its month is checked elsewhere).
    fn day_matches(&self, date: Date) -> bool {
        let day = has_bit(self.days, date.day());
        let weekday = has_bit(self.weekdays, date.weekday().to_sunday_zero_offset());
        if self.days_star || self.weekdays_star {
            day && weekday
        } else {
            day || weekday
        }
    }

    /// The first (hour, minute) at or after `hour:minute` on a matching day.
    fn time_from(&self, hour: i8, minute: i8) -> Option<(i8, i8)> {
        let first_hour = next_bit(self.hours, hour)?;
        if first_hour == hour {
            if let Some(m) = next_bit(self.minutes, minute) {
                return Some((hour, m));
            }
            let later_hour = next_bit(self.hours, hour + 1)?;
            return Some((later_hour, next_bit(self.minutes, 0)?));
        }
        Some((first_hour, next_bit(self.minutes, 0)?))
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Looks up an IANA time zone name (e.g. `Europe/Berlin`) in the host's time zone database;
/// `UTC` always works, even without one.
pub fn parse_zone(name: &str) -> Result<TimeZone, ScheduleError> {
    let name = name.trim();
    if name.eq_ignore_ascii_case("UTC") {
        return Ok(TimeZone::UTC);
    }
    TimeZone::get(name).map_err(|_| ScheduleError::UnknownZone {
        name: name.to_owned(),
    })
}

/// The five fields a macro stands for.
fn expand_macro(text: &str) -> Result<&'static str, ScheduleError> {
    if text.eq_ignore_ascii_case("@reboot") {
        return Err(ScheduleError::Reboot);
    }
    MACROS
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(text))
        .map(|(_, fields)| *fields)
        .ok_or_else(|| ScheduleError::UnknownMacro {
            text: text.to_owned(),
        })
}

/// One field's comma-separated list, as a bit set.
fn parse_field(spec: &FieldSpec, text: &str) -> Result<u64, ScheduleError> {
    let mut bits = 0;
    for item in text.split(',') {
        if item.is_empty() {
            return Err(ScheduleError::EmptyItem {
                field: spec.label,
                text: text.to_owned(),
            });
        }
        bits |= parse_item(spec, item)?;
    }
    Ok(bits)
}

/// One list item: `*`, `N`, `A-B`, `*/S`, `A-B/S` or `N/S`.
fn parse_item(spec: &FieldSpec, item: &str) -> Result<u64, ScheduleError> {
    let (range, step) = match item.split_once('/') {
        Some((range, step)) => (range, Some(parse_step(spec, item, step)?)),
        None => (item, None),
    };
    let (start, end) = if range == "*" {
        (spec.min, spec.max)
    } else if let Some((start, end)) = range.split_once('-') {
        (parse_value(spec, start)?, parse_value(spec, end)?)
    } else {
        let value = parse_value(spec, range)?;
        (value, if step.is_some() { spec.max } else { value })
    };
    // A range whose start is after its end wraps round the field's end (`22-2`: 22, 23, 0,
    // 1, 2); a step goes on across the wrap.
    let span = u32::from(spec.max - spec.min) + 1;
    let length = (u32::from(end) + span - u32::from(start)) % span + 1;
    let bits = (0..length)
        .step_by(usize::from(step.unwrap_or(1)))
        .map(|offset| spec.min as u32 + (u32::from(start - spec.min) + offset) % span)
        .fold(0, |bits, value| bits | 1 << value);
    Ok(bits)
}

/// A step, 1 to the field's maximum.
fn parse_step(spec: &FieldSpec, item: &str, text: &str) -> Result<u8, ScheduleError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ScheduleError::InvalidStep {
            field: spec.label,
            text: text.to_owned(),
        });
    }
    match text.parse::<u8>() {
        Ok(step) if (1..=spec.max).contains(&step) => Ok(step),
        _ => Err(ScheduleError::StepOutOfRange {
            field: spec.label,
            step: text.to_owned(),
            max: spec.max,
            item: item.to_owned(),
        }),
    }
}

/// A number in the field's range, or one of its names.
fn parse_value(spec: &FieldSpec, text: &str) -> Result<u8, ScheduleError> {
    if let Some(index) = spec
        .names
        .iter()
        .position(|name| name.eq_ignore_ascii_case(text))
    {
        return Ok(spec.min + index as u8);
    }
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ScheduleError::InvalidValue {
            field: spec.label,
            text: text.to_owned(),
            expected: spec.names_hint,
        });
    }
    match text.parse::<u8>() {
        Ok(value) if (spec.min..=spec.max).contains(&value) => Ok(value),
        _ => Err(ScheduleError::OutOfRange {
            field: spec.label,
            value: text.to_owned(),
            min: spec.min,
            max: spec.max,
        }),
    }
}

/// The wall-clock time from which to look for `after`'s successor: `after`'s own wall time,
/// or earlier when clocks go back within the next two days (after the fold, wall times below
/// `after`'s happen again).
fn walk_start(zone: &TimeZone, after: Timestamp) -> DateTime {
    let mut start = zone.to_datetime(after);
    let Ok(until) = after.checked_add(SignedDuration::from_hours(48)) else {
        return start;
    };
    for transition in zone.following(after) {
        if transition.timestamp() > until {
            break;
        }
        start = start.min(zone.to_datetime(transition.timestamp()));
    }
    start
}

/// The instants at which the wall time `civil` fires in `zone`: the first one, and a second
/// one when `civil` occurs twice (clocks went back) and `both_in_fold`. A wall time in a gap
/// (clocks went forward) fires at the instant the gap ends.
fn occurrences(
    zone: &TimeZone,
    civil: DateTime,
    both_in_fold: bool,
) -> Option<(Timestamp, Option<Timestamp>)> {
    match zone.to_ambiguous_timestamp(civil).offset() {
        AmbiguousOffset::Unambiguous { offset } => Some((offset.to_timestamp(civil).ok()?, None)),
        AmbiguousOffset::Gap { after, .. } => {
            // With the later offset the wall time lands before the transition; the next
            // transition from there is the end of the gap.
            let inside = after.to_timestamp(civil).ok()?;
            let end = zone.following(inside).next()?.timestamp();
            Some((end, None))
        }
        AmbiguousOffset::Fold { before, after } => {
            let first = before.to_timestamp(civil).ok()?;
            let second = match both_in_fold {
                true => Some(after.to_timestamp(civil).ok()?),
                false => None,
            };
            Some((first, second))
        }
    }
}

/// The last date the walk from `start` looks at.
fn horizon(start: Date) -> Date {
    let year = start.year().saturating_add(HORIZON_YEARS).min(9999);
    Date::new(year, 12, 31).unwrap_or(start)
}

fn has_bit(bits: u64, value: i8) -> bool {
    (0..64).contains(&value) && bits & (1 << value) != 0
}

/// The smallest set bit at `from` or above.
fn next_bit(bits: u64, from: i8) -> Option<i8> {
    if !(0..64).contains(&from) {
        return None;
    }
    let rest = bits >> from;
    (rest != 0).then(|| from + rest.trailing_zeros() as i8)
}

#[cfg(test)]
#[path = "schedule_tests.rs"]
mod tests;
