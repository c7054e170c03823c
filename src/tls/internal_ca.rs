//! `tls.mode = "internal"`: a local CA made with rcgen at first start and kept in the store.
//!
//! A root (10 years, name-constrained to `apps_domain` and the control host, so trusting it
//! cannot vouch for any other site) signs an intermediate (5 years), which signs one leaf per
//! name (90 days). Serials are random and validity is explicit: rcgen's defaults (no serial,
//! 1975–4096) are wrong for both. The manager calls [`create_ca`] once, then
//! [`InternalCa::issue_leaf`] at `domain_binding` and at renewal.

use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose,
    GeneralSubtree, IsCa, Issuer, KeyPair, KeyUsagePurpose, NameConstraints, SerialNumber,
};
use ring::rand::SecureRandom;

use super::certs::cert_record;
use super::clock::unix_seconds;
use super::store::{CaRecord, CertRecord};
use super::TlsError;

const ROOT_LIFETIME: Duration = Duration::from_secs(10 * 365 * 86_400);
const INTERMEDIATE_LIFETIME: Duration = Duration::from_secs(5 * 365 * 86_400);
pub const LEAF_LIFETIME: Duration = Duration::from_secs(90 * 86_400);
/// Backdating absorbs small clock differences between the daemon and its clients.
const BACKDATE: Duration = Duration::from_secs(3600);

/// The loaded CA, able to sign leaves.
pub struct InternalCa {
    intermediate: Issuer<'static, KeyPair>,
    intermediate_cert_pem: String,
    root_cert_pem: String,
}

impl std::fmt::Debug for InternalCa {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("InternalCa").finish_non_exhaustive()
    }
}

/// Makes a new root and intermediate for `permitted` names (DNS subtrees).
pub fn create_ca(permitted: &[String], now: SystemTime) -> Result<CaRecord, TlsError> {
    let root_params = constrained_root("Slipway internal root CA", permitted, now)?;
    create_ca_from(root_params, permitted, now)
}

/// A root's parameters, name-constrained to the `permitted` DNS subtrees.
fn constrained_root(
    common_name: &str,
    permitted: &[String],
    now: SystemTime,
) -> Result<CertificateParams, TlsError> {
    let mut root_params = ca_params(common_name, ROOT_LIFETIME, now, 1)?;
    root_params.name_constraints = Some(NameConstraints {
        permitted_subtrees: permitted
            .iter()
            .map(|name| GeneralSubtree::DnsName(name.clone()))
            .collect(),
        excluded_subtrees: Vec::new(),
    });
    Ok(root_params)
}

/// The second root of `internal` mode, for the projects' custom domains: name-constrained to
/// the operator's `tls.internal_domain_suffixes` (`permitted`, never empty: an empty list
/// would be no constraint at all). Made when the first custom domain needs a leaf;
/// `slipway ca export --domains` prints it.
pub fn create_domains_ca(permitted: &[String], now: SystemTime) -> Result<CaRecord, TlsError> {
    if permitted.is_empty() {
        return Err(TlsError::Config(
            "a custom-domains root needs at least one permitted suffix".into(),
        ));
    }
    let root_params = constrained_root("Slipway internal custom-domains root CA", permitted, now)?;
    create_ca_from(root_params, permitted, now)
}

fn create_ca_from(
    root_params: CertificateParams,
    permitted: &[String],
    now: SystemTime,
) -> Result<CaRecord, TlsError> {
    let root_key = KeyPair::generate().map_err(rcgen_error)?;
    let root_cert = root_params.self_signed(&root_key).map_err(rcgen_error)?;
    let root_issuer = Issuer::new(root_params, root_key);
    let root_key_pem = root_issuer.key().serialize_pem();
    let mut record = CaRecord {
        permitted: permitted.to_vec(),
        root_cert_pem: root_cert.pem(),
        root_key_pem,
        intermediate_cert_pem: String::new(),
        intermediate_key_pem: String::new(),
        intermediate_not_before: 0,
        intermediate_not_after: 0,
    };
    renew_intermediate_with(&mut record, &root_issuer, now)?;
    Ok(record)
}

/// Replaces the intermediate of `record` with a new one signed by its root.
pub fn renew_intermediate(record: &mut CaRecord, now: SystemTime) -> Result<(), TlsError> {
    let root_key = KeyPair::from_pem(&record.root_key_pem).map_err(rcgen_error)?;
    let root_issuer =
        Issuer::from_ca_cert_pem(&record.root_cert_pem, root_key).map_err(rcgen_error)?;
    renew_intermediate_with(record, &root_issuer, now)
}

fn renew_intermediate_with(
    record: &mut CaRecord,
    root: &Issuer<'_, KeyPair>,
    now: SystemTime,
) -> Result<(), TlsError> {
    let mut params = ca_params(
        "Slipway internal intermediate CA",
        INTERMEDIATE_LIFETIME,
        now,
        0,
    )?;
    params.use_authority_key_identifier_extension = true;
    let key = KeyPair::generate().map_err(rcgen_error)?;
    let cert = params.signed_by(&key, root).map_err(rcgen_error)?;
    record.intermediate_cert_pem = cert.pem();
    record.intermediate_key_pem = key.serialize_pem();
    record.intermediate_not_before = unix_seconds(now - BACKDATE);
    record.intermediate_not_after = unix_seconds(now + INTERMEDIATE_LIFETIME);
    Ok(())
}

impl InternalCa {
    pub fn from_record(record: &CaRecord) -> Result<InternalCa, TlsError> {
        let key = KeyPair::from_pem(&record.intermediate_key_pem).map_err(rcgen_error)?;
        let intermediate =
            Issuer::from_ca_cert_pem(&record.intermediate_cert_pem, key).map_err(rcgen_error)?;
        Ok(InternalCa {
            intermediate,
            intermediate_cert_pem: record.intermediate_cert_pem.clone(),
            root_cert_pem: record.root_cert_pem.clone(),
        })
    }

    pub fn root_pem(&self) -> &str {
        &self.root_cert_pem
    }

    /// Signs a new 90-day leaf for `name`; the chain is the leaf and the intermediate.
    pub fn issue_leaf(&self, name: &str, now: SystemTime) -> Result<CertRecord, TlsError> {
        let mut params = CertificateParams::new(vec![name.to_owned()]).map_err(rcgen_error)?;
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, name);
        params.not_before = (now - BACKDATE).into();
        params.not_after = (now + LEAF_LIFETIME).into();
        params.serial_number = Some(random_serial()?);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().map_err(rcgen_error)?;
        let cert = params
            .signed_by(&key, &self.intermediate)
            .map_err(rcgen_error)?;
        let chain_pem = format!("{}{}", cert.pem(), self.intermediate_cert_pem);
        cert_record(name, chain_pem, key.serialize_pem(), now)
    }
}

fn ca_params(
    common_name: &str,
    lifetime: Duration,
    now: SystemTime,
    path_length: u8,
) -> Result<CertificateParams, TlsError> {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::OrganizationName, "Slipway");
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(path_length));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = (now - BACKDATE).into();
    params.not_after = (now + lifetime).into();
    params.serial_number = Some(random_serial()?);
    Ok(params)
}

/// 16 random bytes with the top bit clear, so the DER integer stays positive.
fn random_serial() -> Result<SerialNumber, TlsError> {
    let mut bytes = [0_u8; 16];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| TlsError::Certificate("the system random source failed".into()))?;
    bytes[0] &= 0x7f;
    bytes[0] |= 0x01;
    Ok(SerialNumber::from_slice(&bytes))
}

fn rcgen_error(error: rcgen::Error) -> TlsError {
    TlsError::Certificate(format!("certificate generation failed: {error}"))
}
