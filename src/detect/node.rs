//! Node.js projects: the package manager its lockfile names, then a static build of a known
//! framework (`static_output`), or a server (`start`: `next start`, the `start` script, `main`
//! or a server file), or what a package with none of those is (`unstarted`).

use serde_json::Value;

use super::{Files, Kind, Plan};

/// The package manager a Node project's lockfile names, and its install command.
fn package_manager(files: Files<'_>) -> (&'static str, &'static str, String) {
    if files("pnpm-lock.yaml").is_some() {
        (
            "pnpm",
            "pnpm install --frozen-lockfile",
            "pnpm-lock.yaml".into(),
        )
    } else if files("yarn.lock").is_some() {
        ("yarn", "yarn install --frozen-lockfile", "yarn.lock".into())
    } else if files("bun.lockb").is_some() || files("bun.lock").is_some() {
        ("bun", "bun install", "bun.lock".into())
    } else if files("package-lock.json").is_some() {
        ("npm", "npm ci", "package-lock.json".into())
    } else {
        ("npm", "npm install", "no lockfile".into())
    }
}

/// Dependencies that make a package a server, started or not.
const SERVER_DEPENDENCIES: [&str; 8] = [
    "express",
    "fastify",
    "koa",
    "@hapi/hapi",
    "hono",
    "@nestjs/core",
    "restify",
    "polka",
];

/// What to set when a Node server's start command is not found.
fn set_node_start() -> String {
    format!(
        "add a `start` script to package.json, or {}",
        super::set_start("node server.js")
    )
}

pub(super) fn node(files: Files<'_>, package: &str) -> Plan {
    let Ok(package) = serde_json::from_str::<Value>(package).map(Package) else {
        return Plan {
            framework: "node".into(),
            reasons: vec!["package.json (not valid JSON): a Node.js project".into()],
            kind: Kind::Server {
                what_to_set: format!("make package.json valid JSON, or {}", set_node_start()),
            },
            ..Plan::default()
        };
    };
    let (manager, install, lockfile) = package_manager(files);
    let mut reasons = vec![format!(
        "package.json with {lockfile}: {manager}, installed with `{install}`"
    )];
    let build = package.script("build").map(|_| {
        reasons.push("a `build` script: it builds".into());
        format!("{manager} run build")
    });
    if let Some((framework, output, why)) = static_output(files, &package) {
        reasons.push(format!("{why}: a static site served from {output}/"));
        return Plan {
            framework: framework.into(),
            install_command: Some(install.into()),
            build_command: build,
            start_command: None,
            output_directory: Some(output.into()),
            kind: Kind::StaticBuild {
                what_to_set: "set outputDirectory".into(),
            },
            reasons,
        };
    }
    let Some((framework, start, why)) = start(files, &package, manager) else {
        return unstarted(files, install, build, reasons, &package);
    };
    reasons.push(why);
    Plan {
        framework: framework.into(),
        install_command: Some(install.into()),
        build_command: build,
        start_command: Some(start),
        output_directory: None,
        kind: Kind::Server {
            what_to_set: set_node_start(),
        },
        reasons,
    }
}

/// A parsed package.json.
struct Package(Value);

impl Package {
    /// Whether `name` is among the dependencies or the dev dependencies.
    fn has_dep(&self, name: &str) -> bool {
        ["dependencies", "devDependencies"].iter().any(|section| {
            self.0
                .get(section)
                .and_then(|deps| deps.get(name))
                .is_some()
        })
    }

    fn script(&self, name: &str) -> Option<&str> {
        self.0
            .get("scripts")
            .and_then(|scripts| scripts.get(name))
            .and_then(Value::as_str)
    }
}

/// A framework whose build is a static site as it is set up: (framework, output directory,
/// why).
fn static_output(
    files: Files<'_>,
    package: &Package,
) -> Option<(&'static str, &'static str, String)> {
    let has_dep = |name: &str| package.has_dep(name);
    if has_dep("next") {
        let next_config = ["next.config.js", "next.config.mjs", "next.config.ts"]
            .iter()
            .find_map(|name| files(name));
        let export = next_config.as_deref().is_some_and(|config| {
            let compact: String = config.chars().filter(|c| !c.is_whitespace()).collect();
            compact.contains("output:'export'") || compact.contains("output:\"export\"")
        });
        export.then(|| ("next", "out", "Next.js with output: 'export'".to_owned()))
    } else if has_dep("@sveltejs/kit") {
        has_dep("@sveltejs/adapter-static").then(|| {
            (
                "sveltekit",
                "build",
                "SvelteKit with adapter-static".to_owned(),
            )
        })
    } else if has_dep("astro") {
        let server = ["@astrojs/node", "@astrojs/vercel", "@astrojs/netlify"]
            .iter()
            .any(|adapter| has_dep(adapter));
        (!server).then(|| ("astro", "dist", "Astro without a server adapter".to_owned()))
    } else if has_dep("@docusaurus/core") {
        Some(("docusaurus", "build", "Docusaurus".to_owned()))
    } else if has_dep("gatsby") {
        Some(("gatsby", "public", "Gatsby".to_owned()))
    } else if has_dep("@11ty/eleventy") {
        Some(("eleventy", "_site", "Eleventy".to_owned()))
    } else if has_dep("react-scripts") {
        Some(("create-react-app", "build", "Create React App".to_owned()))
    } else if has_dep("vite") && package.script("start").is_none() {
        Some(("vite", "dist", "Vite".to_owned()))
    } else {
        None
    }
}

/// How a server starts: `next start`, the `start` script, or `node` on `main` or a server
/// file; (framework, start command, why).
fn start(
    files: Files<'_>,
    package: &Package,
    manager: &str,
) -> Option<(&'static str, String, String)> {
    if package.has_dep("next") {
        let why = "Next.js (server mode): `next start` on PORT".to_owned();
        return Some(("next", "exec npx next start -p \"$PORT\"".to_owned(), why));
    }
    if package.script("start").is_some() {
        let why = "a `start` script: it starts the server".to_owned();
        return Some(("node", format!("{manager} start"), why));
    }
    let main = package
        .0
        .pointer("/main")
        .and_then(Value::as_str)
        .or_else(|| {
            ["server.js", "index.js", "app.js"]
                .into_iter()
                .find(|name| files(name).is_some())
        })?;
    Some((
        "node",
        format!("exec node {main}"),
        format!("no start script: `node {main}`"),
    ))
}

/// A package with no start script, `main` or server file: a server that cannot be started
/// (a server dependency), a build whose output the pipeline looks for, a plain site that
/// keeps its tooling in package.json, or else a server again.
fn unstarted(
    files: Files<'_>,
    install: &str,
    build: Option<String>,
    mut reasons: Vec<String>,
    package: &Package,
) -> Plan {
    let server = SERVER_DEPENDENCIES
        .iter()
        .find(|name| package.has_dep(name));
    let (install, kind) = match (server, &build) {
        (Some(server), _) => {
            reasons.push(format!(
                "`{server}` in the dependencies: a server, and no start script, `main`, \
                 server.js, index.js or app.js to start it"
            ));
            let what_to_set = set_node_start();
            (Some(install), Kind::Server { what_to_set })
        }
        (None, Some(_)) => {
            reasons.push(
                "no known framework: the build's dist, build, out or public is served".into(),
            );
            let what_to_set = "set outputDirectory to where the build writes, or startCommand \
                               if this is a server"
                .into();
            (Some(install), Kind::StaticBuild { what_to_set })
        }
        (None, None) if files("index.html").is_some() => {
            reasons.clear();
            reasons.push(
                "no build, no start script, index.html at the root: a static site \
                          served from the root"
                    .into(),
            );
            (None, Kind::Site)
        }
        (None, None) => {
            reasons.push("no build, no start script, `main`, server.js, index.js or app.js".into());
            let what_to_set = set_node_start();
            (Some(install), Kind::Server { what_to_set })
        }
    };
    let framework = match kind {
        Kind::Site => "static",
        _ => "node",
    };
    Plan {
        framework: framework.into(),
        install_command: install.map(str::to_owned),
        build_command: build,
        kind,
        reasons,
        ..Plan::default()
    }
}
