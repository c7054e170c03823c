//! Each project's formation (process types' instances, limits and deploy strategy), as the
//! API set it; types it does not name run with the defaults.

use super::{get_record, put_record, tables, Result, Store};
use crate::formation::StoredFormation;

impl Store {
    /// The project's stored formation (empty when nothing was ever set).
    pub fn formation(&self, project_id: &str) -> Result<StoredFormation> {
        let txn = self.read()?;
        let table = txn.open_table(tables::FORMATIONS)?;
        Ok(get_record(&table, "formations", project_id)?.unwrap_or_default())
    }

    pub fn put_formation(&self, project_id: &str, formation: &StoredFormation) -> Result<()> {
        let txn = self.write()?;
        put_record(
            &mut txn.open_table(tables::FORMATIONS)?,
            project_id,
            formation,
        )?;
        txn.commit()?;
        Ok(())
    }
}
