//! The request and response types every stage of the flow passes along.
//!
//! Bodies are boxed so a stage can replace one (admission rewrites the request
//! object) and so the upstream's streaming body and a static `Bytes` body have
//! one type. Nothing here buffers: a proxied body streams through.

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full, combinators::UnsyncBoxBody};

/// The error a body stream can end with.
pub(crate) type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// A streaming body of bytes.
#[derive(Debug)]
pub struct Body(UnsyncBoxBody<Bytes, BodyError>);

/// A request whose body is the gateway's [`Body`].
pub type Request = http::Request<Body>;
/// A response whose body is the gateway's [`Body`].
pub type Response = http::Response<Body>;

impl Body {
    /// A body with no bytes.
    pub fn empty() -> Self {
        Body(Empty::new().map_err(|never| match never {}).boxed_unsync())
    }

    /// A body of these bytes, whole.
    pub fn full(bytes: impl Into<Bytes>) -> Self {
        Body(
            Full::new(bytes.into())
                .map_err(|never| match never {})
                .boxed_unsync(),
        )
    }

    /// Wraps any body whose errors convert into [`BodyError`].
    pub(crate) fn wrap<B>(body: B) -> Self
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BodyError>,
    {
        Body(body.map_err(Into::into).boxed_unsync())
    }
}

impl Body {
    /// Keeps `guard` alive until this body has been sent or dropped (an
    /// in-flight slot, a connection's activity count).
    pub(crate) fn with_guard<G: Send + 'static>(self, guard: G) -> Self {
        Body::wrap(Guarded {
            body: self,
            _guard: guard,
        })
    }
}

pin_project_lite::pin_project! {
    struct Guarded<G> {
        #[pin]
        body: Body,
        _guard: G,
    }
}

impl<G> http_body::Body for Guarded<G> {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, BodyError>>> {
        self.project().body.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

impl Body {
    /// Calls `finish` once, with the bytes sent and the error the body
    /// failed with, if any, when this body ends, fails or is dropped
    /// unfinished (the client went away): how the request metrics and the
    /// access log learn what was sent.
    pub(crate) fn on_end<F>(self, finish: F) -> Self
    where
        F: FnOnce(u64, Option<&BodyError>) + Send + 'static,
    {
        Body::wrap(Observed {
            body: self,
            bytes: 0,
            finish: Some(finish),
        })
    }
}

pin_project_lite::pin_project! {
    struct Observed<F>
    where
        F: FnOnce(u64, Option<&BodyError>),
    {
        #[pin]
        body: Body,
        bytes: u64,
        finish: Option<F>,
    }

    impl<F> PinnedDrop for Observed<F>
    where
        F: FnOnce(u64, Option<&BodyError>),
    {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(finish) = this.finish.take() {
                finish(*this.bytes, None);
            }
        }
    }
}

impl<F> http_body::Body for Observed<F>
where
    F: FnOnce(u64, Option<&BodyError>),
{
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, BodyError>>> {
        let this = self.project();
        let polled = this.body.poll_frame(cx);
        match &polled {
            std::task::Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    *this.bytes += data.len() as u64;
                }
            }
            std::task::Poll::Ready(Some(Err(error))) => {
                if let Some(finish) = this.finish.take() {
                    finish(*this.bytes, Some(error));
                }
            }
            std::task::Poll::Ready(None) => {
                if let Some(finish) = this.finish.take() {
                    finish(*this.bytes, None);
                }
            }
            std::task::Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// What an upgraded response (`101 Switching Protocols`) carries instead of a
/// body: its body is over at once, and the exchange goes on as a tunnel of
/// bytes. What would be kept until the body is sent (the audit event's
/// completion, the request's place in the shutdown's drain) is kept until
/// the tunnel closes instead.
#[derive(Clone)]
pub(crate) struct Tunnel(Arc<Mutex<Option<Vec<Held>>>>);

/// A guard a tunnel keeps; None in the tunnel's slot once it has closed.
type Held = Box<dyn Send>;

impl Tunnel {
    /// A tunnel holding nothing yet.
    pub(crate) fn open() -> Self {
        Tunnel(Arc::new(Mutex::new(Some(Vec::new()))))
    }

    /// Keeps `guard` until the tunnel closes; drops it now if it has.
    fn hold<G: Send + 'static>(&self, guard: G) {
        let mut held = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(held) = held.as_mut() {
            held.push(Box::new(guard));
        }
    }

    /// Drops every guard held.
    pub(crate) fn close(&self) {
        let held = self.0.lock().unwrap_or_else(PoisonError::into_inner).take();
        drop(held);
    }
}

/// Keeps `guard` alive until `response` is done: its body sent or dropped,
/// or, for an upgraded response, its tunnel closed.
pub(crate) fn keep_until_done<G: Send + 'static>(response: Response, guard: G) -> Response {
    match response.extensions().get::<Tunnel>() {
        Some(tunnel) => {
            tunnel.hold(guard);
            response
        }
        None => response.map(|body| body.with_guard(guard)),
    }
}

/// True when `error`, or any error in its chain of sources, is an `E`.
pub(crate) fn caused_by<E: std::error::Error + 'static>(
    error: &(dyn std::error::Error + 'static),
) -> bool {
    std::iter::successors(Some(error), |error| error.source()).any(|error| error.is::<E>())
}

/// The request body limit in force (`limits.max_request_body`), kept in the
/// request's context by the chain's body-limit step for the handler that
/// reads the body, so its 413 names it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MaxRequestBody(pub u64);

/// True when a body error came from the body limit, so the handler that hit
/// it answers 413 rather than a generic failure.
pub(crate) fn is_body_limit_error(error: &(dyn std::error::Error + 'static)) -> bool {
    caused_by::<http_body_util::LengthLimitError>(error)
}

impl Default for Body {
    fn default() -> Self {
        Body::empty()
    }
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, BodyError>>> {
        std::pin::Pin::new(&mut self.0).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.0.size_hint()
    }
}
