//! The daemon process's own figures, read from `/proc/self` at scrape time: resident and
//! virtual memory, CPU seconds, open and maximum file descriptors, start time. Linux only;
//! a figure that cannot be read is `None` and left out of the page.

/// What `/proc/self` says about the daemon right now.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessFigures {
    pub cpu_seconds: Option<f64>,
    pub resident_memory_bytes: Option<u64>,
    pub virtual_memory_bytes: Option<u64>,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
    pub start_time_seconds: Option<f64>,
}

/// Reads the figures of the calling process.
pub fn read() -> ProcessFigures {
    let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|t| *t > 0)
        .unwrap_or(100) as f64;
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .filter(|p| *p > 0)
        .unwrap_or(4096) as u64;
    let boot_time = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|text| parse_boot_time(&text));
    let mut figures = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|text| parse_stat(&text, ticks, page, boot_time))
        .unwrap_or_default();
    figures.open_fds = std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|entries| entries.count() as u64);
    figures.max_fds = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .ok()
        .map(|(soft, _)| soft);
    figures
}

/// `/proc/<pid>/stat`: the fields after the parenthesised command name (which may contain
/// spaces and parentheses itself).
fn parse_stat(text: &str, ticks: f64, page: u64, boot_time: Option<u64>) -> Option<ProcessFigures> {
    let rest = &text[text.rfind(')')? + 1..];
    // Field 3 (state) is rest's first; utime is field 14, so index 11 here.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let number = |index: usize| fields.get(index).and_then(|f| f.parse::<u64>().ok());
    let (utime, stime) = (number(11)?, number(12)?);
    Some(ProcessFigures {
        cpu_seconds: Some((utime + stime) as f64 / ticks),
        start_time_seconds: number(19)
            .zip(boot_time)
            .map(|(start, boot)| boot as f64 + start as f64 / ticks),
        virtual_memory_bytes: number(20),
        resident_memory_bytes: number(21).map(|pages| pages * page),
        open_fds: None,
        max_fds: None,
    })
}

fn parse_boot_time(proc_stat: &str) -> Option<u64> {
    proc_stat
        .lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|value| value.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_a_tricky_name() {
        let stat = "42 (sl (ip) way) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 1000 \
                    123456789 300 18446744073709551615";
        let figures = parse_stat(stat, 100.0, 4096, Some(1_700_000_000)).unwrap();
        assert_eq!(figures.cpu_seconds, Some(3.0));
        assert_eq!(figures.start_time_seconds, Some(1_700_000_010.0));
        assert_eq!(figures.virtual_memory_bytes, Some(123_456_789));
        assert_eq!(figures.resident_memory_bytes, Some(300 * 4096));
        assert_eq!(
            parse_boot_time("cpu 1 2\nbtime 1700000000\n"),
            Some(1_700_000_000)
        );
    }

    #[test]
    fn reads_this_process() {
        let figures = read();
        assert!(figures.resident_memory_bytes.unwrap() > 0);
        assert!(figures.open_fds.unwrap() > 0);
        assert!(figures.start_time_seconds.unwrap() > 1_600_000_000.0);
    }
}
