//! Server languages detection knows by their manifest only (Go, Ruby, PHP, Rust, Java,
//! Elixir): no commands are chosen for them, but their source is never served as a static
//! site; a Procfile's `web:` line or `startCommand` starts them.

use super::{Files, Kind, Plan};

/// (manifest, language, an example start command).
const MANIFESTS: [(&str, &str, &str); 8] = [
    ("go.mod", "go", "./server"),
    ("Gemfile", "ruby", "bundle exec puma -p $PORT"),
    ("composer.json", "php", "php -S 0.0.0.0:$PORT -t public"),
    ("Cargo.toml", "rust", "./target/release/server"),
    ("pom.xml", "java", "java -jar target/app.jar"),
    ("build.gradle", "java", "java -jar build/libs/app.jar"),
    ("build.gradle.kts", "java", "java -jar build/libs/app.jar"),
    ("mix.exs", "elixir", "mix phx.server"),
];

pub(super) fn other(files: Files<'_>) -> Option<Plan> {
    let (manifest, language, example) = MANIFESTS
        .iter()
        .find(|(manifest, _, _)| files(manifest).is_some())?;
    Some(Plan {
        framework: (*language).into(),
        kind: Kind::Server {
            what_to_set: format!(
                "Slipway chooses no commands for {language}: set installCommand/buildCommand \
                 as needed and {}",
                super::set_start(example)
            ),
        },
        reasons: vec![format!(
            "{manifest}: a {language} project (no commands chosen)"
        )],
        ..Plan::default()
    })
}
