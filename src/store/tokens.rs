//! API tokens: records keyed by id, plus an index from the secret's SHA-256 to the id.

use super::records::TokenRecord;
use super::{all_records, get_record, put_record, tables, Result, Store};
use redb::ReadableTableMetadata;

impl Store {
    pub fn insert_token(&self, record: &TokenRecord, hash: &[u8; 32]) -> Result<()> {
        let txn = self.write()?;
        put_record(&mut txn.open_table(tables::TOKENS)?, &record.id, record)?;
        txn.open_table(tables::TOKEN_HASHES)?
            .insert(hash.as_slice(), record.id.as_str())?;
        txn.commit()?;
        Ok(())
    }

    pub fn list_tokens(&self) -> Result<Vec<TokenRecord>> {
        let txn = self.read()?;
        let mut tokens: Vec<TokenRecord> = all_records(&txn.open_table(tables::TOKENS)?, "tokens")?;
        tokens.sort_by(|a, b| a.created_ms.cmp(&b.created_ms).then(a.id.cmp(&b.id)));
        Ok(tokens)
    }

    /// Returns the removed record, or `None` if there was no such token.
    pub fn delete_token(&self, id: &str) -> Result<Option<TokenRecord>> {
        let txn = self.write()?;
        let removed = {
            let mut tokens = txn.open_table(tables::TOKENS)?;
            let record: Option<TokenRecord> = get_record(&tokens, "tokens", id)?;
            if let Some(record) = &record {
                tokens.remove(id)?;
                let hash = crate::ids::hex_decode(&record.hash).unwrap_or_default();
                txn.open_table(tables::TOKEN_HASHES)?
                    .remove(hash.as_slice())?;
            }
            record
        };
        txn.commit()?;
        Ok(removed)
    }

    /// Records the last use of tokens (batched by the caller).
    pub fn touch_tokens(&self, uses: &[(String, u64)]) -> Result<()> {
        let txn = self.write()?;
        {
            let mut tokens = txn.open_table(tables::TOKENS)?;
            for (id, at) in uses {
                let record: Option<TokenRecord> = get_record(&tokens, "tokens", id)?;
                if let Some(mut record) = record {
                    record.last_used_ms = Some(*at);
                    put_record(&mut tokens, id, &record)?;
                }
            }
        }
        txn.commit()?;
        Ok(())
    }

    /// The ids of the projects these slugs or ids name now; `Err` with the first name that
    /// names none.
    pub fn project_ids_of(
        &self,
        names: &[String],
    ) -> Result<std::result::Result<Vec<String>, String>> {
        let mut ids = Vec::with_capacity(names.len());
        for name in names {
            match self.find_project(name)? {
                Some(project) => ids.push(project.id),
                None => return Ok(Err(name.clone())),
            }
        }
        Ok(Ok(ids))
    }

    /// Binds the slug grants of version 1 token records to the projects that hold those slugs
    /// now (a slug that names none grants nothing), so that no later project is covered by
    /// them. Returns how many records it bound.
    pub fn bind_token_grants(&self) -> Result<usize> {
        let txn = self.write()?;
        let mut bound = 0;
        {
            let mut tokens = txn.open_table(tables::TOKENS)?;
            let records: Vec<TokenRecord> = all_records(&tokens, "tokens")?;
            for mut record in records {
                let Some(slugs) = record
                    .projects
                    .as_ref()
                    .filter(|_| record.project_ids.is_none())
                else {
                    continue;
                };
                let mut ids = Vec::new();
                for slug in slugs {
                    if let Some(project) = self.find_project(slug)? {
                        ids.push(project.id);
                    }
                }
                record.project_ids = Some(ids);
                record.v = record.v.max(2);
                put_record(&mut tokens, &record.id.clone(), &record)?;
                bound += 1;
            }
        }
        txn.commit()?;
        Ok(bound)
    }

    pub fn token_hash_count(&self) -> Result<u64> {
        let txn = self.read()?;
        Ok(txn.open_table(tables::TOKEN_HASHES)?.len()?)
    }
}
