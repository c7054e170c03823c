//! The ACME order budget: how many new orders the daemon places in any hour, in all
//! (`tls.acme_orders_per_hour`) and for one project's names
//! (`tls.acme_orders_per_project_per_hour`), so that no tenant can spend the shared ACME
//! account's rate limits. The orders of the last hour are one record in the TLS store
//! ([`keys::ACME_ORDER_LOG`]): deleting a domain or restarting the daemon forgets none.
//! `issuance.rs` takes an order before each issuance; an order over budget is deferred
//! like a backoff (the name's backoff record says until when, and why).

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::clock::unix_seconds;
use super::store::{blocking, keys};
use super::{TlsError, TlsManager};

/// Orders are counted over this window.
pub const WINDOW_S: u64 = 3600;

/// One new order, as the budget remembers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderEntry {
    /// Unix seconds.
    pub at: u64,
    /// The project the name belongs to (a project id, or a slug for slug hosts); empty for
    /// the control host.
    pub owner: String,
}

/// The orders of the last hour.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderLog {
    pub orders: Vec<OrderEntry>,
}

/// The limits of [`take`].
#[derive(Debug, Clone, Copy)]
pub struct OrderBudget {
    pub per_hour: u32,
    pub per_owner_per_hour: u32,
}

/// Why an order was not granted, and from when one may be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spent {
    pub until: u64,
    pub reason: String,
}

/// Records one order of `owner` at `now` in `log`, or says why the budget has none left
/// (entries older than [`WINDOW_S`] are dropped first).
pub fn take(
    log: &mut OrderLog,
    owner: &str,
    budget: OrderBudget,
    now: SystemTime,
) -> Result<(), Spent> {
    let now = unix_seconds(now);
    log.orders
        .retain(|entry| entry.at + WINDOW_S > now && entry.at <= now);
    let global = log.orders.len();
    if global >= budget.per_hour as usize {
        return Err(Spent {
            until: log.orders.iter().map(|entry| entry.at).min().unwrap_or(now) + WINDOW_S,
            reason: format!(
                "the daemon placed {global} new ACME orders in the last hour \
                 (tls.acme_orders_per_hour = {})",
                budget.per_hour
            ),
        });
    }
    let mine: Vec<u64> = log
        .orders
        .iter()
        .filter(|entry| !owner.is_empty() && entry.owner == owner)
        .map(|entry| entry.at)
        .collect();
    if mine.len() >= budget.per_owner_per_hour as usize {
        return Err(Spent {
            until: mine.iter().min().copied().unwrap_or(now) + WINDOW_S,
            reason: format!(
                "this project's names had {} new ACME orders in the last hour \
                 (tls.acme_orders_per_project_per_hour = {})",
                mine.len(),
                budget.per_owner_per_hour
            ),
        });
    }
    log.orders.push(OrderEntry {
        at: now,
        owner: owner.to_owned(),
    });
    Ok(())
}

impl TlsManager {
    /// Takes one order for `name` from the stored budget (read, decided and written under one
    /// lock, so two issuances cannot both take the last one).
    pub(super) async fn take_order(&self, name: &str) -> Result<Result<(), Spent>, TlsError> {
        let _serialized = self.order_log_lock.lock().await;
        let mut log: OrderLog = blocking::read_json(&self.store, keys::ACME_ORDER_LOG)
            .await?
            .unwrap_or_default();
        let owner = self.owner_of(name);
        let decision = take(&mut log, &owner, self.order_budget, self.clock.now());
        if decision.is_ok() {
            blocking::write_json(&self.store, keys::ACME_ORDER_LOG, log).await?;
        }
        Ok(decision)
    }

    /// Whose budget an order for `name` spends: a custom domain's project, the slug of a slug
    /// host (a preview `<b>--<slug>` counts for `<slug>`), nobody's for the control host.
    fn owner_of(&self, name: &str) -> String {
        if let Some(project_id) = self.custom_names().get(name) {
            return project_id.clone();
        }
        let label = name
            .strip_suffix(&self.apps_domain)
            .and_then(|rest| rest.strip_suffix('.'))
            .unwrap_or_default();
        let slug = label.rsplit_once("--").map_or(label, |(_, slug)| slug);
        match slug.is_empty() {
            true => String::new(),
            false => format!("slug:{slug}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::clock::from_unix_seconds;

    const BUDGET: OrderBudget = OrderBudget {
        per_hour: 3,
        per_owner_per_hour: 2,
    };

    #[test]
    fn a_project_gets_its_share_and_the_daemon_its_total_per_hour() {
        let mut log = OrderLog::default();
        let at = |s| from_unix_seconds(1_000_000 + s);
        assert_eq!(take(&mut log, "prj_a", BUDGET, at(0)), Ok(()));
        assert_eq!(take(&mut log, "prj_a", BUDGET, at(10)), Ok(()));
        let spent = take(&mut log, "prj_a", BUDGET, at(20)).unwrap_err();
        assert_eq!(spent.until, 1_000_000 + WINDOW_S);
        assert!(spent.reason.contains("per_project"), "{}", spent.reason);
        assert_eq!(take(&mut log, "prj_b", BUDGET, at(30)), Ok(()));
        let spent = take(&mut log, "prj_c", BUDGET, at(40)).unwrap_err();
        assert!(
            spent.reason.contains("acme_orders_per_hour"),
            "{}",
            spent.reason
        );
        // An hour after the first order, one is free again.
        assert_eq!(take(&mut log, "prj_c", BUDGET, at(WINDOW_S)), Ok(()));
        assert_eq!(log.orders.len(), 3);
    }
}
