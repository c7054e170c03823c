//! `sandbox.uid_base` against the host's subordinate id ranges (`/etc/subuid`, `/etc/subgid`):
//! a project's uid inside someone's rootless-container range would share files and processes
//! with that user's containers. Checked by the namespaced runner at start.

use std::ops::Range;

/// The first line of `text` (`name:start:count` per line) whose range overlaps `ids`.
pub fn overlapping_line(text: &str, ids: &Range<u64>) -> Option<String> {
    text.lines().find_map(|line| {
        let mut fields = line.trim().split(':');
        let (_name, start, count) = (fields.next()?, fields.next()?, fields.next()?);
        let start: u64 = start.trim().parse().ok()?;
        let count: u64 = count.trim().parse().ok()?;
        let end = start.checked_add(count)?;
        (start < ids.end && ids.start < end).then(|| line.trim().to_owned())
    })
}

/// Checks both files (a missing file has no ranges); `Err` names the file and the line.
pub fn check_host(uid_base: u32, count: u32) -> Result<(), String> {
    let ids = u64::from(uid_base)..u64::from(uid_base) + u64::from(count);
    for file in ["/etc/subuid", "/etc/subgid"] {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        if let Some(line) = overlapping_line(&text, &ids) {
            return Err(format!(
                "sandbox.uid_base {uid_base} gives projects the ids {}..{}, which overlap \
                 {file} line {line:?}; choose a sandbox.uid_base outside every subordinate range",
                ids.start, ids.end
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlaps_are_found_and_neighbours_are_not() {
        let text = "alice:100000:65536\nbob:165536:65536\n# nothing\nbroken line\n";
        assert_eq!(
            overlapping_line(text, &(200_000..300_000)),
            Some("bob:165536:65536".into())
        );
        assert_eq!(overlapping_line(text, &(231_072..300_000)), None);
        assert_eq!(overlapping_line(text, &(0..100_000)), None);
        assert_eq!(
            overlapping_line(text, &(99_999..100_001)),
            Some("alice:100000:65536".into())
        );
        assert_eq!(overlapping_line("", &(0..u64::MAX)), None);
    }
}
