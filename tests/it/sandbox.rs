//! The namespaced sandbox, driven through the `Runner` trait: each attack is a real command
//! run as a build or an app step. Tests skip with a printed reason without root.

mod firewall;
mod limited;
mod network;
pub(crate) mod outside;
mod reach;
mod reachable;
pub(crate) mod support;
mod tty;

use std::time::Duration;

use slipway::sandbox::{Exit, Runner, StepKind};
use support::{find_dirs_named, run, Lines, TestRunner};

#[tokio::test]
async fn inside_the_sandbox_the_build_is_uid_1000_without_privileges() {
    let Some(runner) = TestRunner::start("identity") else {
        return;
    };
    let workspace = runner.workspace();
    let command =
        "id -u; id -g; grep -E '^(CapEff|CapBnd|CapPrm|NoNewPrivs|Seccomp):' /proc/self/status; \
                   touch /app/made-inside; hostname; pwd";
    let spec = runner.spec(
        StepKind::Build {
            workspace: workspace.path().to_owned(),
            cache: None,
        },
        command,
    );
    let finished = run(&runner, spec, Duration::from_secs(20)).await;
    eprintln!("stdout:\n{}\nstderr:\n{}", finished.stdout, finished.stderr);
    assert_eq!(finished.exit, Exit::Code(0));
    let lines: Vec<&str> = finished.stdout.lines().collect();
    assert_eq!(lines[0], "1000");
    assert_eq!(lines[1], "1000");
    assert!(finished.stdout.contains("CapEff:\t0000000000000000"));
    assert!(finished.stdout.contains("CapBnd:\t0000000000000000"));
    assert!(finished.stdout.contains("NoNewPrivs:\t1"));
    assert!(finished.stdout.contains("Seccomp:\t2"));
    assert!(finished.stdout.contains("\n/app"));
    let made = std::fs::metadata(workspace.path().join("made-inside")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        (made.uid(), made.gid()),
        (runner.project_uid, runner.project_uid)
    );
    runner.finish();
}

#[tokio::test]
async fn a_build_cannot_see_the_store_other_projects_or_root_nor_write_system_dirs() {
    let Some(runner) = TestRunner::start("confinement") else {
        return;
    };
    // A stand-in store outside /tmp, and another project's workspace.
    let store = std::path::PathBuf::from(format!(
        "/var/tmp/slwt-store-{}-{}",
        std::process::id(),
        runner.instance()
    ));
    std::fs::create_dir_all(&store).unwrap();
    std::fs::write(store.join("secret"), "store secret").unwrap();
    let other = runner.workspace();
    std::fs::write(other.path().join("other-secret"), "other project").unwrap();
    let workspace = runner.workspace();
    let attempts = [
        format!("cat {}/secret", store.display()),
        format!("ls {}", store.display()),
        format!("cat {}/other-secret", other.path().display()),
        "ls /root/".into(),
        "cat /root/.bashrc".into(),
        "ls /home/".into(),
        "ls /run/".into(),
        "ls /var/lib/".into(),
        "cat /etc/shadow".into(),
        "touch /usr/pwned".into(),
        "touch /usr/bin/pwned".into(),
        "touch /etc/pwned".into(),
        "touch /pwned".into(),
        "echo 1.2.3.4 evil >> /etc/hosts".into(),
        "mount -t tmpfs none /tmp".into(),
        "unshare -U true".into(),
        "unshare -r true".into(),
        "unshare -n true".into(),
    ];
    let mut command = String::from(
        "attempt() { if sh -c \"$1\" >/dev/null 2>&1; then echo \"ALLOWED: $1\"; else echo \"refused: $1\"; fi; }\n",
    );
    for attempt in &attempts {
        command.push_str(&format!("attempt '{attempt}'\n"));
    }
    command.push_str("echo visible: $(ls /)\necho done; exit 7\n");
    let spec = runner.spec(
        StepKind::Build {
            workspace: workspace.path().to_owned(),
            cache: None,
        },
        &command,
    );
    let finished = run(&runner, spec, Duration::from_secs(30)).await;
    eprintln!("stdout:\n{}\nstderr:\n{}", finished.stdout, finished.stderr);
    std::fs::remove_dir_all(&store).unwrap();
    assert!(
        !finished.stdout.contains("ALLOWED"),
        "an attempt succeeded:\n{}",
        finished.stdout
    );
    assert_eq!(finished.stdout.matches("refused:").count(), attempts.len());
    assert!(finished.stdout.contains("\ndone\n"));
    assert_eq!(
        finished.exit,
        Exit::Code(7),
        "the build's own result comes through"
    );
    let visible = finished
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix("visible: "))
        .unwrap();
    for hidden in ["root", "home", "run", "var", "srv", "mnt"] {
        assert!(
            !visible.split(' ').any(|entry| entry == hidden),
            "/{hidden} is visible: {visible}"
        );
    }
    runner.finish();
}

#[tokio::test]
async fn a_fork_bomb_ends_as_pids_exhausted_and_leaves_nothing() {
    let Some(runner) = TestRunner::start("fork bomb") else {
        return;
    };
    let workspace = runner.workspace();
    let mut spec = runner.spec(
        StepKind::Build {
            workspace: workspace.path().to_owned(),
            cache: None,
        },
        "f() { f | f; }; f",
    );
    spec.pids = 32;
    let started = std::time::Instant::now();
    let finished = run(&runner, spec, Duration::from_secs(60)).await;
    eprintln!(
        "fork bomb ended in {:?}: {:?}; stderr tail: {:?}",
        started.elapsed(),
        finished.exit,
        finished.stderr.lines().last()
    );
    assert_eq!(finished.exit, Exit::PidsExhausted);
    assert_eq!(support::processes_of(runner.project_uid), Vec::<i32>::new());
    runner.finish();
}

#[tokio::test]
async fn a_memory_bomb_ends_as_out_of_memory() {
    let Some(runner) = TestRunner::start("memory bomb") else {
        return;
    };
    let workspace = runner.workspace();
    let command = "head -c 400000000 /dev/zero | tail -c 300000000 > /dev/null";
    let mut spec = runner.spec(
        StepKind::Build {
            workspace: workspace.path().to_owned(),
            cache: None,
        },
        command,
    );
    spec.memory_mb = 64;
    let started = std::time::Instant::now();
    let finished = run(&runner, spec, Duration::from_secs(60)).await;
    eprintln!(
        "memory bomb ended in {:?}: {:?}",
        started.elapsed(),
        finished.exit
    );
    assert_eq!(finished.exit, Exit::OutOfMemory);
    assert!(finished.exit.describe().contains("memory"));
    runner.finish();
}

#[tokio::test]
async fn a_setsid_background_process_is_gone_after_the_step() {
    let Some(runner) = TestRunner::start("setsid") else {
        return;
    };
    let workspace = runner.workspace();
    let command = "setsid sleep 300 & nohup sleep 301 >/dev/null 2>&1 & sleep 0.3; echo started";
    let spec = runner.spec(
        StepKind::Build {
            workspace: workspace.path().to_owned(),
            cache: None,
        },
        command,
    );
    let finished = run(&runner, spec, Duration::from_secs(20)).await;
    assert_eq!(finished.exit, Exit::Code(0), "{}", finished.stderr);
    assert_eq!(finished.stdout, "started\n");
    assert_eq!(support::processes_of(runner.project_uid), Vec::<i32>::new());
    runner.finish();
}

#[tokio::test]
async fn dropping_a_running_step_kills_its_whole_tree() {
    let Some(runner) = TestRunner::start("drop") else {
        return;
    };
    let workspace = runner.workspace();
    let command = "setsid sleep 300 & sleep 300";
    let spec = runner.spec(
        StepKind::Build {
            workspace: workspace.path().to_owned(),
            cache: None,
        },
        command,
    );
    let running = runner.runner.spawn(spec).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while support::processes_of(runner.project_uid).len() < 3
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        support::processes_of(runner.project_uid).len() >= 3,
        "the step did not start"
    );
    drop(running);
    assert!(support::no_processes_of(runner.project_uid, Duration::from_secs(5)).await);
    // The cleanup task frees the cgroup shortly after.
    tokio::time::sleep(Duration::from_millis(300)).await;
    runner.finish();
}

#[tokio::test]
async fn stop_forwards_sigterm_then_kills_after_the_grace_period() {
    let Some(runner) = TestRunner::start("stop") else {
        return;
    };
    let output = runner.workspace();
    let data = tempfile::tempdir().unwrap();
    let app = |command: &str| {
        runner.spec(
            StepKind::App {
                output: output.path().to_owned(),
                data_dir: data.path().join("data"),
            },
            command,
        )
    };

    let polite = "trap 'echo got-term; exit 3' TERM; echo ready; while :; do sleep 0.1; done";
    let mut running = runner.runner.spawn(app(polite)).unwrap();
    let mut stdout = support::Lines::new(running.stdout.take().unwrap());
    assert_eq!(
        stdout.next(Duration::from_secs(10)).await.as_deref(),
        Some("ready")
    );
    let exit = running.stop(Duration::from_secs(5)).await.unwrap();
    assert_eq!(exit, Exit::Code(3));
    assert_eq!(
        stdout.next(Duration::from_secs(5)).await.as_deref(),
        Some("got-term")
    );

    let stubborn = "trap '' TERM; echo ready; while :; do sleep 0.1; done";
    let mut running = runner.runner.spawn(app(stubborn)).unwrap();
    let mut stdout = support::Lines::new(running.stdout.take().unwrap());
    assert_eq!(
        stdout.next(Duration::from_secs(10)).await.as_deref(),
        Some("ready")
    );
    let started = std::time::Instant::now();
    let exit = running.stop(Duration::from_millis(300)).await.unwrap();
    assert_eq!(exit, Exit::Signal(9));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "stop took {:?}",
        started.elapsed()
    );
    assert_eq!(support::processes_of(runner.project_uid), Vec::<i32>::new());
    runner.finish();
}

#[tokio::test]
async fn a_restarted_runner_sweeps_what_a_crashed_one_left() {
    let Some(runner) = TestRunner::start("sweep") else {
        return;
    };
    let prefix = runner.runner.interface_prefix().to_owned();
    let stale = format!("{prefix}fff0");
    let peer = format!("{prefix}fff1");
    let added = std::process::Command::new("ip")
        .args(["link", "add", &stale, "type", "veth", "peer", "name", &peer])
        .status()
        .unwrap();
    assert!(added.success());
    // A stale step cgroup in the pids hierarchy, where this process's cgroup is.
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let pids_path = own
        .lines()
        .find_map(|line| line.split_once(":pids:").map(|(_, path)| path.to_owned()));
    let stale_cgroup = pids_path.map(|path| {
        let dir = std::path::Path::new("/sys/fs/cgroup/pids")
            .join(path.trim_start_matches('/'))
            .join(runner.instance())
            .join("stale-step");
        std::fs::create_dir(&dir).unwrap();
        dir
    });
    let runner = runner.restart();
    let links = std::process::Command::new("ip")
        .args(["-o", "link", "show"])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&links.stdout).contains(&stale),
        "the stale veth survived"
    );
    if let Some(dir) = stale_cgroup {
        assert!(!dir.exists(), "the stale cgroup survived");
    }
    runner.finish();
}

#[tokio::test]
async fn the_helpers_death_kills_the_sandbox() {
    let Some(runner) = TestRunner::start("helper death") else {
        return;
    };
    let workspace = runner.workspace();
    let spec = runner.spec(
        StepKind::Build {
            workspace: workspace.path().to_owned(),
            cache: None,
        },
        "setsid sleep 300 & sleep 300",
    );
    let mut running = runner.runner.spawn(spec).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while support::processes_of(runner.project_uid).len() < 3
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // kill() sends SIGKILL to the helper only; the init's parent-death signal does the rest.
    running.kill();
    let exit = tokio::time::timeout(Duration::from_secs(10), running.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(exit, Exit::Signal(9));
    assert!(support::no_processes_of(runner.project_uid, Duration::from_secs(5)).await);
    runner.finish();
}

#[tokio::test]
async fn a_sandbox_that_cannot_be_built_says_why() {
    let Some(runner) = TestRunner::start("setup failure") else {
        return;
    };
    let missing = std::path::PathBuf::from("/nonexistent/slipway-workspace");
    let spec = runner.spec(
        StepKind::Build {
            workspace: missing,
            cache: None,
        },
        "echo never",
    );
    let finished = run(&runner, spec, Duration::from_secs(20)).await;
    assert_eq!(finished.exit, Exit::Code(125));
    assert!(
        finished.stderr.contains("slipway sandbox:") && finished.stderr.contains("/nonexistent"),
        "{}",
        finished.stderr
    );
    assert_eq!(finished.stdout, "");
    runner.finish();
}

#[tokio::test]
async fn mode_none_still_runs_steps_without_isolation() {
    use slipway::config::{SandboxConfig, SandboxMode};
    let config = SandboxConfig {
        mode: SandboxMode::None,
        uid_base: 200_000,
        subnet: (std::net::Ipv4Addr::new(10, 213, 0, 0), 16),
        pass_env: Vec::new(),
        instance: "slipway".into(),
        allow_smtp: false,
    };
    let sandbox = slipway::sandbox::Sandbox::start(
        &config,
        env!("CARGO_BIN_EXE_slipway").into(),
        std::env::temp_dir(),
        &[],
    )
    .unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let spec = slipway::sandbox::StepSpec {
        name: "none-step".into(),
        kind: StepKind::Build {
            workspace: workspace.path().to_owned(),
            cache: None,
        },
        command: "echo plain; pwd".into(),
        env: Vec::new(),
        project_uid: 0,
        memory_mb: 64,
        pids: 32,
        cpus: 1.0,
        stop_grace: Duration::from_secs(1),
        limited_dirs: Vec::new(),
        tty: None,
        reach: Vec::new(),
        serve_port: None,
        link: None,
    };
    let running = sandbox.spawn(spec).unwrap();
    let finished = support::finish_step(running, Duration::from_secs(10)).await;
    assert_eq!(finished.exit, Exit::Code(0));
    assert!(finished.stdout.starts_with("plain\n"));
    sandbox.shutdown();
}

/// No swap past the memory limit and no core dumps: the running step's own cgroup has
/// `memory.swap.max` 0 (v2) or `memory.memsw.limit_in_bytes` equal to its memory limit (v1),
/// and the build's core file size limit is 0.
#[tokio::test]
async fn a_step_can_neither_swap_nor_dump_core() {
    let Some(runner) = TestRunner::start("swap") else {
        return;
    };
    let workspace = runner.workspace();
    let mut running = runner
        .runner
        .spawn(runner.spec(
            StepKind::Build {
                workspace: workspace.path().to_owned(),
                cache: None,
            },
            "grep -i 'core file size' /proc/self/limits; sleep 30",
        ))
        .unwrap();
    let mut lines = Lines::new(running.stdout.take().unwrap());
    let core = lines
        .next(Duration::from_secs(20))
        .await
        .unwrap_or_default();
    let numbers: Vec<&str> = core
        .split_whitespace()
        .filter(|word| word.parse::<u64>().is_ok())
        .collect();
    assert_eq!(numbers, ["0", "0"], "soft and hard core limits: {core}");

    let swap_file = match runner.runner.cgroup_version() {
        2 => "memory.swap.max",
        _ => "memory.memsw.limit_in_bytes",
    };
    let steps: Vec<std::path::PathBuf> =
        find_dirs_named(std::path::Path::new("/sys/fs/cgroup"), runner.instance(), 4)
            .into_iter()
            .flat_map(|dir| std::fs::read_dir(dir).into_iter().flatten().flatten())
            .map(|entry| entry.path())
            .filter(|step| step.join(swap_file).exists())
            .collect();
    match steps.as_slice() {
        [] => eprintln!("SKIP swap: this kernel does not account swap ({swap_file} absent)"),
        [step] => {
            let swap = std::fs::read_to_string(step.join(swap_file)).unwrap();
            let expected = match runner.runner.cgroup_version() {
                2 => "0".to_owned(),
                _ => std::fs::read_to_string(step.join("memory.limit_in_bytes")).unwrap(),
            };
            eprintln!("{}: {}", step.join(swap_file).display(), swap.trim());
            assert_eq!(swap.trim(), expected.trim(), "{}", step.display());
        }
        more => panic!("more than one step cgroup: {more:?}"),
    }
    running.stop(Duration::from_millis(200)).await.unwrap();
    drop(running);
    runner.finish();
}
