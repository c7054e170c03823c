//! How a project is built and run: the commands, the static output directory, the health
//! check and framework detection. One type, one set of rules: a provision request carries it
//! (`store::records::ProvisionRequest`), a project keeps it for git deploys and deploy hooks
//! (`store::records::ProjectSettings`), and both check it with [`BuildSettings::validate`].

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Longest accepted command or setting, in bytes.
pub const MAX_SETTING_BYTES: usize = 16 * 1024;

/// Stored and answered in camelCase; the snake_case aliases read provision requests stored
/// before this type existed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BuildSettings {
    /// Run as `sh -c` in the workspace; absent: skipped (or detected with `framework`).
    #[serde(default, alias = "install_command")]
    pub install_command: Option<String>,
    #[serde(default, alias = "build_command")]
    pub build_command: Option<String>,
    /// Absent: a static site.
    #[serde(default, alias = "start_command")]
    pub start_command: Option<String>,
    /// Run once per deployment after the build, before the switch, in the app's runtime
    /// environment (its env vars and `/data`): migrations. Absent: the Procfile's `release:`.
    #[serde(default)]
    pub release_command: Option<String>,
    /// A relative path inside the project, e.g. `dist`.
    #[serde(default, alias = "output_directory")]
    pub output_directory: Option<String>,
    /// Answered with 2xx/3xx when the app is healthy, e.g. `/healthz`.
    #[serde(default, alias = "health_check_path")]
    pub health_check_path: Option<String>,
    /// `"auto"`: the commands left out are detected from the source (`crate::detect`).
    #[serde(default)]
    pub framework: Option<String>,
}

/// A setting that breaks a rule: the API field it is in and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub field: &'static str,
    pub message: String,
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "field `{}` {}", self.field, self.message)
    }
}

impl BuildSettings {
    /// Empty strings become absent, then every rule is checked.
    pub fn validate(mut self) -> Result<BuildSettings, Invalid> {
        for (field, value) in self.fields_mut() {
            if value.as_deref() == Some("") {
                *value = None;
            }
            if let Some(text) = value {
                if text.len() > MAX_SETTING_BYTES || text.contains('\0') {
                    return Err(Invalid {
                        field,
                        message: format!(
                            "is longer than {MAX_SETTING_BYTES} bytes or contains NUL"
                        ),
                    });
                }
            }
        }
        if let Some(path) = &self.health_check_path {
            if !path.starts_with('/') || path.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(Invalid {
                    field: "healthCheckPath",
                    message: "must be a path starting with / (e.g. \"/healthz\")".into(),
                });
            }
        }
        if self
            .output_directory
            .as_deref()
            .is_some_and(|dir| output_directory(dir).is_none())
        {
            return Err(Invalid {
                field: "outputDirectory",
                message: "must be a relative path inside the project (e.g. \"dist\")".into(),
            });
        }
        if let Some(framework) = self.framework.as_deref().filter(|f| *f != "auto") {
            return Err(Invalid {
                field: "framework",
                message: format!("must be \"auto\" or absent, not {framework:?}"),
            });
        }
        Ok(self)
    }

    fn fields_mut(&mut self) -> [(&'static str, &mut Option<String>); 7] {
        [
            ("installCommand", &mut self.install_command),
            ("buildCommand", &mut self.build_command),
            ("startCommand", &mut self.start_command),
            ("releaseCommand", &mut self.release_command),
            ("outputDirectory", &mut self.output_directory),
            ("healthCheckPath", &mut self.health_check_path),
            ("framework", &mut self.framework),
        ]
    }
}

/// The one rule for `outputDirectory` (checked at the API's edge, and again by the deploy step
/// on the built tree): a relative path of plain names inside the project.
pub fn output_directory(requested: &str) -> Option<PathBuf> {
    let relative = Path::new(requested.trim_start_matches("./"));
    relative
        .components()
        .all(|c| matches!(c, Component::Normal(_)))
        .then(|| relative.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(f: impl FnOnce(&mut BuildSettings)) -> Result<BuildSettings, Invalid> {
        let mut settings = BuildSettings::default();
        f(&mut settings);
        settings.validate()
    }

    #[test]
    fn empty_strings_are_absent_and_rules_hold() {
        let ok = settings(|s| s.build_command = Some(String::new())).unwrap();
        assert_eq!(ok.build_command, None);
        let field = |f: fn(&mut BuildSettings)| settings(f).unwrap_err().field;
        assert_eq!(
            field(|s| s.install_command = Some("a\0b".into())),
            "installCommand"
        );
        assert_eq!(
            field(|s| s.start_command = Some("x".repeat(MAX_SETTING_BYTES + 1))),
            "startCommand"
        );
        assert_eq!(
            field(|s| s.health_check_path = Some("healthz".into())),
            "healthCheckPath"
        );
        assert_eq!(
            field(|s| s.output_directory = Some("../etc".into())),
            "outputDirectory"
        );
        assert_eq!(
            field(|s| s.output_directory = Some("/dist".into())),
            "outputDirectory"
        );
        assert_eq!(field(|s| s.framework = Some("rails".into())), "framework");
        assert!(settings(|s| s.framework = Some("auto".into())).is_ok());
        assert!(settings(|s| s.output_directory = Some("./site/public".into())).is_ok());
    }

    #[test]
    fn old_snake_case_records_still_read() {
        let old: BuildSettings =
            serde_json::from_str(r#"{"start_command":"node s.js","output_directory":"dist"}"#)
                .unwrap();
        assert_eq!(old.start_command.as_deref(), Some("node s.js"));
        assert_eq!(old.output_directory.as_deref(), Some("dist"));
    }
}
