//! The daemon's public addresses, made in one place from what it bound: the control host's
//! (API, dashboard, webhooks) and each app's, `<label>.<apps_domain>`, with the scheme visitors
//! use (https when an HTTPS listener runs) and a port only when it is not the scheme's default.

/// Built once at start (`app.rs`), shared by the API and the pipeline.
#[derive(Debug, Clone)]
pub struct PublicUrls {
    scheme: &'static str,
    port_suffix: String,
    control_host: String,
    apps_domain: String,
}

impl PublicUrls {
    /// From the bound listeners: HTTPS's port when there is one, else plain HTTP's.
    pub fn new(
        https_port: Option<u16>,
        http_port: u16,
        control_host: &str,
        apps_domain: &str,
    ) -> PublicUrls {
        let (scheme, port_suffix) = match https_port {
            Some(port) => ("https", port_suffix(port, 443)),
            None => ("http", port_suffix(http_port, 80)),
        };
        PublicUrls {
            scheme,
            port_suffix,
            control_host: control_host.to_owned(),
            apps_domain: apps_domain.to_owned(),
        }
    }

    /// `https://<control host>[:port]`: where the API (and so webhooks) is reached.
    pub fn control(&self) -> String {
        format!(
            "{}://{}{}",
            self.scheme, self.control_host, self.port_suffix
        )
    }

    /// `https://<label>.<apps_domain>[:port]`: a project's (or a preview's) address.
    pub fn app(&self, label: &str) -> String {
        format!(
            "{}://{label}.{}{}",
            self.scheme, self.apps_domain, self.port_suffix
        )
    }
}

/// `:port`, or nothing for the scheme's default port.
pub fn port_suffix(port: u16, default: u16) -> String {
    if port == default {
        String::new()
    } else {
        format!(":{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_ports_are_left_out() {
        let urls = PublicUrls::new(Some(443), 80, "slipway.example.com", "apps.example.com");
        assert_eq!(urls.control(), "https://slipway.example.com");
        assert_eq!(urls.app("web"), "https://web.apps.example.com");
        let plain = PublicUrls::new(None, 8080, "slipway.localhost", "localhost");
        assert_eq!(plain.control(), "http://slipway.localhost:8080");
        assert_eq!(plain.app("pr-1--web"), "http://pr-1--web.localhost:8080");
    }
}
