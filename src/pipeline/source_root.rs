//! The deploy step's check before it serves a build's root as static files (no
//! `outputDirectory`, and none of `dist`, `build`, `out`, `public`): a project's source is never
//! published. A tree detection knows as a server (`START_COMMAND_MISSING`) or as a static build
//! (`START_FAILED`) is refused whatever the request said; so is a plain site, or a tree
//! detection does not know (no manifest), whose root holds server code: a file of a language
//! browsers do not run (`.py`, `.php`, `.rb`, …) at all, or a script (`server.js`) where
//! there is no `index.html`.

use std::path::Path;

use super::failure::Failure;
use crate::error_code::ErrorCode;

/// Extensions of code that only a server runs: never part of a static site's root.
const SERVER_ONLY: &[&str] = &["py", "php", "rb", "go", "rs", "java", "kt", "ex", "exs"];

/// Scripts a browser may load from a site but that are also a server's entry point.
const SCRIPTS: &[&str] = &["js", "mjs", "cjs", "ts"];

pub(crate) fn refuse_source_root(workspace: &Path) -> Result<(), Failure> {
    if let Some(plan) = crate::detect::detect_dir(workspace) {
        if let Some(message) = plan.refuse_root() {
            let code = match plan.kind {
                crate::detect::Kind::StaticBuild { .. } => ErrorCode::StartFailed,
                _ => ErrorCode::StartCommandMissing,
            };
            return Err(Failure::new("deploy", code, message));
        }
    }
    // Nothing recognised, or a plain site: its root must not hold server code either.
    let names: Vec<String> = std::fs::read_dir(workspace)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    match server_code_at_root(&names) {
        None => Ok(()),
        Some(file) => Err(Failure::new(
            "deploy",
            ErrorCode::StartCommandMissing,
            format!(
                "the project's root holds server code ({file}) and nothing says how to run it: \
                 set startCommand (or add a Procfile line `web: …`) for a server, or \
                 outputDirectory for a site whose files are in a subdirectory (a project's \
                 source directory is never served as static files)"
            ),
        )),
    }
}

/// The first file of the root (by name) that makes it a server's source, if any.
fn server_code_at_root(names: &[String]) -> Option<&str> {
    let extension = |name: &str| name.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
    let has_index = names
        .iter()
        .any(|n| n.eq_ignore_ascii_case("index.html") || n.eq_ignore_ascii_case("index.htm"));
    let mut sorted: Vec<&str> = names.iter().map(String::as_str).collect();
    sorted.sort_unstable();
    sorted.into_iter().find(|name| {
        *name == "Procfile"
            || extension(name).is_some_and(|e| {
                SERVER_ONLY.contains(&e.as_str()) || (!has_index && SCRIPTS.contains(&e.as_str()))
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn a_root_with_server_code_is_never_a_site() {
        for (files, found) in [
            (&["app.py"][..], Some("app.py")),
            (&["index.html", "config.php"][..], Some("config.php")),
            (&["server.js"][..], Some("server.js")),
            (&["README.md", "main.go"][..], Some("main.go")),
            (&["Procfile", "index.html"][..], Some("Procfile")),
            (&["index.html", "app.js", "style.css"][..], None),
            (&["index.html", "404.html", "robots.txt"][..], None),
            (&["INDEX.HTML", "bundle.mjs"][..], None),
            (&[][..], None),
        ] {
            assert_eq!(server_code_at_root(&names(files)), found, "{files:?}");
        }
    }
}
