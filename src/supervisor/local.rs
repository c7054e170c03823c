//! The local sandbox as an [`AppBackend`]: a type's instances are the [`Supervisor`]'s, one
//! sandbox each (`web.1`, `web.2`, …), started at once; past the type's `needed` an instance
//! that does not come up keeps trying with the supervisor's backoff. It owns what is local
//! about that: the ports (mode `none` gives each `web` instance a host port of its own), the
//! instances an earlier daemon left running (taken over with their pid and port, the rest
//! stopped by [`AppBackend::sweep`]), and the route of the instances a scale adds or
//! removes. The pipeline reaches it only through the trait, but for the port choice, the
//! survivors and the memory admission (`pipeline/backends.rs`, `restore.rs`, `scale.rs`).

use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;

use super::backend::{AppBackend, Started, TypeSpec};
use super::ports::{free_host_port, free_port, port_is_free};
use super::{FirstFailure, InstanceView, StartFailure, Supervisor};
use crate::error_code::ErrorCode;
use crate::formation::{instance_key, split_instance_key, InstanceId, WEB};
use crate::sandbox::AppHandle;

pub struct LocalBackend {
    supervisor: Arc<Supervisor>,
    /// Mode `none`: every app shares the host's ports.
    shared_ports: bool,
    /// Instances an earlier daemon left running (`dpl_…:web.1` → handle), until start-up
    /// restore takes them over or sweeps them.
    survivors: Mutex<HashMap<String, AppHandle>>,
    /// What each type (`dpl_…:worker`) was asked last: a scale's reference.
    types: Mutex<HashMap<String, TypeSpec>>,
}

impl LocalBackend {
    pub fn new(supervisor: Arc<Supervisor>, shared_ports: bool) -> Arc<LocalBackend> {
        Arc::new(LocalBackend {
            supervisor,
            shared_ports,
            survivors: Mutex::new(HashMap::new()),
            types: Mutex::new(HashMap::new()),
        })
    }

    /// The instances an earlier daemon left running, still alive (start-up, before restore).
    pub fn set_survivors(&self, survivors: HashMap<String, AppHandle>) {
        *self.survivors.lock().expect("survivors poisoned") = survivors;
    }

    /// Whether an earlier daemon left any instance of the deployment running.
    pub fn has_survivors(&self, deployment_id: &str) -> bool {
        self.survivors
            .lock()
            .expect("survivors poisoned")
            .keys()
            .any(|key| split_instance_key(key).is_some_and(|(d, _)| d == deployment_id))
    }

    /// The port a deployment's `web` instances listen on: the recorded one while it is free
    /// (or held by the instances an earlier daemon left: they keep it), else a new one.
    pub fn deployment_port(
        &self,
        deployment_id: &str,
        recorded: Option<u16>,
    ) -> std::io::Result<u16> {
        let adopting = self.has_survivors(deployment_id);
        let choose = match self.shared_ports {
            true => free_host_port,
            false => free_port,
        };
        recorded
            .filter(|port| adopting || port_is_free(*port))
            .map_or_else(choose, Ok)
    }

    /// The memory limits of every local instance, in MiB, but those `skip` names.
    pub fn held_memory_mb(&self, skip: impl Fn(&str, &InstanceId) -> bool) -> u64 {
        self.supervisor.held_memory_mb(skip)
    }

    fn take_survivor(&self, key: &str) -> Option<AppHandle> {
        self.survivors
            .lock()
            .expect("survivors poisoned")
            .remove(key)
    }

    fn types(&self) -> std::sync::MutexGuard<'_, HashMap<String, TypeSpec>> {
        self.types.lock().expect("types poisoned")
    }

    /// Starts instances `indexes` at once and waits until each is healthy or has failed;
    /// the healthy `web` ones' addresses. At least `needed` must come up: then the others
    /// go on trying with the supervisor's backoff (said in the log) and join the route once
    /// healthy; else every one started here is stopped again and the first failure returned.
    async fn start_range(
        &self,
        spec: &TypeSpec,
        indexes: RangeInclusive<u32>,
        needed: u32,
    ) -> Result<Started, StartFailure> {
        let (dpl, process) = (
            &spec.template.deployment_id,
            &spec.template.instance.process,
        );
        let count = indexes.clone().count() as u32;
        let needed = needed.min(count);
        let after_failure = match needed < count {
            true => FirstFailure::KeepTrying,
            false => FirstFailure::GiveUp,
        };
        let starts = indexes.clone().map(|index| {
            let instance = InstanceId::new(process, index);
            let adopt = self.take_survivor(&instance_key(dpl, &instance));
            let port = self.instance_port(spec, index, adopt.is_some());
            async move {
                let started = match port {
                    Ok(port) => {
                        let health_timeout = spec.health_timeout;
                        let app = spec.instance(index, port);
                        let supervisor = &self.supervisor;
                        supervisor
                            .start(app, health_timeout, adopt, after_failure)
                            .await
                    }
                    Err(error) => Err(StartFailure {
                        code: ErrorCode::StartFailed,
                        message: format!("no free port: {error}"),
                    }),
                };
                started
                    .map(|address| (instance.clone(), address))
                    .map_err(|f| StartFailure {
                        code: f.code,
                        message: format!("{instance}: {}", f.message),
                    })
            }
        });
        let results = futures_util::future::join_all(starts).await;
        let (mut web, mut up, mut failures) = (Vec::new(), 0, Vec::new());
        for result in results {
            match result {
                Ok((instance, address)) => {
                    up += 1;
                    if let Some(address) = address {
                        web.push((Arc::from(instance.to_string()), address));
                    }
                }
                Err(failure) => failures.push(failure),
            }
        }
        if up >= needed {
            for failure in &failures {
                self.supervisor.hub.system(
                    dpl,
                    &format!(
                        "deploy: {} ({up} of {count} `{process}` instances are up, {needed} \
                         needed); it is tried again with backoff",
                        failure.message
                    ),
                );
            }
            return Ok(web);
        }
        for index in indexes {
            self.supervisor
                .stop(dpl, &InstanceId::new(process, index))
                .await;
        }
        Err(failures.remove(0))
    }

    /// The port instance `index` listens on: with namespaces every instance has its own
    /// address and the deployment's port; without, each `web` instance needs a host port of
    /// its own (`web.1`, and one taken over, keeps the deployment's). Other types have none.
    fn instance_port(
        &self,
        spec: &TypeSpec,
        index: u32,
        adopted: bool,
    ) -> std::io::Result<Option<u16>> {
        let Some(port) = spec.template.port else {
            return Ok(None);
        };
        if !self.shared_ports || index == 1 || adopted {
            return Ok(Some(port));
        }
        free_host_port().map(Some)
    }

    /// Starts instances `indexes`, `needed` of them healthy; a `web` one joins the route
    /// once healthy.
    async fn start_routed(
        &self,
        spec: &TypeSpec,
        indexes: RangeInclusive<u32>,
        needed: u32,
    ) -> Result<(), StartFailure> {
        let started = self.start_range(spec, indexes, needed).await?;
        let template = &spec.template;
        for (name, address) in started {
            self.supervisor.routes.set_instance(
                &template.slug,
                &template.deployment_id,
                &name,
                Some(address),
            );
        }
        Ok(())
    }

    /// Stops one instance; a `web` one leaves the route first (the others serve on), and
    /// when `remove`, its place in the route goes too.
    async fn stop_instance(&self, spec: &TypeSpec, index: u32, remove: bool) {
        let template = &spec.template;
        let instance = InstanceId::new(&template.instance.process, index);
        let (slug, dpl, name) = (
            &template.slug,
            &template.deployment_id,
            instance.to_string(),
        );
        let web = instance.process == WEB;
        if web {
            self.supervisor.routes.set_instance(slug, dpl, &name, None);
        }
        self.supervisor.stop(dpl, &instance).await;
        if web && remove {
            self.supervisor.routes.remove_instance(slug, dpl, &name);
        }
    }

    /// Moves one type from `old` to `new`: new limits restart its instances one at a time,
    /// then instances are added or removed. Says which instance did not come up.
    async fn change(&self, old: &TypeSpec, new: &TypeSpec) -> Result<(), StartFailure> {
        if restarts_for(old, new) {
            for index in 1..=old.instances.min(new.instances) {
                self.stop_instance(new, index, false).await;
                self.start_routed(new, index..=index, 1).await?;
            }
        }
        if new.instances > old.instances {
            // The instances kept count towards `needed`; past it, new ones that do not come
            // up keep trying.
            let needed = new.needed.saturating_sub(old.instances);
            self.start_routed(new, old.instances + 1..=new.instances, needed)
                .await?;
        }
        for index in new.instances + 1..=old.instances {
            self.stop_instance(new, index, true).await;
        }
        Ok(())
    }
}

/// Whether a type's instances must restart to go from `now` to `next` (other limits or
/// health check).
fn restarts_for(now: &TypeSpec, next: &TypeSpec) -> bool {
    let (now, next) = (&now.template, &next.template);
    now.memory_mb != next.memory_mb
        || now.cpus != next.cpus
        || now.health_command != next.health_command
}

/// A type's key in [`LocalBackend::types`] (`dpl_…:worker`).
fn type_key(spec: &TypeSpec) -> String {
    format!(
        "{}:{}",
        spec.template.deployment_id, spec.template.instance.process
    )
}

impl AppBackend for LocalBackend {
    fn engine(&self) -> &'static str {
        "local"
    }

    fn start(&self, spec: TypeSpec) -> BoxFuture<'_, Result<Started, StartFailure>> {
        Box::pin(async move {
            let key = type_key(&spec);
            self.types().insert(key.clone(), spec.clone());
            if spec.instances == 0 {
                return Ok(Vec::new());
            }
            let started = self
                .start_range(&spec, 1..=spec.instances, spec.needed)
                .await;
            if started.is_err() {
                self.types().remove(&key);
            }
            started
        })
    }

    fn scale(&self, spec: TypeSpec) -> BoxFuture<'_, Result<(), StartFailure>> {
        Box::pin(async move {
            // A type that is not running (it did not start) starts from none.
            let old = self
                .types()
                .insert(type_key(&spec), spec.clone())
                .unwrap_or_else(|| TypeSpec {
                    instances: 0,
                    ..spec.clone()
                });
            self.change(&old, &spec).await
        })
    }

    fn stop<'a>(&'a self, deployment_id: &'a str, process: Option<&'a str>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            self.types().retain(|_, spec| {
                let template = &spec.template;
                template.deployment_id != deployment_id
                    || process.is_some_and(|p| template.instance.process != p)
            });
            self.supervisor
                .stop_deployment(deployment_id, process)
                .await;
        })
    }

    /// Stops every instance an earlier daemon left that restore did not take over (one that
    /// was draining when that daemon died, one a scale-down made surplus, an app asleep).
    fn sweep<'a>(&'a self, _live: &'a std::collections::HashSet<String>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let left_over: Vec<_> = self
                .survivors
                .lock()
                .expect("survivors poisoned")
                .drain()
                .collect();
            for (key, handle) in left_over {
                self.supervisor.stop_left_over(&key, &handle).await;
            }
        })
    }

    fn memory_bytes(&self, deployment_id: &str, instance: &InstanceId) -> Option<u64> {
        self.supervisor
            .instance_memory_bytes(deployment_id, instance)
    }

    fn runs(&self, deployment_id: &str) -> bool {
        self.supervisor.is_running(deployment_id)
            || self
                .types()
                .values()
                .any(|spec| spec.template.deployment_id == deployment_id)
    }

    fn instances(&self, deployment_id: &str) -> Vec<InstanceView> {
        self.supervisor.instances(deployment_id)
    }
}
