//! Builds that attack the machine: reading the store, another project's workspace and
//! `/root`, writing system directories, fork and memory bombs. Each must fail inside the
//! sandbox while the build itself reports its own result cleanly.

use std::time::{Duration, Instant};

use serde_json::json;

use super::Sandboxed;

#[tokio::test]
async fn a_build_cannot_read_the_store_other_projects_or_root_nor_write_system_dirs() {
    let Some(sandboxed) = Sandboxed::start("confinement", "") else {
        return;
    };
    let daemon = &sandboxed.daemon;
    // Another project first: its workspace holds a secret.
    let victim = daemon
        .deploy(
            "victim",
            &[("secret.txt", "victim-secret-5f3a", 0o644)],
            json!({"buildCommand": "mkdir -p dist && echo victim > dist/index.html"}),
        )
        .await;
    let data = daemon.data_dir();
    let victim_file = data
        .join("deployments")
        .join(victim["deploymentId"].as_str().unwrap())
        .join("app/secret.txt");
    let targets = [
        data.join("slipway.redb"),
        data.join("secret.key"),
        data.join("initial-admin-token"),
        victim_file.clone(),
        "/root/.bashrc".into(),
    ];
    for target in &targets {
        assert!(target.exists(), "{} exists on the host", target.display());
    }
    let marker = format!("slipway-pwned-{}", std::process::id());
    let mut attempts: Vec<String> = targets
        .iter()
        .map(|target| format!("cat {}", target.display()))
        .collect();
    attempts.extend([
        format!("ls {}", data.display()),
        format!("ls {}", data.join("deployments").display()),
        format!("test -e {}", data.join("admin.sock").display()),
        "ls /root".into(),
        format!("touch /usr/{marker}"),
        format!("touch /usr/bin/{marker}"),
        format!("touch /etc/{marker}"),
        "echo 6.6.6.6 evil >> /etc/hosts".into(),
    ]);
    let hosts_before = std::fs::read_to_string("/etc/hosts").unwrap();
    let mut script = String::from(
        "attempt() { if sh -c \"$1\" >/dev/null 2>&1; then echo \"LEAK: $1\"; else echo \"denied: $1\"; fi; }\n",
    );
    for attempt in &attempts {
        script.push_str(&format!("attempt '{attempt}'\n"));
    }
    script.push_str("mkdir -p dist && echo attacker > dist/index.html; exit 0\n");
    let (status, logs) = sandboxed
        .run(
            "attacker",
            &[("x", "x", 0o644)],
            json!({"buildCommand": script, "installCommand": ""}),
            Duration::from_secs(60),
        )
        .await;
    eprintln!("{logs}");
    assert_eq!(
        status["status"], "provisioning_complete",
        "{status}\n{logs}"
    );
    assert!(
        !logs.contains("[build] LEAK"),
        "an attempt succeeded:\n{logs}"
    );
    assert_eq!(
        logs.matches("[build] denied: ").count(),
        attempts.len(),
        "every attempt reported:\n{logs}"
    );
    let token = std::fs::read_to_string(data.join("initial-admin-token")).unwrap();
    assert!(!logs.contains(token.trim()) && !logs.contains("victim-secret-5f3a"));
    for dir in ["/usr", "/usr/bin", "/etc"] {
        assert!(!std::path::Path::new(dir).join(&marker).exists());
    }
    assert_eq!(std::fs::read_to_string("/etc/hosts").unwrap(), hosts_before);
    assert_eq!(
        daemon.app_get("attacker", "/", &[]).await.text(),
        "attacker\n"
    );

    // The build's own failure comes through as it is.
    let (status, logs) = sandboxed
        .run(
            "attacker",
            &[("x", "x", 0o644)],
            json!({"buildCommand": "echo compiling; exit 3"}),
            Duration::from_secs(60),
        )
        .await;
    assert_eq!(status["status"], "provisioning_failed", "{status}");
    assert_eq!(status["error"]["code"], "BUILD_FAILED");
    let message = status["error"]["message"].as_str().unwrap();
    assert!(message.contains("exited with code 3"), "{message}");
    assert!(logs.contains("[build] compiling"), "{logs}");
}

/// Bombs are bounded by small limits; each must end as BUILD_FAILED naming the limit, well
/// within the build timeout, and leave no process behind.
#[tokio::test]
async fn fork_and_memory_bombs_fail_the_build_and_leave_nothing_behind() {
    let Some(sandboxed) = Sandboxed::start(
        "bombs",
        "[limits]\npids = 64\nbuild_memory_mb = 128\nbuild_timeout_s = 60\n",
    ) else {
        return;
    };
    let cases = [
        (
            "a loop that forks until it cannot",
            "while true; do sleep 100 & done",
            "process limit",
        ),
        (
            "the classic fork bomb",
            "bomb() { bomb | bomb & }; bomb; sleep 5; echo survived",
            // 64 shells of a busy machine can reach 128 MiB before the 64th fork: either
            // limit stops it.
            "limit",
        ),
        (
            "a pipeline that buffers 1 GiB",
            "head -c 1024m /dev/zero | tail > /dev/null",
            "memory limit",
        ),
        (
            "a node heap that grows without end",
            "node -e 'const a = []; for (;;) a.push(Buffer.alloc(1 << 20, 1))'",
            "memory limit",
        ),
        (
            "a tmpfs /tmp filled with 1 GiB",
            "head -c 1024m /dev/zero > /tmp/fill",
            "memory limit",
        ),
    ];
    for (what, command, limit) in cases {
        let started = Instant::now();
        let (status, logs) = sandboxed
            .run(
                "bombs",
                &[("x", "x", 0o644)],
                json!({"buildCommand": command, "installCommand": ""}),
                Duration::from_secs(90),
            )
            .await;
        let elapsed = started.elapsed();
        eprintln!("{what}: {status} after {elapsed:?}");
        assert_eq!(
            status["status"], "provisioning_failed",
            "{what}: {status}\n{logs}"
        );
        assert_eq!(status["error"]["code"], "BUILD_FAILED", "{what}: {status}");
        let message = status["error"]["message"].as_str().unwrap();
        assert!(message.contains(limit), "{what}: {message}");
        assert!(
            elapsed < Duration::from_secs(60),
            "{what} took {elapsed:?}, past the build timeout"
        );
        sandboxed.assert_no_project_processes(what);
        assert_eq!(sandboxed.healthz().await, 200, "after {what}");
    }
}

/// The daemon reads a static build's output as root: a build that points the output (or a
/// file in it) at the host with a symlink must not get the host's files published.
#[tokio::test]
async fn a_static_build_cannot_publish_host_files_through_symlinks() {
    let Some(sandboxed) = Sandboxed::start("symlinked output", "") else {
        return;
    };
    let daemon = &sandboxed.daemon;
    let data = daemon.data_dir();
    let key = std::fs::read(data.join("secret.key")).unwrap();
    let token = std::fs::read_to_string(data.join("initial-admin-token")).unwrap();
    let links = format!(
        "ln -s {data} store && ln -s {parent} up && mkdir -p dist && echo ok > dist/index.html \
         && ln -s {data}/secret.key dist/key && ln -s /etc/passwd dist/passwd",
        data = data.display(),
        parent = data.parent().unwrap().display(),
    );
    for output in ["store", "up/data", "./store"] {
        let (status, logs) = sandboxed
            .run(
                "linker",
                &[("x", "x", 0o644)],
                json!({"buildCommand": links, "outputDirectory": output}),
                Duration::from_secs(60),
            )
            .await;
        for path in ["/secret.key", "/initial-admin-token", "/slipway.redb"] {
            let response = daemon.app_get("linker", path, &[]).await;
            assert!(
                response.status != 200
                    && response.body.as_ref() != key.as_slice()
                    && !response.text().contains(token.trim()),
                "outputDirectory {output:?} published {path}: {status}\n{logs}"
            );
        }
        assert_eq!(
            status["status"], "provisioning_failed",
            "{output}: {status}"
        );
        assert_eq!(status["failedStep"], "deploy", "{status}");
        let message = status["error"]["message"].as_str().unwrap();
        assert!(message.contains("symbolic link"), "{message}");
    }
    // Without outputDirectory `dist` is chosen; its links out are skipped.
    let (status, logs) = sandboxed
        .run(
            "linker",
            &[("x", "x", 0o644)],
            json!({"buildCommand": links}),
            Duration::from_secs(60),
        )
        .await;
    assert_eq!(
        status["status"], "provisioning_complete",
        "{status}\n{logs}"
    );
    assert_eq!(daemon.app_get("linker", "/", &[]).await.text(), "ok\n");
    // The links are not served: the paths get what any unknown path gets (the site has no
    // 404.html, so the single-page fallback: its index.html), never the files behind them.
    for path in ["/key", "/passwd"] {
        let response = daemon.app_get("linker", path, &[]).await;
        assert_eq!(response.text(), "ok\n", "{path}");
        assert!(response.body.as_ref() != key.as_slice(), "{path}");
    }
}

/// Builds the daemon stops (the timeout, a newer run) take every process with them, even one
/// that ignores SIGTERM and one in a session of its own.
#[tokio::test]
async fn stopped_builds_leave_nothing_behind() {
    let Some(sandboxed) = Sandboxed::start("stopped builds", "[limits]\nbuild_timeout_s = 3\n")
    else {
        return;
    };
    let started = Instant::now();
    let (status, logs) = sandboxed
        .run(
            "stubborn",
            &[("x", "x", 0o644)],
            json!({"buildCommand": "trap '' TERM; setsid sleep 100 & echo waiting; sleep 100"}),
            Duration::from_secs(30),
        )
        .await;
    assert_eq!(status["error"]["code"], "TIMEOUT", "{status}\n{logs}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    sandboxed.assert_no_project_processes("the timeout");

    let daemon = &sandboxed.daemon;
    let older = daemon
        .provision(
            "stubborn",
            json!({"buildCommand": "trap '' TERM; setsid sleep 100 & sleep 2.5"}),
        )
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let newer = daemon
        .provision(
            "stubborn",
            json!({"buildCommand": "mkdir -p dist && echo new > dist/index.html"}),
        )
        .await;
    let older = daemon
        .wait_run(
            older["provisioningId"].as_str().unwrap(),
            Duration::from_secs(20),
        )
        .await;
    assert_eq!(older["status"], "provisioning_canceled", "{older}");
    let newer = daemon
        .wait_run(
            newer["provisioningId"].as_str().unwrap(),
            Duration::from_secs(20),
        )
        .await;
    assert_eq!(newer["status"], "provisioning_complete", "{newer}");
    sandboxed.assert_no_project_processes("the newer run");
    assert_eq!(daemon.app_get("stubborn", "/", &[]).await.text(), "new\n");
}

/// A build cannot reach a terminal (no `/dev/tty`, no controlling terminal: TIOCSTI has
/// nothing to type into) and cannot dump core to the host's handler.
#[tokio::test]
async fn a_build_has_no_terminal_and_no_core_dumps() {
    let Some(sandboxed) = Sandboxed::start("terminal", "") else {
        return;
    };
    let script = r#"test -e /dev/tty && echo 'LEAK: /dev/tty exists'
(exec 3<>/dev/tty) 2>/dev/null && echo 'LEAK: /dev/tty opens'
python3 - <<'PY' 2>&1 || true
import fcntl, termios
for fd in (0, 1, 2):
    try:
        fcntl.ioctl(fd, termios.TIOCSTI, b"x")
        print("LEAK: TIOCSTI on fd", fd)
    except OSError:
        pass
PY
grep -i 'core file size' /proc/self/limits
echo done-checking
mkdir -p dist && echo ok > dist/index.html"#;
    let (status, logs) = sandboxed
        .run(
            "terminal",
            &[("x", "x", 0o644)],
            json!({"buildCommand": script, "installCommand": ""}),
            Duration::from_secs(60),
        )
        .await;
    assert_eq!(
        status["status"], "provisioning_complete",
        "{status}\n{logs}"
    );
    // Only the build's own output counts (the system line echoes the script).
    let output: Vec<&str> = logs.lines().filter(|l| l.starts_with("[build]")).collect();
    assert!(output.iter().any(|l| l.contains("done-checking")), "{logs}");
    assert!(!output.iter().any(|l| l.contains("LEAK")), "{logs}");
    let core = output
        .iter()
        .find(|line| line.to_ascii_lowercase().contains("core file size"))
        .unwrap_or_else(|| panic!("no core limit line: {logs}"));
    let numbers: Vec<&str> = core
        .split_whitespace()
        .filter(|w| w.parse::<u64>().is_ok())
        .collect();
    assert_eq!(numbers, ["0", "0"], "soft and hard core limits: {core}");
}

/// Syscalls a build must not make (x86_64 numbers): each answers EPERM, and the x32 ABI kills
/// the process.
#[cfg(target_arch = "x86_64")]
#[tokio::test]
async fn a_build_cannot_use_io_uring_handles_vsock_personality_or_x32() {
    let Some(sandboxed) = Sandboxed::start("syscalls", "") else {
        return;
    };
    let script = r#"python3 - <<'PY' 2>&1
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def check(name, number, *args):
    result = libc.syscall(number, *args)
    error = ctypes.get_errno()
    verdict = "denied" if result == -1 and error == errno.EPERM else "LEAK"
    print(verdict + ": " + name, result, error)
params = ctypes.create_string_buffer(120)
check("io_uring_setup", 425, 1, params)
check("kcmp", 312, os.getpid(), os.getpid(), 0, 0, 0)
check("name_to_handle_at", 303, -100, b"/", ctypes.create_string_buffer(128), ctypes.byref(ctypes.c_int()), 0)
check("fanotify_init", 300, 0, 0)
check("personality", 135, 0x0040000)
check("socket(AF_VSOCK)", 41, 40, 1, 0)
check("ioctl(TIOCSTI)", 16, 1, 0x5412, b"x")
print("checked")
PY
python3 -c 'import ctypes; ctypes.CDLL(None).syscall(0x40000000 | 39); print("LEAK: x32 getpid ran")'
echo "x32 exit=$?"
mkdir -p dist && echo ok > dist/index.html"#;
    let (status, logs) = sandboxed
        .run(
            "syscalls",
            &[("x", "x", 0o644)],
            json!({"buildCommand": script, "installCommand": ""}),
            Duration::from_secs(60),
        )
        .await;
    assert_eq!(
        status["status"], "provisioning_complete",
        "{status}\n{logs}"
    );
    let output: Vec<&str> = logs.lines().filter(|l| l.starts_with("[build]")).collect();
    assert!(output.iter().any(|l| l.contains("checked")), "{logs}");
    assert!(!output.iter().any(|l| l.contains("LEAK")), "{logs}");
    assert_eq!(
        output.iter().filter(|l| l.contains("denied:")).count(),
        7,
        "{logs}"
    );
    // SIGSYS (31): the shell reports 128 + 31.
    assert!(output.iter().any(|l| l.contains("x32 exit=159")), "{logs}");
}

/// A world-readable secret in the host's `/etc` (the example config keeps the wildcard key
/// in `/etc/slipway/`): a build sees only the allow-listed part of `/etc`, and no `/opt`.
#[tokio::test]
async fn a_build_sees_only_an_allow_list_of_etc() {
    let Some(sandboxed) = Sandboxed::start("etc", "") else {
        return;
    };
    struct Planted(Vec<std::path::PathBuf>);
    impl Drop for Planted {
        fn drop(&mut self) {
            for path in &self.0 {
                let _ = std::fs::remove_dir_all(path);
                let _ = std::fs::remove_file(path);
            }
        }
    }
    use std::os::unix::fs::PermissionsExt;
    let pid = std::process::id();
    let planted_dir = std::path::PathBuf::from(format!("/etc/slipway-test-{pid}"));
    let planted_file = std::path::PathBuf::from(format!("/etc/slipway-test-secret-{pid}"));
    let planted_opt = std::path::PathBuf::from(format!("/opt/slipway-test-{pid}"));
    let _planted = Planted(vec![
        planted_dir.clone(),
        planted_file.clone(),
        planted_opt.clone(),
    ]);
    std::fs::create_dir_all(&planted_dir).unwrap();
    let secret = planted_dir.join("wildcard.key");
    for file in [&secret, &planted_file, &planted_opt] {
        std::fs::write(file, "-----BEGIN PRIVATE KEY----- planted").unwrap();
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    std::fs::set_permissions(&planted_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = format!(
        "cat {} {} {} && echo 'LEAK: read a planted key'\n\
         find /etc /opt -readable 2>/dev/null | sed 's/^/readable: /'\n\
         git --version >/dev/null && echo git-works\n\
         mkdir -p dist && echo ok > dist/index.html",
        secret.display(),
        planted_file.display(),
        planted_opt.display()
    );
    let (status, logs) = sandboxed
        .run(
            "etc",
            &[("x", "x", 0o644)],
            json!({"buildCommand": script, "installCommand": ""}),
            Duration::from_secs(60),
        )
        .await;
    assert_eq!(
        status["status"], "provisioning_complete",
        "{status}\n{logs}"
    );
    let output: Vec<&str> = logs.lines().filter(|l| l.starts_with("[build]")).collect();
    assert!(!output.iter().any(|l| l.contains("LEAK")), "{logs}");
    assert!(output.iter().any(|l| l.contains("git-works")), "{logs}");
    let readable: Vec<&str> = output
        .iter()
        .filter_map(|line| line.split_once("readable: ").map(|(_, path)| path.trim()))
        .collect();
    assert!(readable.contains(&"/etc/passwd"), "no /etc listing: {logs}");
    eprintln!(
        "a build can read {} paths under /etc and /opt",
        readable.len()
    );
    for path in &readable {
        let allowed = *path == "/etc"
            || path.strip_prefix("/etc/").is_some_and(|rest| {
                let top = rest.split('/').next().unwrap_or(rest);
                slipway::sandbox::ETC_ALLOWED.contains(&top)
            });
        assert!(allowed, "a build can read {path}, outside the allow-list");
    }
}
