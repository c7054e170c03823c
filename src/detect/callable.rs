//! Finds the WSGI or ASGI callable a Python module defines, however it is defined: a function
//! (`def app(environ, start_response)`, `async def app(scope, receive, send)`), an assignment
//! (`app = Flask(__name__)`, `app: FastAPI = FastAPI()`, `app = application = …`), an import
//! (`from api.main import app`), or an application factory (`def create_app():`). Only
//! top-level lines count (no indentation); the text is read, never run.

/// The protocol a callable speaks, when its definition says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Interface {
    Wsgi,
    Asgi,
    /// Made elsewhere (an import, a factory's result): the server installed decides.
    Unknown,
}

/// A callable found in a module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Callable {
    /// `app`, `application`, or a factory's name (`create_app`).
    pub name: String,
    /// A factory: the server calls it for the application.
    pub factory: bool,
    pub interface: Interface,
    /// How it is defined, for the run's log: `def app(environ, start_response)`.
    pub how: String,
}

/// The names servers and peers' buildpacks look for, in order.
const NAMES: [&str; 2] = ["app", "application"];
/// Application factories (Flask's pattern).
const FACTORIES: [&str; 2] = ["create_app", "make_app"];
/// What in an assignment's value says ASGI.
const ASGI_MARKERS: [&str; 7] = [
    "FastAPI(",
    "Starlette(",
    "Quart(",
    "Litestar(",
    "get_asgi_application(",
    "asgi.App(",
    "ASGIApp",
];

/// The module's WSGI/ASGI callable: `app` or `application` defined in any form first, then
/// a factory.
pub(super) fn find(source: &str) -> Option<Callable> {
    let lines: Vec<&str> = source
        .lines()
        .filter(|line| line.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'))
        .collect();
    let named = NAMES
        .iter()
        .find_map(|name| lines.iter().find_map(|line| defines(line, name)));
    named.or_else(|| {
        FACTORIES.iter().find_map(|name| {
            lines.iter().find_map(|line| {
                let params = function(line, name)?;
                Some(Callable {
                    name: (*name).to_owned(),
                    factory: true,
                    interface: Interface::Unknown,
                    how: format!("an application factory `def {name}({params})`"),
                })
            })
        })
    })
}

/// Whether the module starts a server itself (`if __name__ == "__main__":`).
pub(super) fn runs_itself(source: &str) -> bool {
    source.lines().any(|line| {
        let compact: String = line.chars().filter(|c| !c.is_whitespace()).collect();
        compact.starts_with("if__name__==") && compact.contains("__main__")
    })
}

/// `line` defines `name` at the top level: as a function, an assignment or an import.
fn defines(line: &str, name: &str) -> Option<Callable> {
    let found = |interface, how: String| {
        Some(Callable {
            name: name.to_owned(),
            factory: false,
            interface,
            how,
        })
    };
    if let Some(params) = line
        .strip_prefix("async ")
        .and_then(|rest| function(rest.trim_start(), name))
    {
        return found(
            Interface::Asgi,
            format!("`async def {name}({params})` (ASGI)"),
        );
    }
    if let Some(params) = function(line, name) {
        let interface = match params.split(',').count() {
            3 => Interface::Asgi,
            _ => Interface::Wsgi,
        };
        let what = match interface {
            Interface::Asgi => "ASGI",
            _ => "WSGI",
        };
        return found(interface, format!("`def {name}({params})` ({what})"));
    }
    if let Some(value) = assigned(line, name) {
        let interface = match ASGI_MARKERS.iter().any(|marker| line.contains(marker)) {
            true => Interface::Asgi,
            false if value.contains("wsgi") || value.contains("Flask(") => Interface::Wsgi,
            false => Interface::Unknown,
        };
        return found(interface, format!("`{}`", line.trim_end()));
    }
    if imports(line, name) {
        return found(Interface::Unknown, format!("`{}`", line.trim_end()));
    }
    None
}

/// The parameters of `def name(…)` on this line, if it is one.
fn function<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let rest = line.strip_prefix("def ")?.trim_start().strip_prefix(name)?;
    let params = rest.trim_start().strip_prefix('(')?;
    Some(params.split(')').next().unwrap_or(params).trim())
}

/// The value of an assignment to `name` on this line (`name = v`, `name: T = v`,
/// `other = name = v`), if it is one.
fn assigned<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let mut rest = line;
    let mut targets = Vec::new();
    loop {
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        let target = &rest[..end];
        let mut after = rest[end..].trim_start();
        if let Some(annotated) = after.strip_prefix(':') {
            // `name: Type = value`: the annotation ends at the first `=`.
            after = &annotated[annotated.find('=')?..];
        }
        match after.strip_prefix('=') {
            Some(value) if !value.starts_with('=') => {
                targets.push(target);
                rest = value.trim_start();
            }
            _ => break,
        }
    }
    targets.contains(&name).then_some(rest)
}

/// `from m import a, name`, `from m import (name)`, `from m import x as name`.
fn imports(line: &str, name: &str) -> bool {
    let Some(rest) = line.strip_prefix("from ") else {
        return false;
    };
    let Some((_, names)) = rest.split_once(" import ") else {
        return false;
    };
    names
        .trim_matches(|c: char| c == '(' || c == ')' || c.is_whitespace())
        .split(',')
        .any(|item| {
            let bound = item.split(" as ").last().unwrap_or(item);
            bound.trim().trim_end_matches(')') == name
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each form a callable takes: the module's text, and (name, factory, interface).
    #[test]
    fn every_form_of_a_callable() {
        use Interface::{Asgi, Unknown, Wsgi};
        type Row = (&'static str, Option<(&'static str, bool, Interface)>);
        let table: &[Row] = &[
            (
                "def app(environ, start_response):\n    start_response('200 OK', [])\n",
                Some(("app", false, Wsgi)),
            ),
            (
                "def application(environ, start_response):\n    pass\n",
                Some(("application", false, Wsgi)),
            ),
            (
                "async def app(scope, receive, send):\n    pass\n",
                Some(("app", false, Asgi)),
            ),
            (
                "def app(scope, receive, send):\n",
                Some(("app", false, Asgi)),
            ),
            (
                "from flask import Flask\napp = Flask(__name__)\n",
                Some(("app", false, Wsgi)),
            ),
            ("app=Flask(__name__)\n", Some(("app", false, Wsgi))),
            (
                "from fastapi import FastAPI\napp: FastAPI = FastAPI()\n",
                Some(("app", false, Asgi)),
            ),
            (
                "app = Starlette(routes=routes)\n",
                Some(("app", false, Asgi)),
            ),
            ("app = falcon.asgi.App()\n", Some(("app", false, Asgi))),
            (
                "application = get_wsgi_application()\n",
                Some(("application", false, Wsgi)),
            ),
            (
                "application = get_asgi_application()\n",
                Some(("application", false, Asgi)),
            ),
            (
                "app = application = bottle.default_app()\n",
                Some(("app", false, Unknown)),
            ),
            ("app = create_app()\n", Some(("app", false, Unknown))),
            ("from api.main import app\n", Some(("app", false, Unknown))),
            (
                "from api.main import router, app as app\n",
                Some(("app", false, Unknown)),
            ),
            (
                "from service import (make, application)\n",
                Some(("application", false, Unknown)),
            ),
            (
                "def create_app(config=None):\n    app = Flask(__name__)\n    return app\n",
                Some(("create_app", true, Unknown)),
            ),
            // Not a callable: another name, a comparison, an indented assignment, a comment.
            ("apple = 1\napp_name = 'x'\n", None),
            ("if app == None:\n    pass\n", None),
            ("def main():\n    app = Flask(__name__)\n", None),
            ("# app = Flask(__name__)\n", None),
            ("print('hello')\n", None),
        ];
        for (source, expected) in table {
            let found = find(source).map(|c| (c.name, c.factory, c.interface));
            let expected =
                expected.map(|(name, factory, interface)| (name.to_owned(), factory, interface));
            assert_eq!(found, expected, "{source:?}");
        }
    }

    #[test]
    fn app_comes_before_application_and_factories() {
        let source = "def create_app():\n    pass\napplication = x\napp = y\n";
        assert_eq!(find(source).unwrap().name, "app");
        assert!(runs_itself(
            "app = Flask(__name__)\nif __name__ == '__main__':\n    app.run()\n"
        ));
        assert!(!runs_itself("app = Flask(__name__)\n"));
    }
}
