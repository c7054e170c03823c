//! Git-driven deploys in the store: project settings and the webhook secret (on the project
//! record), previews (one row per project and name, pointing at the deployment it serves),
//! deploy hooks (keyed by the hash of their secret), the webhook deliveries seen (so a
//! redelivery starts nothing) and each branch's last accepted push ([`BranchHead`], so a
//! replayed older one starts nothing). `autodeploy/` and the pipeline drive them.

use redb::ReadableTable;
use serde::{Deserialize, Serialize};

use super::records::{
    DeployHookRecord, DeploymentRecord, DeploymentState, PreviewRecord, ProjectRecord, RunRecord,
};
use super::{all_records, decode, encode, get_record, put_record, tables, Result, Store};

/// How long a webhook delivery id is remembered.
const DELIVERY_MEMORY_MS: u64 = 7 * 86_400_000;

/// What [`Store::activate_preview`] found.
#[derive(Debug)]
pub enum PreviewSwitch {
    /// Recorded; the deployment it replaces, if any.
    Switched(Option<String>),
    /// The preview was torn down while its run was in flight.
    Gone,
}

/// What the project last accepted from one branch (`autodeploy::heads` decides).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BranchHead {
    pub v: u32,
    /// The `after` of the last push acted on.
    pub head: String,
    /// Its commit time (Unix ms), when the payload gave it.
    pub committed_ms: Option<u64>,
    /// Earlier heads, oldest first (bounded by `autodeploy::heads`).
    pub superseded: Vec<String>,
    pub updated_ms: u64,
}

impl Store {
    /// Reads a branch's head and, if `decide` returns a new one, stores it, in one
    /// transaction (two deliveries at once cannot both pass). `Ok(Err(_))`: `decide` refused
    /// and nothing changed; `Ok(Ok(previous))`: the new head is stored.
    pub fn advance_branch<T>(
        &self,
        project_id: &str,
        branch: &str,
        decide: impl FnOnce(Option<&BranchHead>) -> std::result::Result<BranchHead, T>,
    ) -> Result<std::result::Result<Option<BranchHead>, T>> {
        let txn = self.write()?;
        let outcome = {
            let mut table = txn.open_table(tables::BRANCH_HEADS)?;
            let known: Option<BranchHead> = match table.get((project_id, branch))? {
                Some(value) => Some(decode("branch_heads", value.value())?),
                None => None,
            };
            match decide(known.as_ref()) {
                Err(refusal) => return Ok(Err(refusal)),
                Ok(head) => {
                    table.insert((project_id, branch), encode(&head).as_slice())?;
                    Ok(known)
                }
            }
        };
        txn.commit()?;
        Ok(outcome)
    }

    /// Puts `previous` back as the branch's head if the head is still `expected` (a push
    /// that was accepted but whose run could not start).
    pub fn restore_branch(
        &self,
        project_id: &str,
        branch: &str,
        expected: &str,
        previous: Option<&BranchHead>,
    ) -> Result<()> {
        let txn = self.write()?;
        {
            let mut table = txn.open_table(tables::BRANCH_HEADS)?;
            let current: Option<BranchHead> = match table.get((project_id, branch))? {
                Some(value) => Some(decode("branch_heads", value.value())?),
                None => None,
            };
            if current.is_some_and(|head| head.head == expected) {
                match previous {
                    Some(previous) => {
                        table.insert((project_id, branch), encode(previous).as_slice())?;
                    }
                    None => {
                        table.remove((project_id, branch))?;
                    }
                }
            }
        }
        txn.commit()?;
        Ok(())
    }

    /// Changes a project record in one transaction; `None` when there is no such project.
    pub fn update_project(
        &self,
        project_id: &str,
        change: impl FnOnce(&mut ProjectRecord),
    ) -> Result<Option<ProjectRecord>> {
        let txn = self.write()?;
        let updated = {
            let mut projects = txn.open_table(tables::PROJECTS)?;
            let project: Option<ProjectRecord> = get_record(&projects, "projects", project_id)?;
            let Some(mut project) = project else {
                return Ok(None);
            };
            change(&mut project);
            put_record(&mut projects, &project.id, &project)?;
            project
        };
        txn.commit()?;
        Ok(Some(updated))
    }

    /// Records that a run for preview `name` started (made or updated, most recent first).
    /// Past `max` previews, the least recently updated others are removed and returned, for
    /// the caller to tear down.
    pub fn start_preview(&self, record: &PreviewRecord, max: usize) -> Result<Vec<PreviewRecord>> {
        let txn = self.write()?;
        let evicted = {
            let mut table = txn.open_table(tables::PREVIEWS)?;
            let key = (record.project_id.as_str(), record.name.as_str());
            let mut stored = record.clone();
            if let Some(old) = table.get(key)? {
                let old: PreviewRecord = decode("previews", old.value())?;
                stored.deployment_id = old.deployment_id;
                stored.sleeping = old.sleeping;
            }
            table.insert(key, encode(&stored).as_slice())?;
            let mut others = previews_in(&table, &record.project_id)?;
            others.retain(|p| p.name != record.name);
            others.sort_by_key(|p| p.updated_ms);
            let excess = (others.len() + 1).saturating_sub(max);
            let evicted: Vec<PreviewRecord> = others.into_iter().take(excess).collect();
            for preview in &evicted {
                table.remove((preview.project_id.as_str(), preview.name.as_str()))?;
            }
            evicted
        };
        txn.commit()?;
        Ok(evicted)
    }

    /// A preview run succeeded: the preview serves `deployment` from now on (the one it
    /// replaces becomes inactive), all in one transaction with the run.
    pub fn activate_preview(
        &self,
        run: &RunRecord,
        deployment: &DeploymentRecord,
        name: &str,
    ) -> Result<PreviewSwitch> {
        let txn = self.write()?;
        let outcome = {
            let mut previews = txn.open_table(tables::PREVIEWS)?;
            let key = (deployment.project_id.as_str(), name);
            let preview: Option<PreviewRecord> = match previews.get(key)? {
                Some(value) => Some(decode("previews", value.value())?),
                None => None,
            };
            let Some(mut preview) = preview else {
                return Ok(PreviewSwitch::Gone);
            };
            let previous = preview
                .deployment_id
                .replace(deployment.id.clone())
                .filter(|p| *p != deployment.id);
            previews.insert(key, encode(&preview).as_slice())?;
            super::deployments::write_switch(&txn, previous.as_deref(), deployment, run)?;
            PreviewSwitch::Switched(previous)
        };
        txn.commit()?;
        Ok(outcome)
    }

    /// Changes preview `name` of a project in one transaction; `None` when there is none.
    pub fn update_preview(
        &self,
        project_id: &str,
        name: &str,
        change: impl FnOnce(&mut PreviewRecord),
    ) -> Result<Option<PreviewRecord>> {
        let txn = self.write()?;
        let updated = {
            let mut table = txn.open_table(tables::PREVIEWS)?;
            let preview: Option<PreviewRecord> = match table.get((project_id, name))? {
                Some(value) => Some(decode("previews", value.value())?),
                None => None,
            };
            let Some(mut preview) = preview else {
                return Ok(None);
            };
            change(&mut preview);
            table.insert((project_id, name), encode(&preview).as_slice())?;
            preview
        };
        txn.commit()?;
        Ok(Some(updated))
    }

    pub fn previews_of(&self, project_id: &str) -> Result<Vec<PreviewRecord>> {
        let txn = self.read()?;
        previews_in(&txn.open_table(tables::PREVIEWS)?, project_id)
    }

    pub fn all_previews(&self) -> Result<Vec<PreviewRecord>> {
        let txn = self.read()?;
        let table = txn.open_table(tables::PREVIEWS)?;
        let mut out = Vec::new();
        for entry in table.iter()? {
            out.push(decode("previews", entry?.1.value())?);
        }
        Ok(out)
    }

    /// Removes a preview; its deployment records stay (marked inactive) for the history.
    pub fn remove_preview(&self, project_id: &str, name: &str) -> Result<Option<PreviewRecord>> {
        let txn = self.write()?;
        let removed = {
            let mut table = txn.open_table(tables::PREVIEWS)?;
            let removed: Option<PreviewRecord> = match table.remove((project_id, name))? {
                Some(value) => Some(decode("previews", value.value())?),
                None => None,
            };
            if let Some(id) = removed.as_ref().and_then(|p| p.deployment_id.clone()) {
                let mut deployments = txn.open_table(tables::DEPLOYMENTS)?;
                let record: Option<DeploymentRecord> =
                    get_record(&deployments, "deployments", &id)?;
                if let Some(mut record) = record {
                    record.state = DeploymentState::Inactive;
                    put_record(&mut deployments, &id, &record)?;
                }
            }
            removed
        };
        txn.commit()?;
        Ok(removed)
    }

    pub fn insert_deploy_hook(&self, record: &DeployHookRecord) -> Result<()> {
        let txn = self.write()?;
        put_record(
            &mut txn.open_table(tables::DEPLOY_HOOKS)?,
            &record.secret_sha256,
            record,
        )?;
        txn.commit()?;
        Ok(())
    }

    /// The project's deploy hooks, oldest first.
    pub fn deploy_hooks_of(&self, project_id: &str) -> Result<Vec<DeployHookRecord>> {
        let txn = self.read()?;
        let mut hooks: Vec<DeployHookRecord> =
            all_records(&txn.open_table(tables::DEPLOY_HOOKS)?, "deploy_hooks")?;
        hooks.retain(|hook| hook.project_id == project_id);
        hooks.sort_by(|a, b| a.created_ms.cmp(&b.created_ms).then(a.id.cmp(&b.id)));
        Ok(hooks)
    }

    pub fn deploy_hook_by_secret(&self, secret_sha256: &str) -> Result<Option<DeployHookRecord>> {
        let txn = self.read()?;
        get_record(
            &txn.open_table(tables::DEPLOY_HOOKS)?,
            "deploy_hooks",
            secret_sha256,
        )
    }

    pub fn delete_deploy_hook(&self, project_id: &str, id: &str) -> Result<bool> {
        let txn = self.write()?;
        let removed = {
            let mut table = txn.open_table(tables::DEPLOY_HOOKS)?;
            let hooks: Vec<DeployHookRecord> = all_records(&table, "deploy_hooks")?;
            match hooks
                .into_iter()
                .find(|hook| hook.project_id == project_id && hook.id == id)
            {
                Some(hook) => {
                    table.remove(hook.secret_sha256.as_str())?;
                    true
                }
                None => false,
            }
        };
        txn.commit()?;
        Ok(removed)
    }

    /// True the first time `delivery_id` is seen for the project (within 7 days); forgets
    /// older ones on the way.
    pub fn first_delivery(&self, project_id: &str, delivery_id: &str, now_ms: u64) -> Result<bool> {
        let txn = self.write()?;
        let first = {
            let mut table = txn.open_table(tables::WEBHOOK_DELIVERIES)?;
            let cutoff = now_ms.saturating_sub(DELIVERY_MEMORY_MS);
            table.retain(|_, at| at >= cutoff)?;
            let seen = table.get((project_id, delivery_id))?.is_some();
            if !seen {
                table.insert((project_id, delivery_id), now_ms)?;
            }
            !seen
        };
        txn.commit()?;
        Ok(first)
    }
}

fn previews_in(
    table: &impl ReadableTable<(&'static str, &'static str), &'static [u8]>,
    project_id: &str,
) -> Result<Vec<PreviewRecord>> {
    let mut out = Vec::new();
    for entry in table.range((project_id, "")..=(project_id, "\u{10FFFF}"))? {
        out.push(decode("previews", entry?.1.value())?);
    }
    Ok(out)
}

/// Drops a deleted project's previews, deploy hooks and remembered deliveries (inside
/// `Store::delete_project`'s transaction).
pub(super) fn remove_project_git(txn: &redb::WriteTransaction, project_id: &str) -> Result<()> {
    txn.open_table(tables::PREVIEWS)?
        .retain_in((project_id, "")..=(project_id, "\u{10FFFF}"), |_, _| false)?;
    txn.open_table(tables::WEBHOOK_DELIVERIES)?
        .retain_in((project_id, "")..=(project_id, "\u{10FFFF}"), |_, _| false)?;
    txn.open_table(tables::BRANCH_HEADS)?
        .retain_in((project_id, "")..=(project_id, "\u{10FFFF}"), |_, _| false)?;
    let mut hooks = txn.open_table(tables::DEPLOY_HOOKS)?;
    let all: Vec<DeployHookRecord> = all_records(&hooks, "deploy_hooks")?;
    for hook in all.into_iter().filter(|hook| hook.project_id == project_id) {
        hooks.remove(hook.secret_sha256.as_str())?;
    }
    Ok(())
}
