//! `Idempotency-Key` on POST: the first answer to a key (per token) is stored with a
//! fingerprint of the request and replayed for 24 h with `Idempotent-Replayed: true`, doing
//! nothing else; the same key for another request is 400 `INVALID_IDEMPOTENCY_KEY`; the same
//! key while its first request still runs is 409 `CONFLICT`. Answers of 5xx and 429 are not
//! kept (the client may retry them). Records live in the store, so replays survive restarts;
//! an answer is sealed there (`SecretBox::seal_answer`: it may carry a new token's secret, a
//! webhook secret or a deploy hook's URL) and the fingerprint is a keyed HMAC.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Mutex;

use http::{HeaderValue, Method, Response, StatusCode};
use http_body_util::BodyExt;

use super::{ApiError, ApiRequest};
use crate::auth::Caller;
use crate::error_code::ErrorCode;
use crate::http_util::{full, Body};
use crate::secrets::SecretBox;
use crate::store::records::{IdempotentResponse, IDEMPOTENT_RESPONSE_VERSION};
use crate::store::Store;

/// Keys whose first request is still running, per token.
#[derive(Default)]
pub struct InFlight(Mutex<HashSet<(String, String)>>);

/// Releases a key when its first request ends (or is dropped).
struct Claim<'a> {
    in_flight: &'a InFlight,
    key: (String, String),
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.in_flight
            .0
            .lock()
            .expect("in-flight keys poisoned")
            .remove(&self.key);
    }
}

/// The header's value, checked: at most 255 visible ASCII characters.
fn key_of(request: &ApiRequest) -> Result<Option<String>, ApiError> {
    let Some(value) = request.headers().get("idempotency-key") else {
        return Ok(None);
    };
    let valid = !value.is_empty()
        && value.len() <= 255
        && value.as_bytes().iter().all(|b| (0x21..=0x7e).contains(b));
    if !valid {
        return Err(ApiError::new(
            ErrorCode::InvalidIdempotencyKey,
            "Idempotency-Key must be 1 to 255 visible ASCII characters (a UUID works)",
        ));
    }
    Ok(Some(value.to_str().unwrap_or_default().to_owned()))
}

fn fingerprint(secrets: &SecretBox, request: &ApiRequest) -> String {
    let mut bytes = Vec::with_capacity(request.body().len() + 256);
    bytes.extend_from_slice(request.method().as_str().as_bytes());
    bytes.push(b'\n');
    bytes.extend_from_slice(request.uri().path().as_bytes());
    bytes.push(b'?');
    bytes.extend_from_slice(request.uri().query().unwrap_or("").as_bytes());
    bytes.push(b'\n');
    bytes.extend_from_slice(request.body());
    secrets.fingerprint(&bytes)
}

/// What `run` needs of the API's state.
pub struct Keeper<'a> {
    pub store: &'a Store,
    pub secrets: &'a SecretBox,
    pub in_flight: &'a InFlight,
}

/// Runs `handle` for `request`, or replays the answer its `Idempotency-Key` already got.
pub async fn run<F, Fut>(
    keeper: Keeper<'_>,
    caller: &Caller,
    request: ApiRequest,
    handle: F,
) -> Result<Response<Body>, ApiError>
where
    F: FnOnce(ApiRequest) -> Fut,
    Fut: Future<Output = Result<Response<Body>, ApiError>>,
{
    if request.method() != Method::POST {
        return handle(request).await;
    }
    let Some(key) = key_of(&request)? else {
        return handle(request).await;
    };
    let print = fingerprint(keeper.secrets, &request);
    let token = caller.token_id.clone();
    if let Some(replayed) = keeper.earlier_answer(&token, &key, &print).await? {
        return Ok(replayed);
    }
    // Held until the answer is kept: a request with the key meanwhile is a 409, never a
    // second run.
    let _claim = keeper.in_flight.claim(&token, &key)?;
    let result = handle(request).await;
    if !keepable(&result) {
        return result;
    }
    let response = result.unwrap_or_else(ApiError::into_response);
    Ok(keeper.keep(token, key, print, response).await)
}

impl InFlight {
    /// Marks the key as running until the claim drops; 409 when it already is.
    fn claim(&self, token: &str, key: &str) -> Result<Claim<'_>, ApiError> {
        let claim_key = (token.to_owned(), key.to_owned());
        if !self
            .0
            .lock()
            .expect("in-flight keys poisoned")
            .insert(claim_key.clone())
        {
            return Err(ApiError::new(
                ErrorCode::Conflict,
                "a request with this Idempotency-Key is still in progress; retry when it has answered",
            ));
        }
        Ok(Claim {
            in_flight: self,
            key: claim_key,
        })
    }
}

/// Answers of 5xx and 429 are not kept: the client may retry them.
fn keepable(result: &Result<Response<Body>, ApiError>) -> bool {
    let status = match result {
        Ok(response) => response.status(),
        Err(error) => error.code.status(),
    };
    !(status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS)
}

impl Keeper<'_> {
    /// The replay of the answer kept for the key, if any; 400 when it was kept for another
    /// request.
    async fn earlier_answer(
        &self,
        token: &str,
        key: &str,
        print: &str,
    ) -> Result<Option<Response<Body>>, ApiError> {
        let (lookup_token, lookup_key) = (token.to_owned(), key.to_owned());
        let earlier = self
            .store
            .call(move |s| s.idempotent_response(&lookup_token, &lookup_key, crate::ids::now_ms()))
            .await?;
        let Some(earlier) = earlier else {
            return Ok(None);
        };
        if earlier.fingerprint != print {
            return Err(ApiError::new(
                ErrorCode::InvalidIdempotencyKey,
                "this Idempotency-Key was used for a different request (method, path or body) \
                 in the last 24 h; use a new key for a new request",
            ));
        }
        replay(self.secrets, token, key, &earlier).map(Some)
    }

    /// Stores the first answer to the key (sealed), and gives it back to be sent. An answer
    /// that cannot be stored is still sent; it is just not replayed.
    async fn keep(
        &self,
        token: String,
        key: String,
        print: String,
        response: Response<Body>,
    ) -> Response<Body> {
        let (parts, body) = response.into_parts();
        let bytes = body
            .collect()
            .await
            .map(|collected| collected.to_bytes())
            .unwrap_or_default();
        let record = IdempotentResponse {
            v: IDEMPOTENT_RESPONSE_VERSION,
            fingerprint: print,
            status: parts.status.as_u16(),
            body_sealed: crate::ids::hex(&self.secrets.seal_answer(&token, &key, &bytes)),
            created_ms: crate::ids::now_ms(),
        };
        let stored = self
            .store
            .call(move |s| s.put_idempotent_response(&token, &key, &record))
            .await;
        if let Err(error) = stored {
            tracing::warn!(%error, "could not keep an idempotent answer");
        }
        Response::from_parts(parts, full(bytes))
    }
}

/// The kept answer, opened; a record that does not open (another `secret.key`, a corrupt
/// store) is a 500, never a second run of the request.
fn replay(
    secrets: &SecretBox,
    token: &str,
    key: &str,
    earlier: &IdempotentResponse,
) -> Result<Response<Body>, ApiError> {
    let body = crate::ids::hex_decode(&earlier.body_sealed)
        .and_then(|sealed| secrets.open_answer(token, key, &sealed).ok())
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::InternalError,
                "the answer kept for this Idempotency-Key cannot be opened",
            )
        })?;
    let mut response = Response::new(full(body));
    *response.status_mut() =
        StatusCode::from_u16(earlier.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert("idempotent-replayed", HeaderValue::from_static("true"));
    Ok(response)
}
