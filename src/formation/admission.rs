//! Memory admission: the memory limits of every instance the machine runs may not add up to
//! more than its memory minus a reserve (`limits.memory_reserve_mb`) kept for the system, the
//! daemon and builds. A refusal says how much is asked and how much is free.

/// The machine's memory in MiB (`MemTotal` of `/proc/meminfo`), or `None` where unreadable.
pub fn host_memory_mb() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024)
}

/// What the machine can give apps, and what they hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    /// The machine's memory, MiB.
    pub total_mb: u64,
    /// Kept for everything else, MiB.
    pub reserve_mb: u64,
    /// The limits of the instances running now that the change keeps, MiB.
    pub held_mb: u64,
}

impl Admission {
    /// What apps may still be given, MiB.
    pub fn free_mb(&self) -> u64 {
        self.total_mb
            .saturating_sub(self.reserve_mb)
            .saturating_sub(self.held_mb)
    }

    /// `Ok` when `asked_mb` more fits; else the refusal's message. `what` says what asks
    /// (e.g. "web=3 × 512 MiB").
    pub fn admit(&self, asked_mb: u64, what: &str) -> Result<(), String> {
        if asked_mb <= self.free_mb() {
            return Ok(());
        }
        Err(format!(
            "not enough memory: {what} asks {asked_mb} MiB, {free} MiB is free ({total} MiB on \
             this machine, {reserve} MiB kept for the system (limits.memory_reserve_mb), \
             {held} MiB held by running apps); ask for fewer instances or less memory, or \
             scale another project down",
            free = self.free_mb(),
            total = self.total_mb,
            reserve = self.reserve_mb,
            held = self.held_mb,
        ))
    }
}
