//! The instances a server-mode deployment is served from (issue 32: a project's web process
//! may run as several instances, all routed), and the choice of one per request. The route
//! table (`router`) holds an [`Upstreams`] in each `Target::Proxy` and makes new ones when
//! instances come, go or move; the proxy asks it which instance a request goes to
//! ([`Upstreams::choose`]) and in which order the others are tried when that one cannot be
//! reached ([`Upstreams::attempts`]).
//!
//! Architecture invariants:
//! - An `Upstreams` never changes: the router makes a new one for every change, handing each
//!   instance that stays its same load counter (`Arc`), so requests in flight are still
//!   counted, and taken off, after a change.
//! - Choosing is lock-free and allocation-free: a thread-local xorshift draws two distinct
//!   instances with an address ("power of two choices") and the one with fewer requests in
//!   flight wins. With one instance nothing is drawn.
//! - Every request forwarded to an instance holds an [`InFlight`] until its response body
//!   ends or is dropped (a WebSocket tunnel: while it is open); that is the instance's load.
//!
//! `affinity.rs`: the optional `slipway_instance` cookie that sends a visitor back to the
//! instance that answered it first.

mod activity;
mod affinity;
#[cfg(test)]
mod tests;

pub use activity::{clock_ms, Activity};
pub use affinity::{AffinityKey, COOKIE_NAME};

use std::cell::Cell;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use http::HeaderMap;

use affinity::Cookie;

/// The name of a deployment's web instance while deployments have one (before formations).
pub const FIRST_WEB_INSTANCE: &str = "web.1";

/// Whether visitors stick to the instance that answered them first: the `web` type's
/// setting, as the formation stores it. With `Cookie`, responses set the `slipway_instance`
/// cookie and a request carrying a valid one goes to that instance while it has an address.
pub use crate::formation::Affinity;

/// One instance of a deployment's web process.
#[derive(Clone)]
pub struct Instance {
    name: Arc<str>,
    /// `None` while the instance is out (restarting): nothing is sent to it.
    address: Option<SocketAddr>,
    /// Requests in flight to it (its [`InFlight`] guards).
    load: Arc<AtomicUsize>,
    /// Its affinity cookie, made by the router under its key for the host it serves.
    cookie: Option<Arc<Cookie>>,
}

impl Instance {
    fn new(name: Arc<str>, address: Option<SocketAddr>) -> Instance {
        Instance {
            name,
            address,
            load: Arc::new(AtomicUsize::new(0)),
            cookie: None,
        }
    }

    /// Its name, e.g. `web.1`.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn address(&self) -> Option<SocketAddr> {
        self.address
    }

    /// The requests in flight to it now.
    pub fn load(&self) -> usize {
        self.load.load(Ordering::Relaxed)
    }

    /// Counts one request in flight to this instance until the guard is dropped.
    pub fn enter(&self) -> InFlight {
        self.load.fetch_add(1, Ordering::Relaxed);
        InFlight {
            load: self.load.clone(),
            activity: None,
        }
    }
}

/// One request in flight to an instance (and open in its project's [`Activity`]); dropping
/// it takes the request off both counts.
pub struct InFlight {
    load: Arc<AtomicUsize>,
    activity: Option<Arc<Activity>>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.load.fetch_sub(1, Ordering::Relaxed);
        if let Some(activity) = &self.activity {
            activity.end();
        }
    }
}

/// The instances of one deployment, immutable and cheap to clone (one `Arc`).
#[derive(Clone)]
pub struct Upstreams {
    instances: Arc<[Instance]>,
    affinity: Affinity,
    /// The project's activity (the route table hands it over), counted with every request.
    activity: Option<Arc<Activity>>,
}

/// Where a request goes first, and the instance its valid affinity cookie named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    pub first: usize,
    cookie: Option<usize>,
}

impl Upstreams {
    /// Instances by name and address (`None`: not serving yet), each with a new load
    /// counter; a repeated name keeps its last address.
    pub fn new(
        instances: impl IntoIterator<Item = (impl Into<Arc<str>>, Option<SocketAddr>)>,
        affinity: Affinity,
    ) -> Upstreams {
        let mut list: Vec<Instance> = Vec::new();
        for (name, address) in instances {
            let name = name.into();
            match list.iter_mut().find(|instance| instance.name == name) {
                Some(instance) => instance.address = address,
                None => list.push(Instance::new(name, address)),
            }
        }
        Upstreams {
            instances: list.into(),
            affinity,
            activity: None,
        }
    }

    /// One instance ([`FIRST_WEB_INSTANCE`]) at `address`, without affinity.
    pub fn one(address: SocketAddr) -> Upstreams {
        Upstreams::new([(FIRST_WEB_INSTANCE, Some(address))], Affinity::None)
    }

    pub fn instances(&self) -> &[Instance] {
        &self.instances
    }

    pub fn affinity(&self) -> Affinity {
        self.affinity
    }

    /// Counts one request to instance `index` in its load and in the project's activity
    /// until the guard is dropped.
    pub fn enter(&self, index: usize) -> InFlight {
        let mut in_flight = self.instances[index].enter();
        if let Some(activity) = &self.activity {
            activity.begin();
            in_flight.activity = Some(activity.clone());
        }
        in_flight
    }

    /// These instances, their requests counted in `activity` too.
    pub(crate) fn with_activity(&self, activity: &Arc<Activity>) -> Upstreams {
        Upstreams {
            instances: self.instances.clone(),
            affinity: self.affinity,
            activity: Some(activity.clone()),
        }
    }

    /// Whether some instance has an address (otherwise visitors get the "restarting" page).
    pub fn serving(&self) -> bool {
        self.instances
            .iter()
            .any(|instance| instance.address.is_some())
    }

    /// The instance a request goes to first: the one its valid affinity cookie names (when
    /// affinity is on and that instance has an address), else [`Upstreams::pick`]. `None`
    /// when no instance has an address.
    pub fn choose(&self, request_headers: &HeaderMap) -> Option<Choice> {
        let cookie = match self.affinity {
            Affinity::Cookie => affinity::find(&self.instances, request_headers),
            Affinity::None => None,
        };
        let first = match cookie {
            Some(index) => index,
            None => self.pick()?,
        };
        Some(Choice { first, cookie })
    }

    /// Power of two choices: of two distinct instances with an address, drawn at random,
    /// the one with fewer requests in flight (either on a tie). No draw with one instance.
    pub fn pick(&self) -> Option<usize> {
        match &*self.instances {
            [only] => only.address.map(|_| 0),
            _ => self.pick_with(random()),
        }
    }

    /// [`Upstreams::pick`] with the random bits given: the low half draws the first
    /// candidate, the high half the second.
    fn pick_with(&self, random: u64) -> Option<usize> {
        let serving = self
            .instances
            .iter()
            .filter(|instance| instance.address.is_some())
            .count();
        match serving {
            0 => None,
            1 => self
                .instances
                .iter()
                .position(|instance| instance.address.is_some()),
            _ => {
                let count = serving as u64;
                let one = ((random & 0xffff_ffff) % count) as usize;
                let mut other = ((random >> 32) % (count - 1)) as usize;
                if other >= one {
                    other += 1;
                }
                let one = self.nth_serving(one);
                let other = self.nth_serving(other);
                match self.instances[other].load() < self.instances[one].load() {
                    true => Some(other),
                    false => Some(one),
                }
            }
        }
    }

    /// The index of the `nth` instance with an address (there are more than `nth`).
    fn nth_serving(&self, nth: usize) -> usize {
        self.instances
            .iter()
            .enumerate()
            .filter(|(_, instance)| instance.address.is_some())
            .nth(nth)
            .map_or(0, |(index, _)| index)
    }

    /// The instances to try, each once: `first`, then the others with an address in turn.
    pub fn attempts(&self, first: usize) -> Attempts<'_> {
        Attempts {
            instances: &self.instances,
            first,
            step: 0,
        }
    }

    /// Adds the affinity cookie of instance `served` to a response's headers, unless the
    /// request's cookie already named it (`secure`: the visitor came over HTTPS).
    pub fn set_affinity_cookie(
        &self,
        choice: Choice,
        served: usize,
        secure: bool,
        response_headers: &mut HeaderMap,
    ) {
        if self.affinity != Affinity::Cookie || choice.cookie == Some(served) {
            return;
        }
        if let Some(cookie) = self.instances.get(served).and_then(|i| i.cookie.as_ref()) {
            response_headers.append(http::header::SET_COOKIE, cookie.header(secure).clone());
        }
    }

    /// These instances with `name` at `address`, added when missing (scaling up); the others
    /// keep their load counters.
    pub(crate) fn with_instance(&self, name: &str, address: Option<SocketAddr>) -> Upstreams {
        let mut list = self.instances.to_vec();
        match list.iter_mut().find(|instance| &*instance.name == name) {
            Some(instance) => instance.address = address,
            None => list.push(Instance::new(name.into(), address)),
        }
        Upstreams {
            instances: list.into(),
            affinity: self.affinity,
            activity: self.activity.clone(),
        }
    }

    /// These instances with another affinity.
    pub(crate) fn with_affinity(&self, affinity: Affinity) -> Upstreams {
        Upstreams {
            instances: self.instances.clone(),
            affinity,
            activity: self.activity.clone(),
        }
    }

    /// These instances without `name` (scaling down).
    pub(crate) fn without_instance(&self, name: &str) -> Upstreams {
        let list: Vec<Instance> = self
            .instances
            .iter()
            .filter(|instance| &*instance.name != name)
            .cloned()
            .collect();
        Upstreams {
            instances: list.into(),
            affinity: self.affinity,
            activity: self.activity.clone(),
        }
    }

    /// These instances, each taking the load counter of the instance of the same name in
    /// `previous` (the same deployment's instances before a change).
    pub(crate) fn carrying_loads_of(&self, previous: &Upstreams) -> Upstreams {
        let list: Vec<Instance> = self
            .instances
            .iter()
            .map(|instance| {
                let before = previous.instances.iter().find(|p| p.name == instance.name);
                Instance {
                    load: before.map_or_else(|| instance.load.clone(), |p| p.load.clone()),
                    ..instance.clone()
                }
            })
            .collect();
        Upstreams {
            instances: list.into(),
            affinity: self.affinity,
            activity: self.activity.clone(),
        }
    }

    /// These instances with their affinity cookies for the host key `host` (a slug or a
    /// preview label) under `key`; without affinity, none.
    pub(crate) fn with_cookies(&self, key: &AffinityKey, host: &str) -> Upstreams {
        let list: Vec<Instance> = self
            .instances
            .iter()
            .map(|instance| Instance {
                cookie: match self.affinity {
                    Affinity::Cookie => key.cookie(host, &instance.name).map(Arc::new),
                    Affinity::None => None,
                },
                ..instance.clone()
            })
            .collect();
        Upstreams {
            instances: list.into(),
            affinity: self.affinity,
            activity: self.activity.clone(),
        }
    }
}

/// The instances to try for one request; see [`Upstreams::attempts`].
pub struct Attempts<'a> {
    instances: &'a [Instance],
    first: usize,
    step: usize,
}

impl<'a> Iterator for Attempts<'a> {
    /// The instance's index, the instance, its address.
    type Item = (usize, &'a Instance, SocketAddr);

    fn next(&mut self) -> Option<Self::Item> {
        while self.step < self.instances.len() {
            let index = (self.first + self.step) % self.instances.len();
            self.step += 1;
            let instance = &self.instances[index];
            if let Some(address) = instance.address {
                return Some((index, instance, address));
            }
        }
        None
    }
}

thread_local! {
    /// This thread's xorshift state; 0 until first used.
    static RANDOM: Cell<u64> = const { Cell::new(0) };
}

/// 64 cheap random bits (xorshift64, seeded per thread from `RandomState`): for spreading
/// load, not for anything an attacker must not guess.
fn random() -> u64 {
    RANDOM.with(|state| {
        let mut x = state.get();
        if x == 0 {
            use std::hash::BuildHasher;
            x = std::collections::hash_map::RandomState::new().hash_one(0u64) | 1;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state.set(x);
        x
    })
}
