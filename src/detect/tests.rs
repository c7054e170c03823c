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
    // `django-admin startproject mysite .` (Django 5.2): gunicorn on the settings'
    // WSGI_APPLICATION; no STATIC_ROOT in a stock project, so no collectstatic.
    assert_eq!(
        row("django-site"),
        (
            "django".into(),
            s("python3 -m venv .venv && .venv/bin/pip install -r requirements.txt"),
            None,
            s("exec .venv/bin/gunicorn --bind \"0.0.0.0:$PORT\" mysite.wsgi:application"),
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
    let docusaurus =
        r#"{"dependencies":{"@docusaurus/core":"3.6.3"},"scripts":{"build":"docusaurus build"}}"#;
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
    let eleventy = r#"{"devDependencies":{"@11ty/eleventy":"^3"},"scripts":{"build":"eleventy"}}"#;
    assert_eq!(
        plan(&[("package.json", eleventy)])
            .unwrap()
            .output_directory
            .as_deref(),
        Some("_site")
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
}

/// Issue 29: every language the detector knows, as a server whose start command is not
/// found, fails before installing with a sentence that says what to set, and its source
/// directory is never served. Plain sites are served from their root.
#[test]
fn servers_without_a_start_command_say_what_to_set() {
    type Tree = &'static [(&'static str, &'static str)];
    let table: &[(Tree, &str, &str)] = &[
        (
            &[
                ("requirements.txt", "gunicorn\n"),
                ("app.py", "print('hi')\n"),
            ],
            "python",
            "gunicorn --bind 0.0.0.0:$PORT app:app",
        ),
        (
            &[
                ("package.json", r#"{"dependencies":{"express":"^4"}}"#),
                ("src/server.js", ""),
            ],
            "node",
            "add a `start` script to package.json",
        ),
        (
            &[("package.json", "not json")],
            "node",
            "make package.json valid JSON",
        ),
        (
            &[("package.json", r#"{"dependencies":{"lodash":"^4"}}"#)],
            "node",
            "Procfile line `web: node server.js`",
        ),
        (
            &[("Procfile", "worker: ./work\n")],
            "procfile",
            "add a `web:` line to the Procfile",
        ),
        (
            &[
                ("manage.py", "import os\n"),
                ("requirements.txt", "django\n"),
            ],
            "django",
            "gunicorn --bind 0.0.0.0:$PORT mysite.wsgi",
        ),
        (
            &[("go.mod", "module x\n"), ("index.html", "")],
            "go",
            "set startCommand",
        ),
        (
            &[("Gemfile", ""), ("app.rb", "")],
            "ruby",
            "a Procfile line `web: ",
        ),
    ];
    for (files, framework, advice) in table {
        let p = plan(files).unwrap_or_else(|| panic!("{files:?}: no plan"));
        assert_eq!(p.framework, *framework, "{files:?}");
        assert_eq!(p.start_command, None, "{files:?}");
        let missing = p
            .missing_start()
            .unwrap_or_else(|| panic!("{files:?}: {p:?}"));
        assert!(missing.contains(advice), "{files:?}: {missing}");
        assert!(missing.contains("no start command"), "{missing}");
        assert!(p.refuse_root().unwrap().contains(advice), "{files:?}");
    }

    // A server with a start command does not fail early, but its root is never served.
    let p = plan(&[
        ("requirements.txt", "gunicorn\n"),
        ("app.py", "app = Flask(__name__)\n"),
    ])
    .unwrap();
    assert_eq!(p.missing_start(), None);
    assert!(p
        .refuse_root()
        .unwrap()
        .contains("never served as static files"));
    // A static build's root is never served either; a plain site's is.
    let vite = r#"{"scripts":{"build":"vite build"},"devDependencies":{"vite":"^6"}}"#;
    let p = plan(&[("package.json", vite)]).unwrap();
    assert_eq!((p.missing_start(), p.refuse_root().is_some()), (None, true));
    let webpack = r#"{"scripts":{"build":"webpack"},"devDependencies":{"webpack":"^5"}}"#;
    let p = plan(&[("package.json", webpack)]).unwrap();
    assert!(
        p.refuse_root().unwrap().contains("set outputDirectory"),
        "{p:?}"
    );
    let tooling = r#"{"devDependencies":{"prettier":"^3"}}"#;
    for files in [
        &[("index.html", "<h1>hi</h1>")][..],
        &[("package.json", tooling), ("index.html", "<h1>hi</h1>")][..],
    ] {
        let p = plan(files).unwrap();
        assert_eq!(
            (p.framework.as_str(), p.kind.clone()),
            ("static", Kind::Site),
            "{files:?}"
        );
        assert_eq!(
            (p.missing_start(), p.refuse_root(), p.install_command),
            (None, None, None)
        );
    }
}
