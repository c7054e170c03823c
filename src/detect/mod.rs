//! Zero-config deploys: a pure function from a source tree to a build plan with its reasons
//! (the contract's "Zero-config deploys"). The tree is read through a closure (relative path
//! → contents), so the rules are table-tested on fixtures without touching a disk; the
//! pipeline passes the workspace after the source step, the CLI (`slipway deploy --dry-run`)
//! the directory it would upload. Explicit fields of a request always win over the plan.
//!
//! One file per language family: `node.rs`, `python.rs` (with `callable.rs`, which finds a
//! WSGI/ASGI callable in a module, and `django.rs`), `other.rs` (server languages known by
//! their manifest only). Every plan says what kind of tree it is (`Kind`): the pipeline
//! never publishes a server's or a build's source directory as a static site.

mod callable;
mod django;
mod node;
mod other;
mod python;
mod venv;

/// What detection chose, and why (one sentence per choice, for the run's log).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// A short name: `vite`, `next`, `flask`, `django`, `procfile`, `static`, …
    pub framework: String,
    pub install_command: Option<String>,
    pub build_command: Option<String>,
    /// `None`: a static site, or a server whose start command was not found (`kind`).
    pub start_command: Option<String>,
    pub output_directory: Option<String>,
    pub kind: Kind,
    pub reasons: Vec<String>,
}

/// What a tree is, which decides whether its own directory may ever be served as files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Kind {
    /// A plain site (`index.html` at the root, nothing that runs): the root may be served.
    #[default]
    Site,
    /// A static build: its output directory is served, the source root never.
    StaticBuild { what_to_set: String },
    /// A server: it runs; its files are never served. `what_to_set` says what to set when
    /// its start command was not found.
    Server { what_to_set: String },
}

impl Plan {
    /// A server whose start command was not found: the sentence a run fails with before it
    /// installs anything (`None` when there is a start command, or this is a site).
    pub fn missing_start(&self) -> Option<String> {
        match (&self.kind, &self.start_command) {
            (Kind::Server { what_to_set }, None) => Some(format!(
                "a {} project with no start command: {what_to_set} (a server's source is never \
                 served as static files)",
                self.framework
            )),
            _ => None,
        }
    }

    /// Why the tree's own directory must not be served as a static site, if it must not
    /// (the deploy step asks when no output directory was set or built).
    pub fn refuse_root(&self) -> Option<String> {
        let framework = &self.framework;
        match &self.kind {
            Kind::Site => None,
            Kind::StaticBuild { what_to_set } => Some(format!(
                "a {framework} project whose build made none of dist, build, out, public: \
                 {what_to_set} (the project's source directory is never served as static files)"
            )),
            Kind::Server { what_to_set } => Some(format!(
                "a {framework} project is a server and no start command was set: {what_to_set} \
                 (a server's source directory is never served as static files)"
            )),
        }
    }
}

/// Reads a file of the tree by its relative path (`package.json`, `mysite/settings.py`), if
/// it exists.
pub type Files<'a> = &'a dyn Fn(&str) -> Option<String>;

/// What to set when a server's start command is not found, with `example` as the command.
fn set_start(example: &str) -> String {
    format!("set startCommand (e.g. `{example}`) or add a Procfile line `web: {example}`")
}

/// The plan for a tree; `None` when nothing here is recognised.
pub fn detect(files: Files<'_>) -> Option<Plan> {
    let procfile = files("Procfile");
    let procfile_web = procfile.as_deref().and_then(|text| {
        text.lines()
            .find_map(|line| line.strip_prefix("web:").map(|cmd| cmd.trim().to_owned()))
            .filter(|cmd| !cmd.is_empty())
    });
    let mut plan = if let Some(package) = files("package.json") {
        node::node(files, &package)
    } else if files("requirements.txt").is_some()
        || files("pyproject.toml").is_some()
        || files("manage.py").is_some()
    {
        python::python(files)
    } else if let Some(plan) = other::other(files) {
        plan
    } else if files("index.html").is_some() {
        Plan {
            framework: "static".into(),
            reasons: vec![
                "index.html at the root: a static site, no build, served from the root".into(),
            ],
            ..Plan::default()
        }
    } else if procfile.is_some() {
        Plan {
            framework: "procfile".into(),
            reasons: vec!["a Procfile".into()],
            kind: Kind::Server {
                what_to_set: "add a `web:` line to the Procfile (`web: ./server --port $PORT`) \
                              or set startCommand"
                    .into(),
            },
            ..Plan::default()
        }
    } else {
        return None;
    };
    if let Some(web) = procfile_web {
        plan.reasons.push(format!(
            "Procfile: the web process `{web}` is the start command"
        ));
        plan.start_command = Some(match plan.framework.as_str() {
            // The venv's tools (gunicorn, uvicorn) come first on PATH.
            "python" | "flask" | "fastapi" | "django" | "wsgi" | "asgi" => {
                format!("PATH=\"$PWD/.venv/bin:$PATH\" exec {web}")
            }
            _ => web,
        });
        plan.output_directory = None;
        if plan.kind == Kind::Site {
            plan.kind = Kind::Server {
                what_to_set: "leave startCommand unset: the Procfile's web process starts it"
                    .into(),
            };
        }
    }
    Some(plan)
}

/// [`detect`] over a directory on disk: files of at most 1 MiB, reached through plain
/// directories only (the deploy step reads a built tree as root: a symbolic link on the way
/// is not followed, so a build cannot point detection at the host's files).
pub fn detect_dir(dir: &std::path::Path) -> Option<Plan> {
    detect(&|name: &str| read_tree_file(dir, name))
}

/// A file of a tree by its relative path, as [`detect_dir`] reads it: at most 1 MiB, through
/// plain directories only (no symbolic link followed).
pub fn read_tree_file(dir: &std::path::Path, name: &str) -> Option<String> {
    let mut path = dir.to_owned();
    for component in std::path::Path::new(name).components() {
        let std::path::Component::Normal(part) = component else {
            return None;
        };
        path.push(part);
        let metadata = std::fs::symlink_metadata(&path).ok()?;
        if metadata.file_type().is_symlink() {
            return None;
        }
    }
    let metadata = std::fs::symlink_metadata(&path).ok()?;
    if !metadata.is_file() || metadata.len() > 1 << 20 {
        return None;
    }
    std::fs::read_to_string(path).ok()
}

#[cfg(test)]
mod tests;
