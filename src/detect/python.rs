//! Python projects (`requirements.txt`, `pyproject.toml` or `manage.py`): installed into a
//! venv (`.venv`), then Django (`django.rs`), or the WSGI/ASGI callable of a top-level module
//! (`callable.rs`) under the server the requirements name: gunicorn or waitress for WSGI,
//! uvicorn or hypercorn for ASGI. A callable with no server in the requirements gets
//! gunicorn (WSGI) or uvicorn (ASGI) installed into the venv too. A project with neither is a
//! server whose start command was not found.

use super::callable::{self, Callable, Interface};
use super::venv::{server_command, Requirements};
use super::{Files, Kind, Plan};

/// Modules a callable is looked for in, in order.
const MODULES: [&str; 7] = [
    "app.py",
    "main.py",
    "wsgi.py",
    "asgi.py",
    "application.py",
    "server.py",
    "api.py",
];

pub(super) fn python(files: Files<'_>) -> Plan {
    let mut requirements = Requirements::read(files);
    let mut reasons = vec![format!(
        "{}: Python, installed into a venv (.venv)",
        requirements.source
    )];
    if files("manage.py").is_some() {
        return super::django::django(files, requirements, reasons);
    }
    let found = MODULES.iter().find_map(|file| {
        let source = files(file)?;
        let callable = callable::find(&source)?;
        Some((file.trim_end_matches(".py"), callable, source))
    });
    let Some((module, callable, source)) = found else {
        return Plan {
            framework: "python".into(),
            install_command: Some(requirements.install),
            kind: Kind::Server {
                what_to_set: format!(
                    "no WSGI or ASGI callable (`app` or `application`, a `def app(environ, \
                     start_response)`, or a `create_app()` factory) in {}; {}",
                    MODULES.join(", "),
                    super::set_start("gunicorn --bind 0.0.0.0:$PORT app:app")
                ),
            },
            reasons,
            ..Plan::default()
        };
    };
    reasons.push(format!("{module}.py defines {}", callable.how));
    let (framework, start) = start(module, &callable, &source, &mut requirements, &mut reasons);
    Plan {
        framework: framework.into(),
        install_command: Some(requirements.install),
        start_command: Some(start),
        kind: Kind::Server {
            what_to_set: super::set_start("gunicorn --bind 0.0.0.0:$PORT app:app"),
        },
        reasons,
        ..Plan::default()
    }
}

/// The server for a callable: the framework name for the log, and the start command.
fn start(
    module: &str,
    callable: &Callable,
    source: &str,
    requirements: &mut Requirements,
    reasons: &mut Vec<String>,
) -> (&'static str, String) {
    let framework = match callable.interface {
        Interface::Asgi if requirements.has("fastapi") => "fastapi",
        Interface::Asgi => "asgi",
        _ if requirements.has("flask") => "flask",
        Interface::Wsgi => "wsgi",
        Interface::Unknown if requirements.has("fastapi") => "fastapi",
        Interface::Unknown => "python",
    };
    let listed = ["gunicorn", "uvicorn", "hypercorn", "waitress"]
        .into_iter()
        .find(|server| requirements.has(server));
    let server = match (callable.interface, listed) {
        (Interface::Asgi, Some("uvicorn" | "hypercorn")) => listed.unwrap_or_default(),
        (Interface::Asgi, _) => "uvicorn",
        (Interface::Wsgi, Some("gunicorn" | "waitress")) => listed.unwrap_or_default(),
        (Interface::Wsgi, _) => "gunicorn",
        (Interface::Unknown, Some(server)) => server,
        (Interface::Unknown, None) if callable::runs_itself(source) => {
            reasons.push(format!(
                "no server in {} and {module}.py runs itself (`if __name__ == \"__main__\"`): \
                 `python {module}.py`",
                requirements.source
            ));
            return ("python", format!("exec .venv/bin/python {module}.py"));
        }
        (Interface::Unknown, None) => "gunicorn",
    };
    requirements.with_server(server, reasons);
    let target = format!("{module}:{}", callable.name);
    let command = server_command(server, &target, callable.factory);
    reasons.push(format!("{server} serves {target} on PORT"));
    (framework, command)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::super::{detect, Kind, Plan};

    fn plan(files: &[(&str, &str)]) -> Plan {
        let map: HashMap<&str, &str> = files.iter().copied().collect();
        detect(&|name: &str| map.get(name).map(|text| (*text).to_owned())).unwrap()
    }

    const VENV: &str = "python3 -m venv .venv && .venv/bin/pip install -r requirements.txt";

    /// Each row: requirements.txt, a module and its text; the framework, the start command and
    /// what the install adds to the requirements' own.
    #[test]
    fn each_callable_form_gets_its_server() {
        let gunicorn =
            |target: &str| format!("exec .venv/bin/gunicorn --bind \"0.0.0.0:$PORT\" {target}");
        let uvicorn = |target: &str| {
            format!("exec .venv/bin/uvicorn {target} --host 0.0.0.0 --port \"$PORT\"")
        };
        let wsgi_fn = "def app(environ, start_response):\n    start_response('200 OK', [])\n    return [b'hi']\n";
        let table: Vec<(&str, &str, &str, &str, String, &str)> = vec![
            (
                "gunicorn\n",
                "app.py",
                wsgi_fn,
                "wsgi",
                gunicorn("app:app"),
                "",
            ),
            (
                "",
                "app.py",
                wsgi_fn,
                "wsgi",
                gunicorn("app:app"),
                " && .venv/bin/pip install gunicorn",
            ),
            (
                "flask==3.1.0\ngunicorn==23.0.0\n",
                "app.py",
                "app = Flask(__name__)\n",
                "flask",
                gunicorn("app:app"),
                "",
            ),
            (
                "flask\nwaitress\n",
                "wsgi.py",
                "from myapp import app\n",
                "flask",
                "exec .venv/bin/waitress-serve --listen=\"0.0.0.0:$PORT\" wsgi:app".into(),
                "",
            ),
            (
                "flask\ngunicorn\n",
                "app.py",
                "def create_app():\n    return Flask(__name__)\n",
                "flask",
                gunicorn("'app:create_app()'"),
                "",
            ),
            (
                "fastapi\nuvicorn[standard]\n",
                "main.py",
                "app = FastAPI()\n",
                "fastapi",
                uvicorn("main:app"),
                "",
            ),
            (
                "fastapi\n",
                "main.py",
                "app: FastAPI = FastAPI()\n",
                "fastapi",
                uvicorn("main:app"),
                " && .venv/bin/pip install uvicorn",
            ),
            (
                "hypercorn\n",
                "asgi.py",
                "async def app(scope, receive, send):\n    pass\n",
                "asgi",
                "exec .venv/bin/hypercorn --bind \"0.0.0.0:$PORT\" asgi:app".into(),
                "",
            ),
            (
                "uvicorn\n",
                "server.py",
                "from api.main import app\n",
                "python",
                uvicorn("server:app"),
                "",
            ),
            (
                "gunicorn\n",
                "application.py",
                "application = bottle.default_app()\n",
                "python",
                gunicorn("application:application"),
                "",
            ),
        ];
        for (requirements, module, text, framework, start, added) in table {
            let p = plan(&[("requirements.txt", requirements), (module, text)]);
            assert_eq!(
                (
                    p.framework.as_str(),
                    p.start_command.as_deref(),
                    p.install_command.as_deref()
                ),
                (
                    framework,
                    Some(start.as_str()),
                    Some(format!("{VENV}{added}").as_str())
                ),
                "{module}: {text:?}\n{:?}",
                p.reasons
            );
            assert!(matches!(p.kind, Kind::Server { .. }));
            assert!(
                p.reasons
                    .iter()
                    .any(|r| r.starts_with(&format!("{module} defines"))),
                "{:?}",
                p.reasons
            );
        }
    }

    #[test]
    fn modules_that_run_themselves_and_procfiles() {
        let p = plan(&[
            ("pyproject.toml", "[project]\nname='x'"),
            (
                "app.py",
                "app = make()\nif __name__ == \"__main__\":\n    app.serve()\n",
            ),
        ]);
        assert_eq!(
            p.start_command.as_deref(),
            Some("exec .venv/bin/python app.py")
        );
        assert_eq!(
            p.install_command.as_deref(),
            Some("python3 -m venv .venv && .venv/bin/pip install .")
        );
        // The Procfile's web process wins, with the venv's tools first on PATH.
        let p = plan(&[
            ("requirements.txt", "flask==3.1.0\ngunicorn==23.0.0\n"),
            ("app.py", "app = Flask(__name__)\n"),
            ("Procfile", "web: gunicorn --bind 0.0.0.0:$PORT app:app\n"),
        ]);
        assert_eq!(
            p.start_command.as_deref(),
            Some("PATH=\"$PWD/.venv/bin:$PATH\" exec gunicorn --bind 0.0.0.0:$PORT app:app")
        );
        assert!(p.reasons.iter().any(|r| r.contains("Procfile")));
        // No callable, but a Procfile: it starts.
        let p = plan(&[
            ("requirements.txt", "gunicorn\n"),
            ("Procfile", "web: gunicorn x:y\n"),
        ]);
        assert_eq!(p.missing_start(), None);
    }

    #[test]
    fn django_projects() {
        let manage = "import os\nos.environ.setdefault('DJANGO_SETTINGS_MODULE', 'config.settings.production')\n";
        let settings = "WSGI_APPLICATION = 'config.wsgi.application'\nSTATIC_ROOT = BASE_DIR / 'staticfiles'\n";
        let base = [
            ("manage.py", manage),
            ("config/settings/production.py", settings),
            ("config/wsgi.py", "application = get_wsgi_application()\n"),
            ("config/asgi.py", "application = get_asgi_application()\n"),
        ];
        let with = |requirements: &'static str| {
            let mut files = base.to_vec();
            files.push(("requirements.txt", requirements));
            plan(&files)
        };
        let p = with("django\ngunicorn\nwhitenoise\n");
        assert_eq!(
            (
                p.framework.as_str(),
                p.build_command.as_deref(),
                p.start_command.as_deref()
            ),
            (
                "django",
                Some(".venv/bin/python manage.py collectstatic --noinput"),
                Some("exec .venv/bin/gunicorn --bind \"0.0.0.0:$PORT\" config.wsgi:application")
            )
        );
        assert!(p
            .reasons
            .iter()
            .any(|r| r.contains("whitenoise: the app serves")));
        let p = with("django\nuvicorn\n");
        assert_eq!(
            p.start_command.as_deref(),
            Some("exec .venv/bin/uvicorn config.asgi:application --host 0.0.0.0 --port \"$PORT\"")
        );
        assert!(p.reasons.iter().any(|r| r.contains("no whitenoise")));
        let p = with("django\n");
        assert!(p
            .install_command
            .unwrap()
            .ends_with(" && .venv/bin/pip install gunicorn"));
        // The settings name a module that is not there: no start command, and why.
        let p = plan(&[("manage.py", manage), ("requirements.txt", "django\n")]);
        let missing = p.missing_start().unwrap();
        assert!(
            missing.contains("set startCommand (e.g. `gunicorn --bind 0.0.0.0:$PORT config.wsgi`)"),
            "{missing}"
        );
        assert!(p
            .reasons
            .iter()
            .any(|r| r.contains("settings config.settings.production not found")));
    }
}
