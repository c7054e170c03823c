//! One memory budget for the file contents of every static site the daemon serves
//! (`limits.static_cache_mb`): a site takes from it file by file as it loads (smallest files
//! first, so HTML, CSS and scripts stay in memory and big media is streamed from disk), and
//! gives back what it held when it is dropped (replaced, rolled back, deleted). Loading takes
//! at most half of it; the other half holds files served from disk that turned hot
//! (`promote.rs`), and room for a new one is made by evicting promoted files nobody asked for
//! since the clock hand last passed them (the CLOCK approximation of least-recently-used).
//! The budget knows a promoted file only as [`Evictable`]: this file imports nothing of
//! `promote.rs`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// Shared by every loaded site; cheap to clone.
#[derive(Clone, Debug)]
pub struct MemoryBudget {
    remaining: Arc<AtomicU64>,
    total: u64,
    /// Files promoted into the budget after loading, for eviction.
    clock: Arc<Mutex<Clock>>,
}

/// A file promoted into the budget (`promote::DiskFile`), as the clock sees it.
pub(super) trait Evictable: Send + Sync {
    /// Whether it was asked for since the clock hand last passed; clears that mark.
    fn take_referenced(&self) -> bool;
    /// Gives its bytes back to `budget` (the one they came from).
    fn evict(&self, budget: &MemoryBudget);
}

/// The promoted files of every site, in the order the clock hand visits them.
#[derive(Default)]
struct Clock {
    files: Vec<Weak<dyn Evictable>>,
    hand: usize,
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

    /// Takes `bytes` for a file about to be promoted, evicting cold promoted files when that
    /// many are not left: moves the clock hand, evicting promoted files not asked for since
    /// its last pass, until they could be taken. At most two turns.
    pub(super) fn try_take_evicting(&self, bytes: u64) -> bool {
        if self.try_take(bytes) {
            return true;
        }
        let mut clock = self.clock.lock().expect("not poisoned");
        let mut steps = clock.files.len() * 2;
        while steps > 0 && !clock.files.is_empty() {
            steps -= 1;
            let at = clock.hand % clock.files.len();
            let Some(file) = clock.files[at].upgrade() else {
                clock.files.swap_remove(at);
                continue;
            };
            if file.take_referenced() {
                clock.hand = at + 1;
                continue;
            }
            file.evict(self);
            clock.files.swap_remove(at);
            if self.try_take(bytes) {
                return true;
            }
        }
        self.try_take(bytes)
    }

    /// Puts a file just promoted under the clock.
    pub(super) fn hold(&self, file: Weak<dyn Evictable>) {
        self.clock.lock().expect("not poisoned").files.push(file);
    }

    pub fn give_back(&self, bytes: u64) {
        self.remaining.fetch_add(bytes, Ordering::AcqRel);
    }

    /// Bytes held by loaded sites now.
    pub fn used(&self) -> u64 {
        self.total - self.remaining.load(Ordering::Acquire)
    }

    pub fn total(&self) -> u64 {
        self.total
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Clock({} files)", self.files.len())
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
