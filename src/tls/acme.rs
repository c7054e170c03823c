//! `tls.mode = "acme"`: certificates from an RFC 8555 CA through instant-acme.
//!
//! One [`AcmeIssuer`] per manager. [`AcmeIssuer::issue`] runs one issuance for one name: it
//! resumes a stored pending order when the CA may still deliver it, else creates an order and
//! answers HTTP-01 (token map read by the plain HTTP listener) or TLS-ALPN-01 (challenge
//! certificate in the resolver), trying the other type when validation fails. The type that
//! last worked is tried first next time. The account and pending orders (with the key of their
//! CSR) are in the store, so a restart neither creates a new account nor loses an order.
//! Backoff, timeouts and storing the result are the manager's job.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use hyper_util::rt::TokioExecutor;
use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, BodyWrapper, ChallengeType, HttpClient,
    Identifier, NewAccount, NewOrder, Order, OrderStatus, RetryPolicy,
};
use rcgen::{CertificateParams, CustomExtension, DistinguishedName, KeyPair};
use rustls::crypto::ring as ring_provider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;

use super::certs::cert_record;
use super::clock::{unix_seconds, Clock};
use super::resolver::CertResolver;
use super::store::{blocking, keys, AccountRecord, CertRecord, PendingOrder, TlsStore};
use super::TlsError;

/// How long the CA may take to validate challenges, and then to sign.
const VALIDATION_TIMEOUT: Duration = Duration::from_secs(90);
const CERTIFICATE_TIMEOUT: Duration = Duration::from_secs(90);

/// What an issuance needs from the manager.
pub struct IssueContext<'a> {
    pub store: &'a Arc<dyn TlsStore>,
    pub resolver: &'a CertResolver,
    pub clock: &'a dyn Clock,
}

pub struct AcmeIssuer {
    directory: String,
    email: String,
    http: hyper_util::client::legacy::Client<
        hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
        BodyWrapper<Bytes>,
    >,
    account: tokio::sync::Mutex<Option<Account>>,
    /// HTTP-01 token → key authorization, for `/.well-known/acme-challenge/<token>`.
    http01: Mutex<HashMap<String, String>>,
}

impl std::fmt::Debug for AcmeIssuer {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("AcmeIssuer")
            .field("directory", &self.directory)
            .finish_non_exhaustive()
    }
}

/// Why one order failed: validation failures are worth retrying with the other challenge type.
enum OrderError {
    Validation(String),
    Fatal(TlsError),
}

impl From<instant_acme::Error> for OrderError {
    fn from(error: instant_acme::Error) -> OrderError {
        OrderError::Fatal(acme_error(error))
    }
}

impl From<TlsError> for OrderError {
    fn from(error: TlsError) -> OrderError {
        OrderError::Fatal(error)
    }
}

impl AcmeIssuer {
    /// `trusted_roots` are trusted for the CA's API besides the webpki roots (tests: Pebble's).
    pub fn new(
        directory: &str,
        email: &str,
        trusted_roots: &[CertificateDer<'static>],
    ) -> Result<AcmeIssuer, TlsError> {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        for root in trusted_roots {
            roots.add(root.clone()).map_err(|error| {
                TlsError::Config(format!("tls.acme_ca_file: unusable certificate: {error}"))
            })?;
        }
        let client_config = rustls::ClientConfig::builder_with_provider(Arc::new(
            ring_provider::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|error| TlsError::Config(format!("TLS client setup failed: {error}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(client_config)
            .https_only()
            .enable_http1()
            .build();
        let http =
            hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(connector);
        Ok(AcmeIssuer {
            directory: directory.to_owned(),
            email: email.to_owned(),
            http,
            account: tokio::sync::Mutex::new(None),
            http01: Mutex::new(HashMap::new()),
        })
    }

    pub fn http01_response(&self, token: &str) -> Option<String> {
        self.http01
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(token)
            .cloned()
    }

    /// Runs one issuance for `name` and returns the new certificate (not yet stored).
    pub async fn issue(
        &self,
        name: &str,
        context: &IssueContext<'_>,
    ) -> Result<CertRecord, TlsError> {
        let account = self.account(context.store).await?;
        let order_key = format!("{}{name}", keys::ACME_ORDER_PREFIX);
        if let Some(pending) =
            blocking::read_json::<PendingOrder>(context.store, &order_key).await?
        {
            match self.resume(&account, name, pending, context).await {
                Ok(Some(record)) => return Ok(record),
                Ok(None) => {}
                Err(error) => {
                    tracing::info!(%name, %error, "the stored ACME order cannot be resumed; starting a new one")
                }
            }
            blocking::delete(context.store, vec![order_key.clone()]).await?;
        }

        let preferred =
            blocking::read_json::<String>(context.store, keys::ACME_PREFERRED_CHALLENGE).await?;
        let challenge_types = match preferred.as_deref() {
            Some("tls-alpn-01") => [ChallengeType::TlsAlpn01, ChallengeType::Http01],
            _ => [ChallengeType::Http01, ChallengeType::TlsAlpn01],
        };
        let mut failures = Vec::new();
        for challenge_type in challenge_types {
            match self
                .order(&account, name, &challenge_type, &order_key, context)
                .await
            {
                Ok(record) => {
                    let label = challenge_label(&challenge_type);
                    if preferred.as_deref() != Some(label) {
                        blocking::write_json(
                            context.store,
                            keys::ACME_PREFERRED_CHALLENGE,
                            label.to_owned(),
                        )
                        .await?;
                    }
                    return Ok(record);
                }
                Err(OrderError::Validation(message)) => {
                    tracing::warn!(%name, challenge = challenge_label(&challenge_type), %message, "ACME validation failed");
                    failures.push(format!("{}: {message}", challenge_label(&challenge_type)));
                    blocking::delete(context.store, vec![order_key.clone()]).await?;
                }
                Err(OrderError::Fatal(error)) => return Err(error),
            }
        }
        Err(TlsError::Acme(format!(
            "validation failed for {name} ({})",
            failures.join("; ")
        )))
    }

    async fn account(&self, store: &Arc<dyn TlsStore>) -> Result<Account, TlsError> {
        let mut cached = self.account.lock().await;
        if let Some(account) = cached.as_ref() {
            return Ok(account.clone());
        }
        let stored = blocking::read_json::<AccountRecord>(store, keys::ACME_ACCOUNT).await?;
        let account = match stored.filter(|record| record.directory == self.directory) {
            Some(record) => {
                let credentials: AccountCredentials = serde_json::from_value(record.credentials)
                    .map_err(|error| {
                        TlsError::Store(format!("stored ACME account is not valid: {error}"))
                    })?;
                Account::builder_with_http(self.http_client())
                    .from_credentials(credentials)
                    .await
                    .map_err(acme_error)?
            }
            None => {
                let contact = format!("mailto:{}", self.email);
                let contacts: Vec<&str> = if self.email.is_empty() {
                    Vec::new()
                } else {
                    vec![contact.as_str()]
                };
                let new_account = NewAccount {
                    contact: &contacts,
                    terms_of_service_agreed: true,
                    only_return_existing: false,
                };
                let (account, credentials) = Account::builder_with_http(self.http_client())
                    .create(&new_account, self.directory.clone(), None)
                    .await
                    .map_err(acme_error)?;
                let credentials = serde_json::to_value(&credentials).map_err(|error| {
                    TlsError::Store(format!("cannot encode the ACME account: {error}"))
                })?;
                let record = AccountRecord {
                    directory: self.directory.clone(),
                    credentials,
                };
                blocking::write_json(store, keys::ACME_ACCOUNT, record).await?;
                tracing::info!(directory = %self.directory, "created an ACME account");
                account
            }
        };
        *cached = Some(account.clone());
        Ok(account)
    }

    fn http_client(&self) -> Box<dyn HttpClient> {
        Box::new(self.http.clone())
    }

    /// Picks up an order a previous run left; `None` when it must be replaced by a new one.
    async fn resume(
        &self,
        account: &Account,
        name: &str,
        pending: PendingOrder,
        context: &IssueContext<'_>,
    ) -> Result<Option<CertRecord>, TlsError> {
        let mut order = account
            .order(pending.url.clone())
            .await
            .map_err(acme_error)?;
        match (order.state().status, pending.key_pem) {
            (OrderStatus::Processing | OrderStatus::Valid, Some(key_pem)) => {
                let retry = RetryPolicy::new().timeout(CERTIFICATE_TIMEOUT);
                let chain_pem = order.poll_certificate(&retry).await.map_err(acme_error)?;
                tracing::info!(%name, "resumed a pending ACME order");
                cert_record(name, chain_pem, key_pem, context.clock.now()).map(Some)
            }
            (OrderStatus::Ready, _) => {
                let order_key = format!("{}{name}", keys::ACME_ORDER_PREFIX);
                finalize(&mut order, name, &order_key, pending.created_at, context)
                    .await
                    .map(Some)
            }
            _ => Ok(None),
        }
    }

    async fn order(
        &self,
        account: &Account,
        name: &str,
        challenge_type: &ChallengeType,
        order_key: &str,
        context: &IssueContext<'_>,
    ) -> Result<CertRecord, OrderError> {
        let identifiers = [Identifier::Dns(name.to_owned())];
        let mut order = account.new_order(&NewOrder::new(&identifiers)).await?;
        let created_at = unix_seconds(context.clock.now());
        let pending = PendingOrder {
            url: order.url().to_owned(),
            key_pem: None,
            created_at,
        };
        blocking::write_json(context.store, order_key, pending).await?;

        let mut published = PublishedChallenges {
            issuer: self,
            resolver: context.resolver,
            tokens: Vec::new(),
            alpn_names: Vec::new(),
        };
        answer_challenges(&mut order, name, challenge_type, &mut published).await?;

        let retry = RetryPolicy::new()
            .initial_delay(Duration::from_millis(250))
            .backoff(1.5)
            .timeout(VALIDATION_TIMEOUT);
        let status = match order.poll_ready(&retry).await {
            Ok(status) => status,
            Err(error) => {
                return Err(OrderError::Validation(
                    validation_detail(&mut order, acme_error(error)).await,
                ))
            }
        };
        drop(published);
        if status != OrderStatus::Ready {
            let message =
                validation_detail(&mut order, TlsError::Acme(format!("order is {status:?}"))).await;
            return Err(OrderError::Validation(message));
        }
        Ok(finalize(&mut order, name, order_key, created_at, context).await?)
    }
}

/// Publishes the answer to each pending authorization's `challenge_type` challenge (kept in
/// `published` until the order is decided) and tells the CA it is ready.
async fn answer_challenges(
    order: &mut Order,
    name: &str,
    challenge_type: &ChallengeType,
    published: &mut PublishedChallenges<'_>,
) -> Result<(), OrderError> {
    let mut authorizations = order.authorizations();
    while let Some(authorization) = authorizations.next().await {
        let mut authorization = authorization?;
        match authorization.status {
            AuthorizationStatus::Pending => {}
            AuthorizationStatus::Valid => continue,
            status => {
                return Err(OrderError::Validation(format!(
                    "authorization is {status:?}"
                )))
            }
        }
        let Some(mut challenge) = authorization.challenge(challenge_type.clone()) else {
            return Err(OrderError::Validation(format!(
                "the CA offers no {} challenge",
                challenge_label(challenge_type)
            )));
        };
        let key_authorization = challenge.key_authorization();
        match challenge_type {
            ChallengeType::TlsAlpn01 => {
                let certified_key = alpn_challenge_cert(name, key_authorization.digest().as_ref())?;
                published.add_alpn(name, certified_key);
            }
            _ => published.add_token(&challenge.token, key_authorization.as_str()),
        }
        // A CA that validates at once (Pebble without its sleep) answers this very call
        // with the challenge's error: that is a failed validation, not a broken CA.
        match challenge.set_ready().await {
            Ok(()) => {}
            Err(instant_acme::Error::Api(problem)) => {
                return Err(OrderError::Validation(problem.to_string()))
            }
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}

/// Sends a CSR for a new key (stored with the order first) and downloads the chain.
async fn finalize(
    order: &mut Order,
    name: &str,
    order_key: &str,
    created_at: u64,
    context: &IssueContext<'_>,
) -> Result<CertRecord, TlsError> {
    let key = KeyPair::generate()
        .map_err(|error| TlsError::Certificate(format!("key generation failed: {error}")))?;
    let mut params = CertificateParams::new(vec![name.to_owned()])
        .map_err(|error| TlsError::Certificate(error.to_string()))?;
    params.distinguished_name = DistinguishedName::new();
    let csr = params
        .serialize_request(&key)
        .map_err(|error| TlsError::Certificate(format!("CSR failed: {error}")))?;
    let key_pem = key.serialize_pem();
    let pending = PendingOrder {
        url: order.url().to_owned(),
        key_pem: Some(key_pem.clone()),
        created_at,
    };
    blocking::write_json(context.store, order_key, pending).await?;
    order.finalize_csr(csr.der()).await.map_err(acme_error)?;
    let retry = RetryPolicy::new()
        .initial_delay(Duration::from_millis(250))
        .backoff(1.5)
        .timeout(CERTIFICATE_TIMEOUT);
    let chain_pem = order.poll_certificate(&retry).await.map_err(acme_error)?;
    cert_record(name, chain_pem, key_pem, context.clock.now())
}

/// The CA's own words about a failed validation, for logs and the provisioning error.
async fn validation_detail(order: &mut Order, fallback: TlsError) -> String {
    let mut details = Vec::new();
    let mut authorizations = order.authorizations();
    while let Some(Ok(mut authorization)) = authorizations.next().await {
        let Ok(state) = authorization.refresh().await else {
            continue;
        };
        details.extend(
            state
                .challenges
                .iter()
                .filter_map(|challenge| challenge.error.as_ref())
                .map(|problem| problem.to_string()),
        );
    }
    match details.is_empty() {
        true => fallback.to_string(),
        false => details.join("; "),
    }
}

/// Challenge responses published for one order; removed again when dropped.
struct PublishedChallenges<'a> {
    issuer: &'a AcmeIssuer,
    resolver: &'a CertResolver,
    tokens: Vec<String>,
    alpn_names: Vec<String>,
}

impl PublishedChallenges<'_> {
    fn add_token(&mut self, token: &str, key_authorization: &str) {
        let mut tokens = self
            .issuer
            .http01
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        tokens.insert(token.to_owned(), key_authorization.to_owned());
        self.tokens.push(token.to_owned());
    }

    fn add_alpn(&mut self, name: &str, certified_key: Arc<CertifiedKey>) {
        self.resolver.add_challenge(name, certified_key);
        self.alpn_names.push(name.to_owned());
    }
}

impl Drop for PublishedChallenges<'_> {
    fn drop(&mut self) {
        let mut tokens = self
            .issuer
            .http01
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for token in &self.tokens {
            tokens.remove(token);
        }
        for name in &self.alpn_names {
            self.resolver.remove_challenge(name);
        }
    }
}

/// The self-signed certificate of RFC 8737 carrying the key authorization digest. It is built
/// with `CertifiedKey::new`: `from_der` would reject its critical acmeIdentifier extension.
fn alpn_challenge_cert(name: &str, digest: &[u8]) -> Result<Arc<CertifiedKey>, TlsError> {
    let certificate_error =
        |error: rcgen::Error| TlsError::Certificate(format!("challenge certificate: {error}"));
    let mut params = CertificateParams::new(vec![name.to_owned()]).map_err(certificate_error)?;
    params.distinguished_name = DistinguishedName::new();
    params.custom_extensions = vec![CustomExtension::new_acme_identifier(digest)];
    let key = KeyPair::generate().map_err(certificate_error)?;
    let certificate = params.self_signed(&key).map_err(certificate_error)?;
    let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let signing_key = ring_provider::default_provider()
        .key_provider
        .load_private_key(key_der)
        .map_err(|error| TlsError::Certificate(format!("challenge key: {error}")))?;
    Ok(Arc::new(CertifiedKey::new(
        vec![certificate.der().clone()],
        signing_key,
    )))
}

fn challenge_label(challenge_type: &ChallengeType) -> &'static str {
    match challenge_type {
        ChallengeType::TlsAlpn01 => "tls-alpn-01",
        _ => "http-01",
    }
}

fn acme_error(error: instant_acme::Error) -> TlsError {
    TlsError::Acme(error.to_string())
}
