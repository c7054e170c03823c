//! `slipway domains add|ls|rm`: a project's custom domains, with each one's status and
//! certificate as the API reports them.

use std::process::ExitCode;

use crate::api::types::{CreateDomain, Domain, DomainDeleted, DomainList, DomainStatus};
use crate::cli::DomainsAction;

use super::commands::project_or_here;
use super::http::ApiClient;
use super::{path_segment, ClientError};

pub async fn domains(
    api: &ApiClient,
    action: DomainsAction,
    project: Option<&str>,
) -> Result<ExitCode, ClientError> {
    let project = project_or_here(project)?;
    let base = format!("/api/projects/{}/domains", path_segment(&project));
    match action {
        DomainsAction::Add {
            domain,
            redirect_to,
        } => {
            let body = CreateDomain {
                domain,
                redirect_to,
            };
            let added: Domain = api.post_json(&base, &body).await?;
            print!("{}", domains_table(std::slice::from_ref(&added)));
            match added.status {
                DomainStatus::Unverified => eprintln!(
                    "{}: not served until you prove you own it: create the DNS record\n  {} TXT \"{}\"\n\
                     (checked again by itself, or at once with POST {base}/{}/verify)",
                    added.domain,
                    added.verification.record_name,
                    added.verification.record_value,
                    added.domain,
                ),
                DomainStatus::Pending => eprintln!(
                    "{}: the certificate is being issued; `slipway domains ls` shows when it is served. \
                     Point the name's DNS (A/AAAA or CNAME) at this machine if you have not yet.",
                    added.domain
                ),
                DomainStatus::Failed => eprintln!(
                    "{}: added, but not served yet: {}",
                    added.domain,
                    added.last_error.as_deref().unwrap_or("no certificate")
                ),
                DomainStatus::Active => {}
            }
        }
        DomainsAction::Ls => {
            let list: DomainList = api.get(&format!("{base}?limit=1000")).await?;
            if list.domains.is_empty() {
                eprintln!("{project} has no custom domains: `slipway domains add NAME` adds one");
            } else {
                print!("{}", domains_table(&list.domains));
            }
        }
        DomainsAction::Rm { domain } => {
            let removed: DomainDeleted = api
                .delete(&format!("{base}/{}", path_segment(&domain)))
                .await?;
            println!("{project}: removed {}", removed.domain);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// DOMAIN, STATUS, what it serves, and the certificate (or the error), padded to columns.
pub fn domains_table(domains: &[Domain]) -> String {
    let mut rows = vec![vec![
        "DOMAIN".to_owned(),
        "STATUS".to_owned(),
        "SERVES".to_owned(),
        "CERTIFICATE".to_owned(),
    ]];
    for domain in domains {
        let status = match domain.status {
            DomainStatus::Unverified => "unverified",
            DomainStatus::Pending => "pending",
            DomainStatus::Active => "active",
            DomainStatus::Failed => "failed",
        };
        let serves = match &domain.redirect_to {
            Some(target) => format!("308 → {target}"),
            None => "the project".to_owned(),
        };
        let certificate = match (&domain.certificate, &domain.last_error) {
            (Some(cert), _) => format!("{} until {}", cert.issuer, cert.not_after),
            (None, Some(error)) => error.clone(),
            (None, None) => "-".to_owned(),
        };
        rows.push(vec![
            domain.domain.clone(),
            status.to_owned(),
            serves,
            certificate,
        ]);
    }
    super::display::table(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_domains_table_lines_up() {
        let domain = |name: &str, status, redirect: Option<&str>| Domain {
            domain: name.into(),
            project_id: "prj_1".into(),
            status,
            redirect_to: redirect.map(str::to_owned),
            certificate: None,
            last_error: None,
            created_at: "t".into(),
            verification: crate::api::types::DomainVerification {
                record_type: "TXT".into(),
                record_name: format!("_slipway-challenge.{name}"),
                record_value: "slipway-verify=0".into(),
                verified_at: Some("t".into()),
                next_check_at: None,
            },
        };
        let table = domains_table(&[
            domain("www.example.com", DomainStatus::Active, None),
            domain(
                "example.com",
                DomainStatus::Pending,
                Some("www.example.com"),
            ),
        ]);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3);
        let column = |line: &str| {
            line.find("STATUS")
                .or_else(|| line.find("active"))
                .or_else(|| line.find("pending"))
        };
        assert_eq!(column(lines[0]), column(lines[1]));
        assert_eq!(column(lines[1]), column(lines[2]));
        assert!(lines[2].contains("308 → www.example.com"));
    }
}
