//! The ports apps listen on: any free one inside a sandbox's own network namespace; on the
//! host (mode `none`) one below the ephemeral range that nothing listens on.

/// Ports apps get in mode `none`: below Linux's ephemeral range (32768 and up by default),
/// so that the source port of some outgoing connection cannot take an app's port between this
/// choice and the app's own bind.
const APP_PORTS: std::ops::Range<u16> = 20_000..32_768;

/// A free port for an app in its own network namespace (any; nothing else binds there).
pub(crate) fn free_port() -> std::io::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// A port no one listens on now on the host, from `APP_PORTS` (random start), else any free
/// one.
pub(crate) fn free_host_port() -> std::io::Result<u16> {
    let span = APP_PORTS.end - APP_PORTS.start;
    let start = u16::from_le_bytes(crate::ids::random_bytes::<2>()) % span;
    for offset in 0..64 {
        let port = APP_PORTS.start + (start + offset * 97) % span;
        if port_is_free(port) {
            return Ok(port);
        }
    }
    let listener = std::net::TcpListener::bind("0.0.0.0:0")?;
    Ok(listener.local_addr()?.port())
}

/// Whether `port` can be listened on, on every address (IPv6 only where the host has it).
pub(crate) fn port_is_free(port: u16) -> bool {
    let v6_free = match std::net::TcpListener::bind(("::", port)) {
        Ok(_) => true,
        Err(error) => error.kind() != std::io::ErrorKind::AddrInUse,
    };
    v6_free && std::net::TcpListener::bind(("0.0.0.0", port)).is_ok()
}
