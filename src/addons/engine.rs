//! What each kind of add-on is made of: the Debian package that provides it, the programs it
//! runs, and the settings that fit its memory limit (pure; the daemon and `doctor` use it).
//!
//! PostgreSQL: `shared_buffers` a quarter of the limit (16 MiB to 8 GiB), `effective_cache_size`
//! half, `max_connections` one per 8 MiB between 20 and 200, `work_mem` what a quarter of the
//! limit gives each connection (at least 1 MiB), `maintenance_work_mem` a sixteenth (at
//! least 8 MiB); pids: the connections plus 30 for its own processes.
//! Redis: `maxmemory` half the limit in persistent mode (the save fork copies pages it
//! touches: the other half is its room, so a save never trips the limit and Redis never
//! refuses writes for want of it — dokku-redis#77), with `noeviction`; in cache mode 80 %
//! with `allkeys-lru` and no persistence at all.

use std::path::{Path, PathBuf};

/// The kinds of add-on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AddonKind {
    Postgres,
    Redis,
}

/// Whether a Redis add-on keeps its data.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RedisMode {
    #[default]
    Persistent,
    Cache,
}

/// The PostgreSQL major version new add-ons run (Debian 12's); an upgrade may move one to
/// another major installed beside it (`postgresql-16` from the PGDG repository, say).
pub const POSTGRES_MAJOR: u32 = 15;

/// Where a PostgreSQL major's programs are (Debian's layout).
pub fn postgres_bin_dir(major: u32) -> String {
    format!("/usr/lib/postgresql/{major}/bin")
}

/// The PostgreSQL majors installed under `root` (each with its `postgres`), lowest first.
pub fn postgres_majors(root: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(root.join("usr/lib/postgresql")) else {
        return Vec::new();
    };
    let mut majors: Vec<u32> = entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .filter(|major| {
            root.join(format!("usr/lib/postgresql/{major}/bin/postgres"))
                .exists()
        })
        .collect();
    majors.sort_unstable();
    majors
}

/// The PostgreSQL major an add-on runs: its version's (set before its first start).
pub fn postgres_major(addon: &crate::store::addons::AddonRecord) -> u32 {
    major_of(&addon.version).unwrap_or(POSTGRES_MAJOR)
}

/// The major of a version as a server reports it (`15.18` → 15, `7.0.15` → 7).
pub fn major_of(version: &str) -> Option<u32> {
    version.split('.').next()?.parse().ok()
}

impl AddonKind {
    pub fn parse(text: &str) -> Option<AddonKind> {
        match text {
            "postgres" => Some(AddonKind::Postgres),
            "redis" => Some(AddonKind::Redis),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            AddonKind::Postgres => "postgres",
            AddonKind::Redis => "redis",
        }
    }

    /// The Debian package to install for it.
    pub fn package(self) -> &'static str {
        match self {
            AddonKind::Postgres => "postgresql-15",
            AddonKind::Redis => "redis-server",
        }
    }

    /// The programs it needs, under `root` (`/` on a server; tests hide them with another).
    pub fn programs(self, root: &Path) -> Vec<PathBuf> {
        match self {
            AddonKind::Postgres => {
                let bin = root.join(format!("usr/lib/postgresql/{POSTGRES_MAJOR}/bin"));
                ["postgres", "initdb", "pg_dump", "pg_restore", "psql"]
                    .iter()
                    .map(|name| bin.join(name))
                    .collect()
            }
            AddonKind::Redis => vec![
                root.join("usr/bin/redis-server"),
                root.join("usr/bin/redis-cli"),
            ],
        }
    }

    /// `Err` naming the package to install when a program is missing.
    pub fn check_installed(self, root: &Path) -> Result<(), String> {
        let missing: Vec<String> = self
            .programs(root)
            .into_iter()
            .filter(|program| !program.exists())
            .map(|program| program.display().to_string())
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(format!(
            "{} add-ons need the Debian package {} (missing: {}); install it with `apt-get \
             install {}`",
            self.as_str(),
            self.package(),
            missing.join(", "),
            self.package()
        ))
    }

    /// The TCP port it listens on in its sandbox.
    pub fn port(self) -> u16 {
        match self {
            AddonKind::Postgres => 5432,
            AddonKind::Redis => 6379,
        }
    }

    /// The variable a linked app gets when the add-on names none.
    pub fn default_env_name(self) -> &'static str {
        match self {
            AddonKind::Postgres => "DATABASE_URL",
            AddonKind::Redis => "REDIS_URL",
        }
    }
}

/// PostgreSQL's settings for a memory limit of `memory_mb`, as `-c name=value` pairs.
pub fn postgres_settings(memory_mb: u64) -> Vec<(&'static str, String)> {
    let shared_buffers = (memory_mb / 4).clamp(16, 8192);
    let connections = (memory_mb / 8).clamp(20, 200);
    let work_mem = (memory_mb * 1024 / 4 / connections).max(1024);
    vec![
        ("shared_buffers", format!("{shared_buffers}MB")),
        (
            "effective_cache_size",
            format!("{}MB", (memory_mb / 2).max(32)),
        ),
        ("max_connections", connections.to_string()),
        ("work_mem", format!("{work_mem}kB")),
        (
            "maintenance_work_mem",
            format!("{}MB", (memory_mb / 16).max(8)),
        ),
        // One shared memory segment the cgroup counts, no huge pages to ask the host for.
        ("huge_pages", "off".into()),
        ("dynamic_shared_memory_type", "posix".into()),
    ]
}

/// The pids limit that fits PostgreSQL's settings for `memory_mb`: a process per connection
/// plus its own (postmaster, checkpointer, writers, autovacuum, parallel workers).
pub fn postgres_pids(memory_mb: u64) -> u64 {
    (memory_mb / 8).clamp(20, 200) + 30
}

/// Redis's `maxmemory` (bytes) and policy for a memory limit of `memory_mb`.
pub fn redis_memory(memory_mb: u64, mode: RedisMode) -> (u64, &'static str) {
    let bytes = memory_mb * 1024 * 1024;
    match mode {
        RedisMode::Persistent => (bytes / 2, "noeviction"),
        RedisMode::Cache => (bytes / 10 * 8, "allkeys-lru"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_fits_its_limit() {
        let settings = |mb| -> std::collections::HashMap<&str, String> {
            postgres_settings(mb).into_iter().collect()
        };
        let small = settings(128);
        assert_eq!(small["shared_buffers"], "32MB");
        assert_eq!(small["max_connections"], "20");
        assert_eq!(small["work_mem"], "1638kB");
        let large = settings(65536);
        assert_eq!(large["shared_buffers"], "8192MB");
        assert_eq!(large["max_connections"], "200");
        // Buffers plus every connection's work memory stay within half the limit.
        for mb in [64, 128, 256, 1024, 4096, 65536] {
            let s = settings(mb);
            let buffers: u64 = s["shared_buffers"].trim_end_matches("MB").parse().unwrap();
            let work: u64 = s["work_mem"].trim_end_matches("kB").parse().unwrap();
            let connections: u64 = s["max_connections"].parse().unwrap();
            assert!(
                buffers * 1024 + work * connections <= mb * 1024 / 2 + 20 * 1024,
                "{mb}"
            );
            assert!(postgres_pids(mb) > connections);
        }
    }

    #[test]
    fn redis_leaves_room_for_the_save_fork_unless_it_is_a_cache() {
        assert_eq!(
            redis_memory(256, RedisMode::Persistent),
            (128 << 20, "noeviction")
        );
        let (cache, policy) = redis_memory(256, RedisMode::Cache);
        assert_eq!(policy, "allkeys-lru");
        assert!(cache > 200 << 20 && cache < 256 << 20);
    }

    #[test]
    fn majors_are_read_from_versions_and_from_the_installed_packages() {
        assert_eq!(major_of("15.18"), Some(15));
        assert_eq!(major_of("7.0.15"), Some(7));
        assert_eq!(major_of(""), None);
        let root = tempfile::tempdir().unwrap();
        for (major, with_server) in [("16", true), ("15", true), ("14", false), ("x", true)] {
            let bin = root.path().join(format!("usr/lib/postgresql/{major}/bin"));
            std::fs::create_dir_all(&bin).unwrap();
            if with_server {
                std::fs::write(bin.join("postgres"), "").unwrap();
            }
        }
        assert_eq!(postgres_majors(root.path()), vec![15, 16]);
        assert!(postgres_majors(&root.path().join("none")).is_empty());
    }

    #[test]
    fn a_missing_program_names_the_package() {
        let empty = tempfile::tempdir().unwrap();
        let error = AddonKind::Postgres
            .check_installed(empty.path())
            .unwrap_err();
        assert!(error.contains("apt-get install postgresql-15"), "{error}");
        let error = AddonKind::Redis.check_installed(empty.path()).unwrap_err();
        assert!(error.contains("redis-server"), "{error}");
    }
}
