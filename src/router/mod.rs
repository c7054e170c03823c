//! The route table: which host goes where. A pure, immutable snapshot (`RouteTable`) that the
//! writers change through a handful of typed methods, each a compare-and-swap of the whole
//! snapshot; request handling only ever loads the current snapshot and never locks or touches
//! the store.
//!
//! Hosts are the control host, `<slug>.<apps_domain>` (the project's slug host) and the
//! projects' custom domains, which either serve the project exactly like its slug host or
//! redirect to another of its hosts. A server-mode target is a set of instances
//! (`upstreams`); the table changes them one instance at a time ([`Routes::set_instance`],
//! [`Routes::remove_instance`]) and keeps each instance's load counter across snapshots.
//! Each host key (slug or preview label) has an [`Activity`] kept across snapshots and handed
//! to its instances, and a sleeping app is a [`Target::Asleep`] (`sleeping.rs`, issue 35).

mod sleeping;

pub use sleeping::{Asleep, Held, SleepStrategy, WakeCall, WakeOutcome, WakeSender};

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::metrics::ProjectMetrics;
use crate::static_files::StaticSite;
pub use crate::upstreams::{clock_ms, Activity};
use crate::upstreams::{Affinity, AffinityKey, Upstreams};

/// Where the live deployment of a project is served from.
#[derive(Clone)]
pub enum Target {
    /// A server-mode app: its instances, each at its address or out (`None`) while it
    /// restarts after a crash (its old address may already belong to another sandbox).
    Proxy {
        deployment_id: String,
        upstreams: Upstreams,
    },
    /// A static-mode build, held in memory.
    Static {
        site: Arc<StaticSite>,
        deployment_id: String,
    },
    /// A server-mode app put to sleep: its instances are stopped and the first request
    /// wakes it.
    Asleep(Arc<Asleep>),
}

impl Target {
    /// A server-mode target: `instances` by name (`web.1`, …) and address (`None`: not
    /// serving yet), each with a new load counter (the route table carries over the
    /// counters of instances the same deployment already had).
    pub fn proxy(
        deployment_id: impl Into<String>,
        instances: impl IntoIterator<Item = (impl Into<Arc<str>>, Option<SocketAddr>)>,
        affinity: Affinity,
    ) -> Target {
        Target::Proxy {
            deployment_id: deployment_id.into(),
            upstreams: Upstreams::new(instances, affinity),
        }
    }

    pub fn deployment_id(&self) -> &str {
        match self {
            Target::Proxy { deployment_id, .. } | Target::Static { deployment_id, .. } => {
                deployment_id
            }
            Target::Asleep(asleep) => asleep.deployment_id(),
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
    /// Host key (slug or preview label) → what is open to its app and when it was last used;
    /// kept across deployments, handed to each `Target::Proxy`'s instances.
    pub activity: HashMap<String, Arc<Activity>>,
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
    /// Signs the instances' affinity cookies.
    affinity_key: AffinityKey,
    /// Where sleeping apps' wake calls go, and their receiver until it is taken.
    wakes: WakeSender,
    wake_calls: std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<WakeCall>>>,
}

impl Routes {
    pub fn new(control_host: String, apps_domain: String) -> Routes {
        let (wakes, wake_calls) = tokio::sync::mpsc::unbounded_channel();
        Routes {
            current: ArcSwap::from_pointee(RouteTable::default()),
            control_host,
            apps_domain,
            request_metrics: true,
            affinity_key: AffinityKey::random(),
            wakes,
            wake_calls: std::sync::Mutex::new(Some(wake_calls)),
        }
    }

    /// The wake calls of sleeping apps, for the one task that starts them (`None` once taken).
    pub fn take_wake_calls(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<WakeCall>> {
        self.wake_calls.lock().expect("wake calls poisoned").take()
    }

    /// The target of `key`'s deployment asleep: its first request sends a wake call.
    pub fn asleep(&self, key: &str, deployment_id: &str, strategy: SleepStrategy) -> Target {
        Target::Asleep(Arc::new(Asleep::new(
            key,
            deployment_id,
            strategy,
            self.wakes.clone(),
        )))
    }

    /// What is open to `key`'s app and when it was last used.
    pub fn activity(&self, key: &str) -> Option<Arc<Activity>> {
        self.current.load().activity.get(key).cloned()
    }

    /// Affinity cookies signed with `key` (the default is a random key per daemon start).
    pub fn with_affinity_key(mut self, key: [u8; 32]) -> Routes {
        self.affinity_key = AffinityKey::new(key);
        self
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
            table.activity.remove(slug);
            table.domains.retain(|_, host| host.slug != slug);
            let previews = format!("--{slug}");
            table.apps.retain(|label, _| !label.ends_with(&previews));
            table
                .activity
                .retain(|label, _| !label.ends_with(&previews));
        });
    }

    /// A preview (`<name>--<slug>`) is served from `target`; no counters of its own (its
    /// traffic is not the project's production traffic).
    pub fn set_preview(&self, label: &str, target: Option<Target>) {
        self.update(|table| {
            let target = self.settled(label, target.as_ref(), &mut *table);
            table.apps.insert(label.to_owned(), target);
        });
    }

    /// A torn-down preview: 404 from the next request on.
    pub fn remove_preview(&self, label: &str) {
        self.update(|table| {
            table.apps.remove(label);
            table.activity.remove(label);
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
            let target = self.settled(slug, target.as_ref(), &mut *table);
            table.apps.insert(slug.to_owned(), target);
            table.metrics.entry(slug.to_owned()).or_default();
        });
    }

    /// `key`'s live app of `deployment_id` is served from `next` from now on (a sleeping
    /// target, or the app again); what it was served from before, or `None` (nothing
    /// changed) when `key` does not serve that deployment's instances now.
    pub fn swap_live(&self, key: &str, deployment_id: &str, next: Target) -> Option<Target> {
        let previous = std::sync::Mutex::new(None);
        self.update(|table| {
            let slot = table.apps.get_mut(key);
            *previous.lock().expect("swap poisoned") = None;
            if let Some(Some(current @ Target::Proxy { .. })) = slot {
                if current.deployment_id() == deployment_id {
                    *previous.lock().expect("swap poisoned") =
                        Some(std::mem::replace(current, next.clone()));
                }
            }
        });
        previous.into_inner().expect("swap poisoned")
    }

    /// `key` sleeps on `next` instead of `asleep`, if `asleep` is still its target (a wake
    /// that failed leaves a new sleeping target for the next request to try again).
    pub fn swap_asleep(&self, key: &str, asleep: &Arc<Asleep>, next: Target) {
        self.update(|table| {
            if let Some(Some(Target::Asleep(current))) = table.apps.get_mut(key) {
                if Arc::ptr_eq(current, asleep) {
                    table.apps.insert(key.to_owned(), Some(next.clone()));
                }
            }
        });
    }

    /// Instance `instance` of the live app of `key` (a slug or a preview label) is at
    /// `address` from now on, or out with `None` (it stopped and will be restarted: nothing
    /// may reach its old address; the other instances keep serving, and with none left
    /// visitors get the "restarting" page). An instance the target lacks is added (scaling
    /// up). Only while `deployment_id` is still the one live there.
    pub fn set_instance(
        &self,
        key: &str,
        deployment_id: &str,
        instance: &str,
        address: Option<SocketAddr>,
    ) {
        self.change_upstreams(key, deployment_id, |upstreams| {
            upstreams.with_instance(instance, address)
        });
    }

    /// Instance `instance` of the live app of `key` is gone (scaling down); only while
    /// `deployment_id` is still the one live there.
    pub fn remove_instance(&self, key: &str, deployment_id: &str, instance: &str) {
        self.change_upstreams(key, deployment_id, |upstreams| {
            upstreams.without_instance(instance)
        });
    }

    /// The live app of `key` keeps its instances with another affinity; only while
    /// `deployment_id` is still the one live there.
    pub fn set_affinity(&self, key: &str, deployment_id: &str, affinity: Affinity) {
        self.change_upstreams(key, deployment_id, |upstreams| {
            upstreams.with_affinity(affinity)
        });
    }

    fn change_upstreams(
        &self,
        key: &str,
        deployment_id: &str,
        change: impl Fn(&Upstreams) -> Upstreams,
    ) {
        self.update(|table| {
            if let Some(Some(Target::Proxy {
                deployment_id: live,
                upstreams,
            })) = table.apps.get_mut(key)
            {
                if live == deployment_id {
                    *upstreams = change(upstreams).with_cookies(&self.affinity_key, key);
                }
            }
        });
    }

    /// `target` as the table holds it under `key`: its instances carry the load counters of
    /// the same deployment's instances already there, count into `key`'s activity (made
    /// here when new, and touched: a switch counts as use), and their cookies are signed
    /// for `key`.
    fn settled(
        &self,
        key: &str,
        target: Option<&Target>,
        table: &mut RouteTable,
    ) -> Option<Target> {
        let Some(Target::Proxy {
            deployment_id,
            upstreams,
        }) = target
        else {
            return target.cloned();
        };
        let activity = table.activity.entry(key.to_owned()).or_default().clone();
        activity.touch();
        let upstreams = upstreams.with_activity(&activity);
        let upstreams = match table.apps.get(key) {
            Some(Some(Target::Proxy {
                deployment_id: live,
                upstreams: before,
            })) if live == deployment_id => upstreams.carrying_loads_of(before),
            _ => upstreams.clone(),
        };
        Some(Target::Proxy {
            deployment_id: deployment_id.clone(),
            upstreams: upstreams.with_cookies(&self.affinity_key, key),
        })
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
mod tests;
