//! `slipway node join`: run on a machine with Debian's `docker.io` (and the Slipway package)
//! to make it a worker of the cluster: makes the runtime image on its engine from this
//! binary (nothing pulled), then joins the swarm with the manager's worker token. One
//! command; the daemon on the control plane places tasks there from then on.

use std::path::PathBuf;

use serde_json::json;

use super::docker::Docker;

/// What `slipway node join` is told.
#[derive(Debug, Clone)]
pub struct JoinArgs {
    /// A manager's address (`10.0.0.1:2377`).
    pub manager: String,
    /// The worker join token (`docker swarm join-token -q worker` on the manager).
    pub token: String,
    /// The address other nodes reach this one at (default: the engine picks).
    pub advertise_addr: Option<String>,
    /// Where the swarm listens here (default `0.0.0.0:2377`).
    pub listen_addr: String,
    pub docker_socket: PathBuf,
    pub image: String,
}

/// Joins; what happened, for the terminal.
pub fn run(args: &JoinArgs) -> Result<String, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(join(args))
}

async fn join(args: &JoinArgs) -> Result<String, String> {
    let docker = Docker::new(&args.docker_socket);
    let made = super::image::ensure(&docker, &args.image)
        .await
        .map_err(|e| format!("cannot make the runtime image {}: {e}", args.image))?;
    let mut out = match made {
        true => format!("made the runtime image {} from this binary\n", args.image),
        false => format!("the runtime image {} is already here\n", args.image),
    };
    let mut body = json!({
        "ListenAddr": args.listen_addr,
        "RemoteAddrs": [args.manager],
        "JoinToken": args.token,
    });
    if let Some(advertise) = &args.advertise_addr {
        body["AdvertiseAddr"] = json!(advertise);
    }
    docker
        .call(
            http::Method::POST,
            "/swarm/join",
            Some(serde_json::to_vec(&body).expect("JSON serializes")),
        )
        .await
        .map_err(|e| format!("cannot join the swarm at {}: {e}", args.manager))?;
    out.push_str(&format!(
        "joined the swarm at {} as a worker; `slipway nodes` on the control plane lists it\n",
        args.manager
    ));
    Ok(out)
}
