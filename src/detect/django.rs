//! Django projects (`manage.py` at the root, as `django-admin startproject NAME .` makes
//! them): the settings module `manage.py` names, the application its settings name
//! (`WSGI_APPLICATION`, else `<package>/wsgi.py`), served by gunicorn (or uvicorn on
//! `<package>/asgi.py` when only uvicorn is listed); `collectstatic` in the build when the
//! settings set `STATIC_ROOT`.

use super::venv::{server_command, Requirements};
use super::{Files, Kind, Plan};

pub(super) fn django(
    files: Files<'_>,
    mut requirements: Requirements,
    mut reasons: Vec<String>,
) -> Plan {
    let manage = files("manage.py").unwrap_or_default();
    let settings_module = quoted_after(&manage, "DJANGO_SETTINGS_MODULE");
    let package = settings_module
        .as_deref()
        .and_then(|module| module.split('.').next())
        .unwrap_or("")
        .to_owned();
    let settings = settings_module.as_deref().and_then(|module| {
        let path = module.replace('.', "/");
        files(&format!("{path}.py")).or_else(|| files(&format!("{path}/__init__.py")))
    });
    let example = match package.as_str() {
        "" => "gunicorn --bind 0.0.0.0:$PORT mysite.wsgi".to_owned(),
        package => format!("gunicorn --bind 0.0.0.0:$PORT {package}.wsgi"),
    };
    let what_to_set = super::set_start(&example);
    let unstarted = |mut reasons: Vec<String>, why: String, install: String| {
        reasons.push(why);
        Plan {
            framework: "django".into(),
            install_command: Some(install),
            kind: Kind::Server {
                what_to_set: what_to_set.clone(),
            },
            reasons,
            ..Plan::default()
        }
    };
    let Some(settings) = settings else {
        let why = match &settings_module {
            Some(module) => format!("manage.py: Django, settings {module} not found"),
            None => "manage.py: Django, and it names no DJANGO_SETTINGS_MODULE".to_owned(),
        };
        return unstarted(reasons, why, requirements.install);
    };
    let settings_module = settings_module.unwrap_or_default();
    reasons.push(format!("manage.py: Django, settings {settings_module}"));
    let (server, target) = match server(files, &settings, &package, &requirements) {
        Ok(server) => server,
        Err(why) => return unstarted(reasons, why, requirements.install),
    };
    requirements.with_server(server, &mut reasons);
    reasons.push(format!("{server} serves {target} on PORT"));
    let build = static_files(&settings, &requirements, &mut reasons);
    Plan {
        framework: "django".into(),
        install_command: Some(requirements.install),
        build_command: build,
        start_command: Some(server_command(server, &target, false)),
        kind: Kind::Server { what_to_set },
        reasons,
        ..Plan::default()
    }
}

/// The server and what it serves: uvicorn on `<package>/asgi.py` when only uvicorn is
/// listed, else gunicorn on the WSGI application; or why neither can start.
fn server(
    files: Files<'_>,
    settings: &str,
    package: &str,
    requirements: &Requirements,
) -> Result<(&'static str, String), String> {
    // The application the settings name (`mysite.wsgi.application`), else the package's.
    let wsgi = quoted_after(settings, "WSGI_APPLICATION")
        .and_then(|path| {
            let (module, name) = path.rsplit_once('.')?;
            Some((module.to_owned(), name.to_owned()))
        })
        .unwrap_or_else(|| (format!("{package}.wsgi"), "application".to_owned()));
    let asgi_module = format!("{package}.asgi");
    let exists = |module: &str| files(&format!("{}.py", module.replace('.', "/"))).is_some();
    let use_uvicorn =
        requirements.has("uvicorn") && !requirements.has("gunicorn") && exists(&asgi_module);
    match use_uvicorn {
        true => Ok(("uvicorn", format!("{asgi_module}:application"))),
        false if exists(&wsgi.0) => Ok(("gunicorn", format!("{}:{}", wsgi.0, wsgi.1))),
        false => Err(format!(
            "no {}.py for the WSGI application",
            wsgi.0.replace('.', "/")
        )),
    }
}

/// `collectstatic` in the build when the settings set `STATIC_ROOT`; whether the app serves
/// its static files (whitenoise).
fn static_files(
    settings: &str,
    requirements: &Requirements,
    reasons: &mut Vec<String>,
) -> Option<String> {
    let build = static_root(settings).then(|| {
        reasons.push(
            "STATIC_ROOT is set: `manage.py collectstatic --noinput` in the build".to_owned(),
        );
        ".venv/bin/python manage.py collectstatic --noinput".to_owned()
    });
    match requirements.has("whitenoise") {
        true => reasons.push("whitenoise: the app serves its own static files".into()),
        false => reasons.push(
            "no whitenoise: with DEBUG off, Django serves no static files (add whitenoise to \
             serve them from the app)"
                .into(),
        ),
    }
    build
}

/// The first quoted string after `key` (`os.environ.setdefault('KEY', 'value')`,
/// `KEY = "value"`), on the same line.
fn quoted_after(text: &str, key: &str) -> Option<String> {
    text.lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .find_map(|line| {
            let rest = &line[line.find(key)? + key.len()..];
            let rest = rest.trim_start_matches(['\'', '"']);
            let start = rest.find(['\'', '"'])?;
            let quote = rest[start..].chars().next()?;
            let value = &rest[start + 1..];
            let end = value.find(quote)?;
            Some(value[..end].to_owned()).filter(|v| !v.is_empty())
        })
}

/// The settings assign `STATIC_ROOT` at the top level.
fn static_root(settings: &str) -> bool {
    settings.lines().any(|line| {
        line.strip_prefix("STATIC_ROOT")
            .is_some_and(|rest| rest.trim_start().starts_with('=') && !rest.contains("None"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_module_and_applications_are_read_from_their_files() {
        let manage = "def main():\n    \"\"\"Run administrative tasks.\"\"\"\n    os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'mysite.settings')\n";
        assert_eq!(
            quoted_after(manage, "DJANGO_SETTINGS_MODULE").as_deref(),
            Some("mysite.settings")
        );
        assert_eq!(
            quoted_after(
                "WSGI_APPLICATION = \"config.wsgi.application\"\n",
                "WSGI_APPLICATION"
            )
            .as_deref(),
            Some("config.wsgi.application")
        );
        assert_eq!(
            quoted_after("# WSGI_APPLICATION = 'x.y'\n", "WSGI_APPLICATION"),
            None
        );
        assert!(static_root("STATIC_ROOT = BASE_DIR / 'staticfiles'\n"));
        assert!(!static_root("STATIC_URL = 'static/'\n"));
        assert!(!static_root("# STATIC_ROOT = BASE_DIR / 'staticfiles'\n"));
        assert!(!static_root("STATIC_ROOT = None\n"));
    }
}
