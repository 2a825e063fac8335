//! The Kubernetes `Status` body: every error response the gateway writes
//! itself is one of these (`metav1.Status`, kube's
//! `staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/types.go`, written as
//! `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/status.go`
//! writes it), built here and nowhere else.
//!
//! Stages and handlers return a [`GatewayError`]; [`GatewayError::into_response`]
//! is the one place that turns an error into a response. The plain-text 429 of
//! max-in-flight is the single exception, as in kube.

use http::{HeaderValue, StatusCode, header};
use serde::Serialize;

use crate::body::{Body, Response};

/// `metav1.Status` as kube serialises it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Status {
    pub(crate) kind: &'static str,
    /// Always `v1`.
    #[serde(rename = "apiVersion")]
    pub api_version: &'static str,
    pub(crate) metadata: Metadata,
    pub(crate) status: &'static str,
    /// The human-readable message.
    pub message: String,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub(crate) reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) details: Option<Details>,
    pub(crate) code: u16,
}

/// Always empty; kept so the body has kube's exact shape.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub(crate) struct Metadata {}

/// `metav1.StatusDetails`.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Details {
    /// The name of the object concerned (kube's `StatusDetails.Name`).
    #[serde(skip_serializing_if = "str::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub(crate) group: String,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub(crate) kind: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) causes: Vec<Cause>,
    #[serde(rename = "retryAfterSeconds", skip_serializing_if = "Option::is_none")]
    pub(crate) retry_after_seconds: Option<u64>,
}

/// `metav1.StatusCause`, as far as the gateway fills it: the message
/// (`NewInternalError` gives its error as the one cause).
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub(crate) struct Cause {
    pub(crate) message: String,
}

impl Status {
    /// A failure Status with the given code, reason and message.
    pub fn failure(code: StatusCode, reason: &str, message: impl Into<String>) -> Self {
        Status {
            kind: "Status",
            api_version: "v1",
            metadata: Metadata {},
            status: "Failure",
            message: message.into(),
            reason: reason.to_owned(),
            details: None,
            code: code.as_u16(),
        }
    }

    /// A success Status (what kube answers when there is no object to return).
    pub fn success(message: impl Into<String>) -> Self {
        Status {
            status: "Success",
            ..Status::failure(StatusCode::OK, "", message)
        }
    }

    pub(crate) fn with_details(mut self, details: Details) -> Self {
        self.details = Some(details);
        self
    }

    /// The Status as a JSON response with its own code. The Status goes in
    /// the response's extensions too, for audit to record as kube's
    /// `WriteObjectNegotiated` hands it to `audit.LogResponseObject`.
    pub fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        // Serialising a struct of strings and integers cannot fail; fall back
        // to a fixed body rather than panic if it ever did.
        let json = serde_json::to_vec(&self).unwrap_or_else(|_| {
            br#"{"kind":"Status","apiVersion":"v1","status":"Failure"}"#.to_vec()
        });
        let mut response = http::Response::new(Body::full(json));
        *response.status_mut() = code;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response.extensions_mut().insert(self);
        response
    }
}

/// Every error the gateway answers with, one variant per kube reason it uses.
/// The `Display` text is the Status message the client sees.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The request is malformed (400).
    #[error("{message}")]
    BadRequest {
        /// The Status message.
        message: String,
    },
    /// No authenticator recognised the request (401).
    #[error("Unauthorized")]
    Unauthorized,
    /// The user may not make the request (403).
    #[error("{message}")]
    Forbidden {
        /// Kube's message: who was refused what.
        message: String,
        /// Details of the object refused, when there is one; empty details
        /// otherwise (boxed: the error travels in `Result`s, and most are
        /// not this one).
        details: Option<Box<Details>>,
    },
    /// A status chosen by a filter (an admission denial).
    #[error("{message}")]
    Denied {
        /// The HTTP status the filter chose.
        code: StatusCode,
        /// The Status `reason`.
        reason: String,
        /// The Status `message`.
        message: String,
    },
    /// No route matched (404).
    #[error("the server could not find the requested resource")]
    NotFound,
    /// The route does not take the method (405).
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed,
    /// The client accepts none of the media types the resource is served in
    /// (406).
    #[error("{message}")]
    NotAcceptable {
        /// The Status message: the media types that are served.
        message: String,
    },
    /// The body is in a media type that is not read (415): kube's
    /// `NewUnsupportedMediaTypeError`
    /// (`staging/src/k8s.io/apiserver/pkg/endpoints/handlers/negotiation/errors.go`).
    #[error(
        "the body of the request was in an unknown format - accepted media types include: {accepted}"
    )]
    UnsupportedMediaType {
        /// The media types that are read, as kube lists them: joined with ", ".
        accepted: &'static str,
    },
    /// The body is over the limit (413).
    #[error("Request entity too large: limit is {limit}")]
    RequestEntityTooLarge {
        /// The limit, in bytes.
        limit: u64,
    },
    /// The request is well-formed but not acceptable (422).
    #[error("{message}")]
    Invalid {
        /// The Status message.
        message: String,
    },
    /// What the request needs of the server it does not implement (an
    /// unknown transfer coding, RFC 9112 §6.1).
    #[error("{message}")]
    NotImplemented {
        /// The Status message.
        message: String,
    },
    /// The gateway failed (500).
    #[error("Internal error occurred: {message}")]
    Internal {
        /// What failed.
        message: String,
    },
    /// The upstream failed or could not be reached (502).
    #[error("an error on the server ({message}) has prevented the request from succeeding")]
    BadGateway {
        /// What failed.
        message: String,
    },
    /// The gateway had no room for the request (kube's
    /// `NewTooManyRequests`): a Status with `details.retryAfterSeconds`,
    /// and the same delay in a `Retry-After` header.
    #[error("{message}")]
    TooManyRequests {
        /// The Status message.
        message: String,
        /// How long the client should wait before it tries again.
        retry_after_seconds: u64,
    },
    /// The gateway cannot serve now: shutting down, or a stage is unavailable (503).
    #[error("{message}")]
    ServiceUnavailable {
        /// The Status message.
        message: String,
    },
    /// The shutdown closed the connections before the request was answered
    /// (503 with `Retry-After: 1`): kube's refusal of a request its
    /// shutdown no longer serves (`waitGroupWriteRetryAfterToResponse` in
    /// `staging/src/k8s.io/apiserver/pkg/server/filters/waitgroup.go`) asks
    /// for a retry a second later, as the client will likely reach another
    /// server; client-go retries such an answer itself.
    #[error("{message}")]
    ShuttingDown {
        /// The Status message.
        message: String,
    },
    /// The request took longer than its timeout (504): kube's
    /// `NewTimeoutError`, whose message starts with "Timeout: ".
    #[error("Timeout: {message}")]
    Timeout {
        /// The Status message.
        message: String,
    },
}

impl GatewayError {
    pub(crate) fn internal(message: impl Into<String>) -> Self {
        GatewayError::Internal {
            message: message.into(),
        }
    }

    /// Reading the request body failed: 413 when it was cut at the body
    /// limit (`limit` bytes), else 400.
    pub fn body_unreadable(error: &(dyn std::error::Error + 'static), limit: u64) -> Self {
        if crate::body::is_body_limit_error(error) {
            GatewayError::RequestEntityTooLarge { limit }
        } else {
            GatewayError::BadRequest {
                message: format!("the request body could not be read: {error}"),
            }
        }
    }

    /// The code and kube reason of this error.
    pub(crate) fn code_and_reason(&self) -> (StatusCode, &str) {
        match self {
            GatewayError::BadRequest { .. } => (StatusCode::BAD_REQUEST, "BadRequest"),
            GatewayError::Unauthorized => (StatusCode::UNAUTHORIZED, "Unauthorized"),
            GatewayError::Forbidden { .. } => (StatusCode::FORBIDDEN, "Forbidden"),
            GatewayError::Denied { code, reason, .. } => (*code, reason.as_str()),
            GatewayError::NotFound => (StatusCode::NOT_FOUND, "NotFound"),
            GatewayError::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed"),
            GatewayError::NotAcceptable { .. } => (StatusCode::NOT_ACCEPTABLE, "NotAcceptable"),
            GatewayError::RequestEntityTooLarge { .. } => {
                (StatusCode::PAYLOAD_TOO_LARGE, "RequestEntityTooLarge")
            }
            GatewayError::UnsupportedMediaType { .. } => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "UnsupportedMediaType")
            }
            GatewayError::Invalid { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "Invalid"),
            GatewayError::Internal { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "InternalError"),
            // kube has no reason for 501 either.
            GatewayError::NotImplemented { .. } => (StatusCode::NOT_IMPLEMENTED, ""),
            // kube has no reason for 502: it leaves the reason unknown (empty).
            GatewayError::BadGateway { .. } => (StatusCode::BAD_GATEWAY, ""),
            GatewayError::TooManyRequests { .. } => {
                (StatusCode::TOO_MANY_REQUESTS, "TooManyRequests")
            }
            GatewayError::ServiceUnavailable { .. } | GatewayError::ShuttingDown { .. } => {
                (StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable")
            }
            GatewayError::Timeout { .. } => (StatusCode::GATEWAY_TIMEOUT, "Timeout"),
        }
    }

    /// The one place an error becomes a response.
    pub fn into_response(self) -> Response {
        let (code, reason) = self.code_and_reason();
        let mut status = Status::failure(code, reason, self.to_string());
        match self {
            // `NewForbidden` always has details: empty for a non-resource
            // request (kube's 403 for `GET /` reads `"details":{}`).
            GatewayError::Forbidden { details, .. } => {
                status = status.with_details(details.map(|details| *details).unwrap_or_default());
            }
            // kube's not-found handler answers with empty details, and
            // `NewTimeoutError` always has them (a `retryAfterSeconds` of 0
            // leaves them empty).
            GatewayError::NotFound | GatewayError::Timeout { .. } => {
                status = status.with_details(Details::default());
            }
            // `NewInternalError`: the error is also the details' one cause.
            GatewayError::Internal { message } => {
                status = status.with_details(Details {
                    causes: vec![Cause { message }],
                    ..Details::default()
                });
            }
            GatewayError::TooManyRequests {
                retry_after_seconds,
                ..
            } => {
                status = status.with_details(Details {
                    retry_after_seconds: Some(retry_after_seconds),
                    ..Details::default()
                });
                // As kube's `ErrorNegotiated` does for a Status that asks
                // for a delay.
                let mut response = status.into_response();
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_seconds));
                return response;
            }
            // `NewServiceUnavailable` has no details; the delay is the
            // header's alone.
            GatewayError::ShuttingDown { .. } => {
                let mut response = status.into_response();
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                return response;
            }
            _ => {}
        }
        status.into_response()
    }
}

#[cfg(test)]
mod tests {
    //! Each error's Status body against the one kube writes for it, from
    //! the constructors in
    //! `staging/src/k8s.io/apimachinery/pkg/api/errors/errors.go`.

    use http_body_util::BodyExt;
    use serde_json::json;

    use super::*;

    async fn body(error: GatewayError) -> (StatusCode, serde_json::Value) {
        let response = error.into_response();
        let code = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("a body")
            .to_bytes();
        (code, serde_json::from_slice(&bytes).expect("a Status"))
    }

    /// `NewTimeoutError` prefixes the message with "Timeout: " and always
    /// has details (its `retryAfterSeconds` 0 leaves them `{}`), as kube's
    /// timeout filter (`server/filters/timeout.go`) writes them.
    #[tokio::test]
    async fn a_timeout_is_kubes_timeout_status() {
        let (code, status) = body(GatewayError::Timeout {
            message: "request did not complete within the allotted timeout".to_owned(),
        })
        .await;
        assert_eq!(code, StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(
            status,
            json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "Timeout: request did not complete within the allotted timeout",
                "reason": "Timeout", "details": {}, "code": 504
            })
        );
    }

    /// `NewInternalError` repeats the error as the one cause of its details.
    #[tokio::test]
    async fn an_internal_error_names_its_cause_as_kube_does() {
        let (code, status) = body(GatewayError::internal("the authorization stage failed")).await;
        assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            status,
            json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "Internal error occurred: the authorization stage failed",
                "reason": "InternalError",
                "details": {"causes": [{"message": "the authorization stage failed"}]},
                "code": 500
            })
        );
    }

    /// `limitedReadBody` (`endpoints/handlers/rest.go`) refuses a body over
    /// the limit with `NewRequestEntityTooLargeError("limit is N")`.
    #[tokio::test]
    async fn a_body_over_the_limit_is_kubes_413() {
        let (code, status) = body(GatewayError::RequestEntityTooLarge { limit: 3145728 }).await;
        assert_eq!(code, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(
            status,
            json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "Request entity too large: limit is 3145728",
                "reason": "RequestEntityTooLarge", "code": 413
            })
        );
    }

    /// `NewForbidden` always has details: a non-resource request's are
    /// empty (`"details":{}`), as kube's 403 for `GET /` shows.
    #[tokio::test]
    async fn a_forbidden_path_has_empty_details() {
        let (code, status) = body(GatewayError::Forbidden {
            message: r#"forbidden: User "system:anonymous" cannot get path "/""#.to_owned(),
            details: None,
        })
        .await;
        assert_eq!(code, StatusCode::FORBIDDEN);
        assert_eq!(
            status,
            json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": r#"forbidden: User "system:anonymous" cannot get path "/""#,
                "reason": "Forbidden", "details": {}, "code": 403
            })
        );
    }
}
