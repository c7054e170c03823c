//! The route table: which host goes where. A pure, immutable snapshot (`RouteTable`) that the
//! pipeline rebuilds and swaps in atomically (`Routes::publish`); request handling only ever
//! loads the current snapshot and never locks or touches the store.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::static_files::StaticSite;

/// Where the live deployment of a project is served from.
#[derive(Clone)]
pub enum Target {
    /// A server-mode app listening at `upstream`.
    Proxy {
        upstream: SocketAddr,
        deployment_id: String,
    },
    /// A static-mode build, held in memory.
    Static {
        site: Arc<StaticSite>,
        deployment_id: String,
    },
}

impl Target {
    pub fn deployment_id(&self) -> &str {
        match self {
            Target::Proxy { deployment_id, .. } | Target::Static { deployment_id, .. } => {
                deployment_id
            }
        }
    }
}

/// Immutable host → target map for the apps under `apps_domain`.
#[derive(Clone, Default)]
pub struct RouteTable {
    /// slug → live target; a project without a live deployment has `None` (503).
    pub apps: HashMap<String, Option<Target>>,
}

/// What a request's `Host` resolves to.
pub enum Destination<'a> {
    Control,
    /// A project exists; `None` while it has no live deployment.
    App {
        slug: &'a str,
        target: Option<Target>,
    },
    Unknown,
}

/// The shared, swappable snapshot plus the host names it is keyed under.
pub struct Routes {
    current: ArcSwap<RouteTable>,
    control_host: String,
    apps_domain: String,
}

impl Routes {
    pub fn new(control_host: String, apps_domain: String) -> Routes {
        Routes {
            current: ArcSwap::from_pointee(RouteTable::default()),
            control_host,
            apps_domain,
        }
    }

    pub fn snapshot(&self) -> Arc<RouteTable> {
        self.current.load_full()
    }

    /// Replaces the table as a whole; readers see either the old or the new one.
    pub fn publish(&self, table: RouteTable) {
        self.current.store(Arc::new(table));
    }

    /// Applies `change` to a copy of the current table and publishes it. Callers serialize
    /// updates among themselves (the pipeline holds its own lock around this).
    pub fn update(&self, change: impl FnOnce(&mut RouteTable)) {
        let mut next = RouteTable::clone(&self.current.load());
        change(&mut next);
        self.publish(next);
    }

    pub fn control_host(&self) -> &str {
        &self.control_host
    }

    pub fn apps_domain(&self) -> &str {
        &self.apps_domain
    }

    /// Resolves a `Host` header (or TLS SNI / `:authority`) value.
    pub fn resolve<'h>(&self, host: &'h str) -> Destination<'h> {
        let name = host_without_port(host);
        if name.eq_ignore_ascii_case(&self.control_host) {
            return Destination::Control;
        }
        let Some(slug) = app_slug(name, &self.apps_domain) else {
            return Destination::Unknown;
        };
        match self.current.load().apps.get(slug) {
            Some(target) => Destination::App {
                slug,
                target: target.clone(),
            },
            None => Destination::Unknown,
        }
    }
}

/// `Host: a.b:8080` → `a.b`; also strips a trailing dot.
pub fn host_without_port(host: &str) -> &str {
    let name = match host.rsplit_once(':') {
        Some((name, port)) if !name.ends_with(']') || port.bytes().all(|b| b.is_ascii_digit()) => {
            if port.bytes().all(|b| b.is_ascii_digit()) {
                name
            } else {
                host
            }
        }
        _ => host,
    };
    name.trim_end_matches('.')
}

/// `myapp.apps.example.com` with domain `apps.example.com` → `myapp`; one label only.
pub fn app_slug<'h>(name: &'h str, apps_domain: &str) -> Option<&'h str> {
    let cut = name.len().checked_sub(apps_domain.len() + 1)?;
    let (label, rest) = name.split_at(cut);
    if !rest[1..].eq_ignore_ascii_case(apps_domain) || !rest.starts_with('.') {
        return None;
    }
    if label.is_empty() || label.contains('.') || label.bytes().any(|b| b.is_ascii_uppercase()) {
        return None;
    }
    Some(label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_resolve() {
        assert_eq!(host_without_port("a.localhost:8080"), "a.localhost");
        assert_eq!(host_without_port("a.localhost."), "a.localhost");
        assert_eq!(host_without_port("a.localhost"), "a.localhost");
        assert_eq!(app_slug("my-app.localhost", "localhost"), Some("my-app"));
        assert_eq!(app_slug("x.my-app.localhost", "localhost"), None);
        assert_eq!(app_slug("localhost", "localhost"), None);
        assert_eq!(app_slug("evil-localhost", "localhost"), None);
        let routes = Routes::new("slipway.localhost".into(), "localhost".into());
        assert!(matches!(
            routes.resolve("slipway.localhost:8080"),
            Destination::Control
        ));
        assert!(matches!(
            routes.resolve("nope.localhost"),
            Destination::Unknown
        ));
        routes.update(|t| {
            t.apps.insert("web".into(), None);
        });
        assert!(matches!(
            routes.resolve("web.localhost"),
            Destination::App {
                slug: "web",
                target: None
            }
        ));
    }
}
