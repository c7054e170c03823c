//! The Procfile's rules: one `name: command` per line; blank lines and `#` comments are
//! skipped. Every name is a process type (`release` is the release command, not a type).

use std::collections::BTreeMap;

use super::{check_name, MAX_TYPES};

/// Why a Procfile cannot be used; the message names the line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Procfile line {line}: {message}")]
pub struct ProcfileError {
    pub line: usize,
    pub message: String,
}

/// The Procfile's types (name → command), `release` included, in name order.
pub fn parse_procfile(text: &str) -> Result<BTreeMap<String, String>, ProcfileError> {
    let mut types = BTreeMap::new();
    for (number, line) in text.lines().enumerate() {
        let line_no = number + 1;
        let fail = |message: String| ProcfileError {
            line: line_no,
            message,
        };
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let Some((name, command)) = trimmed.split_once(':') else {
            return Err(fail(format!(
                "{trimmed:?} is not `name: command` (e.g. `worker: node worker.js`)"
            )));
        };
        let (name, command) = (name.trim(), command.trim());
        check_name(name).map_err(fail)?;
        if command.is_empty() {
            return Err(fail(format!("the `{name}` process has no command")));
        }
        if types.insert(name.to_owned(), command.to_owned()).is_some() {
            return Err(fail(format!("the `{name}` process is named twice")));
        }
        if types.len() > MAX_TYPES + 1 {
            return Err(fail(format!("more than {MAX_TYPES} process types")));
        }
    }
    Ok(types)
}
