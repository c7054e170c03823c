//! A sleeping app in the route table (issue 35): [`Asleep`] is the target of a project whose
//! instances were stopped for want of visitors. The first request to it asks for one start
//! (single flight: the first caller of [`Asleep::wake`] sends the one [`WakeCall`]), and the
//! requests that arrive meanwhile wait for its outcome, a bounded number of them for a
//! bounded time. Whoever receives the calls (`sleep::Sleeper`) starts the app and reports
//! the outcome with [`Asleep::finish`]; a woken app's route is a `Target::Proxy` again.
//!
//! Architecture invariant: the request path only reads and swaps atomics here and waits on a
//! `watch` channel; it never reaches the store or the supervisor.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

pub use crate::formation::sleep::SleepStrategy;

/// How a wake ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WakeOutcome {
    /// The app is healthy and its route serves it.
    Woke,
    /// It did not come up: why.
    Failed(Arc<str>),
}

/// A request for one start of a sleeping app, sent once per [`Asleep`].
pub struct WakeCall {
    /// The route key (a slug).
    pub label: String,
    pub asleep: Arc<Asleep>,
}

/// Where wake calls go; the receiver belongs to whoever starts apps.
pub type WakeSender = mpsc::UnboundedSender<WakeCall>;

/// A sleeping deployment's route target.
pub struct Asleep {
    deployment_id: String,
    label: String,
    strategy: SleepStrategy,
    /// Set by the first request (or `POST …/wake`): the one wake call was sent.
    claimed: AtomicBool,
    /// Requests waiting for the wake now.
    held: AtomicUsize,
    outcome: watch::Sender<Option<WakeOutcome>>,
    calls: WakeSender,
}

/// A request held while its app wakes; counted until dropped.
pub struct Held<'a>(&'a AtomicUsize);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Asleep {
    pub fn new(
        label: &str,
        deployment_id: &str,
        strategy: SleepStrategy,
        calls: WakeSender,
    ) -> Asleep {
        Asleep {
            deployment_id: deployment_id.to_owned(),
            label: label.to_owned(),
            strategy,
            claimed: AtomicBool::new(false),
            held: AtomicUsize::new(0),
            outcome: watch::channel(None).0,
            calls,
        }
    }

    pub fn deployment_id(&self) -> &str {
        &self.deployment_id
    }

    pub fn strategy(&self) -> SleepStrategy {
        self.strategy
    }

    /// Whether its wake was asked for (the app is starting).
    pub fn waking(&self) -> bool {
        self.claimed.load(Ordering::Relaxed)
    }

    /// Asks for the app's start; only the first call of this sleep sends it. True for that
    /// first call.
    pub fn wake(self: &Arc<Self>) -> bool {
        if self.claimed.swap(true, Ordering::AcqRel) {
            return false;
        }
        let call = WakeCall {
            label: self.label.clone(),
            asleep: self.clone(),
        };
        if self.calls.send(call).is_err() {
            self.finish(WakeOutcome::Failed("the daemon is stopping".into()));
        }
        true
    }

    /// A place among the held requests, or `None` when `max` are held already.
    pub fn hold(&self, max: usize) -> Option<Held<'_>> {
        let before = self.held.fetch_add(1, Ordering::Relaxed);
        let held = Held(&self.held);
        (before < max).then_some(held)
    }

    /// The wake's outcome, waiting at most `timeout` for it (`None`: not yet known).
    pub async fn outcome(&self, timeout: Duration) -> Option<WakeOutcome> {
        let mut receiver = self.outcome.subscribe();
        let waited = tokio::time::timeout(timeout, receiver.wait_for(Option::is_some)).await;
        match waited {
            Ok(Ok(outcome)) => outcome.clone(),
            _ => None,
        }
    }

    /// Tells every held request how the wake ended.
    pub fn finish(&self, outcome: WakeOutcome) {
        self.outcome.send_replace(Some(outcome));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_call_per_sleep_and_every_waiter_hears_the_outcome() {
        let (sender, mut calls) = mpsc::unbounded_channel();
        let asleep = Arc::new(Asleep::new("web", "dpl_1", SleepStrategy::Hold, sender));
        let waiters: Vec<_> = (0..10)
            .map(|_| {
                let asleep = asleep.clone();
                tokio::spawn(async move {
                    asleep.wake();
                    asleep.outcome(Duration::from_secs(5)).await
                })
            })
            .collect();
        let call = calls.recv().await.unwrap();
        assert_eq!(call.label, "web");
        assert!(asleep.waking());
        call.asleep.finish(WakeOutcome::Woke);
        for waiter in waiters {
            assert_eq!(waiter.await.unwrap(), Some(WakeOutcome::Woke));
        }
        assert!(calls.try_recv().is_err(), "a second wake call was sent");
    }

    #[tokio::test]
    async fn holds_at_most_max_and_times_out() {
        let (sender, _calls) = mpsc::unbounded_channel();
        let asleep = Asleep::new("web", "dpl_1", SleepStrategy::Hold, sender);
        let first = asleep.hold(2);
        let second = asleep.hold(2);
        assert!(first.is_some() && second.is_some());
        assert!(asleep.hold(2).is_none());
        drop(first);
        assert!(asleep.hold(2).is_some());
        assert_eq!(asleep.outcome(Duration::from_millis(20)).await, None);
    }
}
