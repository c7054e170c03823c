//! Table tests for cron schedules. Each row is (schedule, zone, after) and the next due
//! instants in RFC 3339 UTC; the expected instants were worked out by hand from the zones'
//! offsets (America/New_York EST −5 / EDT −4, Europe/Berlin CET +1 / CEST +2,
//! Australia/Sydney AEST +10 / AEDT +11), not copied from the code's output. Then
//! [`against_brute_force`] checks the walk against a minute-by-minute scan around every 2026
//! transition of a few zones.

use super::*;

/// Checks a table: rows of `schedule | zone | after`, each followed by `->` lines with the
/// next due instants (RFC 3339, UTC); `#` starts a comment line. Reports every failing row.
fn check(table: &str) {
    let mut rows: Vec<(&str, &str, &str, Vec<&str>)> = Vec::new();
    for line in table.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(instants) = line.strip_prefix("->") {
            let row = rows.last_mut().expect("a `->` line follows a row");
            row.3.extend(instants.split_whitespace());
            continue;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let [text, zone, after] = cells[..] else {
            panic!("not `schedule | zone | after`: {line:?}");
        };
        rows.push((text, zone, after, Vec::new()));
    }
    assert!(!rows.is_empty(), "an empty table");
    let failures: Vec<String> = rows
        .iter()
        .filter_map(|(text, zone, after, expected)| check_row(text, zone, after, expected))
        .collect();
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

/// One row: `None` if it passes, else what went wrong.
fn check_row(text: &str, zone_name: &str, after: &str, expected: &[&str]) -> Option<String> {
    let schedule = Schedule::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    let zone = parse_zone(zone_name).unwrap_or_else(|e| panic!("{zone_name}: {e}"));
    let after: Timestamp = after.parse().unwrap();
    let got: Vec<String> = schedule
        .upcoming(&zone, after, expected.len())
        .iter()
        .map(ToString::to_string)
        .collect();
    (got != expected).then(|| {
        format!(
            "{text:?} in {zone_name} after {after}:\n  expected {expected:?}\n  got      {got:?}"
        )
    })
}

#[test]
fn new_york_spring_forward() {
    // 2026-03-08: 02:00 EST (07:00Z) becomes 03:00 EDT; 02:00-02:59 do not exist.
    check(
        "
        # 02:30 is skipped: fires at the end of the gap, 03:00 EDT; the next day 02:30 EDT.
        30 2 * * * | America/New_York | 2026-03-08T00:00:00Z
            -> 2026-03-08T07:00:00Z 2026-03-09T06:30:00Z
        # Three times in the gap fire once, at 03:00 EDT.
        0,20,40 2 * * * | America/New_York | 2026-03-08T00:00:00Z
            -> 2026-03-08T07:00:00Z 2026-03-09T06:00:00Z 2026-03-09T06:20:00Z
        # Hourly: 01:00 EST, then 02:00 (gap) and 03:00 EDT are the same instant, once.
        0 * * * * | America/New_York | 2026-03-08T05:30:00Z
            -> 2026-03-08T06:00:00Z 2026-03-08T07:00:00Z 2026-03-08T08:00:00Z
        # Starting at the end of the gap itself.
        30 2 * * * | America/New_York | 2026-03-08T07:00:00Z
            -> 2026-03-09T06:30:00Z
        ",
    );
}

#[test]
fn new_york_fall_back() {
    // 2026-11-01: 02:00 EDT (06:00Z) becomes 01:00 EST; 01:00-01:59 happen twice.
    check(
        "
        # Once, at 01:30 EDT (05:30Z), not again at 01:30 EST; next day 01:30 EST.
        30 1 * * * | America/New_York | 2026-11-01T00:00:00Z
            -> 2026-11-01T05:30:00Z 2026-11-02T06:30:00Z
        # Already fired at 01:30 EDT: during the repeated hour, the next is tomorrow.
        30 1 * * * | America/New_York | 2026-11-01T05:45:00Z
            -> 2026-11-02T06:30:00Z
        # Every hour: both 01:30 EDT and 01:30 EST.
        30 * * * * | America/New_York | 2026-11-01T04:00:00Z
            -> 2026-11-01T04:30:00Z 2026-11-01T05:30:00Z 2026-11-01T06:30:00Z
            -> 2026-11-01T07:30:00Z
        # From 01:45 EDT, a wall time already passed (01:30) comes round again in EST.
        30 * * * * | America/New_York | 2026-11-01T05:45:00Z
            -> 2026-11-01T06:30:00Z 2026-11-01T07:30:00Z
        # A step covering every hour counts as every hour.
        */30 */1 * * * | America/New_York | 2026-11-01T05:15:00Z
            -> 2026-11-01T05:30:00Z 2026-11-01T06:00:00Z 2026-11-01T06:30:00Z
            -> 2026-11-01T07:00:00Z
        # Hours 0-2 only: the repeated 01:00 and 01:30 fire once each, at EDT.
        0,30 0-2 * * * | America/New_York | 2026-11-01T04:15:00Z
            -> 2026-11-01T04:30:00Z 2026-11-01T05:00:00Z 2026-11-01T05:30:00Z
            -> 2026-11-01T07:00:00Z 2026-11-01T07:30:00Z
        ",
    );
}

#[test]
fn berlin_transitions() {
    // 2026-03-29: 02:00 CET (01:00Z) becomes 03:00 CEST.
    // 2026-10-25: 03:00 CEST (01:00Z) becomes 02:00 CET; 02:00-02:59 happen twice.
    check(
        "
        30 2 * * * | Europe/Berlin | 2026-03-28T12:00:00Z
            -> 2026-03-29T01:00:00Z 2026-03-30T00:30:00Z
        0 * * * * | Europe/Berlin | 2026-03-28T23:30:00Z
            -> 2026-03-29T00:00:00Z 2026-03-29T01:00:00Z 2026-03-29T02:00:00Z
        # 02:30 CEST (00:30Z) once, not 02:30 CET (01:30Z); next day 02:30 CET.
        30 2 * * * | Europe/Berlin | 2026-10-24T12:00:00Z
            -> 2026-10-25T00:30:00Z 2026-10-26T01:30:00Z
        30 * * * * | Europe/Berlin | 2026-10-24T23:00:00Z
            -> 2026-10-24T23:30:00Z 2026-10-25T00:30:00Z 2026-10-25T01:30:00Z
            -> 2026-10-25T02:30:00Z
        ",
    );
}

#[test]
fn sydney_transitions() {
    // 2026-04-05: 03:00 AEDT (2026-04-04T16:00Z) becomes 02:00 AEST; 02:00-02:59 twice.
    // 2026-10-04: 02:00 AEST (2026-10-03T16:00Z) becomes 03:00 AEDT.
    check(
        "
        # 02:30 AEDT (15:30Z) once; the next day 02:30 AEST.
        30 2 * * * | Australia/Sydney | 2026-04-04T00:00:00Z
            -> 2026-04-04T15:30:00Z 2026-04-05T16:30:00Z
        30 * * * * | Australia/Sydney | 2026-04-04T14:00:00Z
            -> 2026-04-04T14:30:00Z 2026-04-04T15:30:00Z 2026-04-04T16:30:00Z
            -> 2026-04-04T17:30:00Z
        # 02:30 is skipped: fires at 03:00 AEDT; the next day 02:30 AEDT.
        30 2 * * * | Australia/Sydney | 2026-10-03T00:00:00Z
            -> 2026-10-03T16:00:00Z 2026-10-04T15:30:00Z
        0 * * * * | Australia/Sydney | 2026-10-03T14:30:00Z
            -> 2026-10-03T15:00:00Z 2026-10-03T16:00:00Z 2026-10-03T17:00:00Z
        ",
    );
}

#[test]
fn calendar_edges() {
    check(
        "
        # Leap days only.
        0 0 29 2 * | UTC | 2026-01-01T00:00:00Z
            -> 2028-02-29T00:00:00Z 2032-02-29T00:00:00Z
        # 2100 is not a leap year: from 2096 the next Feb 29 is in 2104.
        0 0 29 2 * | UTC | 2096-03-01T00:00:00Z
            -> 2104-02-29T00:00:00Z
        @monthly | UTC | 2026-01-31T00:00:00Z
            -> 2026-02-01T00:00:00Z 2026-03-01T00:00:00Z
        # Months without a 31st are skipped.
        0 0 31 * * | UTC | 2026-01-30T12:00:00Z
            -> 2026-01-31T00:00:00Z 2026-03-31T00:00:00Z 2026-05-31T00:00:00Z
            -> 2026-07-31T00:00:00Z 2026-08-31T00:00:00Z
        # Strictly after: a due time equal to `after` is not returned.
        0 0 31 * * | UTC | 2026-01-31T00:00:00Z
            -> 2026-03-31T00:00:00Z
        # Seconds in `after` are rounded up, never down.
        * * * * * | UTC | 2026-01-01T10:00:30.5Z
            -> 2026-01-01T10:01:00Z 2026-01-01T10:02:00Z
        # Year end.
        @yearly | UTC | 2026-03-01T00:00:00Z
            -> 2027-01-01T00:00:00Z 2028-01-01T00:00:00Z
        # Local midnight in a zone: 00:00 CET is 23:00Z the day before.
        @daily | Europe/Berlin | 2026-01-01T00:00:00Z
            -> 2026-01-01T23:00:00Z 2026-01-02T23:00:00Z
        ",
    );
}

#[test]
fn vixie_day_rule() {
    // April 2026: Fridays are the 3rd, 10th, 17th, 24th; the 13th is a Monday.
    check(
        "
        0 0 13 * 5 | UTC | 2026-04-01T00:00:00Z
            -> 2026-04-03T00:00:00Z 2026-04-10T00:00:00Z 2026-04-13T00:00:00Z
            -> 2026-04-17T00:00:00Z 2026-04-24T00:00:00Z
        # Day-of-week `*`: only the 13th counts.
        0 0 13 * * | UTC | 2026-04-01T00:00:00Z
            -> 2026-04-13T00:00:00Z 2026-05-13T00:00:00Z
        # Day-of-month `*`: only Fridays count.
        0 0 * * fri | UTC | 2026-04-01T00:00:00Z
            -> 2026-04-03T00:00:00Z 2026-04-10T00:00:00Z
        # `*/10` starts with `*`: both must match (1st/11th/21st/31st that is a Monday).
        0 0 */10 * 1 | UTC | 2026-04-01T00:00:00Z
            -> 2026-05-11T00:00:00Z 2026-06-01T00:00:00Z
        ",
    );
}

#[test]
fn names_ranges_steps_and_sunday() {
    // 2026-01-01 is a Thursday.
    check(
        "
        0 9 * JAN mon-FRI | UTC | 2026-01-01T00:00:00Z
            -> 2026-01-01T09:00:00Z 2026-01-02T09:00:00Z 2026-01-05T09:00:00Z
        # After the last weekday of January 2026, the next is Friday 2027-01-01.
        0 9 * jan mon-fri | UTC | 2026-01-30T10:00:00Z
            -> 2027-01-01T09:00:00Z
        10-30/10 */6 * * * | UTC | 2026-01-01T00:00:00Z
            -> 2026-01-01T00:10:00Z 2026-01-01T00:20:00Z 2026-01-01T00:30:00Z
            -> 2026-01-01T06:10:00Z
        # N/S: from N to the maximum.
        50/5 * * * * | UTC | 2026-01-01T00:00:00Z
            -> 2026-01-01T00:50:00Z 2026-01-01T00:55:00Z 2026-01-01T01:50:00Z
        0 0 1 feb-dec/5 * | UTC | 2026-01-01T00:00:00Z
            -> 2026-02-01T00:00:00Z 2026-07-01T00:00:00Z 2026-12-01T00:00:00Z
            -> 2027-02-01T00:00:00Z
        # 7 is Sunday, as is 0; 5-7 is Friday to Sunday.
        0 12 * * 7 | UTC | 2026-01-01T00:00:00Z
            -> 2026-01-04T12:00:00Z 2026-01-11T12:00:00Z
        0 12 * * 5-7 | UTC | 2026-01-01T00:00:00Z
            -> 2026-01-02T12:00:00Z 2026-01-03T12:00:00Z 2026-01-04T12:00:00Z
            -> 2026-01-09T12:00:00Z
        @weekly | UTC | 2026-01-01T00:00:00Z
            -> 2026-01-04T00:00:00Z 2026-01-11T00:00:00Z
        @hourly | UTC | 2026-01-01T00:00:00Z
            -> 2026-01-01T01:00:00Z 2026-01-01T02:00:00Z
        ",
    );
    assert_eq!(
        Schedule::parse("0 0 * * 7").unwrap().weekdays,
        Schedule::parse("0 0 * * sun").unwrap().weekdays
    );
}

#[test]
fn no_due_time() {
    let zone = parse_zone("UTC").unwrap();
    let after: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
    for text in ["0 0 30 2 *", "0 0 31 4,6,9,11 *"] {
        let schedule = Schedule::parse(text).unwrap();
        assert_eq!(schedule.next_after(&zone, after), None, "{text}");
        assert!(schedule.upcoming(&zone, after, 3).is_empty(), "{text}");
    }
}

#[test]
fn leap_day_is_fast() {
    // A minute-by-minute scan would take millions of steps; the field walk takes a few
    // hundred. The bound is loose for unoptimised builds.
    let schedule = Schedule::parse("0 0 29 2 *").unwrap();
    let zone = parse_zone("America/New_York").unwrap();
    let after: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
    let started = std::time::Instant::now();
    for _ in 0..100 {
        assert!(schedule.next_after(&zone, after).is_some());
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed < std::time::Duration::from_millis(100),
        "{elapsed:?}"
    );
}

#[test]
fn parse_errors() {
    let rows = [
        ("61 * * * *", "field 1 (minute): 61 is out of range 0-59"),
        ("* 24 * * *", "field 2 (hour): 24 is out of range 0-23"),
        (
            "* * 0 * *",
            "field 3 (day-of-month): 0 is out of range 1-31",
        ),
        ("* * * 13 *", "field 4 (month): 13 is out of range 1-12"),
        ("* * * * 8", "field 5 (day-of-week): 8 is out of range 0-7"),
        (
            "* * *",
            "expected 5 fields (minute hour day-of-month month day-of-week), found 3",
        ),
        (
            "* * * * * *",
            "expected 5 fields (minute hour day-of-month month day-of-week), found 6",
        ),
        (
            "@reboot",
            "@reboot is not supported: a schedule must name times; use 5 fields (minute hour \
             day-of-month month day-of-week) or one of @yearly, @annually, @monthly, @weekly, \
             @daily, @midnight, @hourly",
        ),
        (
            "@every 5m",
            "unknown macro \"@every 5m\": use one of @yearly, @annually, @monthly, @weekly, \
             @daily, @midnight, @hourly",
        ),
        (
            "*/0 * * * *",
            "field 1 (minute): step 0 is out of range 1-59 (in \"*/0\")",
        ),
        (
            "* * * foo *",
            "field 4 (month): \"foo\" is not a number or a month name (jan-dec)",
        ),
        ("mon * * * *", "field 1 (minute): \"mon\" is not a number"),
        (
            "*/x * * * *",
            "field 1 (minute): step \"x\" is not a number",
        ),
        (
            "1,,2 * * * *",
            "field 1 (minute): empty item in the list \"1,,2\"",
        ),
        ("-5 * * * *", "field 1 (minute): \"\" is not a number"),
        (
            "  ",
            "the schedule is empty: expected 5 fields (minute hour day-of-month month \
             day-of-week) or one of @yearly, @annually, @monthly, @weekly, @daily, @midnight, \
             @hourly",
        ),
    ];
    let mut failures = Vec::new();
    for (text, expected) in rows {
        match Schedule::parse(text) {
            Ok(schedule) => failures.push(format!("{text:?}: parsed as {schedule:?}")),
            Err(e) if e.to_string() != expected => {
                failures.push(format!("{text:?}:\n  expected {expected}\n  got      {e}"))
            }
            Err(_) => {}
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn zones() {
    let error = parse_zone("Mars/Base").unwrap_err();
    assert_eq!(
        error.to_string(),
        "unknown time zone \"Mars/Base\": it is not in the host's time zone database; use an \
         IANA name such as \"Europe/Berlin\", or \"UTC\""
    );
    assert_eq!(parse_zone("UTC").unwrap(), TimeZone::UTC);
    assert_eq!(
        parse_zone("Europe/Berlin").unwrap().iana_name(),
        Some("Europe/Berlin")
    );
}

#[test]
fn ranges_that_wrap_go_round_the_end_of_the_field() {
    // The same due times for a month as the list written out.
    let same = |wrapped: &str, listed: &str| {
        let zone = parse_zone("UTC").unwrap();
        let after: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let times = |text: &str| Schedule::parse(text).unwrap().upcoming(&zone, after, 200);
        assert_eq!(times(wrapped), times(listed), "{wrapped} vs {listed}");
    };
    // 22-2 is 22, 23, 0, 1, 2; fri-mon is Friday to Monday; a step goes on across the wrap.
    same("0 22-2 * * *", "0 22,23,0,1,2 * * *");
    same("0 0 * * fri-mon", "0 0 * * 5,6,0,1");
    same("0 21-3/2 * * *", "0 21,23,1,3 * * *");
    same("58-1 * * * *", "58,59,0,1 * * * *");
}

#[test]
fn display_is_normalised() {
    let schedule = Schedule::parse("  0   9 * *\tmon-fri ").unwrap();
    assert_eq!(schedule.to_string(), "0 9 * * mon-fri");
    assert_eq!(Schedule::parse("@daily").unwrap().to_string(), "@daily");
    assert_eq!(schedule, Schedule::parse("0 9 * * mon-fri").unwrap());
}

/// Every whole minute in `(from, from + minutes]` at which `schedule` is due by the module's
/// rules, stated directly on instants: a minute is due if its wall time matches and has not
/// been shown before (or the job runs every hour), or if clocks jumped forward over a
/// matching wall time just before it. Scanning starts a day early to know the walls seen.
fn brute_force(
    schedule: &Schedule,
    zone: &TimeZone,
    from: Timestamp,
    minutes: i64,
) -> Vec<Timestamp> {
    let every_hour = schedule.hours & ALL_HOURS == ALL_HOURS;
    let names = |wall: DateTime| {
        has_bit(schedule.months, wall.month())
            && schedule.day_matches(wall.date())
            && has_bit(schedule.hours, wall.hour())
            && has_bit(schedule.minutes, wall.minute())
    };
    let minute = SignedDuration::from_mins(1);
    let mut due = Vec::new();
    let mut latest_wall: Option<DateTime> = None;
    for i in -24 * 60..=minutes {
        let t = from.checked_add(SignedDuration::from_mins(i)).unwrap();
        let wall = zone.to_datetime(t);
        let repeat = latest_wall.is_some_and(|latest| wall <= latest);
        let mut fires = names(wall) && (!repeat || every_hour);
        if let Some(latest) =
            latest_wall.filter(|latest| wall > latest.checked_add(minute).unwrap())
        {
            let mut skipped = latest.checked_add(minute).unwrap();
            while skipped < wall {
                fires |= names(skipped);
                skipped = skipped.checked_add(minute).unwrap();
            }
        }
        if fires && i > 0 {
            due.push(t);
        }
        latest_wall = latest_wall.max(Some(wall));
    }
    due
}

#[test]
fn against_brute_force() {
    let schedules = [
        "30 2 * * *",
        "0 * * * *",
        "30 * * * *",
        "*/7 * * * *",
        "0,30 1-3 * * *",
        "15 0-4/2 * * *",
        "59 1 * * *",
        "0 2 * * *",
        "45 */1 * * *",
        "*/20 1,2 * * 0",
    ];
    let zones = [
        "America/New_York",
        "Europe/Berlin",
        "Australia/Sydney",
        "Australia/Lord_Howe",
    ];
    let window = 40 * 60;
    let year_start: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
    let year_end: Timestamp = "2027-01-01T00:00:00Z".parse().unwrap();
    let mut failures = Vec::new();
    for zone_name in zones {
        let zone = parse_zone(zone_name).unwrap();
        let transitions: Vec<Timestamp> = zone
            .following(year_start)
            .map(|transition| transition.timestamp())
            .take_while(|t| *t < year_end)
            .collect();
        assert_eq!(transitions.len(), 2, "{zone_name}");
        for transition in transitions {
            let from = transition
                .checked_sub(SignedDuration::from_hours(20))
                .unwrap();
            let end = from.checked_add(SignedDuration::from_mins(window)).unwrap();
            for text in schedules {
                let schedule = Schedule::parse(text).unwrap();
                let expected = brute_force(&schedule, &zone, from, window);
                // From every fifth minute of the window, and half a minute past it.
                for step in 0..window / 5 {
                    let minute = from
                        .checked_add(SignedDuration::from_mins(step * 5))
                        .unwrap();
                    for after in [
                        minute,
                        minute.checked_add(SignedDuration::from_secs(30)).unwrap(),
                    ] {
                        let want = expected.iter().find(|t| **t > after);
                        let got = schedule.next_after(&zone, after).filter(|t| *t <= end);
                        if want.copied() != got {
                            failures.push(format!("{text:?} in {zone_name} after {after}: expected {want:?}, got {got:?}"));
                        }
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures[..failures.len().min(20)].join("\n")
    );
}
