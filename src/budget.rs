//! Budgets of things clients hold open: a global bound, part of it reserved for the control
//! host so that a flood aimed at apps never locks the operator out of the API, and a
//! per-client cap (per IPv4 address, per IPv6 /64) so one client cannot take the whole budget.
//! `server/` asks for a permit per accepted connection (with a reserve), the proxy per
//! WebSocket tunnel (without); a permit gives its share back when it is dropped.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// The bounds, from `[limits]` in the config.
#[derive(Debug, Clone, Copy)]
pub struct BudgetLimits {
    /// Open connections across every listener, the reserve included.
    pub max_connections: usize,
    /// Of those, how many only the control host may use.
    pub control_reserved: usize,
    /// Open connections per client address (IPv4) or /64 (IPv6).
    pub max_per_client: u32,
}

pub struct ConnectionBudget {
    general: Arc<Semaphore>,
    reserve: Arc<Semaphore>,
    per_client: Mutex<HashMap<ClientKey, u32>>,
    max_per_client: u32,
    /// Woken whenever a permit is given back.
    freed: Notify,
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// This client already holds `max_per_client` connections.
    ClientCap,
    /// Neither the general budget nor the reserve has room.
    Full,
}

/// One admitted connection's share of the budget.
pub struct ConnectionPermit {
    budget: Arc<ConnectionBudget>,
    client: ClientKey,
    permit: Option<OwnedSemaphorePermit>,
    /// Admitted from the reserve: only control-host requests may be served on it.
    pub control_only: bool,
}

/// Who a client is for the limits that count per client: an IPv4 address (IPv4-mapped IPv6
/// included), or an IPv6 /64, since anyone holds a whole /64. The connection budget and the
/// API's rate limiter (`ratelimit::client_subject`) both key by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClientKey {
    V4(u32),
    /// The upper 64 bits of the address.
    V6Net(u64),
}

impl ClientKey {
    pub fn of(ip: IpAddr) -> ClientKey {
        match ip {
            IpAddr::V4(v4) => ClientKey::V4(u32::from(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => ClientKey::V4(u32::from(v4)),
                None => ClientKey::V6Net((u128::from(v6) >> 64) as u64),
            },
        }
    }
}

impl std::fmt::Display for ClientKey {
    /// `192.0.2.1` or `2001:db8::/64`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            ClientKey::V4(v4) => write!(f, "{}", std::net::Ipv4Addr::from(v4)),
            ClientKey::V6Net(net) => {
                write!(f, "{}/64", std::net::Ipv6Addr::from(u128::from(net) << 64))
            }
        }
    }
}

impl ConnectionBudget {
    pub fn new(limits: BudgetLimits) -> Arc<ConnectionBudget> {
        let reserve = limits.control_reserved.min(limits.max_connections / 2);
        Arc::new(ConnectionBudget {
            general: Arc::new(Semaphore::new(limits.max_connections - reserve)),
            reserve: Arc::new(Semaphore::new(reserve)),
            per_client: Mutex::new(HashMap::new()),
            max_per_client: limits.max_per_client,
            freed: Notify::new(),
        })
    }

    /// Returns once some connection could be admitted (the accept loops wait here instead of
    /// accepting connections they would drop).
    pub async fn room(&self) {
        loop {
            let freed = self.freed.notified();
            if self.general.available_permits() > 0 || self.reserve.available_permits() > 0 {
                return;
            }
            freed.await;
        }
    }

    /// Admits a connection from `ip`: from the general budget, else from the control-host
    /// reserve (marked `control_only`), else refused.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<ConnectionPermit, Refusal> {
        let client = ClientKey::of(ip);
        {
            let mut per_client = self.per_client.lock().expect("budget lock");
            let count = per_client.entry(client).or_insert(0);
            if *count >= self.max_per_client {
                return Err(Refusal::ClientCap);
            }
            *count += 1;
        }
        let (permit, control_only) = match self.general.clone().try_acquire_owned() {
            Ok(permit) => (permit, false),
            Err(_) => match self.reserve.clone().try_acquire_owned() {
                Ok(permit) => (permit, true),
                Err(_) => {
                    self.release_client(client);
                    return Err(Refusal::Full);
                }
            },
        };
        Ok(ConnectionPermit {
            budget: self.clone(),
            client,
            permit: Some(permit),
            control_only,
        })
    }

    fn release_client(&self, client: ClientKey) {
        let mut per_client = self.per_client.lock().expect("budget lock");
        if let Some(count) = per_client.get_mut(&client) {
            *count -= 1;
            if *count == 0 {
                per_client.remove(&client);
            }
        }
    }
}

impl Drop for ConnectionPermit {
    fn drop(&mut self) {
        self.budget.release_client(self.client);
        drop(self.permit.take());
        self.budget.freed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max: usize, reserved: usize, per_client: u32) -> BudgetLimits {
        BudgetLimits {
            max_connections: max,
            control_reserved: reserved,
            max_per_client: per_client,
        }
    }

    #[test]
    fn one_client_cannot_take_more_than_its_cap() {
        let budget = ConnectionBudget::new(limits(100, 10, 3));
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let held: Vec<_> = (0..3).map(|_| budget.admit(ip).unwrap()).collect();
        assert_eq!(budget.admit(ip).err(), Some(Refusal::ClientCap));
        assert!(budget.admit("192.0.2.2".parse().unwrap()).is_ok());
        drop(held);
        assert!(budget.admit(ip).is_ok());
    }

    #[test]
    fn an_ipv6_slash_64_is_one_client() {
        let budget = ConnectionBudget::new(limits(100, 10, 2));
        let _a = budget.admit("2001:db8::1".parse().unwrap()).unwrap();
        let _b = budget.admit("2001:db8::ffff:2".parse().unwrap()).unwrap();
        assert_eq!(
            budget.admit("2001:db8::3".parse().unwrap()).err(),
            Some(Refusal::ClientCap)
        );
        assert!(budget.admit("2001:db8:0:1::1".parse().unwrap()).is_ok());
    }

    #[test]
    fn the_reserve_is_used_last_and_marked_control_only() {
        let budget = ConnectionBudget::new(limits(6, 2, 100));
        let general: Vec<_> = (0..4)
            .map(|i| budget.admit(IpAddr::from([10, 0, 0, i])).unwrap())
            .collect();
        assert!(general.iter().all(|p| !p.control_only));
        let reserved = budget.admit("10.0.1.1".parse().unwrap()).unwrap();
        assert!(reserved.control_only);
        let _second = budget.admit("10.0.1.2".parse().unwrap()).unwrap();
        assert_eq!(
            budget.admit("10.0.1.3".parse().unwrap()).err(),
            Some(Refusal::Full)
        );
        // A refused connection gives its per-client count back.
        assert!(budget
            .per_client
            .lock()
            .unwrap()
            .get(&ClientKey::of("10.0.1.3".parse().unwrap()))
            .is_none());
        drop(general);
        assert!(
            !budget
                .admit("10.0.1.3".parse().unwrap())
                .unwrap()
                .control_only
        );
    }
}
