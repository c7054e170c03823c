//! Where the client finds the API and its token: `SLIPWAY_URL` / `SLIPWAY_TOKEN`, else
//! `~/.config/slipway/credentials.toml` (written by `slipway login`, mode 0600). Each
//! environment variable wins over the file's value. Resolution is pure (`resolve`); only
//! `load` and `save` touch the environment and the disk.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::ClientError;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Credentials {
    pub url: String,
    pub token: String,
}

/// The file's shape: either key may be missing (the environment may supply it).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CredentialsFile {
    url: Option<String>,
    token: Option<String>,
}

/// `$XDG_CONFIG_HOME/slipway/credentials.toml`, else `$HOME/.config/slipway/credentials.toml`.
pub fn credentials_path(xdg_config_home: Option<&str>, home: Option<&str>) -> Option<PathBuf> {
    let config_dir = match (xdg_config_home, home) {
        (Some(xdg), _) if !xdg.is_empty() => PathBuf::from(xdg),
        (_, Some(home)) if !home.is_empty() => Path::new(home).join(".config"),
        _ => return None,
    };
    Some(config_dir.join("slipway").join("credentials.toml"))
}

/// Combines the environment's values with the file's text (when there is a file).
pub fn resolve(
    env_url: Option<String>,
    env_token: Option<String>,
    file: Option<(&Path, &str)>,
) -> Result<Credentials, ClientError> {
    let parsed = match file {
        Some((path, text)) => toml::from_str::<CredentialsFile>(text).map_err(|error| {
            ClientError::Config(format!("{}: {}", path.display(), error.message()))
        })?,
        None => CredentialsFile::default(),
    };
    let non_empty = |value: Option<String>| value.filter(|v| !v.trim().is_empty());
    let url = non_empty(env_url).or(non_empty(parsed.url));
    let token = non_empty(env_token).or(non_empty(parsed.token));
    match (url, token) {
        (Some(url), Some(token)) => Ok(Credentials {
            url: url.trim().to_owned(),
            token: token.trim().to_owned(),
        }),
        (url, _) => {
            let missing = if url.is_none() {
                "the API URL"
            } else {
                "a token"
            };
            Err(ClientError::Config(format!(
                "no credentials: {missing} is missing. Set SLIPWAY_URL and SLIPWAY_TOKEN, or run \
                 `slipway login --url https://slipway.example.com --token slw_…`"
            )))
        }
    }
}

/// Reads the environment and the credentials file.
pub fn load() -> Result<Credentials, ClientError> {
    let path = credentials_path(
        std::env::var("XDG_CONFIG_HOME").ok().as_deref(),
        std::env::var("HOME").ok().as_deref(),
    );
    let text = match &path {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => Some(text),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
            Err(error) => {
                return Err(ClientError::Config(format!(
                    "cannot read {}: {error}",
                    path.display()
                )))
            }
        },
        None => None,
    };
    let file = path.as_deref().zip(text.as_deref());
    resolve(
        std::env::var("SLIPWAY_URL").ok(),
        std::env::var("SLIPWAY_TOKEN").ok(),
        file,
    )
}

/// Writes the credentials file with mode 0600 (its directory 0700), replacing any old one.
pub fn save(path: &Path, credentials: &Credentials) -> Result<(), ClientError> {
    let failed = |error: std::io::Error| {
        ClientError::Config(format!("cannot write {}: {error}", path.display()))
    };
    if let Some(parent) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(failed)?;
    }
    let text = toml::to_string(credentials)
        .map_err(|error| ClientError::Config(format!("cannot encode the credentials: {error}")))?;
    let temporary = path.with_extension("toml.tmp");
    let _ = std::fs::remove_file(&temporary);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temporary)
        .map_err(failed)?;
    file.write_all(text.as_bytes()).map_err(failed)?;
    file.sync_all().map_err(failed)?;
    // The mode given at creation is reduced by the umask; make sure it is exactly 0600.
    std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(0o600)).map_err(failed)?;
    std::fs::rename(&temporary, path).map_err(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_wins_over_the_file_key_by_key() {
        let path = Path::new("/c.toml");
        let file = "url = \"https://file.example\"\ntoken = \"slw_file\"\n";
        let credentials = resolve(Some("http://env".into()), None, Some((path, file))).unwrap();
        assert_eq!(credentials.url, "http://env");
        assert_eq!(credentials.token, "slw_file");
        let credentials = resolve(None, None, Some((path, file))).unwrap();
        assert_eq!(credentials.url, "https://file.example");
        let credentials = resolve(Some("u".into()), Some("t".into()), None).unwrap();
        assert_eq!(
            (credentials.url.as_str(), credentials.token.as_str()),
            ("u", "t")
        );
    }

    #[test]
    fn missing_values_and_unknown_keys_are_explained() {
        let error = resolve(Some("u".into()), None, None)
            .unwrap_err()
            .to_string();
        assert!(error.contains("a token is missing"), "{error}");
        assert!(error.contains("slipway login"), "{error}");
        let error = resolve(None, Some("".into()), None)
            .unwrap_err()
            .to_string();
        assert!(error.contains("the API URL is missing"), "{error}");
        let error = resolve(None, None, Some((Path::new("/c.toml"), "colour = 1")))
            .unwrap_err()
            .to_string();
        assert!(error.contains("colour"), "{error}");
    }

    #[test]
    fn the_path_follows_xdg_then_home() {
        assert_eq!(
            credentials_path(Some("/x"), Some("/home/a")).unwrap(),
            Path::new("/x/slipway/credentials.toml")
        );
        assert_eq!(
            credentials_path(Some(""), Some("/home/a")).unwrap(),
            Path::new("/home/a/.config/slipway/credentials.toml")
        );
        assert!(credentials_path(None, None).is_none());
    }

    #[test]
    fn saved_credentials_are_private_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("conf/slipway/credentials.toml");
        let credentials = Credentials {
            url: "https://slipway.example.com".into(),
            token: "slw_secret".into(),
        };
        save(&path, &credentials).unwrap();
        save(&path, &credentials).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            resolve(None, None, Some((&path, &text))).unwrap(),
            credentials
        );
    }
}
