//! A Python project's venv (`.venv`): the names its requirements list, the command that
//! installs them (with a server added where they lack one), and each server's start command
//! on `$PORT`. Shared by plain Python projects (`python.rs`) and Django (`django.rs`).

use super::Files;

/// The project's requirements, as the names they list (lower case).
pub(super) struct Requirements {
    names: Vec<String>,
    /// `requirements.txt` or `pyproject.toml`.
    pub source: &'static str,
    /// Installs them into `.venv`.
    pub install: String,
}

impl Requirements {
    pub(super) fn read(files: Files<'_>) -> Requirements {
        let requirements = files("requirements.txt");
        let (install, source) = match &requirements {
            Some(_) => ("pip install -r requirements.txt", "requirements.txt"),
            None => ("pip install .", "pyproject.toml"),
        };
        let text = format!(
            "{}\n{}",
            requirements.unwrap_or_default(),
            files("pyproject.toml").unwrap_or_default()
        )
        .to_ascii_lowercase();
        let names = text
            .split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
            .filter(|word| !word.is_empty())
            .map(str::to_owned)
            .collect();
        Requirements {
            names,
            source,
            install: format!("python3 -m venv .venv && .venv/bin/{install}"),
        }
    }

    pub fn has(&self, name: &str) -> bool {
        self.names.iter().any(|listed| listed == name)
    }

    /// The install command with `server` installed too, when the requirements lack it.
    pub fn with_server(&mut self, server: &str, reasons: &mut Vec<String>) {
        if self.has(server) {
            return;
        }
        self.install
            .push_str(&format!(" && .venv/bin/pip install {server}"));
        reasons.push(format!(
            "{server} is not in {}: installed into the venv too (list it there to pin its \
             version)",
            self.source
        ));
    }
}

/// The start command of `server` for `target` (`module:name`), a factory or an application.
pub(super) fn server_command(server: &str, target: &str, factory: bool) -> String {
    let bin = format!("exec .venv/bin/{server}");
    match (server, factory) {
        ("uvicorn", false) => format!("{bin} {target} --host 0.0.0.0 --port \"$PORT\""),
        ("uvicorn", true) => format!("{bin} --factory {target} --host 0.0.0.0 --port \"$PORT\""),
        ("hypercorn", false) => format!("{bin} --bind \"0.0.0.0:$PORT\" {target}"),
        ("hypercorn", true) => format!("{bin} --bind \"0.0.0.0:$PORT\" '{target}()'"),
        ("waitress", false) => {
            format!("exec .venv/bin/waitress-serve --listen=\"0.0.0.0:$PORT\" {target}")
        }
        ("waitress", true) => {
            format!("exec .venv/bin/waitress-serve --listen=\"0.0.0.0:$PORT\" --call {target}")
        }
        (_, false) => format!("{bin} --bind \"0.0.0.0:$PORT\" {target}"),
        (_, true) => format!("{bin} --bind \"0.0.0.0:$PORT\" '{target}()'"),
    }
}
