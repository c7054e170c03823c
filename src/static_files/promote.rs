//! Files of a site that did not fit in memory when it loaded are read from disk per request;
//! the ones that turn out hot move into memory. Every [`PROMOTE_AFTER`] requests a file of at
//! most [`PROMOTE_MAX`] bytes is offered a place in the daemon-wide budget; when the budget is
//! full, it evicts cold promoted files until the new one fits (`budget.rs`). A promoted file's
//! bytes go back to the budget when it is evicted or its site is dropped (the site evicts
//! its files: a `DiskFile` holds neither its path nor the budget, to stay small).

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, RwLock, Weak};

use bytes::Bytes;

use super::budget::{Evictable, MemoryBudget};

/// Requests to a file served from disk between two offers of a place in memory.
const PROMOTE_AFTER: u32 = 8;
/// Larger files stay on disk: reading them whole would hold up the request that promotes.
const PROMOTE_MAX: u64 = 1024 * 1024;

pub(super) struct DiskFile {
    pub len: u64,
    hits: AtomicU32,
    promoted: RwLock<Option<Bytes>>,
    /// Asked for since the clock hand last passed.
    referenced: AtomicBool,
}

impl DiskFile {
    pub fn new(len: u64) -> DiskFile {
        DiskFile {
            len,
            hits: AtomicU32::new(0),
            promoted: RwLock::new(None),
            referenced: AtomicBool::new(false),
        }
    }

    /// The file's bytes if it is in memory, or just moved there (read from `path`, taken from
    /// `budget`; never without one); counts this request.
    pub fn in_memory(
        self: &Arc<Self>,
        budget: Option<&MemoryBudget>,
        path: impl FnOnce() -> std::path::PathBuf,
    ) -> Option<Bytes> {
        if let Some(bytes) = self.promoted.read().expect("not poisoned").as_ref() {
            if !self.referenced.load(Ordering::Relaxed) {
                self.referenced.store(true, Ordering::Relaxed);
            }
            return Some(bytes.clone());
        }
        let budget = budget?;
        if self.len > PROMOTE_MAX
            || (self.hits.fetch_add(1, Ordering::Relaxed) + 1) % PROMOTE_AFTER != 0
        {
            return None;
        }
        if !budget.try_take_evicting(self.len) {
            return None;
        }
        let Some(bytes) = self.read_whole(&path()) else {
            budget.give_back(self.len);
            return None;
        };
        let stored = {
            let mut slot = self.promoted.write().expect("not poisoned");
            slot.is_none() && slot.replace(bytes.clone()).is_none()
        };
        // Never the clock's lock while holding a file's (eviction takes them the other way).
        match stored {
            true => {
                // A new arrival survives the hand's next pass.
                self.referenced.store(true, Ordering::Relaxed);
                let file: Weak<DiskFile> = Arc::downgrade(self);
                budget.hold(file);
            }
            false => budget.give_back(self.len),
        }
        Some(bytes)
    }

    #[cfg(test)]
    pub fn is_promoted(&self) -> bool {
        self.promoted.read().expect("not poisoned").is_some()
    }

    /// Gives the promoted bytes back to `budget` (the one they came from); whether there
    /// were any.
    pub fn evict(&self, budget: &MemoryBudget) -> bool {
        let taken = self.promoted.write().expect("not poisoned").take();
        if taken.is_some() {
            budget.give_back(self.len);
        }
        taken.is_some()
    }

    /// The whole file, if it still has the length it had when the site loaded.
    fn read_whole(&self, path: &Path) -> Option<Bytes> {
        use std::io::Read;
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .ok()?;
        let mut bytes = Vec::with_capacity(self.len as usize);
        file.by_ref()
            .take(self.len + 1)
            .read_to_end(&mut bytes)
            .ok()?;
        (bytes.len() as u64 == self.len).then(|| Bytes::from(bytes))
    }
}

impl Evictable for DiskFile {
    fn take_referenced(&self) -> bool {
        self.referenced.swap(false, Ordering::Relaxed)
    }

    fn evict(&self, budget: &MemoryBudget) {
        DiskFile::evict(self, budget);
    }
}
