//! What a project's links to add-ons (issue 34) give its code: the add-on's URL in its
//! variable (`DATABASE_URL`, `REDIS_URL`, or the one asked for) and the allowance to connect
//! to its address and port. Production only: a preview never gets a link (it would write the
//! production database). Linked add-ons asleep with their apps are started before the
//! variables are given (`sleep.rs`'s `LinkedAddons`).

use std::net::SocketAddrV4;

use super::Pipeline;
use crate::store::addons::AddonRecord;
use crate::store::records::{DeployTarget, Environment};

/// The context an add-on's password is sealed under.
pub fn password_context(addon_id: &str) -> String {
    format!("slipway add-on password {addon_id}")
}

/// The URL a linked app connects with.
pub fn addon_url(addon: &AddonRecord, password: &str) -> String {
    match addon.kind.as_str() {
        "postgres" => format!(
            "postgres://slipway:{password}@{}:{}/app",
            addon.address, addon.port
        ),
        _ => format!(
            "redis://default:{password}@{}:{}/0",
            addon.address, addon.port
        ),
    }
}

impl Pipeline {
    /// The add-ons `project_id`'s production is linked to.
    async fn linked(
        &self,
        project_id: &str,
        target: &DeployTarget,
    ) -> Result<Vec<AddonRecord>, String> {
        if target.environment != Environment::Production {
            return Ok(Vec::new());
        }
        // An add-on asleep with its apps starts first (issue 35).
        if let Some(addons) = self.linked_addons() {
            addons.wake_for(project_id).await?;
        }
        let id = project_id.to_owned();
        self.store
            .call(move |s| s.addons_linked_to(&id))
            .await
            .map_err(|e| e.to_string())
    }

    /// The variables the project's links set.
    pub(crate) async fn addon_env(
        &self,
        project_id: &str,
        target: &DeployTarget,
    ) -> Result<Vec<(String, String)>, String> {
        let mut env = Vec::new();
        for addon in self.linked(project_id, target).await? {
            let password = self
                .secrets
                .open(&password_context(&addon.id), &addon.sealed_password)
                .map_err(|e| format!("cannot open the password of {}: {e}", addon.id))?;
            let password = String::from_utf8_lossy(&password).into_owned();
            env.push((addon.env_name.clone(), addon_url(&addon, &password)));
        }
        Ok(env)
    }

    /// The add-on endpoints the project's code may connect to.
    pub(crate) async fn addon_reach(
        &self,
        project_id: &str,
        target: &DeployTarget,
    ) -> Vec<SocketAddrV4> {
        match self.linked(project_id, target).await {
            Ok(addons) => addons
                .iter()
                .map(|addon| SocketAddrV4::new(addon.address, addon.port))
                .collect(),
            Err(error) => {
                tracing::warn!(%error, "cannot read the project's add-on links");
                Vec::new()
            }
        }
    }
}
