//! The namespaced sandbox, driven through the `Runner` trait: each attack is a real command
//! run as a build or an app step. Tests skip with a printed reason without root.

mod support;

use std::time::Duration;

use slipway::sandbox::{Exit, Runner, StepKind};
use support::{run, TestRunner};

#[tokio::test]
async fn inside_the_sandbox_the_build_is_uid_1000_without_privileges() {
    let Some(runner) = TestRunner::start("identity") else { return };
    let workspace = runner.workspace();
    let command = "id -u; id -g; grep -E '^(CapEff|CapBnd|CapPrm|NoNewPrivs|Seccomp):' /proc/self/status; \
                   touch /app/made-inside; hostname; pwd";
    let spec = runner.spec(StepKind::Build { workspace: workspace.path().to_owned() }, command);
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
    assert_eq!((made.uid(), made.gid()), (runner.project_uid, runner.project_uid));
    runner.finish();
}
