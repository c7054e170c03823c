//! The first step of a start: the data dir checked and made private, the store opened, the
//! apps an earlier daemon left running found, the sandbox started, the secret key and the
//! tokens loaded. Nothing listens yet.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;

use crate::auth::Tokens;
use crate::config::Config;
use crate::sandbox::{AppHandle, Sandbox};
use crate::secrets::SecretBox;
use crate::store::Store;

/// What every later step builds on.
pub(super) struct Base {
    /// The config, its sandbox mode the one in force (never `auto`).
    pub config: Arc<Config>,
    pub store: Store,
    /// Apps an earlier daemon left running (deployment → handle), to adopt.
    pub survivors: HashMap<String, AppHandle>,
    pub sandbox: Arc<Sandbox>,
    pub secrets: Arc<SecretBox>,
    pub tokens: Arc<Tokens>,
}

impl Base {
    pub fn open(mut config: Config) -> anyhow::Result<Base> {
        check_data_dir(&config)?;
        if !config.dev {
            for advice in config.advice() {
                tracing::warn!("{advice}");
            }
        }
        prepare_data_dir(&config)?;
        let store = Store::open(&config.data_dir)?;
        let survivors = surviving_apps(&store)?;
        let handles: Vec<_> = survivors.values().cloned().collect();
        let sandbox = Arc::new(start_sandbox(&config, &handles)?);
        config.sandbox.mode = sandbox.mode();
        let secrets = Arc::new(SecretBox::open_or_create(
            &config.data_dir.join("secret.key"),
        )?);
        let tokens = Arc::new(Tokens::load(store.clone())?);
        let token_path = config.data_dir.join("initial-admin-token");
        if tokens.bootstrap(&token_path, crate::ids::now_ms())? {
            tracing::info!(path = %token_path.display(), "created the initial admin token; read it from this file (mode 0600)");
        }
        Ok(Base {
            config: Arc::new(config),
            store,
            survivors,
            sandbox,
            secrets,
            tokens,
        })
    }
}

/// A data dir that every sandbox sees would hand the store and the secret key to builds.
fn check_data_dir(config: &Config) -> anyhow::Result<()> {
    match crate::sandbox::visible_to_sandboxes(&config.data_dir) {
        Some(visible) => anyhow::bail!(
            "data_dir {} is under {}, which every sandbox sees (read-only); choose a data_dir \
             elsewhere (the default is /var/lib/slipway)",
            config.data_dir.display(),
            visible.display()
        ),
        None => Ok(()),
    }
}

fn prepare_data_dir(config: &Config) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let dir = &config.data_dir;
    std::fs::create_dir_all(dir).with_context(|| format!("creating data_dir {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("setting mode 0700 on {}", dir.display()))?;
    Ok(())
}

/// Instances an earlier daemon left running that still run (`dpl_…:web.1` → handle);
/// records of those that are gone are dropped, and a record from before process types (keyed
/// by the bare deployment id) is kept again as its `web.1`.
pub(super) fn surviving_apps(store: &Store) -> anyhow::Result<HashMap<String, AppHandle>> {
    let mut alive = HashMap::new();
    for (key, json) in store.app_processes()? {
        let handle = serde_json::from_slice::<AppHandle>(&json).ok();
        let split = crate::formation::split_instance_key(&key);
        match (handle, split) {
            (Some(handle), Some((deployment_id, instance))) if handle.is_alive() => {
                let current = crate::formation::instance_key(deployment_id, &instance);
                if current != key {
                    store.put_app_process(&current, &json)?;
                    store.remove_app_process(&key)?;
                }
                alive.insert(current, handle);
            }
            _ => store.remove_app_process(&key)?,
        }
    }
    Ok(alive)
}

/// Starts the sandbox runner. Without `--dev` a machine that cannot sandbox stops the daemon:
/// a production host must never silently lose its sandbox.
fn start_sandbox(config: &Config, survivors: &[AppHandle]) -> anyhow::Result<Sandbox> {
    let exe = PathBuf::from("/proc/self/exe");
    let run_dir = config.data_dir.join("run");
    Sandbox::start(&config.sandbox, exe, run_dir, survivors).map_err(|error| {
        let hint = if config.dev {
            ""
        } else {
            ". To try Slipway out on this machine anyway, run `slipway serve --dev`: its sandbox \
             mode \"auto\" falls back to running builds unsandboxed, with a warning"
        };
        anyhow::anyhow!("starting the sandbox: {error}{hint}")
    })
}

/// `slipway stop-apps` when no daemon runs: stops the apps the last daemon left running and
/// removes what the sandbox had on the host (cgroups, links, the nftables table). Returns how
/// many apps were running.
pub fn stop_apps_offline(config: &Config) -> anyhow::Result<usize> {
    let store = Store::open(&config.data_dir)?;
    let survivors = surviving_apps(&store)?;
    let handles: Vec<_> = survivors.values().cloned().collect();
    let grace = std::time::Duration::from_secs(config.limits.app_stop_grace_s);
    let stopped = crate::sandbox::stop_outliving(&handles, grace);
    for key in survivors.keys() {
        store.remove_app_process(key)?;
    }
    // Nothing needs the volumes any more (a daemon started later mounts them again).
    crate::disk::unmount_all_under(&config.data_dir);
    if config.sandbox.mode != crate::config::SandboxMode::None {
        let exe = PathBuf::from("/proc/self/exe");
        let run_dir = config.data_dir.join("run");
        match crate::sandbox::NamespaceRunner::start(&config.sandbox, exe, run_dir, &[]) {
            Ok(runner) => runner.shutdown(),
            Err(error) => tracing::debug!(%error, "no sandbox state to clean up"),
        }
    }
    Ok(stopped)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record from before process types (keyed by the bare deployment id) is adopted as
    /// its `web.1` and kept under that key; a dead one is dropped.
    #[test]
    fn old_adoption_records_become_web_1() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let me = std::process::id() as i32;
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let start_time: u64 = stat[stat.rfind(')').unwrap() + 1..]
            .split_whitespace()
            .nth(19)
            .unwrap()
            .parse()
            .unwrap();
        let handle = |pid: i32, start_time: u64| {
            serde_json::to_vec(&serde_json::json!({
                "helper_pid": pid, "start_time": start_time, "cgroup": "c",
                "link_index": 1, "exit_file": "/nonexistent"
            }))
            .unwrap()
        };
        store
            .put_app_process("dpl_old", &handle(me, start_time))
            .unwrap();
        store
            .put_app_process("dpl_dead:worker.1", &handle(me, start_time + 1))
            .unwrap();
        let alive = surviving_apps(&store).unwrap();
        assert_eq!(alive.keys().collect::<Vec<_>>(), ["dpl_old:web.1"]);
        let kept: Vec<String> = store
            .app_processes()
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(kept, ["dpl_old:web.1"]);
    }
}
