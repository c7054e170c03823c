//! glibc's malloc parameters (`mallopt`).

/// A parameter of glibc's malloc that [`set`] changes.
#[derive(Debug, Clone, Copy)]
pub enum MallocOption {
    /// `M_MMAP_THRESHOLD`: blocks this large or larger come from `mmap` (bytes).
    MmapThreshold,
    /// `M_TRIM_THRESHOLD`: a free heap top this large is given back (bytes).
    TrimThreshold,
    /// `M_ARENA_MAX`: at most this many arenas.
    ArenaMax,
}

/// Sets one malloc parameter; whether glibc took it.
pub fn set(option: MallocOption, value: i32) -> bool {
    let parameter = match option {
        MallocOption::MmapThreshold => libc::M_MMAP_THRESHOLD,
        MallocOption::TrimThreshold => libc::M_TRIM_THRESHOLD,
        MallocOption::ArenaMax => libc::M_ARENA_MAX,
    };
    // SAFETY: mallopt only sets an allocator parameter, under glibc's own locks.
    unsafe { libc::mallopt(parameter, value) == 1 }
}
