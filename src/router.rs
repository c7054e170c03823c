//! The route table: which host goes where. A pure, immutable snapshot (`RouteTable`) that the
//! writers change through a handful of typed methods, each a compare-and-swap of the whole
//! snapshot; request handling only ever loads the current snapshot and never locks or touches
//! the store.
//!
//! Hosts are the control host, `<slug>.<apps_domain>` (the project's slug host) and the
//! projects' custom domains, which either serve the project exactly like its slug host or
//! redirect to another of its hosts.

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::metrics::ProjectMetrics;
use crate::static_files::StaticSite;

/// Where the live deployment of a project is served from.
#[derive(Clone)]
pub enum Target {
    /// A server-mode app listening at `upstream`; `None` while it restarts after a crash
    /// (its old address may already belong to another sandbox).
    Proxy {
        upstream: Option<SocketAddr>,
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
    /// slug → the project's traffic counters; same keys as `apps`, kept across deployments.
    pub metrics: HashMap<String, Arc<ProjectMetrics>>,
    /// Custom domain (lowercase, punycode) → what it does.
    pub domains: HashMap<String, CustomHost>,
}

/// A custom domain in the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CustomHost {
    /// The project it belongs to.
    pub slug: String,
    /// `Some(host)`: visitors get a 308 to `host`; `None`: it serves the project.
    pub redirect_to: Option<String>,
}

/// What a request's `Host` resolves to.
pub enum Destination<'a> {
    Control,
    /// A project exists; `None` while it has no live deployment.
    App {
        slug: Cow<'a, str>,
        target: Option<Target>,
        /// Where this request is counted; `None` when request metrics are off.
        metrics: Option<Arc<ProjectMetrics>>,
    },
    /// A custom domain that sends its visitors to another host of its project (308).
    Redirect {
        to: String,
    },
    Unknown,
}

/// The shared, swappable snapshot plus the host names it is keyed under.
pub struct Routes {
    current: ArcSwap<RouteTable>,
    control_host: String,
    apps_domain: String,
    /// `metrics.requests` in the config: hand each request its project's counters.
    request_metrics: bool,
}

impl Routes {
    pub fn new(control_host: String, apps_domain: String) -> Routes {
        Routes {
            current: ArcSwap::from_pointee(RouteTable::default()),
            control_host,
            apps_domain,
            request_metrics: true,
        }
    }

    /// With `false`, [`Routes::resolve`] gives requests no counters (`metrics.requests = false`).
    pub fn with_request_metrics(mut self, on: bool) -> Routes {
        self.request_metrics = on;
        self
    }

    /// The traffic counters of `slug`, if it is a project.
    pub fn metrics(&self, slug: &str) -> Option<Arc<ProjectMetrics>> {
        self.current.load().metrics.get(slug).cloned()
    }

    pub fn snapshot(&self) -> Arc<RouteTable> {
        self.current.load_full()
    }

    /// A new project: answers 503 (not 404) until something is live. Keeps a live target.
    pub fn add_project(&self, slug: &str) {
        self.update(|table| {
            table.apps.entry(slug.to_owned()).or_insert(None);
            table.metrics.entry(slug.to_owned()).or_default();
        });
    }

    /// Every project at start-up, none of them live yet.
    pub fn add_projects<'s>(&self, slugs: impl Iterator<Item = &'s str> + Clone) {
        self.update(|table| {
            for slug in slugs.clone() {
                table.apps.entry(slug.to_owned()).or_insert(None);
                table.metrics.entry(slug.to_owned()).or_default();
            }
        });
    }

    /// A deleted project: its host and its custom domains answer 404 from the next request on.
    pub fn remove_project(&self, slug: &str) {
        self.update(|table| {
            table.apps.remove(slug);
            table.metrics.remove(slug);
            table.domains.retain(|_, host| host.slug != slug);
            let previews = format!("--{slug}");
            table.apps.retain(|label, _| !label.ends_with(&previews));
        });
    }

    /// A preview (`<name>--<slug>`) is served from `target`; no counters of its own (its
    /// traffic is not the project's production traffic).
    pub fn set_preview(&self, label: &str, target: Option<Target>) {
        self.update(|table| {
            table.apps.insert(label.to_owned(), target.clone());
        });
    }

    /// A torn-down preview: 404 from the next request on.
    pub fn remove_preview(&self, label: &str) {
        self.update(|table| {
            table.apps.remove(label);
        });
    }

    /// Serves (or redirects) custom domains from the next request on; replaces earlier
    /// entries of the same names.
    pub fn add_domains(&self, domains: &[(String, CustomHost)]) {
        self.update(|table| {
            for (name, host) in domains {
                table.domains.insert(name.clone(), host.clone());
            }
        });
    }

    /// A deleted custom domain: 404 from the next request on.
    pub fn remove_domain(&self, name: &str) {
        self.update(|table| {
            table.domains.remove(name);
        });
    }

    /// The live switch: `slug` is served from `target` (or 503 with `None`) from now on.
    pub fn set_live(&self, slug: &str, target: Option<Target>) {
        self.update(|table| {
            table.apps.insert(slug.to_owned(), target.clone());
            table.metrics.entry(slug.to_owned()).or_default();
        });
    }

    /// A restarted app listens at a new address; only while `deployment_id` is still live.
    pub fn repoint(&self, slug: &str, deployment_id: &str, address: SocketAddr) {
        self.set_upstream(slug, deployment_id, Some(address));
    }

    /// The live app of `slug` stopped (it will be restarted): nothing may reach its address
    /// until `repoint` gives the new one; visitors meanwhile get a "restarting" page.
    pub fn unpoint(&self, slug: &str, deployment_id: &str) {
        self.set_upstream(slug, deployment_id, None);
    }

    /// TEMPORARY until the multi-upstream router lands.
    pub fn set_instance(
        &self,
        slug: &str,
        deployment_id: &str,
        _instance: &str,
        address: Option<SocketAddr>,
    ) {
        self.set_upstream(slug, deployment_id, address);
    }

    /// TEMPORARY until the multi-upstream router lands.
    pub fn remove_instance(&self, slug: &str, deployment_id: &str, _instance: &str) {
        let _ = (slug, deployment_id);
    }

    fn set_upstream(&self, slug: &str, deployment_id: &str, address: Option<SocketAddr>) {
        self.update(|table| {
            if let Some(Some(Target::Proxy {
                deployment_id: live,
                upstream,
            })) = table.apps.get_mut(slug)
            {
                if live == deployment_id {
                    *upstream = address;
                }
            }
        });
    }

    /// The one way the table changes: a compare-and-swap loop (`ArcSwap::rcu`). `change` runs
    /// on a copy of the current table and may run again if another writer got in first, so
    /// concurrent changes for different projects are never lost.
    fn update(&self, change: impl Fn(&mut RouteTable)) {
        self.current.rcu(|current| {
            let mut next = RouteTable::clone(current);
            change(&mut next);
            next
        });
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
        let table = self.current.load();
        let slug = match app_slug(name, &self.apps_domain) {
            Some(slug) => Cow::Borrowed(slug),
            None => match table.domains.get(name) {
                Some(CustomHost {
                    redirect_to: Some(to),
                    ..
                }) => return Destination::Redirect { to: to.clone() },
                Some(CustomHost { slug, .. }) => Cow::Owned(slug.clone()),
                None => return Destination::Unknown,
            },
        };
        match table.apps.get(slug.as_ref()) {
            Some(target) => Destination::App {
                target: target.clone(),
                metrics: match self.request_metrics {
                    true => table.metrics.get(slug.as_ref()).cloned(),
                    false => None,
                },
                slug,
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
        routes.add_project("web");
        assert!(matches!(
            routes.resolve("web.localhost"),
            Destination::App {
                target: None,
                metrics: Some(_),
                ..
            }
        ));
    }

    /// A custom domain serves its project like the slug host, or redirects; it goes with its
    /// project, and names under the apps domain never reach the custom table.
    #[test]
    fn custom_domains_serve_or_redirect_and_go_with_their_project() {
        let routes = Routes::new("slipway.localhost".into(), "localhost".into());
        routes.add_project("web");
        let serve = |slug: &str| CustomHost {
            slug: slug.into(),
            redirect_to: None,
        };
        routes.add_domains(&[
            ("www.example.test".into(), serve("web")),
            (
                "example.test".into(),
                CustomHost {
                    slug: "web".into(),
                    redirect_to: Some("www.example.test".into()),
                },
            ),
            ("orphan.example.test".into(), serve("gone")),
        ]);
        match routes.resolve("www.example.test:8443") {
            Destination::App { slug, .. } => assert_eq!(slug, "web"),
            _ => panic!("www.example.test does not serve web"),
        }
        assert!(matches!(
            routes.resolve("example.test."),
            Destination::Redirect { to } if to == "www.example.test"
        ));
        assert!(matches!(
            routes.resolve("orphan.example.test"),
            Destination::Unknown
        ));
        routes.remove_domain("www.example.test");
        assert!(matches!(
            routes.resolve("www.example.test"),
            Destination::Unknown
        ));
        routes.remove_project("web");
        let left: Vec<String> = routes.snapshot().domains.keys().cloned().collect();
        assert_eq!(left, ["orphan.example.test"]);
    }

    /// A project's counters live as long as the project: a new live deployment keeps them,
    /// deletion drops them; with request metrics off, requests get none.
    #[test]
    fn metrics_follow_the_project_not_the_deployment() {
        let routes = Routes::new("slipway.localhost".into(), "localhost".into());
        routes.add_project("web");
        let counters = routes.metrics("web").unwrap();
        counters.record_response(200, std::time::Duration::from_millis(1));
        routes.set_live(
            "web",
            Some(Target::Proxy {
                upstream: None,
                deployment_id: "dpl_1".into(),
            }),
        );
        let Destination::App {
            metrics: Some(handed),
            ..
        } = routes.resolve("web.localhost")
        else {
            panic!("no counters for a request to web");
        };
        assert!(Arc::ptr_eq(&handed, &counters));
        assert_eq!(handed.snapshot().requests[1], 1);
        routes.remove_project("web");
        assert!(routes.metrics("web").is_none());
        let quiet =
            Routes::new("slipway.localhost".into(), "localhost".into()).with_request_metrics(false);
        quiet.add_project("web");
        assert!(matches!(
            quiet.resolve("web.localhost"),
            Destination::App { metrics: None, .. }
        ));
        assert!(quiet.metrics("web").is_some(), "restarts are still counted");
    }

    /// Many writers for different projects at once, each adding, switching and repointing its
    /// own project: with a load-clone-store update, some of these changes were lost.
    #[test]
    fn concurrent_updates_for_different_projects_are_never_lost() {
        const WRITERS: usize = 16;
        const ROUNDS: usize = 200;
        let routes = Arc::new(Routes::new("slipway.localhost".into(), "localhost".into()));
        let threads: Vec<_> = (0..WRITERS)
            .map(|writer| {
                let routes = routes.clone();
                std::thread::spawn(move || {
                    for round in 0..ROUNDS {
                        let slug = format!("app-{writer}-{round}");
                        routes.add_project(&slug);
                        let upstream = SocketAddr::from(([127, 0, 0, 1], 1000 + round as u16));
                        routes.set_live(
                            &slug,
                            Some(Target::Proxy {
                                upstream: Some(upstream),
                                deployment_id: format!("dpl-{writer}-{round}"),
                            }),
                        );
                        let moved = SocketAddr::from(([127, 0, 0, 2], 2000 + round as u16));
                        routes.repoint(&slug, &format!("dpl-{writer}-{round}"), moved);
                        if round % 2 == 1 {
                            routes.remove_project(&format!("app-{writer}-{}", round - 1));
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let table = routes.snapshot();
        assert_eq!(table.apps.len(), WRITERS * ROUNDS / 2);
        for writer in 0..WRITERS {
            for round in (1..ROUNDS).step_by(2) {
                let slug = format!("app-{writer}-{round}");
                match table.apps.get(&slug) {
                    Some(Some(Target::Proxy {
                        upstream,
                        deployment_id,
                    })) => {
                        assert_eq!(deployment_id, &format!("dpl-{writer}-{round}"));
                        assert_eq!(
                            upstream.map(|u| u.port()),
                            Some(2000 + round as u16),
                            "{slug} repoint lost"
                        );
                    }
                    _ => panic!("{slug}: its live switch was lost"),
                }
            }
        }
    }
}
