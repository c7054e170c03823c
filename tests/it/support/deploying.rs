//! Deploying through a `TestDaemon`'s API: archives, upload, provision, waiting for a run,
//! reading its logs, static pages checked over TLS, and requests to app hosts.

use std::time::{Duration, Instant};

use super::{TestDaemon, TestResponse};

/// A gzip'd tar of `(path, contents, mode)` entries.
pub fn targz(files: &[(&str, &str, u32)]) -> Vec<u8> {
    let encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut builder = tar::Builder::new(encoder);
    for (path, contents, mode) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(contents.len() as u64);
        header.set_mode(*mode);
        header.set_mtime(1_700_000_000);
        header.set_entry_type(tar::EntryType::Regular);
        builder
            .append_data(&mut header, path, contents.as_bytes())
            .unwrap();
    }
    builder.into_inner().unwrap().finish().unwrap()
}

impl TestDaemon {
    /// A GitHub `ping` to `/api/webhooks/{project}`, signed with `secret`: answered 202 only
    /// when the signature checks out.
    pub async fn github_ping(&self, project: &str, secret: &str, delivery: &str) -> TestResponse {
        let body = br#"{"zen":"Keep it logically awesome.","hook_id":1}"#.to_vec();
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
        let signature = slipway::ids::hex(ring::hmac::sign(&key, &body).as_ref());
        let headers = [
            ("content-type", "application/json".to_owned()),
            ("x-github-event", "ping".to_owned()),
            ("x-github-delivery", delivery.to_owned()),
            ("x-hub-signature-256", format!("sha256={signature}")),
        ];
        let host = self.control_host();
        let path = format!("/api/webhooks/{project}");
        self.request("POST", &host, &path, &headers, body).await
    }

    pub async fn upload(&self, slug: &str, archive: Vec<u8>) -> TestResponse {
        let headers = [
            ("authorization", format!("Bearer {}", self.token)),
            ("content-type", "application/gzip".into()),
        ];
        self.request(
            "POST",
            &self.control_host(),
            &format!("/api/projects/{slug}/source"),
            &headers,
            archive,
        )
        .await
    }

    /// POST …/provision; panics unless 202. Returns the response body.
    pub async fn provision(&self, slug: &str, mut body: serde_json::Value) -> serde_json::Value {
        body["projectSlug"] = serde_json::Value::String(slug.to_owned());
        let response = self
            .api(
                "POST",
                &format!("/api/projects/{slug}/provision"),
                Some(body),
            )
            .await;
        assert_eq!(response.status, 202, "provision: {}", response.text());
        response.json()
    }

    /// Polls the status until the run is no longer in progress (at most `timeout`).
    pub async fn wait_run(&self, provisioning_id: &str, timeout: Duration) -> serde_json::Value {
        let deadline = Instant::now() + timeout;
        let mut last_progress = 0;
        loop {
            let status = self
                .api(
                    "GET",
                    &format!("/api/provisioning/{provisioning_id}/status"),
                    None,
                )
                .await;
            assert_eq!(status.status, 200, "{}", status.text());
            let status = status.json();
            if status["status"] != "provisioning_in_progress" {
                return status;
            }
            let progress = status["progressPercentage"].as_u64().unwrap();
            assert!(
                progress >= last_progress && progress <= 99,
                "progress went from {last_progress} to {progress}"
            );
            last_progress = progress;
            assert!(
                Instant::now() < deadline,
                "run {provisioning_id} still in progress: {status}\nlog:\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Upload of `archive` + provision of `body` + wait (at most `timeout`), however the run
    /// ends: its final status and its deployment's logs.
    pub async fn run_archive(
        &self,
        slug: &str,
        archive: Vec<u8>,
        body: serde_json::Value,
        timeout: Duration,
    ) -> (serde_json::Value, String) {
        let upload = self.upload(slug, archive).await;
        assert_eq!(upload.status, 201, "upload: {}", upload.text());
        let started = self.provision(slug, body).await;
        let status = self
            .wait_run(started["provisioningId"].as_str().unwrap(), timeout)
            .await;
        let logs = self
            .logs_text(started["deploymentId"].as_str().unwrap())
            .await;
        (status, logs)
    }

    /// Upload + provision + wait; asserts completion and returns the final status.
    pub async fn deploy(
        &self,
        slug: &str,
        files: &[(&str, &str, u32)],
        body: serde_json::Value,
    ) -> serde_json::Value {
        let upload = self.upload(slug, targz(files)).await;
        assert_eq!(upload.status, 201, "upload: {}", upload.text());
        let started = self.provision(slug, body).await;
        self.wait_complete(&started, Duration::from_secs(120)).await
    }

    /// Waits for the run a provision answer names; asserts it completed (showing its logs
    /// when not) and returns the final status.
    pub async fn wait_complete(
        &self,
        started: &serde_json::Value,
        timeout: Duration,
    ) -> serde_json::Value {
        let status = self
            .wait_run(started["provisioningId"].as_str().unwrap(), timeout)
            .await;
        let deployment_id = started["deploymentId"].as_str().unwrap();
        assert_eq!(
            status["status"],
            "provisioning_complete",
            "{status}\nlogs: {}",
            self.logs_text(deployment_id).await
        );
        status
    }

    /// All log messages of a deployment, one per line.
    pub async fn logs_text(&self, deployment_id: &str) -> String {
        let logs = self
            .api(
                "GET",
                &format!("/api/deployments/{deployment_id}/logs?limit=5000"),
                None,
            )
            .await
            .json();
        logs["logs"]
            .as_array()
            .map(|lines| {
                lines
                    .iter()
                    .map(|l| {
                        format!(
                            "[{}] {}",
                            l["stream"].as_str().unwrap_or(""),
                            l["message"].as_str().unwrap_or("")
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default()
    }

    /// Uploads `public/index.html` with `page` and provisions it as a static site (no install,
    /// no build); returns the final status of the run, whatever it is.
    pub async fn deploy_page(&self, slug: &str, page: &str) -> serde_json::Value {
        let upload = self
            .upload(slug, targz(&[("public/index.html", page, 0o644)]))
            .await;
        assert_eq!(upload.status, 201, "upload: {}", upload.text());
        let body = serde_json::json!({"installCommand": "", "buildCommand": ""});
        let started = self.provision(slug, body).await;
        let provisioning_id = started["provisioningId"].as_str().unwrap();
        self.wait_run(provisioning_id, Duration::from_secs(120))
            .await
    }

    /// [`TestDaemon::deploy_page`] that must end `provisioning_complete` with
    /// `ssl_verification` `succeeded` and the https URL of the app.
    pub async fn deploy_verified(&self, slug: &str, page: &str) -> serde_json::Value {
        let status = self.deploy_page(slug, page).await;
        assert_eq!(
            status["status"],
            "provisioning_complete",
            "{status}\nlog:\n{}",
            self.log_text()
        );
        assert_eq!(
            step_state(&status, "ssl_verification"),
            "succeeded",
            "{status}"
        );
        assert_eq!(
            status["url"],
            format!(
                "https://{}:{}",
                self.app_host(slug),
                self.https_addr().port()
            )
        );
        status
    }

    /// GET on an app host through the daemon's router.
    pub async fn app_get(
        &self,
        slug: &str,
        path: &str,
        headers: &[(&str, String)],
    ) -> TestResponse {
        self.request("GET", &self.app_host(slug), path, headers, vec![])
            .await
    }
}

/// The state of one step in a provisioning status.
pub fn step_state<'s>(status: &'s serde_json::Value, step: &str) -> &'s str {
    status["steps"]
        .as_array()
        .and_then(|steps| steps.iter().find(|s| s["name"] == step))
        .and_then(|s| s["state"].as_str())
        .unwrap_or_else(|| panic!("no step {step} in {status}"))
}
