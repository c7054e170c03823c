//! Custom domains: one row per name in the `domains` table (so a name belongs to one project
//! at most) and the same names on the project record (so a project shows its domains without
//! another read). Both change in one transaction. The rules a name must follow are checked
//! before (`domains::name`); the rules that depend on what is stored are checked here, inside
//! the transaction that writes, so two requests cannot both take a name: a name held by
//! another project is taken unless that claim was never proven and this one is (a squatter's
//! pending claim does not block the owner); a name under another project's proven domain is
//! taken (`login.victim.com` under `victim.com`).

use serde::{Deserialize, Serialize};

use super::records::ProjectRecord;
use super::{all_records, get_record, put_record, tables, Result, Store};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DomainRecord {
    pub v: u32,
    /// Lowercase, IDNA names in punycode, no trailing dot.
    pub domain: String,
    pub project_id: String,
    /// Visitors of this domain are sent (308) to this host: another domain of the project or
    /// its slug host.
    pub redirect_to: Option<String>,
    pub created_ms: u64,
    /// When ownership was proven (a TXT record, a trusted suffix); `None` while pending: the
    /// name is neither routed nor given a certificate. Records written before proofs existed
    /// have no such field and count as proven (0): they were served already.
    #[serde(default = "proven_before_proofs")]
    pub verified_ms: Option<u64>,
}

fn proven_before_proofs() -> Option<u64> {
    Some(0)
}

/// What [`Store::add_domain`] did.
#[derive(Debug)]
pub enum AddDomain {
    Added(DomainRecord),
    NoProject,
    /// Another project (or this one) holds the name already.
    Taken {
        project_id: String,
    },
    /// Another project holds a proven domain `parent` that this name is under.
    Under {
        parent: String,
    },
    /// The project holds `max` domains already.
    TooMany {
        max: usize,
    },
    /// `redirect_to` is neither a domain of the project nor its slug host.
    BadRedirect,
}

/// What [`Store::remove_domain`] did.
#[derive(Debug)]
pub enum RemoveDomain {
    Removed(DomainRecord),
    NotFound,
    /// Other domains of the project redirect to this one.
    RedirectedTo(Vec<String>),
}

impl Store {
    /// Adds `record.domain` to its project, all or nothing. `slug_host` is the project's own
    /// `<slug>.<apps_domain>`, a valid redirect target.
    pub fn add_domain(
        &self,
        record: &DomainRecord,
        slug_host: impl Fn(&str) -> String,
        max: usize,
    ) -> Result<AddDomain> {
        let txn = self.write()?;
        let outcome = {
            let mut projects = txn.open_table(tables::PROJECTS)?;
            let project: Option<ProjectRecord> =
                get_record(&projects, "projects", &record.project_id)?;
            let Some(mut project) = project else {
                return Ok(AddDomain::NoProject);
            };
            let mut domains = txn.open_table(tables::DOMAINS)?;
            let holder: Option<DomainRecord> = get_record(&domains, "domains", &record.domain)?;
            let displaced = match holder {
                Some(holder)
                    if holder.project_id != record.project_id
                        && holder.verified_ms.is_none()
                        && record.verified_ms.is_some() =>
                {
                    Some(holder)
                }
                Some(holder) => {
                    return Ok(AddDomain::Taken {
                        project_id: holder.project_id,
                    })
                }
                None => None,
            };
            for parent in parents(&record.domain) {
                let parent: Option<DomainRecord> = get_record(&domains, "domains", parent)?;
                if let Some(parent) = parent.filter(|parent| {
                    parent.project_id != record.project_id && parent.verified_ms.is_some()
                }) {
                    return Ok(AddDomain::Under {
                        parent: parent.domain,
                    });
                }
            }
            if project.domains.len() >= max {
                return Ok(AddDomain::TooMany { max });
            }
            if let Some(target) = &record.redirect_to {
                let valid = *target == slug_host(&project.slug)
                    || (project.domains.contains(target) && *target != record.domain);
                if !valid {
                    return Ok(AddDomain::BadRedirect);
                }
            }
            if let Some(displaced) = displaced {
                let squatter: Option<ProjectRecord> =
                    get_record(&projects, "projects", &displaced.project_id)?;
                if let Some(mut squatter) = squatter {
                    squatter.domains.retain(|name| *name != displaced.domain);
                    put_record(&mut projects, &squatter.id, &squatter)?;
                }
            }
            put_record(&mut domains, &record.domain, record)?;
            project.domains.push(record.domain.clone());
            put_record(&mut projects, &project.id, &project)?;
            AddDomain::Added(record.clone())
        };
        txn.commit()?;
        Ok(outcome)
    }

    /// Marks `name` proven at `ms` if `project_id` still holds it; the record as stored.
    pub fn set_domain_verified(
        &self,
        project_id: &str,
        name: &str,
        ms: u64,
    ) -> Result<Option<DomainRecord>> {
        let txn = self.write()?;
        let outcome = {
            let mut domains = txn.open_table(tables::DOMAINS)?;
            let record: Option<DomainRecord> = get_record(&domains, "domains", name)?;
            let Some(mut record) = record.filter(|record| record.project_id == project_id) else {
                return Ok(None);
            };
            record.verified_ms.get_or_insert(ms);
            put_record(&mut domains, name, &record)?;
            Some(record)
        };
        txn.commit()?;
        Ok(outcome)
    }

    /// The domain `name`, whichever project holds it.
    pub fn domain(&self, name: &str) -> Result<Option<DomainRecord>> {
        let txn = self.read()?;
        get_record(&txn.open_table(tables::DOMAINS)?, "domains", name)
    }

    /// The domains of one project, in the order they were added.
    pub fn domains_of(&self, project_id: &str) -> Result<Vec<DomainRecord>> {
        let txn = self.read()?;
        let project: Option<ProjectRecord> =
            get_record(&txn.open_table(tables::PROJECTS)?, "projects", project_id)?;
        let table = txn.open_table(tables::DOMAINS)?;
        let mut records = Vec::new();
        for name in project.map(|p| p.domains).unwrap_or_default() {
            if let Some(record) = get_record::<DomainRecord>(&table, "domains", &name)? {
                records.push(record);
            }
        }
        Ok(records)
    }

    /// Every custom domain (start-up: routes and certificates).
    pub fn all_domains(&self) -> Result<Vec<DomainRecord>> {
        let txn = self.read()?;
        all_records(&txn.open_table(tables::DOMAINS)?, "domains")
    }

    /// Removes `name` from `project_id`, all or nothing; refused while another domain of the
    /// project redirects to it.
    pub fn remove_domain(&self, project_id: &str, name: &str) -> Result<RemoveDomain> {
        let txn = self.write()?;
        let outcome = {
            let mut domains = txn.open_table(tables::DOMAINS)?;
            let record: Option<DomainRecord> = get_record(&domains, "domains", name)?;
            let Some(record) = record.filter(|record| record.project_id == project_id) else {
                return Ok(RemoveDomain::NotFound);
            };
            let mut projects = txn.open_table(tables::PROJECTS)?;
            let project: Option<ProjectRecord> = get_record(&projects, "projects", project_id)?;
            let Some(mut project) = project else {
                return Ok(RemoveDomain::NotFound);
            };
            let mut redirecting = Vec::new();
            for other in &project.domains {
                let other: Option<DomainRecord> = get_record(&domains, "domains", other)?;
                if let Some(other) = other {
                    if other.redirect_to.as_deref() == Some(name) {
                        redirecting.push(other.domain);
                    }
                }
            }
            if !redirecting.is_empty() {
                return Ok(RemoveDomain::RedirectedTo(redirecting));
            }
            domains.remove(name)?;
            project.domains.retain(|domain| domain != name);
            put_record(&mut projects, &project.id, &project)?;
            RemoveDomain::Removed(record)
        };
        txn.commit()?;
        Ok(outcome)
    }

    /// How many custom domains there are in all.
    pub fn domain_count(&self) -> Result<u64> {
        use redb::ReadableTableMetadata;
        let txn = self.read()?;
        Ok(txn.open_table(tables::DOMAINS)?.len()?)
    }
}

/// The names `name` is under, nearest first, down to two labels (`a.b.example.com` →
/// `b.example.com`, `example.com`).
fn parents(name: &str) -> impl Iterator<Item = &str> {
    name.match_indices('.')
        .map(move |(at, _)| &name[at + 1..])
        .filter(|parent| parent.contains('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(domain: &str, project_id: &str, redirect_to: Option<&str>) -> DomainRecord {
        DomainRecord {
            v: 1,
            domain: domain.into(),
            project_id: project_id.into(),
            redirect_to: redirect_to.map(str::to_owned),
            created_ms: 1,
            verified_ms: Some(1),
        }
    }

    /// A pending claim blocks nobody who proves the name; a proven one blocks the names under
    /// it for other projects.
    #[test]
    fn proofs_decide_who_holds_a_name_and_the_names_under_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let victim = project(&store, "victim");
        let squatter = project(&store, "squatter");
        let add = |r: &DomainRecord| store.add_domain(r, slug_host, 10).unwrap();
        let pending = |name: &str, id: &str| DomainRecord {
            verified_ms: None,
            ..record(name, id, None)
        };
        assert!(matches!(
            add(&pending("victim.com", &squatter.id)),
            AddDomain::Added(_)
        ));
        assert!(matches!(
            add(&pending("victim.com", &victim.id)),
            AddDomain::Taken { .. }
        ));
        assert!(matches!(
            add(&record("victim.com", &victim.id, None)),
            AddDomain::Added(_)
        ));
        assert!(store.domains_of(&squatter.id).unwrap().is_empty());
        assert!(store
            .find_project("squatter")
            .unwrap()
            .unwrap()
            .domains
            .is_empty());
        for name in ["login.victim.com", "a.b.victim.com"] {
            match add(&record(name, &squatter.id, None)) {
                AddDomain::Under { parent } => assert_eq!(parent, "victim.com"),
                other => panic!("{name}: {other:?}"),
            }
        }
        assert!(matches!(
            add(&record("www.victim.com", &victim.id, None)),
            AddDomain::Added(_)
        ));
        assert!(matches!(
            add(&record("othervictim.com", &squatter.id, None)),
            AddDomain::Added(_)
        ));
        assert_eq!(
            parents("a.b.example.com").collect::<Vec<_>>(),
            ["b.example.com", "example.com"]
        );
    }

    fn slug_host(slug: &str) -> String {
        format!("{slug}.apps.test")
    }

    fn project(store: &Store, slug: &str) -> ProjectRecord {
        match store.create_project(slug, 100_000, 1).unwrap() {
            crate::store::CreateProject::Created(record) => record,
            _ => panic!("project {slug} not created"),
        }
    }

    /// Names are unique across projects, redirects must point inside the project, a name
    /// redirected to cannot go, and deleting the project frees its names.
    #[test]
    fn domains_are_unique_and_go_with_their_project() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let web = project(&store, "web");
        let blog = project(&store, "blog");
        let add = |r: &DomainRecord| store.add_domain(r, slug_host, 3).unwrap();

        assert!(matches!(
            add(&record("example.com", &web.id, None)),
            AddDomain::Added(_)
        ));
        assert!(matches!(
            add(&record("example.com", &blog.id, None)),
            AddDomain::Taken { .. }
        ));
        assert!(matches!(
            add(&record("www.example.com", &web.id, Some("example.org"))),
            AddDomain::BadRedirect
        ));
        assert!(matches!(
            add(&record("www.example.com", &web.id, Some("www.example.com"))),
            AddDomain::BadRedirect
        ));
        assert!(matches!(
            add(&record("www.example.com", &web.id, Some("example.com"))),
            AddDomain::Added(_)
        ));
        assert!(matches!(
            add(&record("old.example.com", &web.id, Some("web.apps.test"))),
            AddDomain::Added(_)
        ));
        assert!(matches!(
            add(&record("four.example.com", &web.id, None)),
            AddDomain::TooMany { max: 3 }
        ));
        assert!(matches!(
            add(&record("x.example.com", "prj_nope", None)),
            AddDomain::NoProject
        ));
        let names: Vec<String> = store
            .domains_of(&web.id)
            .unwrap()
            .into_iter()
            .map(|d| d.domain)
            .collect();
        assert_eq!(names, ["example.com", "www.example.com", "old.example.com"]);
        assert_eq!(store.find_project("web").unwrap().unwrap().domains, names);

        match store.remove_domain(&web.id, "example.com").unwrap() {
            RemoveDomain::RedirectedTo(from) => assert_eq!(from, ["www.example.com"]),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            store.remove_domain(&blog.id, "www.example.com").unwrap(),
            RemoveDomain::NotFound
        ));
        assert!(matches!(
            store.remove_domain(&web.id, "www.example.com").unwrap(),
            RemoveDomain::Removed(_)
        ));
        assert_eq!(store.domain_count().unwrap(), 2);

        store.delete_project(&web.id).unwrap().unwrap();
        assert_eq!(store.domain_count().unwrap(), 0);
        assert!(matches!(
            add(&record("example.com", &blog.id, None)),
            AddDomain::Added(_)
        ));
    }
}
