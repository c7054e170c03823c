//! Disk-limited directories (issue 10): the helper clones a directory the daemon says is a
//! disk-limited volume only if the tree it clones is on that filesystem; anything else fails
//! the step before its command runs, rather than letting it write past its limit.

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use slipway::sandbox::{Exit, LimitedDir, StepKind};

use super::support::{run, TestRunner};

#[tokio::test]
async fn a_workspace_off_its_limited_filesystem_is_refused() {
    let Some(runner) = TestRunner::start("limited dirs") else {
        return;
    };
    let workspace = runner.workspace();
    let path = workspace.path().to_owned();
    let device = std::fs::metadata(&path).unwrap().dev();
    let kind = StepKind::Build {
        workspace: path.clone(),
        cache: None,
    };
    let mut spec = runner.spec(kind, "touch /app/written");
    spec.limited_dirs = vec![LimitedDir {
        path: path.clone(),
        device: device ^ 1,
    }];
    let finished = run(&runner, spec.clone(), Duration::from_secs(20)).await;
    assert_eq!(finished.exit, Exit::Code(125), "{}", finished.stderr);
    assert!(
        finished
            .stderr
            .contains("is not on its disk-limited filesystem"),
        "{}",
        finished.stderr
    );
    assert!(!path.join("written").exists(), "the command never ran");

    spec.limited_dirs[0].device = device;
    let finished = run(&runner, spec, Duration::from_secs(20)).await;
    assert_eq!(finished.exit, Exit::Code(0), "{}", finished.stderr);
    assert!(path.join("written").exists());
    runner.finish();
}
