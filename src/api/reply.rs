//! What a handler answers on success. A JSON body is sent with its route's success status
//! from the route table (`RouteSpec::success`), so a handler never names it; streams and
//! other non-JSON answers are whole responses.

use http::{Response, StatusCode};

use crate::http_util::Body;

pub enum Reply {
    /// A serialized API shape.
    Json(Vec<u8>),
    /// A whole response (Server-Sent Events, the Prometheus text format).
    Whole(Response<Body>),
}

impl Reply {
    pub fn json(value: &impl serde::Serialize) -> Reply {
        Reply::Json(serde_json::to_vec(value).expect("API shapes serialize"))
    }

    pub fn into_response(self, success: StatusCode) -> Response<Body> {
        match self {
            Reply::Json(body) => super::json_bytes_response(success, body),
            Reply::Whole(response) => response,
        }
    }
}
