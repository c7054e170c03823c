//! The OpenAPI schemas of a cron job's `schedule` and `timezone`: exactly what the parser and
//! the host's time zone database accept, so a request the schema allows is one the API takes.

use super::schedule::{FieldSpec, DAY_OF_MONTH, DAY_OF_WEEK, HOUR, MACROS, MINUTE, MONTH};

/// `a|b|…` of every number from `low` to `high` (leading zeros allowed, as the parser does).
fn numbers(low: u8, high: u8) -> String {
    let list: Vec<String> = (low..=high).rev().map(|n| n.to_string()).collect();
    format!("0*({})", list.join("|"))
}

/// A name matched in any case: `[Jj][Aa][Nn]`.
fn any_case(name: &str) -> String {
    name.chars()
        .map(|c| format!("[{}{}]", c.to_ascii_uppercase(), c.to_ascii_lowercase()))
        .collect()
}

/// One field's comma-separated list of `*`, `N`, `A-B`, with an optional `/S`.
fn field(spec: &FieldSpec) -> String {
    let mut values = numbers(spec.min, spec.max);
    if !spec.names.is_empty() {
        let names: Vec<String> = spec.names.iter().map(|name| any_case(name)).collect();
        values = format!("({values}|{})", names.join("|"));
    }
    let step = format!("/{}", numbers(1, spec.max));
    let item = format!("(\\*|{values}(-{values})?)({step})?");
    format!("{item}(,{item})*")
}

/// The pattern of a schedule: five fields or a macro, spaces around.
pub fn schedule_pattern() -> String {
    let fields: Vec<String> = [&MINUTE, &HOUR, &DAY_OF_MONTH, &MONTH, &DAY_OF_WEEK]
        .iter()
        .map(|spec| format!("({})", field(spec)))
        .collect();
    let macros: Vec<String> = MACROS
        .iter()
        .map(|(name, _)| any_case(&name[1..]))
        .collect();
    format!(
        "^[ \\t]*(@({})|{})[ \\t]*$",
        macros.join("|"),
        fields.join("[ \\t]+")
    )
}

/// The time zones a job may name: `UTC` and every zone of the host's database (read once).
pub fn zone_names() -> &'static [String] {
    static NAMES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        let mut names: Vec<String> = jiff::tz::db()
            .available()
            .map(|name| name.as_str().to_owned())
            .filter(|name| super::schedule::parse_zone(name).is_ok())
            .collect();
        names.push("UTC".to_owned());
        names.sort();
        names.dedup();
        names
    })
}

/// The zones as one anchored alternation (a pattern, not an enum: client generators turn
/// enum values into identifiers, and `GMT+0`, `GMT-0` and `GMT0` would meet).
pub fn zone_pattern() -> String {
    let escaped: Vec<String> = zone_names()
        .iter()
        .map(|name| name.replace('+', "\\+"))
        .collect();
    format!("^({})$", escaped.join("|"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_takes_what_the_parser_takes() {
        let pattern = schedule_pattern();
        // No regex crate here: check the pieces the pattern is built of instead.
        assert!(pattern.starts_with("^[ \\t]*(@("));
        assert!(field(&MINUTE).contains("0*(59|58|"));
        assert!(field(&MONTH).contains("[Jj][Aa][Nn]"));
        assert!(field(&HOUR).contains("0*(23|22|") && !field(&HOUR).contains("24|"));
        for text in [
            "*/5 * * * *",
            "0 22-2 * * fri-mon",
            "@Daily",
            "005 1,2 1 jan 7",
        ] {
            assert!(
                crate::jobs::schedule::Schedule::parse(text).is_ok(),
                "{text}"
            );
        }
        let zones = zone_names();
        assert!(zones.iter().any(|z| z == "Europe/Berlin"));
        assert!(zones.iter().any(|z| z == "UTC"));
    }
}
