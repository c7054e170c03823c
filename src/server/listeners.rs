//! Where the daemon's listeners come from: handed over by systemd socket activation
//! (`LISTEN_PID`, `LISTEN_FDS`, `LISTEN_FDNAMES`; names `http`, `https`, `api`, as
//! `systemd/slipway.socket` sets them), else bound from the config. `app.rs` calls
//! [`open`] once at start. With the socket unit, connections that arrive while the daemon
//! restarts wait in the kernel's backlog instead of being refused.

use std::net::SocketAddr;
use std::os::fd::RawFd;

use anyhow::Context as _;
use tokio::net::TcpListener;

use crate::config::{Config, TlsMode};

/// systemd passes its sockets from this descriptor on (`SD_LISTEN_FDS_START`).
pub const FIRST_FD: RawFd = 3;

/// The listeners the daemon serves on.
pub struct Listeners {
    pub http: TcpListener,
    pub https: Option<TcpListener>,
    pub api: Option<TcpListener>,
}

/// The three names a handed-over socket may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerName {
    Http,
    Https,
    Api,
}

impl ListenerName {
    fn parse(name: &str) -> Option<ListenerName> {
        match name {
            "http" => Some(ListenerName::Http),
            "https" => Some(ListenerName::Https),
            "api" => Some(ListenerName::Api),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ListenerName::Http => "http",
            ListenerName::Https => "https",
            ListenerName::Api => "api",
        }
    }
}

/// The three variables of the protocol, as read from the environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct ActivationEnv<'a> {
    pub listen_pid: Option<&'a str>,
    pub listen_fds: Option<&'a str>,
    pub listen_fdnames: Option<&'a str>,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ActivationError {
    #[error("LISTEN_FDS={0:?} is not a number of sockets")]
    BadCount(String),
    #[error("LISTEN_FDNAMES names {names} sockets but LISTEN_FDS passes {count}")]
    NameCount { names: usize, count: usize },
    #[error(
        "socket activation passed a socket named {0:?}; Slipway takes `http`, `https` and `api` \
         (set FileDescriptorName= in slipway.socket)"
    )]
    UnknownName(String),
    #[error("socket activation passed two sockets named {0:?}; give each name one socket")]
    Duplicate(&'static str),
}

/// What the environment hands over to the process `own_pid`: each socket's name and fd.
/// Nothing when `LISTEN_FDS` is unset or `LISTEN_PID` names another process (the variables
/// were inherited, not meant for us). Pure: the caller reads the environment.
pub fn parse(
    env: ActivationEnv<'_>,
    own_pid: u32,
) -> Result<Vec<(ListenerName, RawFd)>, ActivationError> {
    let Some(count_text) = env.listen_fds else {
        return Ok(Vec::new());
    };
    match env.listen_pid.map(|pid| pid.trim().parse::<u32>()) {
        Some(Ok(pid)) if pid == own_pid => {}
        _ => return Ok(Vec::new()),
    }
    let count: usize = count_text
        .trim()
        .parse()
        .map_err(|_| ActivationError::BadCount(count_text.into()))?;
    if count == 0 {
        return Ok(Vec::new());
    }
    // systemd names every socket; a missing LISTEN_FDNAMES means "unknown" for each.
    let names: Vec<&str> = match env.listen_fdnames {
        Some(text) => text.split(':').collect(),
        None => vec!["unknown"; count],
    };
    if names.len() != count {
        return Err(ActivationError::NameCount {
            names: names.len(),
            count,
        });
    }
    let mut sockets = Vec::with_capacity(count);
    for (index, name) in names.into_iter().enumerate() {
        let parsed =
            ListenerName::parse(name).ok_or_else(|| ActivationError::UnknownName(name.into()))?;
        if sockets.iter().any(|(seen, _)| *seen == parsed) {
            return Err(ActivationError::Duplicate(parsed.as_str()));
        }
        sockets.push((parsed, FIRST_FD + index as RawFd));
    }
    Ok(sockets)
}

/// The listeners: the handed-over ones where systemd passed them (their addresses win over
/// the config's), the config's addresses bound otherwise. `https` exists unless
/// `tls.mode = "off"`; `api` when the config or systemd asks for it.
pub async fn open(config: &Config) -> anyhow::Result<Listeners> {
    raise_open_files_limit();
    let (mut http, mut https, mut api) = (None, None, None);
    for (name, fd) in parse(read_env(), std::process::id())? {
        let listener = adopt(fd)
            .with_context(|| format!("taking the `{}` socket from systemd", name.as_str()))?;
        tracing::info!(listener = name.as_str(), address = ?listener.local_addr().ok(), "using the socket systemd passed");
        match name {
            ListenerName::Http => http = Some(listener),
            ListenerName::Https => https = Some(listener),
            ListenerName::Api => api = Some(listener),
        }
    }
    let http = match http {
        Some(listener) => listener,
        None => bind(config.http_listen, "http_listen").await?,
    };
    let https = match (config.tls.mode, https) {
        (TlsMode::Off, Some(_)) => {
            tracing::warn!("systemd passed an `https` socket but tls.mode is \"off\": it is closed unused; remove it from slipway.socket");
            None
        }
        (TlsMode::Off, None) => None,
        (_, Some(listener)) => Some(listener),
        (_, None) => Some(bind(config.https_listen, "https_listen").await?),
    };
    let api = match (api, config.api_listen) {
        (Some(listener), _) => Some(listener),
        (None, Some(addr)) => Some(bind(addr, "api_listen").await?),
        (None, None) => None,
    };
    Ok(Listeners { http, https, api })
}

fn read_env() -> ActivationEnv<'static> {
    // Read once and kept for the life of the process (a few bytes).
    static ENV: std::sync::OnceLock<[Option<String>; 3]> = std::sync::OnceLock::new();
    let values = ENV.get_or_init(|| {
        ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"].map(|name| std::env::var(name).ok())
    });
    ActivationEnv {
        listen_pid: values[0].as_deref(),
        listen_fds: values[1].as_deref(),
        listen_fdnames: values[2].as_deref(),
    }
}

/// An inherited fd as a tokio listener, refused unless it is a listening TCP socket.
fn adopt(fd: RawFd) -> anyhow::Result<TcpListener> {
    let owned = crate::sys::fd::claim_inherited(fd)?;
    let listening = nix::sys::socket::getsockopt(&owned, nix::sys::socket::sockopt::AcceptConn)
        .with_context(|| format!("fd {fd} is not a socket"))?;
    if !listening {
        anyhow::bail!("fd {fd} is not a listening socket (use ListenStream= in slipway.socket)");
    }
    let listener = std::net::TcpListener::from(owned);
    listener
        .local_addr()
        .with_context(|| format!("fd {fd} is not a TCP socket"))?;
    listener.set_nonblocking(true)?;
    Ok(TcpListener::from_std(listener)?)
}

pub async fn bind(addr: SocketAddr, key: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr).await.with_context(|| {
        format!("cannot listen on {addr} ({key}): is another server using it, or does the port need root? Change {key} in the config")
    })
}

/// Raises the soft limit on open files to the hard one. Every connection, every pooled
/// connection to an app and every tunnel is a descriptor, and systemd starts services with a
/// soft limit of 1024 (hard 524288): a daemon that kept it would refuse visitors (EMFILE) long
/// before `limits.max_connections`. Apps and builds inherit the raised limit, as containers'
/// processes do.
fn raise_open_files_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    if soft >= hard {
        return;
    }
    match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => tracing::info!(from = soft, to = hard, "raised the open files limit"),
        Err(error) => tracing::warn!(%error, soft, hard, "could not raise the open files limit"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(
        pid: Option<&'a str>,
        fds: Option<&'a str>,
        names: Option<&'a str>,
    ) -> ActivationEnv<'a> {
        ActivationEnv {
            listen_pid: pid,
            listen_fds: fds,
            listen_fdnames: names,
        }
    }

    #[test]
    fn nothing_handed_over_without_listen_fds() {
        assert_eq!(parse(env(None, None, None), 42), Ok(vec![]));
        assert_eq!(parse(env(Some("42"), None, Some("http")), 42), Ok(vec![]));
        assert_eq!(parse(env(Some("42"), Some("0"), None), 42), Ok(vec![]));
    }

    #[test]
    fn variables_meant_for_another_process_are_ignored() {
        // A child that inherited the variables (LISTEN_PID is its parent's) takes nothing.
        assert_eq!(
            parse(env(Some("41"), Some("2"), Some("http:api")), 42),
            Ok(vec![])
        );
        assert_eq!(parse(env(None, Some("1"), Some("http")), 42), Ok(vec![]));
        assert_eq!(
            parse(env(Some("x"), Some("1"), Some("http")), 42),
            Ok(vec![])
        );
    }

    #[test]
    fn named_sockets_start_at_fd_3_in_order() {
        assert_eq!(
            parse(env(Some("42"), Some("3"), Some("https:http:api")), 42),
            Ok(vec![
                (ListenerName::Https, 3),
                (ListenerName::Http, 4),
                (ListenerName::Api, 5)
            ])
        );
        assert_eq!(
            parse(env(Some(" 42\n"), Some("1"), Some("api")), 42),
            Ok(vec![(ListenerName::Api, 3)])
        );
    }

    #[test]
    fn bad_counts_names_and_duplicates_are_refused() {
        assert_eq!(
            parse(env(Some("42"), Some("two"), None), 42),
            Err(ActivationError::BadCount("two".into()))
        );
        assert_eq!(
            parse(env(Some("42"), Some("2"), Some("http")), 42),
            Err(ActivationError::NameCount { names: 1, count: 2 })
        );
        // Without names systemd says "unknown": we cannot tell http from https.
        assert_eq!(
            parse(env(Some("42"), Some("1"), None), 42),
            Err(ActivationError::UnknownName("unknown".into()))
        );
        assert_eq!(
            parse(env(Some("42"), Some("2"), Some("http:web")), 42),
            Err(ActivationError::UnknownName("web".into()))
        );
        assert_eq!(
            parse(env(Some("42"), Some("2"), Some("http:http")), 42),
            Err(ActivationError::Duplicate("http"))
        );
    }
}
