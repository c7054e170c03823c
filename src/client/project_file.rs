//! A project's own `slipway.toml` (in the directory `slipway deploy` packs): the defaults for
//! `deploy`'s flags and the project `env` uses. Strict: unknown keys are an error naming
//! them. Also the directory-name → slug rule used when no project is named.

use std::path::Path;

use super::ClientError;

pub const FILE_NAME: &str = "slipway.toml";

/// The keys a project file may set, each a string, and `cron` (the `[[cron]]` tables the
/// daemon applies when the build goes live: `jobs::declared`).
const KEYS: &[&str] = &[
    "project", "install", "build", "start", "release", "output", "health", "cron",
];

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ProjectFile {
    pub project: Option<String>,
    pub install: Option<String>,
    pub build: Option<String>,
    pub start: Option<String>,
    pub release: Option<String>,
    pub output: Option<String>,
    pub health: Option<String>,
}

impl ProjectFile {
    /// Parses the file's text; `origin` names it in messages.
    pub fn parse(origin: &str, text: &str) -> Result<ProjectFile, ClientError> {
        let invalid = |why: String| ClientError::Config(format!("{origin}: {why}"));
        let table: toml::Table = text
            .parse()
            .map_err(|error: toml::de::Error| invalid(error.message().trim().to_owned()))?;
        let unknown: Vec<&str> = table
            .keys()
            .map(String::as_str)
            .filter(|key| !KEYS.contains(key))
            .collect();
        if !unknown.is_empty() {
            return Err(invalid(format!(
                "unknown key{} {}; the keys are {}",
                if unknown.len() == 1 { "" } else { "s" },
                unknown
                    .iter()
                    .map(|k| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
                KEYS.join(", ")
            )));
        }
        let mut file = ProjectFile::default();
        for (key, value) in table {
            if key == "cron" {
                // Checked by the daemon at deploy (its messages are in the deployment's log).
                if !value.is_array() {
                    return Err(invalid("`cron` must be [[cron]] tables".into()));
                }
                continue;
            }
            let value = match value {
                toml::Value::String(text) => text,
                other => {
                    return Err(invalid(format!(
                        "`{key}` must be a string, not a {}",
                        other.type_str()
                    )))
                }
            };
            let slot = match key.as_str() {
                "project" => &mut file.project,
                "install" => &mut file.install,
                "build" => &mut file.build,
                "start" => &mut file.start,
                "release" => &mut file.release,
                "output" => &mut file.output,
                _ => &mut file.health,
            };
            *slot = Some(value);
        }
        Ok(file)
    }

    /// Reads `dir/slipway.toml`; `None` when there is none.
    pub fn load(dir: &Path) -> Result<Option<ProjectFile>, ClientError> {
        let path = dir.join(FILE_NAME);
        match std::fs::read_to_string(&path) {
            Ok(text) => ProjectFile::parse(&path.display().to_string(), &text).map(Some),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(ClientError::Config(format!(
                "cannot read {}: {error}",
                path.display()
            ))),
        }
    }
}

/// A directory name made into a slug: lowercase ASCII letters and digits, runs of anything
/// else become one `-`, at most 63 characters. `None` when fewer than 2 characters remain.
pub fn slugify(name: &str) -> Option<String> {
    let mut slug = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            slug.push(c.to_ascii_lowercase());
        } else if !slug.is_empty() && !slug.ends_with('-') {
            slug.push('-');
        }
    }
    slug.truncate(63);
    let slug = slug.trim_end_matches('-').to_owned();
    (slug.len() >= 2).then_some(slug)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_read() {
        let text = "project = \"web\"\ninstall = \"npm ci\"\nbuild = \"npm run build\"\n\
                    start = \"node server.js\"\nrelease = \"npm run migrate\"\n\
                    output = \"dist\"\nhealth = \"/healthz\"\n";
        let file = ProjectFile::parse("slipway.toml", text).unwrap();
        assert_eq!(
            file,
            ProjectFile {
                project: Some("web".into()),
                install: Some("npm ci".into()),
                build: Some("npm run build".into()),
                start: Some("node server.js".into()),
                release: Some("npm run migrate".into()),
                output: Some("dist".into()),
                health: Some("/healthz".into()),
            }
        );
        assert_eq!(ProjectFile::parse("x", "").unwrap(), ProjectFile::default());
    }

    #[test]
    fn unknown_keys_and_wrong_types_are_named() {
        let error = ProjectFile::parse("dir/slipway.toml", "projet = \"x\"\nbuidl = \"y\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("dir/slipway.toml: unknown keys"),
            "{error}"
        );
        assert!(
            error.contains("`projet`") && error.contains("`buidl`"),
            "{error}"
        );
        let error = ProjectFile::parse("f", "build = 3")
            .unwrap_err()
            .to_string();
        assert!(error.contains("`build` must be a string"), "{error}");
        let error = ProjectFile::parse("f", "build = ").unwrap_err().to_string();
        assert!(error.starts_with("f: "), "{error}");
    }

    #[test]
    fn directory_names_become_slugs() {
        assert_eq!(slugify("My App").as_deref(), Some("my-app"));
        assert_eq!(slugify("__site__v2..").as_deref(), Some("site-v2"));
        assert_eq!(slugify("web").as_deref(), Some("web"));
        assert_eq!(slugify("x"), None);
        assert_eq!(slugify("日本"), None);
        let long = "a".repeat(70);
        assert_eq!(slugify(&long).unwrap().len(), 63);
        assert_eq!(slugify(&format!("{}-b", "a".repeat(62))).unwrap().len(), 62);
    }
}
