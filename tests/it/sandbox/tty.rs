//! A step under a pseudo-terminal (`StepSpec::tty`): the command sees a terminal of the
//! given size on stdin, stdout and stderr, answers what is typed into the master, sees a
//! resize, is interrupted by ^C (the line discipline signals its foreground group), and
//! cannot type into its own terminal (TIOCSTI stays refused by seccomp). The same in mode
//! none. Namespaced tests skip with a printed reason without root.

use std::time::{Duration, Instant};

use slipway::sandbox::direct::DirectRunner;
use slipway::sandbox::{Exit, Runner, Running, StepKind, StepSpec, Terminal, TtySize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::support::TestRunner;

const SIZE: TtySize = TtySize { cols: 80, rows: 24 };

/// Also checks that the daemon's end of the terminal did not leak into the step.
const ANSWERS: &str = "stty size; read line; echo \"got:$line\"; test -t 0 && echo isatty; \
     readlink /proc/$$/fd/* | grep ptmx || echo no-master";

/// Everything read so far from a terminal, and more on demand.
struct Screen<'a> {
    terminal: &'a Terminal,
    text: String,
}

impl<'a> Screen<'a> {
    fn new(terminal: &'a Terminal) -> Screen<'a> {
        Screen {
            terminal,
            text: String::new(),
        }
    }

    /// Reads until `needle` was seen (true) or the output ended or `within` passed (false).
    async fn until(&mut self, needle: &str, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        let mut buffer = [0u8; 4096];
        while !self.text.contains(needle) {
            let mut reader = self.terminal;
            match tokio::time::timeout_at(deadline, reader.read(&mut buffer)).await {
                Ok(Ok(0)) | Err(_) => return false,
                Ok(Ok(count)) => self.text += &String::from_utf8_lossy(&buffer[..count]),
                Ok(Err(error)) => panic!("reading the terminal: {error}"),
            }
        }
        true
    }

    /// Reads to the end of the output (every slave holder gone), bounded by `within`.
    async fn read_to_end(&mut self, within: Duration) {
        let ended = self.until("\u{0}never\u{0}", within).await;
        assert!(!ended);
    }

    async fn type_in(&self, input: &[u8]) {
        let mut writer = self.terminal;
        writer.write_all(input).await.unwrap();
    }
}

fn build_spec(runner: &TestRunner, workspace: &tempfile::TempDir, command: &str) -> StepSpec {
    let mut spec = runner.spec(
        StepKind::Build {
            workspace: workspace.path().to_owned(),
            cache: None,
        },
        command,
    );
    spec.tty = Some(SIZE);
    spec
}

async fn wait(running: &mut Running, within: Duration) -> Exit {
    tokio::time::timeout(within, running.wait())
        .await
        .expect("the step did not end in time")
        .unwrap()
}

/// Types a line into [`ANSWERS`] and checks what it printed; shared by both modes.
async fn answers_typed_input(mut running: Running, also: &[&str]) {
    assert!(running.stdout.is_none() && running.stderr.is_none());
    let terminal = running.tty.take().expect("a step spawned with tty has one");
    let mut screen = Screen::new(&terminal);
    assert!(
        screen.until("24 80", Duration::from_secs(20)).await,
        "no size: {:?}",
        screen.text
    );
    screen.type_in(b"hello\n").await;
    screen.read_to_end(Duration::from_secs(10)).await;
    eprintln!("terminal:\n{}", screen.text);
    assert!(screen.text.contains("got:hello"), "{:?}", screen.text);
    assert!(screen.text.contains("isatty"), "{:?}", screen.text);
    for expected in ["no-master"].iter().chain(also) {
        assert!(
            screen.text.contains(expected),
            "{expected}: {:?}",
            screen.text
        );
    }
    assert_eq!(
        wait(&mut running, Duration::from_secs(10)).await,
        Exit::Code(0)
    );
}

#[tokio::test]
async fn tty_a_step_sees_its_terminal_and_answers_typed_input() {
    let Some(runner) = TestRunner::start("tty input") else {
        return;
    };
    let workspace = runner.workspace();
    // No terminal of the host's can be opened inside: no /dev/pts, /dev/ptmx or /dev/tty.
    let command = format!(
        "{ANSWERS}; ls /dev/pts /dev/ptmx /dev/tty >/dev/null 2>&1 || echo no-host-terminals"
    );
    let running = runner
        .runner
        .spawn(build_spec(&runner, &workspace, &command))
        .unwrap();
    answers_typed_input(running, &["no-host-terminals"]).await;
    runner.finish();
}

#[tokio::test]
async fn tty_a_sandbox_that_cannot_be_built_says_why_on_its_terminal() {
    let Some(runner) = TestRunner::start("tty setup failure") else {
        return;
    };
    let mut spec = runner.spec(
        StepKind::Build {
            workspace: "/nonexistent/slipway-workspace".into(),
            cache: None,
        },
        "echo never",
    );
    spec.tty = Some(SIZE);
    let mut running = runner.runner.spawn(spec).unwrap();
    let terminal = running.tty.take().unwrap();
    let mut screen = Screen::new(&terminal);
    screen.read_to_end(Duration::from_secs(20)).await;
    assert!(
        screen.text.contains("slipway sandbox:") && screen.text.contains("/nonexistent"),
        "{:?}",
        screen.text
    );
    assert_eq!(
        wait(&mut running, Duration::from_secs(10)).await,
        Exit::Code(125)
    );
    runner.finish();
}

#[tokio::test]
async fn tty_a_resize_reaches_the_running_step() {
    let Some(runner) = TestRunner::start("tty resize") else {
        return;
    };
    let workspace = runner.workspace();
    let command = "echo ready; read line; stty size";
    let mut running = runner
        .runner
        .spawn(build_spec(&runner, &workspace, command))
        .unwrap();
    let terminal = running.tty.take().unwrap();
    let mut screen = Screen::new(&terminal);
    assert!(screen.until("ready", Duration::from_secs(20)).await);
    terminal
        .resize(TtySize {
            cols: 120,
            rows: 40,
        })
        .unwrap();
    screen.type_in(b"go\n").await;
    screen.read_to_end(Duration::from_secs(10)).await;
    assert!(screen.text.contains("40 120"), "{:?}", screen.text);
    assert_eq!(
        wait(&mut running, Duration::from_secs(10)).await,
        Exit::Code(0)
    );

    // The foreground group gets SIGWINCH.
    let command = "trap 'echo winched; exit 0' WINCH; echo ready; while :; do sleep 0.1; done";
    let mut running = runner
        .runner
        .spawn(build_spec(&runner, &workspace, command))
        .unwrap();
    let terminal = running.tty.take().unwrap();
    let mut screen = Screen::new(&terminal);
    assert!(screen.until("ready", Duration::from_secs(20)).await);
    terminal
        .resize(TtySize {
            cols: 100,
            rows: 30,
        })
        .unwrap();
    assert!(
        screen.until("winched", Duration::from_secs(5)).await,
        "no SIGWINCH: {:?}",
        screen.text
    );
    assert_eq!(
        wait(&mut running, Duration::from_secs(10)).await,
        Exit::Code(0)
    );
    runner.finish();
}

/// TIOCSTI on its own terminal: seccomp answers EPERM (a kernel that refuses legacy
/// TIOCSTI would answer EIO, so EPERM is the filter's).
#[tokio::test]
async fn tty_tiocsti_on_its_own_terminal_is_refused() {
    let Some(runner) = TestRunner::start("tty tiocsti") else {
        return;
    };
    if !std::path::Path::new("/usr/bin/python3").exists() {
        eprintln!("SKIP tty tiocsti: no /usr/bin/python3 for the sandbox's /usr");
        runner.finish();
        return;
    }
    let workspace = runner.workspace();
    let command = "echo ready; /usr/bin/python3 -c 'import fcntl, termios\n\
         try:\n    fcntl.ioctl(0, termios.TIOCSTI, b\"x\")\n\
         except OSError as error:\n    print(\"refused\", error.errno)\n    raise SystemExit(3)\n\
         print(\"typed\")'";
    let mut running = runner
        .runner
        .spawn(build_spec(&runner, &workspace, command))
        .unwrap();
    let terminal = running.tty.take().unwrap();
    let mut screen = Screen::new(&terminal);
    screen.read_to_end(Duration::from_secs(20)).await;
    eprintln!("terminal:\n{}", screen.text);
    assert!(
        screen.text.contains(&format!("refused {}", libc::EPERM)),
        "{:?}",
        screen.text
    );
    assert!(!screen.text.contains("typed"));
    assert_eq!(
        wait(&mut running, Duration::from_secs(10)).await,
        Exit::Code(3)
    );
    runner.finish();
}

/// Waits (bounded) until a process runs `argv`: it has executed it (a forked shell not yet
/// there still shows the shell's command line, and still catches SIGINT the shell's way).
async fn process_runs(argv: &[&str], within: Duration) -> bool {
    let wanted: Vec<u8> = argv
        .iter()
        .flat_map(|arg| [arg.as_bytes(), b"\0"].concat())
        .collect();
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        let entries = std::fs::read_dir("/proc").unwrap().flatten();
        if entries
            .filter_map(|entry| std::fs::read(entry.path().join("cmdline")).ok())
            .any(|cmdline| cmdline == wanted)
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// ^C typed into the terminal: SIGINT to the foreground group, the step (`sh -c 'sleep
/// <seconds>'`, each test its own number) ends by it at once.
async fn interrupted_by_control_c(mut running: Running, seconds: &str) {
    let terminal = running.tty.take().unwrap();
    let mut screen = Screen::new(&terminal);
    assert!(screen.until("ready", Duration::from_secs(20)).await);
    // dash catches SIGINT until it has executed `sleep`: typed earlier, ^C would end only
    // the shell, once the sleep is over.
    assert!(process_runs(&["sleep", seconds], Duration::from_secs(10)).await);
    let typed = Instant::now();
    screen.type_in(b"\x03").await;
    let exit = wait(&mut running, Duration::from_secs(5)).await;
    eprintln!("^C ended the step in {:?}: {exit:?}", typed.elapsed());
    assert_eq!(exit, Exit::Signal(libc::SIGINT));
}

#[tokio::test]
async fn tty_control_c_interrupts_the_step() {
    let Some(runner) = TestRunner::start("tty ^C") else {
        return;
    };
    let workspace = runner.workspace();
    let running = runner
        .runner
        .spawn(build_spec(&runner, &workspace, "echo ready; sleep 30"))
        .unwrap();
    interrupted_by_control_c(running, "30").await;
    assert!(super::support::no_processes_of(runner.project_uid, Duration::from_secs(5)).await);
    runner.finish();
}

/// Mode none: the same terminal, without a sandbox (no root needed).
#[tokio::test]
async fn tty_mode_none_runs_a_step_under_a_terminal_too() {
    let workspace = tempfile::tempdir().unwrap();
    let spec = |command: &str| StepSpec {
        name: "none-tty".into(),
        kind: StepKind::Build {
            workspace: workspace.path().to_owned(),
            cache: None,
        },
        command: command.into(),
        env: Vec::new(),
        project_uid: 0,
        memory_mb: 64,
        pids: 32,
        cpus: 1.0,
        stop_grace: Duration::from_secs(1),
        limited_dirs: Vec::new(),
        tty: Some(SIZE),
        reach: Vec::new(),
        serve_port: None,
        link: None,
    };
    answers_typed_input(DirectRunner.spawn(spec(ANSWERS)).unwrap(), &[]).await;
    let running = DirectRunner.spawn(spec("echo ready; sleep 31")).unwrap();
    interrupted_by_control_c(running, "31").await;
}

/// An app never gets a terminal: it outlives the daemon that would hold the master.
#[tokio::test]
async fn tty_is_refused_for_an_app() {
    let output = tempfile::tempdir().unwrap();
    let spec = StepSpec {
        name: "none-tty-app".into(),
        kind: StepKind::App {
            output: output.path().to_owned(),
            data_dir: output.path().join("data"),
        },
        command: "true".into(),
        env: Vec::new(),
        project_uid: 0,
        memory_mb: 64,
        pids: 32,
        cpus: 1.0,
        stop_grace: Duration::from_secs(1),
        limited_dirs: Vec::new(),
        tty: Some(SIZE),
        reach: Vec::new(),
        serve_port: None,
        link: None,
    };
    let error = DirectRunner.spawn(spec).err().expect("refused");
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
}
