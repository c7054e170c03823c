//! What `deploy`, `logs` and `rollback` print while a run goes on: log lines on stdout,
//! prefixed with their stream, and the run's progress on stderr — one line redrawn in place on
//! a terminal, else a line per step change. Formatting is pure (`format_*`); `Display` owns
//! the terminal state.

use std::io::Write;

use crate::api::types::{LogLine, LogStream, ProvisionStatus, StepState};

/// One log line as the API sends it. Control characters (terminal escapes a build printed)
/// are shown escaped, so build output cannot drive the user's terminal.
pub fn format_log_line(line: &LogLine) -> String {
    let stream = match line.stream {
        LogStream::System => "system",
        LogStream::Install => "install",
        LogStream::Build => "build",
        LogStream::Release => "release",
        LogStream::Stdout => "stdout",
        LogStream::Stderr => "stderr",
    };
    match &line.instance {
        Some(instance) => format!(
            "{stream:>7} | [{}] {}",
            escape_controls(instance),
            escape_controls(&line.message)
        ),
        None => format!("{stream:>7} | {}", escape_controls(&line.message)),
    }
}

/// `\x1b[31m` → `\\x1b[31m`: every control character but tab, visible and inert.
fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(|c| c.is_control() && c != '\t') {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() && c != '\t' {
            escaped.push_str(&format!("\\x{:02x}", c as u32));
        } else {
            escaped.push(c);
        }
    }
    std::borrow::Cow::Owned(escaped)
}

/// The progress of an in-progress status object: `(step, percentage, seconds left)`.
pub fn progress_of(status: &ProvisionStatus) -> Option<(String, u64, Option<u64>)> {
    let ProvisionStatus::ProvisioningInProgress {
        current_step,
        progress_percentage,
        estimated_time_remaining,
        steps,
        ..
    } = status
    else {
        return None;
    };
    // Between a step's end and the run's end, `currentStep` names the next (pending) step;
    // only a running step is shown, so a failed build never reads as "deploy".
    let state = steps
        .iter()
        .find(|s| s.name == *current_step)
        .map(|s| s.state);
    if state.is_some_and(|state| state != StepState::Running) {
        return None;
    }
    let remaining = Some(estimated_time_remaining.div_ceil(1000));
    Some((
        current_step.clone(),
        u64::from(*progress_percentage),
        remaining,
    ))
}

/// The terminal's progress line: `[#########...........]  47% build · ~52 s left`.
pub fn format_bar(step: &str, percentage: u64, remaining_s: Option<u64>) -> String {
    const WIDTH: usize = 20;
    let filled = (percentage.min(100) as usize * WIDTH) / 100;
    let bar = format!("{}{}", "#".repeat(filled), ".".repeat(WIDTH - filled));
    match remaining_s {
        Some(seconds) if seconds > 0 => {
            format!("[{bar}] {percentage:>3}% {step} · ~{seconds} s left")
        }
        _ => format!("[{bar}] {percentage:>3}% {step}"),
    }
}

pub struct Display {
    /// Redraw one progress line (stderr is a terminal) or print step changes.
    redraw: bool,
    /// The progress line currently on screen (redraw mode).
    shown: Option<String>,
    last_step: Option<String>,
    last_percentage: u64,
}

impl Display {
    pub fn new(redraw: bool) -> Display {
        Display {
            redraw,
            shown: None,
            last_step: None,
            last_percentage: 0,
        }
    }

    /// For the current process: redraw when stderr is a terminal.
    pub fn for_terminal() -> Display {
        use std::io::IsTerminal;
        Display::new(std::io::stderr().is_terminal())
    }

    /// Prints a log line on stdout, keeping the progress line below it. Errors mean stdout is
    /// gone (e.g. a closed pipe).
    pub fn log_line(&mut self, line: &LogLine) -> std::io::Result<()> {
        self.clear();
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{}", format_log_line(line))?;
        stdout.flush()?;
        drop(stdout);
        self.draw();
        Ok(())
    }

    /// Takes a status object; shows progress while the run is in progress.
    pub fn status(&mut self, status: &ProvisionStatus) {
        let Some((step, percentage, remaining)) = progress_of(status) else {
            return;
        };
        // Progress never goes down, whatever order polls and events arrive in.
        let percentage = percentage.max(self.last_percentage);
        self.last_percentage = percentage;
        if self.redraw {
            self.clear();
            self.shown = Some(format_bar(&step, percentage, remaining));
            self.draw();
        } else if self.last_step.as_deref() != Some(step.as_str()) {
            eprintln!("==> {step} ({percentage}%)");
        }
        self.last_step = Some(step);
    }

    /// Prints a message on stderr below the log (e.g. the outcome).
    pub fn message(&mut self, text: &str) {
        self.clear();
        self.shown = None;
        eprintln!("{text}");
    }

    /// Removes the progress line for good.
    pub fn finish(&mut self) {
        self.clear();
        self.shown = None;
    }

    fn clear(&self) {
        if self.redraw && self.shown.is_some() {
            let mut stderr = std::io::stderr().lock();
            let _ = write!(stderr, "\r\x1b[2K");
            let _ = stderr.flush();
        }
    }

    fn draw(&self) {
        if let (true, Some(line)) = (self.redraw, &self.shown) {
            let mut stderr = std::io::stderr().lock();
            let _ = write!(stderr, "{line}");
            let _ = stderr.flush();
        }
    }
}

/// Rows as a table: every column but the last padded to its widest cell, two spaces apart.
pub fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|column| {
            rows.iter()
                .filter_map(|row| row.get(column))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (column, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if column + 1 < row.len() {
                line.push_str(&" ".repeat(widths[column] - cell.chars().count() + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(stream: &str, message: &str) -> LogLine {
        serde_json::from_value(
            json!({"seq": 1, "timestamp": "t", "stream": stream, "message": message}),
        )
        .unwrap()
    }

    #[test]
    fn lines_and_bars_read_well() {
        assert_eq!(
            format_log_line(&line("build", "compiled")),
            "  build | compiled"
        );
        assert_eq!(
            format_log_line(&line("stdout", "\x1b]0;owned\x07red\ttab")),
            " stdout | \\x1b]0;owned\\x07red\ttab"
        );
        assert_eq!(
            format_bar("build", 47, Some(52)),
            "[#########...........]  47% build · ~52 s left"
        );
        assert_eq!(
            format_bar("deploy", 100, Some(0)),
            format!("[{}] 100% deploy", "#".repeat(20))
        );
    }

    #[test]
    fn progress_comes_only_from_runs_in_progress() {
        let running: ProvisionStatus = serde_json::from_value(json!({
            "status": "provisioning_in_progress", "currentStep": "install",
            "progressPercentage": 12, "estimatedTimeRemaining": 1500,
            "provisioningId": "pvn_1", "deploymentId": "dpl_1",
            "steps": [{"name": "install", "state": "running", "startedAt": null, "durationMs": null}]
        }))
        .unwrap();
        assert_eq!(progress_of(&running), Some(("install".into(), 12, Some(2))));
        let complete: ProvisionStatus = serde_json::from_value(json!({
            "status": "provisioning_complete", "url": "http://x", "deploymentId": "dpl_1",
            "totalDurationMs": 5, "provisioningId": "pvn_1", "steps": []
        }))
        .unwrap();
        assert_eq!(progress_of(&complete), None);
    }
}
