//! What `deploy`, `logs` and `rollback` print while a run goes on: log lines on stdout,
//! prefixed with their stream, and the run's progress on stderr — one line redrawn in place on
//! a terminal, else a line per step change. Formatting is pure (`format_*`); `Display` owns
//! the terminal state.

use std::io::Write;

use serde_json::Value;

/// One log line as the API sends it.
pub fn format_log_line(line: &Value) -> String {
    let stream = line["stream"].as_str().unwrap_or("?");
    let message = line["message"].as_str().unwrap_or("");
    format!("{stream:>7} | {message}")
}

/// The progress of an in-progress status object: `(step, percentage, seconds left)`.
pub fn progress_of(status: &Value) -> Option<(String, u64, Option<u64>)> {
    if status["status"] != "provisioning_in_progress" {
        return None;
    }
    let step = status["currentStep"].as_str()?.to_owned();
    // Between a step's end and the run's end, `currentStep` names the next (pending) step;
    // only a running step is shown, so a failed build never reads as "deploy".
    let state = status["steps"]
        .as_array()
        .and_then(|steps| steps.iter().find(|s| s["name"] == step.as_str()))
        .and_then(|s| s["state"].as_str());
    if state.is_some_and(|state| state != "running") {
        return None;
    }
    let percentage = status["progressPercentage"].as_u64().unwrap_or(0);
    let remaining = status["estimatedTimeRemaining"]
        .as_u64()
        .map(|ms| ms.div_ceil(1000));
    Some((step, percentage, remaining))
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
    pub fn log_line(&mut self, line: &Value) -> std::io::Result<()> {
        self.clear();
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{}", format_log_line(line))?;
        stdout.flush()?;
        drop(stdout);
        self.draw();
        Ok(())
    }

    /// Takes a status object; shows progress while the run is in progress.
    pub fn status(&mut self, status: &Value) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lines_and_bars_read_well() {
        assert_eq!(
            format_log_line(&json!({"stream":"build","message":"compiled"})),
            "  build | compiled"
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
        let running = json!({"status":"provisioning_in_progress","currentStep":"install",
                             "progressPercentage":12,"estimatedTimeRemaining":1500});
        assert_eq!(progress_of(&running), Some(("install".into(), 12, Some(2))));
        assert_eq!(
            progress_of(&json!({"status":"provisioning_complete"})),
            None
        );
    }
}
