//! [`TollgateBody`], the body of every response a `Tollgate` service (the layer's service)
//! returns: the inner service's, the layer's own answer, or a rejection hook's.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;

/// The error of a [`TollgateBody`]: the inner body's or a rejection hook's, boxed (the error
/// type axum, hyper and tonic take from a response body).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A rejection hook's body, its type erased.
pub(crate) type HookBody = UnsyncBoxBody<Bytes, BoxError>;

/// Erases the type of a rejection hook's `body`.
pub(crate) fn hook_body<H>(body: H) -> HookBody
where
    H: Body<Data = Bytes> + Send + 'static,
    H::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed_unsync()
}

pin_project_lite::pin_project! {
    /// The response body of a `Tollgate` service: the inner service's body when the request
    /// went through, else the layer's own answer (or the one its builder's `rejection` hook
    /// built). axum, hyper and tonic
    /// serve it as they serve any body; there is nothing to construct.
    ///
    /// ```
    /// use http::{Request, Response};
    /// use http_body::Body as _;
    /// use tollgate::middleware::{TollgateBody, TollgateLayer};
    /// use tollgate::{MemoryStore, Policy};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let layer = TollgateLayer::builder(MemoryStore::new())
    ///     .policy("api", Policy::per_minute(1)?)
    ///     .key(|_: &http::request::Parts| Some("everyone"))
    ///     .build()?;
    /// let hello = service_fn(|_: Request<()>| async {
    ///     Ok::<_, std::convert::Infallible>(Response::new(String::from("hello")))
    /// });
    /// let service = layer.layer(hello);
    /// let passed: Response<TollgateBody<String>> =
    ///     service.clone().oneshot(Request::new(())).await?;
    /// assert_eq!(passed.body().size_hint().exact(), Some(5)); // the inner "hello"
    /// let denied = service.oneshot(Request::new(())).await?;
    /// assert_eq!(denied.status(), 429); // the layer's own problem+json
    /// # Ok(())
    /// # }
    /// ```
    pub struct TollgateBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project_lite::pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B },
        /// The layer's own answer, in one frame (`None` once sent).
        Own { bytes: Option<Bytes> },
        /// A rejection hook's body, of the type the hook chose.
        Hook { body: HookBody },
    }
}

impl<B> TollgateBody<B> {
    pub(crate) fn inner(body: B) -> TollgateBody<B> {
        TollgateBody {
            kind: Kind::Inner { body },
        }
    }

    pub(crate) fn own(text: String) -> TollgateBody<B> {
        let bytes = (!text.is_empty()).then(|| Bytes::from(text));
        TollgateBody {
            kind: Kind::Own { bytes },
        }
    }

    pub(crate) fn hook(body: HookBody) -> TollgateBody<B> {
        TollgateBody {
            kind: Kind::Hook { body },
        }
    }
}

impl<B> Body for TollgateBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.project().kind.project() {
            KindProj::Inner { body } => body.poll_frame(cx).map_err(Into::into),
            KindProj::Own { bytes } => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            KindProj::Hook { body } => Pin::new(body).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Own { bytes } => bytes.is_none(),
            Kind::Hook { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Own { bytes } => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            Kind::Hook { body } => body.size_hint(),
        }
    }
}

/// An empty body, for layers outside this one that need a `Default` response body (tower-http's
/// timeout, for one).
impl<B> Default for TollgateBody<B> {
    fn default() -> Self {
        TollgateBody {
            kind: Kind::Own { bytes: None },
        }
    }
}

impl<B> fmt::Debug for TollgateBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            Kind::Inner { .. } => "inner",
            Kind::Own { .. } => "own",
            Kind::Hook { .. } => "hook",
        };
        f.debug_struct("TollgateBody").field("kind", &kind).finish()
    }
}
