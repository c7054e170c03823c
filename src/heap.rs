//! Allocator settings for the daemon's process (`main` calls it before it starts the runtime;
//! the `mallopt` calls are `sys::heap`'s).

/// glibc's malloc raises its mmap threshold each time a large block is freed (up to 32 MiB),
/// after which multi-megabyte buffers (uploads, files read into static sites) come from the
/// heap and their pages stay with the process when freed: 100 static deploys left ~60 MiB
/// that no site held. A fixed threshold keeps large blocks in mmap (returned on free) and a
/// fixed trim threshold gives freed heap tops back. Four arenas instead of 8 per core: the
/// blocking pool's threads (file reads, the store) each held pages of an arena of their own.
/// Measured by `benches/static_memory.sh`.
pub fn bound_heap_growth() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use crate::sys::heap::{set, MallocOption};
        set(MallocOption::MmapThreshold, 256 * 1024);
        set(MallocOption::TrimThreshold, 1024 * 1024);
        set(MallocOption::ArenaMax, 4);
    }
}
