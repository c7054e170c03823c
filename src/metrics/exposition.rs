//! The Prometheus text exposition format, version 0.0.4, written by hand: `# HELP` and
//! `# TYPE` once per family, then its samples, label values escaped. Used by `usage.rs` to
//! render `GET /metrics` and `GET /api/metrics`.

use std::fmt::Write as _;

use super::HistogramSnapshot;

/// The `Content-Type` of the format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// A page of metric families being written.
#[derive(Default)]
pub struct Exposition {
    out: String,
}

impl Exposition {
    pub fn new() -> Exposition {
        Exposition::default()
    }

    /// Starts a family; every sample of it must follow before the next family starts.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {}", kind.as_str());
    }

    /// One sample line.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(name);
        self.labels(labels, None);
        self.out.push(' ');
        push_value(&mut self.out, value);
        self.out.push('\n');
    }

    /// The `_bucket`, `_sum` and `_count` lines of one histogram.
    pub fn histogram(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        histogram: &HistogramSnapshot,
    ) {
        let bucket = format!("{name}_bucket");
        let mut le = String::new();
        for (bound, count) in &histogram.buckets {
            le.clear();
            push_value(&mut le, *bound);
            self.out.push_str(&bucket);
            self.labels(labels, Some(&le));
            let _ = writeln!(self.out, " {count}");
        }
        self.out.push_str(&bucket);
        self.labels(labels, Some("+Inf"));
        let _ = writeln!(self.out, " {}", histogram.count);
        self.sample(&format!("{name}_sum"), labels, histogram.sum_seconds);
        self.sample(&format!("{name}_count"), labels, histogram.count as f64);
    }

    pub fn finish(self) -> String {
        self.out
    }

    fn labels(&mut self, labels: &[(&str, &str)], le: Option<&str>) {
        if labels.is_empty() && le.is_none() {
            return;
        }
        self.out.push('{');
        let mut first = true;
        for (name, value) in labels.iter().copied().chain(le.map(|le| ("le", le))) {
            if !first {
                self.out.push(',');
            }
            first = false;
            self.out.push_str(name);
            self.out.push_str("=\"");
            for c in value.chars() {
                match c {
                    '\\' => self.out.push_str("\\\\"),
                    '"' => self.out.push_str("\\\""),
                    '\n' => self.out.push_str("\\n"),
                    c => self.out.push(c),
                }
            }
            self.out.push('"');
        }
        self.out.push('}');
    }
}

/// Integers without a fraction, others in Rust's shortest round-trip form, `+Inf`/`NaN`.
fn push_value(out: &mut String, value: f64) {
    if value.is_nan() {
        out.push_str("NaN");
    } else if value.is_infinite() {
        out.push_str(if value > 0.0 { "+Inf" } else { "-Inf" });
    } else if value.fract() == 0.0 && value.abs() < 1e15 {
        let _ = write!(out, "{}", value as i64);
    } else {
        let _ = write!(out, "{value}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_families_samples_and_escapes() {
        let mut page = Exposition::new();
        page.family("x_total", Kind::Counter, "Things.\nMore");
        page.sample("x_total", &[("project", "a\"b\\c\nd")], 3.0);
        page.family("h_seconds", Kind::Histogram, "Latency.");
        page.histogram(
            "h_seconds",
            &[("project", "web")],
            &HistogramSnapshot {
                buckets: vec![(0.5, 1), (1.0, 2)],
                count: 3,
                sum_seconds: 2.25,
            },
        );
        let text = page.finish();
        assert_eq!(
            text,
            "# HELP x_total Things.\\nMore\n# TYPE x_total counter\n\
             x_total{project=\"a\\\"b\\\\c\\nd\"} 3\n\
             # HELP h_seconds Latency.\n# TYPE h_seconds histogram\n\
             h_seconds_bucket{project=\"web\",le=\"0.5\"} 1\n\
             h_seconds_bucket{project=\"web\",le=\"1\"} 2\n\
             h_seconds_bucket{project=\"web\",le=\"+Inf\"} 3\n\
             h_seconds_sum{project=\"web\"} 2.25\n\
             h_seconds_count{project=\"web\"} 3\n"
        );
    }
}
