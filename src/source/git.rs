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

fn check_url(url: &str) -> Result<(), SourceError> {
    let refuse = |reason: &str| Err(SourceError::InvalidGitUrl(format!("gitUrl {reason}")));
    if url.is_empty() {
        return refuse("is empty");
    }
    if url.len() > MAX_URL_LEN {
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

fn check_ref(git_ref: &str) -> Result<(), SourceError> {
    let refuse = |reason: &str| Err(SourceError::InvalidGitRef(format!("gitRef {reason}")));
    if git_ref.len() > MAX_REF_LEN {
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
