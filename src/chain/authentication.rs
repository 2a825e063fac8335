//! The authentication place of the chain. With no authenticator configured
//! every request is kube's anonymous user, `system:anonymous` in group
//! `system:unauthenticated`; the Wasm authentication stage takes this place.

use futures_util::future::BoxFuture;

use crate::body::{Request, Response};
use crate::context::UserInfo;
use crate::handler::{Handler, SharedHandler};

pub struct Anonymous {
    pub next: SharedHandler,
}

impl Handler for Anonymous {
    fn call(&self, mut request: Request) -> BoxFuture<'_, Response> {
        request.extensions_mut().insert(UserInfo::anonymous());
        self.next.call(request)
    }
}
