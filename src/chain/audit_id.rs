//! First filter of the chain (kube's `WithAuditInit`): every request gets an
//! audit ID, the client's `Audit-ID` header when it sent one, else a new
//! UUID, and every response carries it back.

use futures_util::future::BoxFuture;
use http::HeaderValue;

use crate::body::{Request, Response};
use crate::context::AuditId;
use crate::handler::{Handler, SharedHandler};

pub const AUDIT_ID_HEADER: &str = "audit-id";

pub struct AuditIdFilter {
    pub next: SharedHandler,
}

impl Handler for AuditIdFilter {
    fn call(&self, mut request: Request) -> BoxFuture<'_, Response> {
        Box::pin(async move {
            let audit_id = request
                .headers()
                .get(AUDIT_ID_HEADER)
                .and_then(|value| value.to_str().ok())
                .filter(|value| !value.trim().is_empty())
                .map(str::to_owned)
                .unwrap_or_else(new_audit_id);
            let header = HeaderValue::from_str(&audit_id).ok();
            request.extensions_mut().insert(AuditId(audit_id));
            let mut response = self.next.call(request).await;
            if let Some(header) = header {
                response.headers_mut().insert(AUDIT_ID_HEADER, header);
            }
            response
        })
    }
}

/// A new UUID, written without the formatting machinery (this runs on
/// every request that brings no `Audit-ID`).
fn new_audit_id() -> String {
    let mut buffer = uuid::Uuid::encode_buffer();
    uuid::Uuid::new_v4()
        .hyphenated()
        .encode_lower(&mut buffer)
        .to_owned()
}
