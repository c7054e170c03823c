//! Deployments, provisioning runs and uploaded sources.

use super::records::{DeploymentRecord, RunRecord, SourceRecord};
use super::{all_records, get_record, put_record, tables, Result, Store};

impl Store {
    pub fn put_deployment(&self, record: &DeploymentRecord) -> Result<()> {
        let txn = self.write()?;
        put_record(
            &mut txn.open_table(tables::DEPLOYMENTS)?,
            &record.id,
            record,
        )?;
        txn.commit()?;
        Ok(())
    }

    pub fn deployment(&self, id: &str) -> Result<Option<DeploymentRecord>> {
        let txn = self.read()?;
        get_record(&txn.open_table(tables::DEPLOYMENTS)?, "deployments", id)
    }

    /// A project's deployments, newest first.
    pub fn project_deployments(&self, project_id: &str) -> Result<Vec<DeploymentRecord>> {
        let txn = self.read()?;
        let all: Vec<DeploymentRecord> =
            all_records(&txn.open_table(tables::DEPLOYMENTS)?, "deployments")?;
        let mut mine: Vec<_> = all
            .into_iter()
            .filter(|d| d.project_id == project_id)
            .collect();
        mine.sort_by(|a, b| b.created_ms.cmp(&a.created_ms).then(b.id.cmp(&a.id)));
        Ok(mine)
    }

    pub fn all_deployments(&self) -> Result<Vec<DeploymentRecord>> {
        let txn = self.read()?;
        all_records(&txn.open_table(tables::DEPLOYMENTS)?, "deployments")
    }

    /// Writes a run and its deployment together (one commit).
    pub fn put_run_and_deployment(
        &self,
        run: &RunRecord,
        deployment: &DeploymentRecord,
    ) -> Result<()> {
        let txn = self.write()?;
        put_record(&mut txn.open_table(tables::RUNS)?, &run.id, run)?;
        put_record(
            &mut txn.open_table(tables::DEPLOYMENTS)?,
            &deployment.id,
            deployment,
        )?;
        txn.commit()?;
        Ok(())
    }

    pub fn put_run(&self, run: &RunRecord) -> Result<()> {
        let txn = self.write()?;
        put_record(&mut txn.open_table(tables::RUNS)?, &run.id, run)?;
        txn.commit()?;
        Ok(())
    }

    /// Records a run's step progress without waiting for the disk: the next durable commit
    /// (the run's end, or any other write) persists it. A crash in between loses only progress
    /// of a run that restart recovery marks `INTERRUPTED` anyway.
    pub fn put_run_progress(&self, run: &RunRecord) -> Result<()> {
        let mut txn = self.write()?;
        txn.set_durability(redb::Durability::None)
            .map_err(|e| super::StoreError::Db(e.to_string()))?;
        put_record(&mut txn.open_table(tables::RUNS)?, &run.id, run)?;
        txn.commit()?;
        Ok(())
    }

    pub fn run(&self, id: &str) -> Result<Option<RunRecord>> {
        let txn = self.read()?;
        get_record(&txn.open_table(tables::RUNS)?, "runs", id)
    }

    pub fn all_runs(&self) -> Result<Vec<RunRecord>> {
        let txn = self.read()?;
        all_records(&txn.open_table(tables::RUNS)?, "runs")
    }

    pub fn project_runs(&self, project_id: &str) -> Result<Vec<RunRecord>> {
        Ok(self
            .all_runs()?
            .into_iter()
            .filter(|r| r.project_id == project_id)
            .collect())
    }

    pub fn put_source(&self, record: &SourceRecord) -> Result<()> {
        let txn = self.write()?;
        put_record(&mut txn.open_table(tables::SOURCES)?, &record.id, record)?;
        txn.commit()?;
        Ok(())
    }

    pub fn source(&self, id: &str) -> Result<Option<SourceRecord>> {
        let txn = self.read()?;
        get_record(&txn.open_table(tables::SOURCES)?, "sources", id)
    }

    /// The project's most recent upload.
    pub fn latest_source(&self, project_id: &str) -> Result<Option<SourceRecord>> {
        let txn = self.read()?;
        let all: Vec<SourceRecord> = all_records(&txn.open_table(tables::SOURCES)?, "sources")?;
        Ok(all
            .into_iter()
            .filter(|s| s.project_id == project_id)
            .max_by_key(|s| (s.created_ms, s.id.clone())))
    }

    /// Whether any source record (of any project) still refers to this archive.
    pub fn source_hash_in_use(&self, sha256: &str) -> Result<bool> {
        let txn = self.read()?;
        let all: Vec<SourceRecord> = all_records(&txn.open_table(tables::SOURCES)?, "sources")?;
        Ok(all.iter().any(|s| s.sha256 == sha256))
    }
}

/// Removes a project's deployments, runs and logs inside `txn`; returns the deployment ids.
pub(super) fn remove_project_deployments(
    txn: &redb::WriteTransaction,
    project_id: &str,
) -> Result<Vec<String>> {
    let mut deployments = txn.open_table(tables::DEPLOYMENTS)?;
    let all: Vec<DeploymentRecord> = all_records(&deployments, "deployments")?;
    let ids: Vec<String> = all
        .into_iter()
        .filter(|d| d.project_id == project_id)
        .map(|d| d.id)
        .collect();
    let mut logs = txn.open_table(tables::LOGS)?;
    let mut stats = txn.open_table(tables::LOG_STATS)?;
    for id in &ids {
        deployments.remove(id.as_str())?;
        logs.retain_in((id.as_str(), 0)..=(id.as_str(), u64::MAX), |_, _| false)?;
        stats.remove(id.as_str())?;
    }
    let mut runs = txn.open_table(tables::RUNS)?;
    let all_runs: Vec<RunRecord> = all_records(&runs, "runs")?;
    for run in all_runs.into_iter().filter(|r| r.project_id == project_id) {
        runs.remove(run.id.as_str())?;
    }
    Ok(ids)
}

/// Removes a project's source records inside `txn`; returns their archive hashes.
pub(super) fn remove_project_sources(
    txn: &redb::WriteTransaction,
    project_id: &str,
) -> Result<Vec<String>> {
    let mut sources = txn.open_table(tables::SOURCES)?;
    let all: Vec<SourceRecord> = all_records(&sources, "sources")?;
    let mut hashes = Vec::new();
    for source in all.into_iter().filter(|s| s.project_id == project_id) {
        sources.remove(source.id.as_str())?;
        hashes.push(source.sha256);
    }
    Ok(hashes)
}

/// The store's half of a switch, in the caller's transaction: the deployment it replaces (if
/// any) becomes inactive; the new one and its finished run are written.
pub(super) fn write_switch(
    txn: &redb::WriteTransaction,
    previous: Option<&str>,
    deployment: &DeploymentRecord,
    run: &RunRecord,
) -> Result<()> {
    use super::records::DeploymentState;
    let mut deployments = txn.open_table(tables::DEPLOYMENTS)?;
    if let Some(previous_id) = previous {
        let old: Option<DeploymentRecord> = get_record(&deployments, "deployments", previous_id)?;
        if let Some(mut old) = old {
            old.state = DeploymentState::Inactive;
            put_record(&mut deployments, previous_id, &old)?;
        }
    }
    put_record(&mut deployments, &deployment.id, deployment)?;
    put_record(&mut txn.open_table(tables::RUNS)?, &run.id, run)?;
    Ok(())
}

impl Store {
    /// Makes `deployment` the project's live one and records the finished run, in one commit.
    /// Returns the previously live deployment's id (now `Inactive`), if any.
    pub fn activate(
        &self,
        run: &RunRecord,
        deployment: &DeploymentRecord,
    ) -> Result<Option<String>> {
        use super::records::{ProjectRecord, ProjectState};
        let txn = self.write()?;
        let previous = {
            let mut projects = txn.open_table(tables::PROJECTS)?;
            let project: Option<ProjectRecord> =
                get_record(&projects, "projects", &deployment.project_id)?;
            let Some(mut project) = project else {
                return Ok(None);
            };
            let previous = project
                .live_deployment_id
                .replace(deployment.id.clone())
                .filter(|p| *p != deployment.id);
            project.state = ProjectState::Live;
            put_record(&mut projects, &project.id, &project)?;
            write_switch(&txn, previous.as_deref(), deployment, run)?;
            previous
        };
        txn.commit()?;
        Ok(previous)
    }

    /// Records a failed or canceled run; a project that never went live becomes `failed`.
    pub fn record_unsuccessful(
        &self,
        run: &RunRecord,
        deployment: &DeploymentRecord,
        failed: bool,
    ) -> Result<()> {
        use super::records::{ProjectRecord, ProjectState};
        let txn = self.write()?;
        {
            let mut projects = txn.open_table(tables::PROJECTS)?;
            let project: Option<ProjectRecord> =
                get_record(&projects, "projects", &deployment.project_id)?;
            if let Some(mut project) = project {
                if failed && project.live_deployment_id.is_none() {
                    project.state = ProjectState::Failed;
                    put_record(&mut projects, &project.id, &project)?;
                }
            }
            put_record(
                &mut txn.open_table(tables::DEPLOYMENTS)?,
                &deployment.id,
                deployment,
            )?;
            put_record(&mut txn.open_table(tables::RUNS)?, &run.id, run)?;
        }
        txn.commit()?;
        Ok(())
    }
}
