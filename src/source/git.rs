//! Git sources: validation of a provision's `gitUrl` and `gitRef`, and the shell command the
//! pipeline's `source` step runs inside the build sandbox (in the empty workspace) to clone
//! them with the system `git`. Called by the provision handler (to refuse a bad URL with 400
//! before a run starts) and by the pipeline.
//!
//! Accepted URLs: `https://`, `http://`, `git://`, `ssh://` and the scp-like `user@host:path`.
//! Refused: transport helpers (`ext::`, `fd::`, anything with `::`), `file://` and every other
//! scheme, a leading `-` (option injection), a host starting with `-` (ssh option injection),
//! whitespace and control characters. The command also restricts git's protocols itself, so a
//! redirect or a submodule cannot reach `ext::` or a local path either.

use super::SourceError;

/// The longest URL accepted.
const MAX_URL_LEN: usize = 2048;
/// The longest ref accepted.
const MAX_REF_LEN: usize = 255;

/// Options given to every git invocation: an allow-list of network protocols, no hooks, no
/// detached-HEAD advice.
const GIT_OPTIONS: &str = "-c protocol.allow=never -c protocol.https.allow=always \
     -c protocol.http.allow=always -c protocol.git.allow=always -c protocol.ssh.allow=always \
     -c protocol.ext.allow=never -c protocol.file.allow=never -c core.hooksPath=/dev/null \
     -c advice.detachedHead=false -c init.defaultBranch=main";

/// Returns the POSIX shell command that clones `url` at `git_ref` (a branch or tag; a full
/// 40- or 64-hex commit id; `None` or empty for the remote's default branch) into the current
/// directory, which must be empty, with a history depth of 1.
/// Splits the credentials out of an `http(s)://user:token@host/…` URL: the URL without them
/// (what logs, records and git's command line show) and `user:token` (handed to git through
/// its environment, never its arguments). Other URLs come back as they are.
pub fn split_credentials(url: &str) -> (String, Option<String>) {
    let Some((scheme, rest)) = url.split_once("://") else {
        return (url.to_owned(), None);
    };
    if !matches!(scheme, "https" | "http") {
        return (url.to_owned(), None);
    }
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some((userinfo, host)) = rest[..authority_end].rsplit_once('@') else {
        return (url.to_owned(), None);
    };
    let redacted = format!("{scheme}://{host}{}", &rest[authority_end..]);
    let decoded = crate::http_util::percent_decode(userinfo.as_bytes())
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .unwrap_or_else(|| userinfo.to_owned());
    (redacted, Some(decoded))
}

/// The environment that hands `user:token` to git as an HTTP `Authorization` header
/// (`GIT_CONFIG_*`), so that it never appears in a process list or a log.
pub fn credential_env(credentials: &str) -> Vec<(String, String)> {
    vec![
        ("GIT_CONFIG_COUNT".into(), "1".into()),
        ("GIT_CONFIG_KEY_0".into(), "http.extraHeader".into()),
        (
            "GIT_CONFIG_VALUE_0".into(),
            format!(
                "Authorization: Basic {}",
                crate::ids::base64(credentials.as_bytes())
            ),
        ),
    ]
}

pub fn git_clone_command(url: &str, git_ref: Option<&str>) -> Result<String, SourceError> {
    check_url(url)?;
    let git_ref = git_ref.filter(|git_ref| !git_ref.is_empty());
    if let Some(git_ref) = git_ref {
        check_ref(git_ref)?;
    }
    let url = shell_quote(url);
    let prefix = "export GIT_TERMINAL_PROMPT=0 &&";
    let command = match git_ref {
        Some(commit) if is_commit_id(commit) => format!(
            "{prefix} git {GIT_OPTIONS} init --quiet . && \
             git {GIT_OPTIONS} fetch --quiet --depth 1 -- {url} {} && \
             git {GIT_OPTIONS} checkout --quiet FETCH_HEAD",
            shell_quote(commit)
        ),
        Some(branch_or_tag) => format!(
            "{prefix} git {GIT_OPTIONS} clone --quiet --depth 1 --branch {} -- {url} .",
            shell_quote(branch_or_tag)
        ),
        None => format!("{prefix} git {GIT_OPTIONS} clone --quiet --depth 1 -- {url} ."),
    };
    Ok(command)
}

pub fn check_url(url: &str) -> Result<(), SourceError> {
    let refuse = |reason: &str| Err(SourceError::InvalidGitUrl(format!("gitUrl {reason}")));
    if url.is_empty() {
        return refuse("is empty");
    }
    // Characters, as the OpenAPI document's maxLength counts.
    if url.chars().count() > MAX_URL_LEN {
        return refuse("is longer than 2048 characters");
    }
    if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return refuse("contains whitespace or control characters");
    }
    if url.starts_with('-') {
        return refuse("starts with '-'");
    }
    if url.contains("::") {
        return refuse("names a git transport helper (such as ext::), which is not allowed");
    }
    if let Some((scheme, rest)) = url.split_once("://") {
        if !matches!(scheme, "https" | "http" | "git" | "ssh") {
            return refuse(&format!(
                "uses the scheme '{scheme}'; only https, http, git and ssh are allowed"
            ));
        }
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let host = authority
            .rsplit_once('@')
            .map_or(authority, |(_, host)| host);
        if host.is_empty() || host.starts_with('-') {
            return refuse("has no usable host");
        }
        if path.is_empty() {
            return refuse("names no repository path");
        }
        return Ok(());
    }
    // The scp-like form `user@host:path`, with no slash before the colon.
    let Some((user_host, path)) = url.split_once(':') else {
        return refuse("is not an https://, http://, git://, ssh:// or user@host:path URL");
    };
    let Some((user, host)) = user_host.split_once('@') else {
        return refuse("is not an https://, http://, git://, ssh:// or user@host:path URL");
    };
    let user_ok = !user.is_empty()
        && user
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    let host_ok = !host.is_empty()
        && !host.starts_with('-')
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-'));
    if !user_ok || !host_ok {
        return refuse("has no usable user@host before ':'");
    }
    if path.is_empty() || path.starts_with('-') {
        return refuse("names no usable repository path after ':'");
    }
    Ok(())
}

pub fn check_ref(git_ref: &str) -> Result<(), SourceError> {
    let refuse = |reason: &str| Err(SourceError::InvalidGitRef(format!("gitRef {reason}")));
    if git_ref.chars().count() > MAX_REF_LEN {
        return refuse("is longer than 255 characters");
    }
    let allowed =
        |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'/' | b'+' | b'-');
    if !git_ref.bytes().all(allowed) {
        return refuse("may only hold letters, digits and . _ / + -");
    }
    if git_ref.starts_with(['-', '/', '.']) || git_ref.ends_with(['/', '.']) {
        return refuse("may not start with '-', '/' or '.', nor end with '/' or '.'");
    }
    if git_ref.contains("..") || git_ref.contains("//") || git_ref.ends_with(".lock") {
        return refuse("is not a valid branch, tag or commit name");
    }
    Ok(())
}

/// A full commit id: 40 hex digits (SHA-1) or 64 (SHA-256).
fn is_commit_id(git_ref: &str) -> bool {
    matches!(git_ref.len(), 40 | 64) && git_ref.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Quotes `text` as one POSIX shell word.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    //! Validation tables, and real clones from a bare repository served by `git daemon
    //! --inetd` behind a listener on 127.0.0.1 port 0 (one daemon process per connection).

    use std::net::TcpListener;
    use std::os::fd::OwnedFd;
    use std::path::{Path, PathBuf};
    use std::process::{Child, Command, Output, Stdio};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::thread::JoinHandle;
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn credentials_are_split_out_of_https_urls_only() {
        assert_eq!(
            split_credentials("https://ci:s3cr%40t@git.example.com/team/app.git"),
            (
                "https://git.example.com/team/app.git".to_owned(),
                Some("ci:s3cr@t".to_owned())
            )
        );
        assert_eq!(
            split_credentials("https://git.example.com/a@b.git"),
            ("https://git.example.com/a@b.git".to_owned(), None)
        );
        for url in ["ssh://git@example.com/app.git", "git@example.com:app.git"] {
            assert_eq!(split_credentials(url), (url.to_owned(), None));
        }
        let env = credential_env("ci:token");
        assert!(env.iter().any(|(k, v)| k == "GIT_CONFIG_VALUE_0"
            && v == &format!("Authorization: Basic {}", crate::ids::base64(b"ci:token"))));
    }

    #[test]
    fn urls_are_validated() {
        let accepted = [
            "https://github.com/acme/app.git",
            "http://git.example.com:8080/team/app",
            "git://example.com/app.git",
            "ssh://git@example.com:2222/acme/app.git",
            "git@github.com:acme/app.git",
            "deploy.user@git.example.com:repos/app",
        ];
        for url in accepted {
            git_clone_command(url, None).unwrap_or_else(|error| panic!("{url}: {error}"));
        }
        let refused = [
            ("", "is empty"),
            ("ext::sh -c touch% /tmp/pwned", "whitespace"),
            ("ext::sh%20-c%20id", "transport helper"),
            ("fd::7", "transport helper"),
            ("file:///etc", "scheme 'file'"),
            ("FILE:///etc", "scheme 'FILE'"),
            ("/srv/git/app.git", "is not an https://"),
            ("./app", "is not an https://"),
            ("-uhttps://x/y", "starts with '-'"),
            ("--upload-pack=touch /tmp/pwned", "whitespace"),
            ("ssh://-oProxyCommand=id/x", "no usable host"),
            ("ssh://user@-oProxyCommand=id/x", "no usable host"),
            ("git@-oProxyCommand=id:x", "no usable user@host"),
            ("git@host:-x", "no usable repository path"),
            ("https://example.com", "names no repository path"),
            ("https://example.com/a\nb", "control characters"),
            ("https://example.com/a\u{7f}", "control characters"),
            ("ftp://example.com/x", "scheme 'ftp'"),
            ("host:path", "is not an https://"),
        ];
        for (url, needle) in refused {
            match git_clone_command(url, None) {
                Err(SourceError::InvalidGitUrl(message)) => {
                    assert!(
                        message.contains(needle),
                        "{url:?}: {message:?} lacks {needle:?}"
                    )
                }
                other => panic!("{url:?}: expected InvalidGitUrl, got {other:?}"),
            }
        }
        let long = format!("https://example.com/{}", "a".repeat(MAX_URL_LEN));
        assert!(matches!(
            git_clone_command(&long, None),
            Err(SourceError::InvalidGitUrl(_))
        ));
    }

    #[test]
    fn refs_are_validated_and_everything_is_quoted() {
        let url = "https://example.com/it's.git";
        for good in ["main", "release/1.2", "v1.0.0+build", "feature_x-y"] {
            git_clone_command(url, Some(good)).unwrap_or_else(|error| panic!("{good}: {error}"));
        }
        for bad in [
            "-b",
            "a..b",
            "a b",
            "x;rm -rf /",
            "$(id)",
            "a//b",
            "/a",
            "a/",
            "x.lock",
            "`id`",
        ] {
            assert!(
                matches!(
                    git_clone_command(url, Some(bad)),
                    Err(SourceError::InvalidGitRef(_))
                ),
                "{bad:?} should be refused"
            );
        }
        let command = git_clone_command(url, Some("main")).unwrap();
        assert!(command.contains("--branch 'main' -- 'https://example.com/it'\\''s.git' ."));
        assert!(command.contains("-c protocol.ext.allow=never"));
        let commit = "0123456789abcdef0123456789abcdef01234567";
        let command = git_clone_command(url, Some(commit)).unwrap();
        assert!(command.contains(&format!(
            "fetch --quiet --depth 1 -- 'https://example.com/it'\\''s.git' '{commit}'"
        )));
        assert_eq!(
            git_clone_command(url, Some("")).unwrap(),
            git_clone_command(url, None).unwrap()
        );
    }

    /// Serves the repositories under `base` on git://127.0.0.1:port/ until dropped.
    struct GitServer {
        port: u16,
        stop: Arc<AtomicBool>,
        thread: Option<JoinHandle<()>>,
    }

    impl GitServer {
        fn start(base: &Path) -> GitServer {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            listener.set_nonblocking(true).unwrap();
            let port = listener.local_addr().unwrap().port();
            let stop = Arc::new(AtomicBool::new(false));
            let base = base.to_path_buf();
            let stop_flag = Arc::clone(&stop);
            let thread = std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(120);
                let mut children: Vec<Child> = Vec::new();
                while !stop_flag.load(Ordering::Relaxed) && Instant::now() < deadline {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            stream.set_nonblocking(false).unwrap();
                            let input = OwnedFd::from(stream.try_clone().unwrap());
                            let output = OwnedFd::from(stream);
                            let child = Command::new("git")
                                .args(["daemon", "--inetd", "--export-all", "--informative-errors"])
                                .arg(format!("--base-path={}", base.display()))
                                .stdin(Stdio::from(input))
                                .stdout(Stdio::from(output))
                                .stderr(Stdio::null())
                                .spawn()
                                .unwrap();
                            children.push(child);
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(10)),
                    }
                    children.retain_mut(|child| !matches!(child.try_wait(), Ok(Some(_))));
                }
                for mut child in children {
                    let _ = child.kill();
                    let _ = child.wait();
                }
            });
            GitServer {
                port,
                stop,
                thread: Some(thread),
            }
        }
    }

    impl Drop for GitServer {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Relaxed);
            if let Some(thread) = self.thread.take() {
                let _ = thread.join();
            }
        }
    }

    /// Runs `git` with a private HOME and no system config; panics on failure.
    fn git(home: &Path, dir: &Path, args: &[&str]) -> String {
        let output = run(home, dir, Command::new("git").args(args));
        assert!(
            output.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap().trim().to_owned()
    }

    /// Runs a command with a 60-second limit.
    fn run(home: &Path, dir: &Path, command: &mut Command) -> Output {
        let child = command
            .current_dir(dir)
            .env("HOME", home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = sender.send(child.wait_with_output());
        });
        match receiver.recv_timeout(Duration::from_secs(60)) {
            Ok(output) => output.unwrap(),
            Err(_) => {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
                panic!("command {command:?} took more than 60 s");
            }
        }
    }

    struct Repository {
        _temp: tempfile::TempDir,
        root: PathBuf,
        first: String,
        second: String,
    }

    /// A bare repository `app.git` on `main` with two commits, the first tagged `v1`.
    fn repository() -> Repository {
        let temp = tempfile::tempdir().unwrap();
        let root = temp.path().to_path_buf();
        let work = root.join("work");
        std::fs::create_dir_all(&work).unwrap();
        git(
            &root,
            &root,
            &[
                "init",
                "--quiet",
                "--bare",
                "--initial-branch=main",
                "app.git",
            ],
        );
        git(&root, &work, &["init", "--quiet", "--initial-branch=main"]);
        std::fs::write(work.join("version.txt"), "one\n").unwrap();
        git(&root, &work, &["add", "version.txt"]);
        git(&root, &work, &["commit", "--quiet", "-m", "one"]);
        git(&root, &work, &["tag", "v1"]);
        let first = git(&root, &work, &["rev-parse", "HEAD"]);
        std::fs::write(work.join("version.txt"), "two\n").unwrap();
        git(&root, &work, &["commit", "--quiet", "-am", "two"]);
        let second = git(&root, &work, &["rev-parse", "HEAD"]);
        let bare = root.join("app.git").display().to_string();
        git(&root, &work, &["push", "--quiet", &bare, "main", "v1"]);
        Repository {
            _temp: temp,
            root,
            first,
            second,
        }
    }

    #[test]
    fn clones_a_branch_a_tag_and_a_commit_over_git_protocol() {
        if Command::new("git").arg("--version").output().is_err() {
            eprintln!("SKIP: the system git is not installed");
            return;
        }
        let repository = repository();
        let server = GitServer::start(&repository.root);
        let url = format!("git://127.0.0.1:{}/app.git", server.port);
        let cases = [
            (None, "two\n", &repository.second),
            (Some("main"), "two\n", &repository.second),
            (Some("v1"), "one\n", &repository.first),
            (Some(repository.first.as_str()), "one\n", &repository.first),
        ];
        for (index, (git_ref, content, commit)) in cases.into_iter().enumerate() {
            let dir = repository.root.join(format!("clone-{index}"));
            std::fs::create_dir(&dir).unwrap();
            let command = git_clone_command(&url, git_ref).unwrap();
            let output = run(
                &repository.root,
                &dir,
                Command::new("sh").arg("-c").arg(&command),
            );
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(output.status.success(), "{git_ref:?}: {command}\n{stderr}");
            assert_eq!(
                std::fs::read_to_string(dir.join("version.txt")).unwrap(),
                content
            );
            assert_eq!(&git(&repository.root, &dir, &["rev-parse", "HEAD"]), commit);
            let depth = git(&repository.root, &dir, &["rev-list", "--count", "HEAD"]);
            assert_eq!(depth, "1", "{git_ref:?}: the clone is shallow");
        }
        let dir = repository.root.join("clone-missing");
        std::fs::create_dir(&dir).unwrap();
        let command = git_clone_command(&url, Some("no-such-branch")).unwrap();
        let output = run(
            &repository.root,
            &dir,
            Command::new("sh").arg("-c").arg(&command),
        );
        assert!(!output.status.success(), "cloning a missing branch fails");
    }
}
