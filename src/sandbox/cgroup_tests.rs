//! Cgroup logic against an in-memory cgroupfs that keeps the kernel rules that matter here:
//! a v2 cgroup with processes cannot enable controllers for its children, a directory with
//! processes or children cannot be removed, and writing a pid moves it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::*;

#[derive(Default, Clone)]
struct FakeCgroupFs {
    tree: Arc<Mutex<BTreeMap<PathBuf, Option<String>>>>,
}

impl FakeCgroupFs {
    fn with(entries: &[(&str, Option<&str>)]) -> Self {
        let fake = FakeCgroupFs::default();
        let mut tree = fake.tree.lock().unwrap();
        for (path, contents) in entries {
            tree.insert(PathBuf::from(path), contents.map(str::to_owned));
        }
        drop(tree);
        fake
    }

    fn file(&self, path: &str) -> Option<String> {
        self.tree
            .lock()
            .unwrap()
            .get(Path::new(path))
            .cloned()
            .flatten()
    }

    fn has_dir(&self, path: &str) -> bool {
        matches!(self.tree.lock().unwrap().get(Path::new(path)), Some(None))
    }
}

fn errno(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

impl CgroupFs for FakeCgroupFs {
    fn read(&self, path: &Path) -> io::Result<String> {
        self.tree
            .lock()
            .unwrap()
            .get(path)
            .cloned()
            .flatten()
            .ok_or_else(|| errno(libc::ENOENT))
    }

    fn write(&self, path: &Path, contents: &str) -> io::Result<()> {
        let mut tree = self.tree.lock().unwrap();
        let dir = path.parent().unwrap().to_owned();
        if tree.get(&dir) != Some(&None) {
            return Err(errno(libc::ENOENT));
        }
        match path.file_name().and_then(|name| name.to_str()) {
            Some("cgroup.subtree_control") => {
                let busy = tree
                    .get(&dir.join("cgroup.procs"))
                    .cloned()
                    .flatten()
                    .unwrap_or_default();
                if !busy.trim().is_empty() && tree.contains_key(&dir.join("cgroup.controllers")) {
                    return Err(errno(libc::EBUSY));
                }
                tree.insert(path.to_owned(), Some(contents.to_owned()));
            }
            Some("cgroup.procs") => {
                for (key, value) in tree.iter_mut() {
                    if key.ends_with("cgroup.procs") {
                        if let Some(text) = value {
                            *text = text
                                .split_whitespace()
                                .filter(|pid| *pid != contents)
                                .collect::<Vec<_>>()
                                .join("\n");
                        }
                    }
                }
                let entry = tree.entry(path.to_owned()).or_insert(Some(String::new()));
                let text = entry.get_or_insert_with(String::new);
                text.push_str(contents);
                text.push('\n');
            }
            _ => {
                tree.insert(path.to_owned(), Some(contents.to_owned()));
            }
        }
        Ok(())
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        let mut tree = self.tree.lock().unwrap();
        if tree.get(path.parent().unwrap()) != Some(&None) {
            return Err(errno(libc::ENOENT));
        }
        if tree.contains_key(path) {
            return Ok(());
        }
        tree.insert(path.to_owned(), None);
        tree.insert(path.join("cgroup.procs"), Some(String::new()));
        // What a kernel with swap accounting offers in every new memory cgroup.
        tree.insert(path.join("memory.swap.max"), Some("max".into()));
        tree.insert(path.join("memory.memsw.limit_in_bytes"), Some("-1".into()));
        Ok(())
    }

    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        let mut tree = self.tree.lock().unwrap();
        if tree.get(path) != Some(&None) {
            return Err(errno(libc::ENOENT));
        }
        let procs = tree
            .get(&path.join("cgroup.procs"))
            .cloned()
            .flatten()
            .unwrap_or_default();
        if !procs.trim().is_empty() {
            return Err(errno(libc::EBUSY));
        }
        if tree
            .iter()
            .any(|(key, value)| value.is_none() && key.parent() == Some(path))
        {
            return Err(errno(libc::ENOTEMPTY));
        }
        tree.retain(|key, _| !key.starts_with(path));
        Ok(())
    }

    fn child_dirs(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        let tree = self.tree.lock().unwrap();
        Ok(tree
            .iter()
            .filter(|(key, value)| value.is_none() && key.parent() == Some(path))
            .map(|(key, _)| key.clone())
            .collect())
    }

    fn exists(&self, path: &Path) -> bool {
        self.tree.lock().unwrap().contains_key(path)
    }

    fn kill(&self, pid: i32) {
        let mut tree = self.tree.lock().unwrap();
        let pid = pid.to_string();
        for (key, value) in tree.iter_mut() {
            if key.ends_with("cgroup.procs") {
                if let Some(text) = value {
                    *text = text
                        .split_whitespace()
                        .filter(|p| *p != pid)
                        .collect::<Vec<_>>()
                        .join("\n");
                }
            }
        }
    }
}

fn v2_machine() -> FakeCgroupFs {
    FakeCgroupFs::with(&[
        ("/cg", None),
        ("/cg/cgroup.controllers", Some("cpuset cpu io memory pids")),
        ("/cg/system.slice", None),
        ("/cg/system.slice/slipway.service", None),
        (
            "/cg/system.slice/slipway.service/cgroup.controllers",
            Some("cpu memory pids"),
        ),
        (
            "/cg/system.slice/slipway.service/cgroup.procs",
            Some("4242\n"),
        ),
    ])
}

const V2_SELF: &str = "0::/system.slice/slipway.service\n";

#[test]
fn v2_is_chosen_when_its_controllers_are_present() {
    let fake = v2_machine();
    let layout = CgroupLayout::detect(&fake, Path::new("/cg"), V2_SELF).unwrap();
    assert_eq!(
        layout,
        CgroupLayout::V2 {
            own: "/cg/system.slice/slipway.service".into(),
            cpu: true
        }
    );
}

#[test]
fn v2_delegation_moves_the_daemon_into_a_leaf_and_writes_the_limits() {
    let fake = v2_machine();
    let layout = CgroupLayout::detect(&fake, Path::new("/cg"), V2_SELF).unwrap();
    let cgroups = Cgroups::prepare(
        Box::new(fake.clone()),
        layout,
        "slipway",
        &Default::default(),
    )
    .unwrap();
    let own = "/cg/system.slice/slipway.service";
    assert_eq!(
        fake.file(&format!("{own}/slipway-daemon/cgroup.procs"))
            .unwrap()
            .trim(),
        "4242"
    );
    assert_eq!(
        fake.file(&format!("{own}/cgroup.subtree_control")).unwrap(),
        "+memory +pids +cpu"
    );
    assert_eq!(
        fake.file(&format!("{own}/slipway/cgroup.subtree_control"))
            .unwrap(),
        "+memory +pids +cpu"
    );

    let limits = CgroupLimits {
        memory_bytes: 64 << 20,
        pids: 32,
        cpu_quota_us: Some(50_000),
    };
    let step = cgroups.create("build-1", &limits).unwrap();
    let dir = format!("{own}/slipway/build-1");
    assert_eq!(
        step.procs_files,
        vec![PathBuf::from(format!("{dir}/cgroup.procs"))]
    );
    assert_eq!(
        fake.file(&format!("{dir}/memory.max")).unwrap(),
        (64u64 << 20).to_string()
    );
    assert_eq!(fake.file(&format!("{dir}/pids.max")).unwrap(), "32");
    // No swap: a step cannot page its way past the memory limit.
    assert_eq!(fake.file(&format!("{dir}/memory.swap.max")).unwrap(), "0");
    assert_eq!(
        fake.file(&format!("{dir}/cpu.max")).unwrap(),
        "50000 100000"
    );

    fake.write(
        Path::new(&format!("{dir}/memory.events")),
        "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n",
    )
    .unwrap();
    fake.write(Path::new(&format!("{dir}/pids.events")), "max 7\n")
        .unwrap();
    assert_eq!(
        cgroups.events(&step),
        StepEvents {
            oom_kills: 1,
            pids_limit_hits: 7
        }
    );

    fake.write(Path::new(&format!("{dir}/cgroup.procs")), "5000")
        .unwrap();
    cgroups.remove(&step).unwrap();
    assert!(!fake.has_dir(&dir));

    // Removed behind the daemon's back (another daemon's clean-up): the next step makes it
    // again, with its controllers, instead of failing.
    let instance = format!("{own}/slipway");
    fake.tree
        .lock()
        .unwrap()
        .retain(|path, _| !path.starts_with(&instance));
    assert!(!fake.has_dir(&instance));
    cgroups.create("build-2", &limits).unwrap();
    assert!(fake.has_dir(&format!("{instance}/build-2")));
    assert_eq!(
        fake.file(&format!("{instance}/cgroup.subtree_control"))
            .unwrap(),
        "+memory +pids +cpu"
    );
}

#[test]
fn the_sweep_keeps_adopted_apps_cgroups() {
    let fake = v2_machine();
    let layout = CgroupLayout::detect(&fake, Path::new("/cg"), V2_SELF).unwrap();
    let own = "/cg/system.slice/slipway.service";
    for name in ["app-kept", "build-stale"] {
        fake.create_dir(Path::new(&format!("{own}/slipway")))
            .unwrap();
        fake.create_dir(Path::new(&format!("{own}/slipway/{name}")))
            .unwrap();
    }
    let keep = ["app-kept".to_owned()].into_iter().collect();
    let cgroups = Cgroups::prepare(Box::new(fake.clone()), layout, "slipway", &keep).unwrap();
    assert!(fake.has_dir(&format!("{own}/slipway/app-kept")));
    assert!(!fake.has_dir(&format!("{own}/slipway/build-stale")));
    let adopted = cgroups.existing("app-kept");
    assert_eq!(
        adopted.procs_files,
        vec![PathBuf::from(format!(
            "{own}/slipway/app-kept/cgroup.procs"
        ))]
    );
}

#[test]
fn v2_without_the_pids_controller_falls_back_to_v1() {
    let fake = FakeCgroupFs::with(&[
        ("/cg", None),
        ("/cg/unified", None),
        ("/cg/unified/cgroup.controllers", Some("")),
        ("/cg/memory", None),
        ("/cg/memory/daemon", None),
        ("/cg/pids", None),
    ]);
    let own = "9:pids:/\n4:memory:/daemon\n0::/\n";
    let layout = CgroupLayout::detect(&fake, Path::new("/cg"), own).unwrap();
    assert_eq!(
        layout,
        CgroupLayout::V1 {
            memory: "/cg/memory/daemon".into(),
            pids: "/cg/pids/".into(),
            cpu: None,
            freezer: None
        }
    );
}

#[test]
fn no_cgroups_is_a_clear_error() {
    let fake = FakeCgroupFs::with(&[("/cg", None)]);
    let error = CgroupLayout::detect(&fake, Path::new("/cg"), "0::/\n").unwrap_err();
    assert!(error.to_string().contains("no usable cgroups"), "{error}");
}

#[test]
fn a_sweep_removes_stale_steps_and_kills_their_processes() {
    let fake = v2_machine();
    fake.create_dir(Path::new("/cg/system.slice/slipway.service/slipway"))
        .unwrap();
    let stale = Path::new("/cg/system.slice/slipway.service/slipway/old-step");
    fake.create_dir(stale).unwrap();
    fake.write(&stale.join("cgroup.procs"), "777").unwrap();
    let layout = CgroupLayout::detect(&fake, Path::new("/cg"), V2_SELF).unwrap();
    let _cgroups = Cgroups::prepare(
        Box::new(fake.clone()),
        layout,
        "slipway",
        &Default::default(),
    )
    .unwrap();
    assert!(!fake.has_dir(stale.to_str().unwrap()));
}

#[test]
fn usage_sums_the_steps_of_one_app_and_ignores_others() {
    let fake = v2_machine();
    let layout = CgroupLayout::detect(&fake, Path::new("/cg"), V2_SELF).unwrap();
    let cgroups = Cgroups::prepare(
        Box::new(fake.clone()),
        layout,
        "slipway",
        &Default::default(),
    )
    .unwrap();
    let instance = Path::new("/cg/system.slice/slipway.service/slipway");
    for (name, memory, usec) in [
        ("slipway-dpl_a-app-1", "1000", "2500000"),
        ("slipway-dpl_a-app-2", "24", "500000"),
        ("slipway-dpl_ab-app-3", "999999", "9000000"),
    ] {
        let dir = instance.join(name);
        fake.create_dir(&dir).unwrap();
        fake.write(&dir.join("memory.current"), memory).unwrap();
        fake.write(
            &dir.join("cpu.stat"),
            &format!("usage_usec {usec}\nuser_usec 1\nsystem_usec 2\n"),
        )
        .unwrap();
    }
    let usage = cgroups.usage("slipway-dpl_a-app-").unwrap();
    assert_eq!(usage.memory_bytes, Some(1024));
    assert_eq!(usage.cpu_seconds, Some(3.0));
    assert_eq!(cgroups.usage("slipway-dpl_zz-app-"), None);
}
