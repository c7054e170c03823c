//! One memory budget for the file contents of every static site the daemon serves
//! (`limits.static_cache_mb`): a site takes from it file by file as it loads (smallest files
//! first, so HTML, CSS and scripts stay in memory and big media is streamed from disk), and
//! gives back what it held when it is dropped (replaced, rolled back, deleted). Loading takes
//! at most half of it; the other half holds files served from disk that turned hot
//! (`promote.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Shared by every loaded site; cheap to clone.
#[derive(Clone, Debug)]
pub struct MemoryBudget {
    remaining: Arc<AtomicU64>,
    total: u64,
    /// Files promoted into the budget after loading, for eviction.
    clock: super::promote::SharedClock,
}

impl MemoryBudget {
    pub fn new(total_bytes: u64) -> MemoryBudget {
        MemoryBudget {
            remaining: Arc::new(AtomicU64::new(total_bytes)),
            total: total_bytes,
            clock: Default::default(),
        }
    }

    /// Takes `bytes` if that many are left.
    pub fn try_take(&self, bytes: u64) -> bool {
        self.try_take_below(bytes, self.total)
    }

    /// Takes `bytes` if afterwards no more than `ceiling` bytes are in use: sites take only
    /// up to half the budget as they load, the other half is for files that turn hot.
    pub fn try_take_below(&self, bytes: u64, ceiling: u64) -> bool {
        let floor = self.total.saturating_sub(ceiling);
        self.remaining
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                left.checked_sub(bytes).filter(|after| *after >= floor)
            })
            .is_ok()
    }

    pub fn give_back(&self, bytes: u64) {
        self.remaining.fetch_add(bytes, Ordering::AcqRel);
    }

    /// Bytes held by loaded sites now.
    pub fn used(&self) -> u64 {
        self.total - self.remaining.load(Ordering::Acquire)
    }

    pub(super) fn clock(&self) -> std::sync::MutexGuard<'_, super::promote::Clock> {
        self.clock.lock().expect("not poisoned")
    }

    pub fn total(&self) -> u64 {
        self.total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_only_what_is_left_and_gets_it_back() {
        let budget = MemoryBudget::new(100);
        assert!(budget.try_take(60));
        assert!(!budget.try_take(50));
        assert!(budget.clone().try_take(40));
        assert_eq!(budget.used(), 100);
        budget.give_back(60);
        assert_eq!(budget.used(), 40);
    }
}
