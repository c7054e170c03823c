//! The key a kept `node_modules` is filed under (`node_modules.rs`): everything that decides
//! what an install puts there. A pure function of the tree (read through a closure, as in
//! `detect.rs`), the install command, the Node.js version and the step's environment, so the
//! rules are tested without a disk or a registry.

use serde_json::Value;

/// Lockfiles, one of which must be there: without one, nothing pins what an install puts in
/// `node_modules`, and it is not kept.
const LOCKFILES: [&str; 6] = [
    "package-lock.json",
    "npm-shrinkwrap.json",
    "pnpm-lock.yaml",
    "yarn.lock",
    "bun.lock",
    "bun.lockb",
];

/// Package-manager settings that live in the tree.
const CONFIG_FILES: [&str; 5] = [
    ".npmrc",
    ".yarnrc",
    ".yarnrc.yml",
    ".pnpmfile.cjs",
    "bunfig.toml",
];

/// The fields of `package.json` an install reads; the rest (other scripts, the version, the
/// description) may change without making a kept tree wrong.
const PACKAGE_FIELDS: [&str; 13] = [
    "dependencies",
    "devDependencies",
    "optionalDependencies",
    "peerDependencies",
    "peerDependenciesMeta",
    "bundleDependencies",
    "bundledDependencies",
    "overrides",
    "resolutions",
    "packageManager",
    "engines",
    "pnpm",
    "workspaces",
];

/// Root scripts a package manager runs while it installs.
const INSTALL_SCRIPTS: [&str; 6] = [
    "preinstall",
    "install",
    "postinstall",
    "preprepare",
    "prepare",
    "postprepare",
];

/// Variables that change with every deploy without changing what an install does.
const PER_DEPLOY_ENV: [&str; 2] = ["SLIPWAY_BRANCH", "SLIPWAY_COMMIT"];

/// What the key is made of, besides the tree.
pub(super) struct KeyInputs<'a> {
    /// The install command as the request or detection gave it.
    pub install_command: &'a str,
    /// `node --version`, or `none`.
    pub node_version: &'a str,
    /// The install step's environment (project variables included).
    pub env: &'a [(String, String)],
    /// `patches/` (patch-package, pnpm `patchedDependencies`): relative path and contents.
    pub patches: &'a [(String, Vec<u8>)],
}

/// A key: labelled parts, each a value or a digest, in a fixed order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ModulesKey {
    parts: Vec<(&'static str, String)>,
}

impl ModulesKey {
    /// The name of the key: 32 hex digits of the SHA-256 of `manifest`.
    pub fn digest(&self) -> String {
        crate::ids::sha256_hex(self.manifest().as_bytes())[..32].to_owned()
    }

    /// The parts as `label value` lines, kept next to the tree so that a later build can say
    /// what changed.
    pub fn manifest(&self) -> String {
        self.parts
            .iter()
            .map(|(label, value)| format!("{label} {value}\n"))
            .collect()
    }

    /// What differs between this key and a kept tree's `manifest`, in words (`lockfile
    /// changed`); "the cache format changed" when the manifest is unreadable.
    pub fn changes_since(&self, manifest: &str) -> String {
        let changed: Vec<&str> = self
            .parts
            .iter()
            .filter(|(label, value)| {
                !manifest
                    .lines()
                    .any(|line| line.split_once(' ') == Some((label, value.as_str())))
            })
            .map(|(label, _)| match *label {
                "lockfile" => "lockfile changed",
                "node" => "Node.js version changed",
                "install" => "install command changed",
                "package.json" => "package.json dependencies or install scripts changed",
                "config" => "package manager settings changed",
                "patches" => "patches changed",
                "env" => "environment variables changed",
                _ => "cache format changed",
            })
            .collect();
        match changed.is_empty() {
            true => "cache format changed".to_owned(),
            false => changed.join(", "),
        }
    }
}

/// The key for a Node tree, or why its `node_modules` is not kept.
pub(super) fn modules_key(
    files: crate::detect::Files<'_>,
    inputs: &KeyInputs<'_>,
) -> Result<ModulesKey, String> {
    let package = files("package.json").ok_or("no package.json")?;
    let json: Value =
        serde_json::from_str(&package).map_err(|_| "package.json is not valid JSON".to_owned())?;
    if json.get("workspaces").is_some() || files("pnpm-workspace.yaml").is_some() {
        return Err("a workspace (monorepo) project: node_modules is not kept".into());
    }
    let lockfiles: Vec<String> = LOCKFILES
        .iter()
        .filter_map(|name| files(name).map(|text| format!("{name}:{}", digest(text.as_bytes()))))
        .collect();
    if lockfiles.is_empty() {
        return Err("no lockfile pins the dependencies: node_modules is not kept".into());
    }
    let mut fields = serde_json::Map::new();
    for field in PACKAGE_FIELDS {
        if let Some(value) = json.get(field) {
            fields.insert(field.to_owned(), value.clone());
        }
    }
    for script in INSTALL_SCRIPTS {
        if let Some(value) = json.pointer(&format!("/scripts/{script}")) {
            fields.insert(format!("scripts.{script}"), value.clone());
        }
    }
    let config: String = CONFIG_FILES
        .iter()
        .filter_map(|name| files(name).map(|text| format!("{name}\0{text}\0")))
        .collect();
    let mut patches: Vec<u8> = Vec::new();
    for (path, contents) in inputs.patches {
        patches.extend_from_slice(format!("{path}\0{}\0", contents.len()).as_bytes());
        patches.extend_from_slice(contents);
    }
    let mut env: Vec<&(String, String)> = inputs
        .env
        .iter()
        .filter(|(name, _)| !PER_DEPLOY_ENV.contains(&name.as_str()))
        .collect();
    env.sort();
    let env: String = env.iter().map(|(k, v)| format!("{k}={v}\0")).collect();
    let parts = vec![
        ("format", "1".to_owned()),
        ("arch", std::env::consts::ARCH.to_owned()),
        ("node", inputs.node_version.replace(char::is_whitespace, "")),
        ("install", digest(inputs.install_command.as_bytes())),
        ("lockfile", lockfiles.join(",")),
        (
            "package.json",
            digest(Value::Object(fields).to_string().as_bytes()),
        ),
        ("config", digest(config.as_bytes())),
        ("patches", digest(&patches)),
        ("env", digest(env.as_bytes())),
    ];
    Ok(ModulesKey { parts })
}

fn digest(bytes: &[u8]) -> String {
    crate::ids::sha256_hex(bytes)[..16].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PACKAGE: &str = r#"{"name":"a","version":"1.0.0","scripts":{"build":"next build"},"dependencies":{"next":"16.4.3"}}"#;

    fn key_of(files: &[(&str, &str)], inputs: &KeyInputs<'_>) -> Result<ModulesKey, String> {
        let lookup = |path: &str| {
            files
                .iter()
                .find(|(name, _)| *name == path)
                .map(|(_, text)| (*text).to_owned())
        };
        modules_key(&lookup, inputs)
    }

    fn inputs<'a>(env: &'a [(String, String)]) -> KeyInputs<'a> {
        KeyInputs {
            install_command: "npm ci",
            node_version: "v20.20.2\n",
            env,
            patches: &[],
        }
    }

    fn var(name: &str, value: &str) -> (String, String) {
        (name.to_owned(), value.to_owned())
    }

    #[test]
    fn the_key_follows_what_an_install_reads_and_nothing_else() {
        let env = [var("PATH", "/usr/bin"), var("SLIPWAY_COMMIT", "abc")];
        let tree = [
            ("package.json", PACKAGE),
            ("package-lock.json", "{\"v\":1}"),
        ];
        let base = key_of(&tree, &inputs(&env)).unwrap();
        assert_eq!(base.digest().len(), 32);
        assert_eq!(
            key_of(&tree, &inputs(&env)).unwrap().digest(),
            base.digest()
        );

        // Unchanged: other scripts, the version, a per-deploy variable, the source.
        let edited = PACKAGE
            .replace("next build", "next build --debug")
            .replace("1.0.0", "1.0.1");
        let same_tree = [
            ("package.json", edited.as_str()),
            ("package-lock.json", "{\"v\":1}"),
            ("app/page.tsx", "x"),
        ];
        let commit = [var("PATH", "/usr/bin"), var("SLIPWAY_COMMIT", "def")];
        assert_eq!(
            key_of(&same_tree, &inputs(&commit)).unwrap().digest(),
            base.digest()
        );

        // Changed, each with its reason.
        let lockfile = [
            ("package.json", PACKAGE),
            ("package-lock.json", "{\"v\":2}"),
        ];
        let changed = |key: Result<ModulesKey, String>| {
            let key = key.unwrap();
            assert_ne!(key.digest(), base.digest());
            key.changes_since(&base.manifest())
        };
        assert_eq!(
            changed(key_of(&lockfile, &inputs(&env))),
            "lockfile changed"
        );
        let deps = PACKAGE.replace("16.4.3", "16.5.0");
        let deps_tree = [
            ("package.json", deps.as_str()),
            ("package-lock.json", "{\"v\":1}"),
        ];
        assert_eq!(
            changed(key_of(&deps_tree, &inputs(&env))),
            "package.json dependencies or install scripts changed"
        );
        let postinstall = PACKAGE.replace("\"build\"", "\"postinstall\":\"x\",\"build\"");
        let scripts_tree = [
            ("package.json", postinstall.as_str()),
            ("package-lock.json", "{\"v\":1}"),
        ];
        assert_eq!(
            changed(key_of(&scripts_tree, &inputs(&env))),
            "package.json dependencies or install scripts changed"
        );
        let node22 = KeyInputs {
            node_version: "v22.1.0",
            ..inputs(&env)
        };
        assert_eq!(changed(key_of(&tree, &node22)), "Node.js version changed");
        let omit_dev = KeyInputs {
            install_command: "npm ci --omit=dev",
            ..inputs(&env)
        };
        assert_eq!(changed(key_of(&tree, &omit_dev)), "install command changed");
        let production = [var("PATH", "/usr/bin"), var("NODE_ENV", "production")];
        assert_eq!(
            changed(key_of(&tree, &inputs(&production))),
            "environment variables changed"
        );
        let npmrc = [
            ("package.json", PACKAGE),
            ("package-lock.json", "{\"v\":1}"),
            (".npmrc", "legacy-peer-deps=true"),
        ];
        assert_eq!(
            changed(key_of(&npmrc, &inputs(&env))),
            "package manager settings changed"
        );
        let patch = [("patches/next+16.4.3.patch".to_owned(), b"--- a".to_vec())];
        let patched = KeyInputs {
            patches: &patch,
            ..inputs(&env)
        };
        assert_eq!(changed(key_of(&tree, &patched)), "patches changed");
        let pnpm = [
            ("package.json", PACKAGE),
            ("pnpm-lock.yaml", "lockfileVersion: 9"),
        ];
        assert_eq!(changed(key_of(&pnpm, &inputs(&env))), "lockfile changed");
        assert_eq!(base.changes_since("garbage"), base.changes_since(""));
    }

    #[test]
    fn trees_without_a_lockfile_or_with_workspaces_are_not_kept() {
        let env = [var("PATH", "/usr/bin")];
        let no_lockfile = key_of(&[("package.json", PACKAGE)], &inputs(&env));
        assert!(no_lockfile.unwrap_err().contains("no lockfile"));
        let workspaces = r#"{"workspaces":["packages/*"]}"#;
        let tree = [("package.json", workspaces), ("package-lock.json", "{}")];
        assert!(key_of(&tree, &inputs(&env))
            .unwrap_err()
            .contains("monorepo"));
        let pnpm = [
            ("package.json", PACKAGE),
            ("pnpm-lock.yaml", "x"),
            ("pnpm-workspace.yaml", "packages: []"),
        ];
        assert!(key_of(&pnpm, &inputs(&env)).is_err());
        assert!(key_of(&[("package.json", "{")], &inputs(&env)).is_err());
    }
}
