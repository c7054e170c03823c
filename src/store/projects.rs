//! Projects (with their slug index and sandbox uid) and their sealed env vars.

use redb::ReadableTable;

use super::records::{EnvScope, ProjectRecord, ProjectState};
use super::{
    all_records, decode, encode, get_record, meta_u64, put_record, set_meta_u64, tables, Result,
    Store,
};

/// The most env vars a project may hold.
pub const MAX_ENV_VARS: usize = 500;

pub enum CreateProject {
    Created(ProjectRecord),
    SlugTaken(ProjectRecord),
    /// Every uid of `sandbox.uid_base`'s range was handed out (uids are never reused).
    NoUidLeft,
}

pub enum SetEnvVars {
    Stored,
    TooMany { would_have: usize },
}

/// One env var as the store keeps it.
pub struct StoredEnvVar {
    pub key: String,
    /// nonce ‖ ciphertext ‖ tag (`Secrets::seal_env`).
    pub sealed: Vec<u8>,
    /// Where it applies; `None`: production and every preview.
    pub scope: Option<EnvScope>,
}

impl Store {
    /// Creates a project with `slug`, or returns the existing one with that slug.
    pub fn create_project(&self, slug: &str, uid_base: u32, now_ms: u64) -> Result<CreateProject> {
        let txn = self.write()?;
        let result = {
            let slugs = txn.open_table(tables::PROJECT_SLUGS)?;
            let existing = slugs.get(slug)?.map(|id| id.value().to_owned());
            drop(slugs);
            match existing {
                Some(id) => {
                    let projects = txn.open_table(tables::PROJECTS)?;
                    let record: Option<ProjectRecord> = get_record(&projects, "projects", &id)?;
                    match record {
                        Some(record) => CreateProject::SlugTaken(record),
                        None => {
                            return Err(super::StoreError::Corrupt {
                                table: "project_slugs",
                                message: format!("{slug} → {id} dangles"),
                            })
                        }
                    }
                }
                None => {
                    let index = meta_u64(&txn, "next_uid_index")?;
                    let uid = u32::try_from(index)
                        .ok()
                        .filter(|index| *index < crate::config::PROJECT_UID_RANGE)
                        .and_then(|index| uid_base.checked_add(index));
                    let Some(uid) = uid else {
                        return Ok(CreateProject::NoUidLeft);
                    };
                    set_meta_u64(&txn, "next_uid_index", index + 1)?;
                    let record = ProjectRecord {
                        v: 1,
                        id: crate::ids::new_id("prj_"),
                        slug: slug.to_owned(),
                        created_ms: now_ms,
                        live_deployment_id: None,
                        state: ProjectState::New,
                        uid,
                        domains: Vec::new(),
                        settings: Default::default(),
                        webhook_secret_sealed: None,
                        sleeping: None,
                    };
                    put_record(&mut txn.open_table(tables::PROJECTS)?, &record.id, &record)?;
                    txn.open_table(tables::PROJECT_SLUGS)?
                        .insert(slug, record.id.as_str())?;
                    CreateProject::Created(record)
                }
            }
        };
        txn.commit()?;
        Ok(result)
    }

    /// Looks a project up by `prj_…` id or by slug.
    pub fn find_project(&self, id_or_slug: &str) -> Result<Option<ProjectRecord>> {
        let txn = self.read()?;
        let projects = txn.open_table(tables::PROJECTS)?;
        if id_or_slug.starts_with("prj_") {
            return get_record(&projects, "projects", id_or_slug);
        }
        let slugs = txn.open_table(tables::PROJECT_SLUGS)?;
        let Some(id) = slugs.get(id_or_slug)? else {
            return Ok(None);
        };
        get_record(&projects, "projects", id.value())
    }

    pub fn list_projects(&self) -> Result<Vec<ProjectRecord>> {
        let txn = self.read()?;
        let mut projects: Vec<ProjectRecord> =
            all_records(&txn.open_table(tables::PROJECTS)?, "projects")?;
        projects.sort_by(|a, b| a.created_ms.cmp(&b.created_ms).then(a.id.cmp(&b.id)));
        Ok(projects)
    }

    pub fn put_project(&self, record: &ProjectRecord) -> Result<()> {
        let txn = self.write()?;
        put_record(&mut txn.open_table(tables::PROJECTS)?, &record.id, record)?;
        txn.commit()?;
        Ok(())
    }

    /// Removes a project and everything that belongs to it, in one transaction. Returns the
    /// removed deployments' ids and source hashes so the caller can clean files up.
    pub fn delete_project(&self, project_id: &str) -> Result<Option<DeletedProject>> {
        let txn = self.write()?;
        let deleted = {
            let mut projects = txn.open_table(tables::PROJECTS)?;
            let record: Option<ProjectRecord> = get_record(&projects, "projects", project_id)?;
            let Some(record) = record else {
                return Ok(None);
            };
            projects.remove(project_id)?;
            txn.open_table(tables::PROJECT_SLUGS)?
                .remove(record.slug.as_str())?;
            let mut env = txn.open_table(tables::ENV_VARS)?;
            env.retain_in((project_id, "")..=(project_id, "\u{10FFFF}"), |_, _| false)?;
            let mut scopes = txn.open_table(tables::ENV_VAR_SCOPES)?;
            scopes.retain_in((project_id, "")..=(project_id, "\u{10FFFF}"), |_, _| false)?;
            let deployment_ids = super::deployments::remove_project_deployments(&txn, project_id)?;
            let sources = super::deployments::remove_project_sources(&txn, project_id)?;
            let mut domains = txn.open_table(tables::DOMAINS)?;
            for domain in &record.domains {
                domains.remove(domain.as_str())?;
            }
            super::git::remove_project_git(&txn, project_id)?;
            txn.open_table(tables::FORMATIONS)?.remove(project_id)?;
            let run_ids = super::jobs::remove_project_jobs(&txn, project_id)?;
            DeletedProject {
                project: record,
                deployment_ids,
                run_ids,
                source_sha256s: sources,
            }
        };
        txn.commit()?;
        Ok(Some(deleted))
    }

    /// Stores all `vars` (already sealed) or none of them, each with `scope` (`None`: they
    /// apply everywhere, and a scope they had is dropped).
    pub fn set_env_vars(
        &self,
        project_id: &str,
        vars: &[(String, Vec<u8>)],
        scope: Option<&EnvScope>,
    ) -> Result<SetEnvVars> {
        let txn = self.write()?;
        {
            let mut table = txn.open_table(tables::ENV_VARS)?;
            let mut count = 0usize;
            for entry in table.range((project_id, "")..=(project_id, "\u{10FFFF}"))? {
                let (key, _) = entry?;
                if !vars.iter().any(|(k, _)| k == key.value().1) {
                    count += 1;
                }
            }
            let would_have = count + vars.len();
            if would_have > MAX_ENV_VARS {
                return Ok(SetEnvVars::TooMany { would_have });
            }
            let mut scopes = txn.open_table(tables::ENV_VAR_SCOPES)?;
            for (key, sealed) in vars {
                table.insert((project_id, key.as_str()), sealed.as_slice())?;
                match scope {
                    Some(scope) => {
                        scopes.insert((project_id, key.as_str()), encode(scope).as_slice())?;
                    }
                    None => {
                        scopes.remove((project_id, key.as_str()))?;
                    }
                }
            }
        }
        txn.commit()?;
        Ok(SetEnvVars::Stored)
    }

    /// The project's variables, sorted by name, each with its scope.
    pub fn env_vars(&self, project_id: &str) -> Result<Vec<StoredEnvVar>> {
        let txn = self.read()?;
        let table = txn.open_table(tables::ENV_VARS)?;
        let scopes = txn.open_table(tables::ENV_VAR_SCOPES)?;
        let mut out = Vec::new();
        for entry in table.range((project_id, "")..=(project_id, "\u{10FFFF}"))? {
            let (key, value) = entry?;
            let key = key.value().1.to_owned();
            let scope = match scopes.get((project_id, key.as_str()))? {
                Some(scope) => Some(decode("env_var_scopes", scope.value())?),
                None => None,
            };
            out.push(StoredEnvVar {
                key,
                sealed: value.value().to_vec(),
                scope,
            });
        }
        Ok(out)
    }

    /// Returns false when the key did not exist.
    pub fn delete_env_var(&self, project_id: &str, key: &str) -> Result<bool> {
        let txn = self.write()?;
        let existed = txn
            .open_table(tables::ENV_VARS)?
            .remove((project_id, key))?
            .is_some();
        txn.open_table(tables::ENV_VAR_SCOPES)?
            .remove((project_id, key))?;
        txn.commit()?;
        Ok(existed)
    }
}

pub struct DeletedProject {
    pub project: ProjectRecord,
    pub deployment_ids: Vec<String>,
    /// Its one-off and cron runs (`run_…`), whose log channels go too.
    pub run_ids: Vec<String>,
    pub source_sha256s: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::records::Environment;

    #[test]
    fn a_variable_stored_without_a_scope_reads_as_everywhere_and_scopes_follow_sets() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        // What every variable looked like before scopes: a row in `env_vars` alone.
        let old = [("OLD".to_owned(), b"sealed".to_vec())];
        store.set_env_vars("prj_a", &old, None).unwrap();
        let preview = EnvScope {
            v: 1,
            environments: vec![Environment::Preview],
            branch: Some("feature-x".into()),
        };
        let new = [("NEW".to_owned(), b"sealed".to_vec())];
        store.set_env_vars("prj_a", &new, Some(&preview)).unwrap();
        let read = |store: &Store| -> Vec<(String, Option<EnvScope>)> {
            let vars = store.env_vars("prj_a").unwrap();
            vars.into_iter().map(|var| (var.key, var.scope)).collect()
        };
        assert_eq!(
            read(&store),
            [("NEW".into(), Some(preview.clone())), ("OLD".into(), None)]
        );
        // Reopened (as after an upgrade), the same.
        drop(store);
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(read(&store)[0].1, Some(preview));
        // Set again without a scope, it applies everywhere; deleted, its scope goes too.
        store.set_env_vars("prj_a", &new, None).unwrap();
        assert_eq!(read(&store), [("NEW".into(), None), ("OLD".into(), None)]);
        let scoped = EnvScope {
            v: 1,
            environments: vec![Environment::Production],
            branch: None,
        };
        store.set_env_vars("prj_a", &new, Some(&scoped)).unwrap();
        assert!(store.delete_env_var("prj_a", "NEW").unwrap());
        store.set_env_vars("prj_a", &new, None).unwrap();
        assert_eq!(read(&store)[0], ("NEW".into(), None));
    }
}
