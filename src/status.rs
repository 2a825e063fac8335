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
    pub kind: &'static str,
    #[serde(rename = "apiVersion")]
    pub api_version: &'static str,
    pub metadata: Metadata,
    pub status: &'static str,
    pub message: String,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Details>,
    pub code: u16,
}

/// Always empty; kept so the body has kube's exact shape.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Metadata {}

/// `metav1.StatusDetails`.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Details {
    #[serde(skip_serializing_if = "str::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub group: String,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub kind: String,
    #[serde(rename = "retryAfterSeconds", skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<u64>,
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

    pub fn with_details(mut self, details: Details) -> Self {
        self.details = Some(details);
        self
    }

    /// The Status as a JSON response with its own code.
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
        response
    }
}

/// Every error the gateway answers with, one variant per kube reason it uses.
/// The `Display` text is the Status message the client sees.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("{message}")]
    BadRequest { message: String },
    #[error("Unauthorized")]
    Unauthorized,
    #[error("{message}")]
    Forbidden {
        message: String,
        details: Option<Details>,
    },
    /// A status chosen by a filter (an admission denial).
    #[error("{message}")]
    Denied {
        code: StatusCode,
        reason: String,
        message: String,
    },
    #[error("the server could not find the requested resource")]
    NotFound,
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed,
    #[error("the request body is too large: limit is {limit} bytes")]
    RequestEntityTooLarge { limit: u64 },
    #[error("{message}")]
    Invalid { message: String },
    /// What the request needs of the server it does not implement (an
    /// unknown transfer coding, RFC 9112 §6.1).
    #[error("{message}")]
    NotImplemented { message: String },
    #[error("Internal error occurred: {message}")]
    Internal { message: String },
    #[error("an error on the server ({message}) has prevented the request from succeeding")]
    BadGateway { message: String },
    /// The gateway had no room for the request (kube's
    /// `NewTooManyRequests`): a Status with `details.retryAfterSeconds`,
    /// and the same delay in a `Retry-After` header.
    #[error("{message}")]
    TooManyRequests {
        message: String,
        retry_after_seconds: u64,
    },
    #[error("{message}")]
    ServiceUnavailable { message: String },
    #[error("{message}")]
    Timeout { message: String },
}

impl GatewayError {
    pub fn internal(message: impl Into<String>) -> Self {
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
    pub fn code_and_reason(&self) -> (StatusCode, &str) {
        match self {
            GatewayError::BadRequest { .. } => (StatusCode::BAD_REQUEST, "BadRequest"),
            GatewayError::Unauthorized => (StatusCode::UNAUTHORIZED, "Unauthorized"),
            GatewayError::Forbidden { .. } => (StatusCode::FORBIDDEN, "Forbidden"),
            GatewayError::Denied { code, reason, .. } => (*code, reason.as_str()),
            GatewayError::NotFound => (StatusCode::NOT_FOUND, "NotFound"),
            GatewayError::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed"),
            GatewayError::RequestEntityTooLarge { .. } => {
                (StatusCode::PAYLOAD_TOO_LARGE, "RequestEntityTooLarge")
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
            GatewayError::ServiceUnavailable { .. } => {
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
            GatewayError::Forbidden {
                details: Some(details),
                ..
            } => status = status.with_details(details),
            // kube's not-found handler answers with empty details.
            GatewayError::NotFound => status = status.with_details(Details::default()),
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
            _ => {}
        }
        status.into_response()
    }
}
