//! Placeholder until the TLS module lands (replaced wholesale by the tls branch).

use std::net::SocketAddr;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
#[error("TLS is not available in this build")]
pub struct TlsError;

pub struct TlsManager {
    _private: (),
}

impl TlsManager {
    pub async fn ensure_certificate(self: &Arc<Self>, _name: &str) -> Result<(), TlsError> {
        Err(TlsError)
    }

    pub async fn verify(&self, _name: &str, _addr: SocketAddr) -> Result<(), TlsError> {
        Err(TlsError)
    }
}
