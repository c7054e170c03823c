//! systemd readiness notification (`Type=notify`): a datagram to `$NOTIFY_SOCKET`.
//! Silently does nothing when not started by systemd.

fn send(message: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let path = std::path::PathBuf::from(path);
    let Ok(socket) = std::os::unix::net::UnixDatagram::unbound() else {
        return;
    };
    let bytes = path.as_os_str().as_encoded_bytes();
    let result = if let Some(abstract_name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(abstract_name)
            .and_then(|addr| socket.send_to_addr(message.as_bytes(), &addr))
    } else {
        socket.send_to(message.as_bytes(), &path)
    };
    if let Err(error) = result {
        tracing::debug!(%error, "sd_notify failed");
    }
}

pub fn ready() {
    send("READY=1");
}

pub fn stopping() {
    send("STOPPING=1");
}
