//! The bodies a subscription receives: `json` (`{event, at, project, deployment, url,
//! error, run, job, addon}`, signed with HMAC-SHA256) or `slack` (`{"text": …}`, which Slack, Mattermost and
//! Discord's Slack-compatible hooks take).

use super::{Event, EventKind};

/// `{event, at, project, deployment, url, error, run, job, addon}`; absent fields are `null`.
pub fn json_body(event: &Event) -> String {
    serde_json::json!({
        "event": event.kind.as_str(),
        "at": crate::ids::rfc3339(event.at_ms),
        "project": event.project,
        "deployment": event.deployment,
        "url": event.url,
        "error": event.error,
        "run": event.run,
        "job": event.job,
        "addon": event.addon,
    })
    .to_string()
}

/// `{"text": "<one line>"}`, with Slack's `&`, `<`, `>` escapes.
pub fn slack_body(event: &Event) -> String {
    let project = event.project.as_deref().unwrap_or("?");
    let deployment = event
        .deployment
        .as_deref()
        .map(|d| format!(" ({d})"))
        .unwrap_or_default();
    let url = event.url.as_deref().unwrap_or("");
    let error = event.error.as_deref().unwrap_or("no details");
    let text = match event.kind {
        EventKind::DeploymentStarted => format!("Slipway: deploying {project}{deployment}"),
        EventKind::DeploymentSucceeded => {
            format!("Slipway: {project} is live at {url}{deployment}")
        }
        EventKind::DeploymentFailed => {
            format!("Slipway: deployment of {project} failed{deployment}: {error}")
        }
        EventKind::DeploymentCanceled => {
            format!("Slipway: deployment of {project} was canceled{deployment}")
        }
        EventKind::AppCrashed => {
            format!("Slipway: the app of {project} crashed{deployment}: {error}")
        }
        EventKind::CertificateFailed => {
            format!("Slipway: the certificate for {url} could not be issued: {error}")
        }
        EventKind::DomainActive => format!("Slipway: {url} now serves {project}"),
        EventKind::ReleaseFailed => {
            format!("Slipway: the release command of {project} failed{deployment}: {error}")
        }
        EventKind::RunFailed | EventKind::CronFailed | EventKind::CronTimedOut => {
            let run = event.run.as_deref().unwrap_or("?");
            format!("Slipway: run {run} of {project} failed: {error}")
        }
        EventKind::AddonBackupFailed => {
            let addon = event.addon.as_deref().unwrap_or("?");
            format!("Slipway: a backup of add-on {addon} of {project} failed: {error}")
        }
        EventKind::AddonDiskFull => {
            let addon = event.addon.as_deref().unwrap_or("?");
            format!("Slipway: the disk of add-on {addon} of {project} is filling up: {error}")
        }
        EventKind::AppSlept => format!("Slipway: {project} is asleep{deployment}: {error}"),
        EventKind::AppWoke => format!("Slipway: {project} woke up{deployment}: {error}"),
        EventKind::AppWakeFailed => {
            format!("Slipway: {project} did not wake up{deployment}: {error}")
        }
        EventKind::NodeDown => format!("Slipway: a cluster node is down: {error}"),
    };
    let escaped = text
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    serde_json::json!({ "text": escaped }).to_string()
}

/// `sha256=<hex HMAC-SHA256 of body keyed with the secret's bytes>`.
pub fn signature(secret: &str, body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    let tag = ring::hmac::sign(&key, body);
    format!("sha256={}", crate::ids::hex(tag.as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies() {
        let event = Event {
            kind: EventKind::DeploymentFailed,
            at_ms: 0,
            project: Some("web".into()),
            deployment: Some("dpl_1".into()),
            url: None,
            error: Some("build <failed> & stopped".into()),
            run: None,
            job: None,
            addon: None,
        };
        let json: serde_json::Value = serde_json::from_str(&json_body(&event)).unwrap();
        assert_eq!(json["event"], "deployment.failed");
        assert_eq!(json["at"], "1970-01-01T00:00:00.000Z");
        assert_eq!(json["url"], serde_json::Value::Null);
        let slack: serde_json::Value = serde_json::from_str(&slack_body(&event)).unwrap();
        assert_eq!(
            slack["text"],
            "Slipway: deployment of web failed (dpl_1): build &lt;failed&gt; &amp; stopped"
        );
    }

    /// RFC 4231 test case 2.
    #[test]
    fn signature_is_hmac_sha256() {
        assert_eq!(
            signature("Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
