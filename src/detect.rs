//! Zero-config deploys: a pure function from a source tree to a build plan with its reasons
//! (the contract's "Zero-config deploys"). The tree is read through a closure (relative path
//! → contents), so the rules are table-tested on fixtures without touching a disk; the
//! pipeline passes the workspace after the source step, the CLI (`slipway deploy --dry-run`)
//! the directory it would upload. Explicit fields of a request always win over the plan.

use serde_json::Value;

/// What detection chose, and why (one sentence per choice, for the run's log).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// A short name: `vite`, `next`, `flask`, `procfile`, `static`, …
    pub framework: String,
    pub install_command: Option<String>,
    pub build_command: Option<String>,
    /// `None`: a static site.
    pub start_command: Option<String>,
    pub output_directory: Option<String>,
    pub reasons: Vec<String>,
}

/// Reads a file of the tree by its relative path (`package.json`), if it exists.
pub type Files<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The plan for a tree; `None` when nothing here is recognised.
pub fn detect(files: Files<'_>) -> Option<Plan> {
    let procfile_web = files("Procfile").and_then(|text| {
        text.lines()
            .find_map(|line| line.strip_prefix("web:").map(|cmd| cmd.trim().to_owned()))
            .filter(|cmd| !cmd.is_empty())
    });
    let mut plan = if let Some(package) = files("package.json") {
        node(files, &package)?
    } else if files("requirements.txt").is_some() || files("pyproject.toml").is_some() {
        python(files)
    } else if files("index.html").is_some() {
        Plan {
            framework: "static".into(),
            reasons: vec![
                "index.html at the root: a static site, no build, served from the root".into(),
            ],
            ..Plan::default()
        }
    } else if procfile_web.is_some() {
        Plan {
            framework: "procfile".into(),
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
            "python" | "flask" | "fastapi" | "django" => {
                format!("PATH=\"$PWD/.venv/bin:$PATH\" exec {web}")
            }
            _ => web,
        });
        plan.output_directory = None;
    }
    Some(plan)
}

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

fn node(files: Files<'_>, package: &str) -> Option<Plan> {
    let json: Value = serde_json::from_str(package).ok()?;
    let has_dep = |name: &str| {
        ["dependencies", "devDependencies"]
            .iter()
            .any(|section| json.get(section).and_then(|deps| deps.get(name)).is_some())
    };
    let script = |name: &str| {
        json.get("scripts")
            .and_then(|scripts| scripts.get(name))
            .and_then(Value::as_str)
    };
    let (manager, install, lockfile) = package_manager(files);
    let run = |name: &str| match manager {
        "npm" => format!("npm run {name}"),
        other => format!("{other} run {name}"),
    };
    let mut reasons = vec![format!(
        "package.json with {lockfile}: {manager}, installed with `{install}`"
    )];
    let build = script("build").map(|_| {
        reasons.push("a `build` script: it builds".into());
        run("build")
    });
    let next_config = ["next.config.js", "next.config.mjs", "next.config.ts"]
        .iter()
        .find_map(|name| files(name));
    let static_output: Option<(&str, &str, String)> = if has_dep("next") {
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
    } else if has_dep("vite") && script("start").is_none() {
        Some(("vite", "dist", "Vite".to_owned()))
    } else {
        None
    };
    if let Some((framework, output, why)) = static_output {
        reasons.push(format!("{why}: a static site served from {output}/"));
        return Some(Plan {
            framework: framework.into(),
            install_command: Some(install.into()),
            build_command: build,
            start_command: None,
            output_directory: Some(output.into()),
            reasons,
        });
    }
    let (framework, start) = if has_dep("next") {
        reasons.push("Next.js (server mode): `next start` on PORT".into());
        ("next", "exec npx next start -p \"$PORT\"".to_owned())
    } else if script("start").is_some() {
        reasons.push("a `start` script: it starts the server".into());
        (
            "node",
            match manager {
                "npm" => "npm start".to_owned(),
                other => format!("{other} start"),
            },
        )
    } else {
        let main = json
            .pointer("/main")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| {
                ["server.js", "index.js", "app.js"]
                    .iter()
                    .find(|name| files(name).is_some())
                    .map(|name| (*name).to_owned())
            })?;
        reasons.push(format!("no start script: `node {main}`"));
        ("node", format!("exec node {main}"))
    };
    Some(Plan {
        framework: framework.into(),
        install_command: Some(install.into()),
        build_command: build,
        start_command: Some(start),
        output_directory: None,
        reasons,
    })
}

fn python(files: Files<'_>) -> Plan {
    let requirements = files("requirements.txt");
    let (install, source) = match &requirements {
        Some(_) => (
            "python3 -m venv .venv && .venv/bin/pip install -r requirements.txt",
            "requirements.txt",
        ),
        None => (
            "python3 -m venv .venv && .venv/bin/pip install .",
            "pyproject.toml",
        ),
    };
    let deps = format!(
        "{}\n{}",
        requirements.unwrap_or_default(),
        files("pyproject.toml").unwrap_or_default()
    )
    .to_ascii_lowercase();
    let mut reasons = vec![format!("{source}: Python, installed into a venv (.venv)")];
    let module = ["app.py", "main.py", "wsgi.py", "asgi.py"]
        .iter()
        .find(|name| {
            files(name).is_some_and(|text| text.contains("app =") || text.contains("app="))
        })
        .map(|name| name.trim_end_matches(".py").to_owned());
    let (framework, start) = match &module {
        Some(module) if deps.contains("uvicorn") => {
            reasons.push(format!(
                "uvicorn and an `app` in {module}.py: uvicorn {module}:app"
            ));
            (
                "fastapi",
                Some(format!(
                    "exec .venv/bin/uvicorn {module}:app --host 0.0.0.0 --port \"$PORT\""
                )),
            )
        }
        Some(module) if deps.contains("gunicorn") => {
            reasons.push(format!(
                "gunicorn and an `app` in {module}.py: gunicorn {module}:app"
            ));
            (
                "flask",
                Some(format!(
                    "exec .venv/bin/gunicorn --bind \"0.0.0.0:$PORT\" {module}:app"
                )),
            )
        }
        Some(module) => {
            reasons.push(format!("an `app` in {module}.py: `python {module}.py`"));
            ("python", Some(format!("exec .venv/bin/python {module}.py")))
        }
        None => ("python", None),
    };
    Plan {
        framework: framework.into(),
        install_command: Some(install.into()),
        build_command: None,
        start_command: start,
        output_directory: None,
        reasons,
    }
}

/// [`detect`] over a directory on disk (files of at most 1 MiB are read).
pub fn detect_dir(dir: &std::path::Path) -> Option<Plan> {
    let read = |name: &str| -> Option<String> {
        let path = dir.join(name);
        let metadata = std::fs::symlink_metadata(&path).ok()?;
        if !metadata.is_file() || metadata.len() > 1 << 20 {
            return None;
        }
        std::fs::read_to_string(path).ok()
    };
    detect(&read)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn plan(files: &[(&str, &str)]) -> Option<Plan> {
        let map: HashMap<String, String> = files
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        detect(&|name: &str| map.get(name).cloned())
    }

    /// The real projects under `tests/fixtures/projects/`, made by each framework's create
    /// tool, read from disk as the pipeline reads a workspace.
    #[test]
    fn fixture_projects_on_disk() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/projects");
        let row = |dir: &str| {
            let p = detect_dir(&root.join(dir)).unwrap_or_else(|| panic!("{dir}: no plan"));
            (
                p.framework,
                p.install_command,
                p.build_command,
                p.start_command,
                p.output_directory,
            )
        };
        let s = |v: &str| Some(v.to_owned());
        let npm_build = (s("npm ci"), s("npm run build"));
        assert_eq!(
            row("vite-react"),
            (
                "vite".into(),
                npm_build.0.clone(),
                npm_build.1.clone(),
                None,
                s("dist")
            )
        );
        assert_eq!(
            row("astro-site"),
            (
                "astro".into(),
                npm_build.0.clone(),
                npm_build.1.clone(),
                None,
                s("dist")
            )
        );
        assert_eq!(
            row("next-app"),
            (
                "next".into(),
                npm_build.0,
                npm_build.1,
                s("exec npx next start -p \"$PORT\""),
                None
            )
        );
    }

    /// Each row: a project as its framework's own create tool makes it (the files detection
    /// reads, trimmed), and what must be chosen.
    #[test]
    fn real_projects_get_their_commands() {
        let vite = r#"{"name":"vite-react","scripts":{"dev":"vite","build":"tsc -b && vite build","preview":"vite preview"},"dependencies":{"react":"^19.0.0","react-dom":"^19.0.0"},"devDependencies":{"@vitejs/plugin-react":"^4.3.4","vite":"^6.0.5"}}"#;
        let p = plan(&[
            ("package.json", vite),
            ("package-lock.json", "{}"),
            ("index.html", "<div id=root>"),
        ])
        .unwrap();
        assert_eq!(
            (
                p.framework.as_str(),
                p.install_command.as_deref(),
                p.build_command.as_deref(),
                p.start_command.as_deref(),
                p.output_directory.as_deref()
            ),
            (
                "vite",
                Some("npm ci"),
                Some("npm run build"),
                None,
                Some("dist")
            )
        );

        let astro = r#"{"name":"astro-site","type":"module","scripts":{"dev":"astro dev","build":"astro build","preview":"astro preview","astro":"astro"},"dependencies":{"astro":"^5.1.1"}}"#;
        let p = plan(&[
            ("package.json", astro),
            ("pnpm-lock.yaml", "lockfileVersion: '9.0'"),
        ])
        .unwrap();
        assert_eq!(
            (
                p.framework.as_str(),
                p.install_command.as_deref(),
                p.build_command.as_deref(),
                p.output_directory.as_deref()
            ),
            (
                "astro",
                Some("pnpm install --frozen-lockfile"),
                Some("pnpm run build"),
                Some("dist")
            )
        );

        let next = r#"{"name":"next-app","scripts":{"dev":"next dev --turbopack","build":"next build","start":"next start","lint":"next lint"},"dependencies":{"react":"^19.0.0","react-dom":"^19.0.0","next":"15.1.3"}}"#;
        let p = plan(&[
            ("package.json", next),
            ("package-lock.json", "{}"),
            (
                "next.config.ts",
                "const nextConfig = {};\nexport default nextConfig;",
            ),
        ])
        .unwrap();
        assert_eq!(p.framework, "next");
        assert_eq!(p.build_command.as_deref(), Some("npm run build"));
        assert!(p.start_command.unwrap().contains("next start"));
        let p = plan(&[
            ("package.json", next),
            ("next.config.mjs", "export default { output: 'export' }"),
        ])
        .unwrap();
        assert_eq!(
            (p.output_directory.as_deref(), p.start_command),
            (Some("out"), None)
        );

        let express = r#"{"name":"api","main":"server.js","scripts":{"start":"node server.js"},"dependencies":{"express":"^4.21.2"}}"#;
        let p = plan(&[("package.json", express), ("yarn.lock", "")]).unwrap();
        assert_eq!(
            (p.install_command.as_deref(), p.start_command.as_deref()),
            (Some("yarn install --frozen-lockfile"), Some("yarn start"))
        );
        let bare = r#"{"name":"api","dependencies":{"express":"^4"}}"#;
        let p = plan(&[("package.json", bare), ("index.js", "require('express')")]).unwrap();
        assert_eq!(p.start_command.as_deref(), Some("exec node index.js"));

        let svelte = r#"{"devDependencies":{"@sveltejs/kit":"^2","@sveltejs/adapter-static":"^3","vite":"^6"},"scripts":{"build":"vite build"}}"#;
        assert_eq!(
            plan(&[("package.json", svelte)])
                .unwrap()
                .output_directory
                .as_deref(),
            Some("build")
        );
        let cra = r#"{"dependencies":{"react-scripts":"5.0.1"},"scripts":{"start":"react-scripts start","build":"react-scripts build"}}"#;
        assert_eq!(
            plan(&[("package.json", cra)])
                .unwrap()
                .output_directory
                .as_deref(),
            Some("build")
        );
        let docusaurus = r#"{"dependencies":{"@docusaurus/core":"3.6.3"},"scripts":{"build":"docusaurus build"}}"#;
        assert_eq!(
            plan(&[("package.json", docusaurus), ("bun.lockb", "")])
                .unwrap()
                .install_command
                .as_deref(),
            Some("bun install")
        );
        let gatsby = r#"{"dependencies":{"gatsby":"^5"},"scripts":{"build":"gatsby build"}}"#;
        assert_eq!(
            plan(&[("package.json", gatsby)])
                .unwrap()
                .output_directory
                .as_deref(),
            Some("public")
        );
        let eleventy =
            r#"{"devDependencies":{"@11ty/eleventy":"^3"},"scripts":{"build":"eleventy"}}"#;
        assert_eq!(
            plan(&[("package.json", eleventy)])
                .unwrap()
                .output_directory
                .as_deref(),
            Some("_site")
        );
    }

    #[test]
    fn python_projects_get_a_venv_and_their_server() {
        let flask_app = "from flask import Flask\napp = Flask(__name__)\n";
        let p = plan(&[
            ("requirements.txt", "flask==3.1.0\ngunicorn==23.0.0\n"),
            ("app.py", flask_app),
            ("Procfile", "web: gunicorn --bind 0.0.0.0:$PORT app:app\n"),
        ])
        .unwrap();
        assert_eq!(p.framework, "flask");
        assert!(p
            .install_command
            .unwrap()
            .contains(".venv/bin/pip install -r requirements.txt"));
        assert_eq!(
            p.start_command.as_deref(),
            Some("PATH=\"$PWD/.venv/bin:$PATH\" exec gunicorn --bind 0.0.0.0:$PORT app:app")
        );
        assert!(p.reasons.iter().any(|r| r.contains("Procfile")));
        let p = plan(&[
            ("requirements.txt", "fastapi\nuvicorn[standard]\n"),
            ("main.py", "app = FastAPI()"),
        ])
        .unwrap();
        assert!(p.start_command.unwrap().contains("uvicorn main:app"));
        let p = plan(&[
            ("pyproject.toml", "[project]\nname='x'"),
            ("app.py", "app = make()"),
        ])
        .unwrap();
        assert_eq!(
            p.start_command.as_deref(),
            Some("exec .venv/bin/python app.py")
        );
    }

    #[test]
    fn plain_sites_procfiles_and_unknown_trees() {
        let p = plan(&[("index.html", "<h1>hi</h1>"), ("style.css", "")]).unwrap();
        assert_eq!(
            (
                p.framework.as_str(),
                p.install_command,
                p.output_directory.as_deref()
            ),
            ("static", None, None)
        );
        let p = plan(&[("Procfile", "worker: x\nweb: ./serve --port $PORT\n")]).unwrap();
        assert_eq!(p.start_command.as_deref(), Some("./serve --port $PORT"));
        assert!(plan(&[("README.md", "")]).is_none());
        assert!(plan(&[("package.json", "not json")]).is_none());
    }
}
