//! [`Problems`]: the layer around every served service (outside its router, so around
//! axum's own answers too) that makes each error answer a problem ([`ensure_problem`]).
//!
//! Outside the router, it rewrites an answer after axum emptied a `HEAD`'s body, so a `HEAD`'s
//! rewritten answer is emptied again here (over HTTP/2 hyper sends whatever body it is given,
//! and a `HEAD`'s is a protocol error to the client).
//!
//! A service of its own rather than `axum::middleware::map_response`, which boxes a future and
//! clones the inner (boxed) service for every request: here a request costs nothing more than a
//! look at its answer's status and content type, and only an answer to rewrite is boxed.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::body::Body;
use axum::extract::Request;
use axum::http::{Method, header};
use axum::response::Response;
use tower_layer::Layer;
use tower_service::Service;

use super::problem::{ensure_problem, needs_problem};

/// The layer.
#[derive(Clone, Copy)]
pub(super) struct Problems;

impl<S> Layer<S> for Problems {
    type Service = WithProblems<S>;

    fn layer(&self, inner: S) -> WithProblems<S> {
        WithProblems(inner)
    }
}

/// A service whose error answers are problems.
#[derive(Clone)]
pub(super) struct WithProblems<S>(S);

impl<S> Service<Request> for WithProblems<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
    S::Future: Unpin,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Answering<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Answering<S::Future> {
        let head = request.method() == Method::HEAD;
        Answering::Inner(self.0.call(request), head)
    }
}

/// The inner service's answer, then, if it is an error in plain text, its rewriting.
pub(super) enum Answering<F> {
    /// The inner service is answering; `true` for a `HEAD`, whose answer has no body.
    Inner(F, bool),
    /// Its answer is being rewritten as a problem (its body read as the detail).
    Rewriting(Pin<Box<dyn Future<Output = Response> + Send>>),
}

impl<F: Future<Output = Result<Response, Infallible>> + Unpin> Future for Answering<F> {
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        loop {
            match this {
                Answering::Inner(inner, head) => {
                    let Ok(response) = ready!(Pin::new(inner).poll(cx));
                    if !needs_problem(&response) {
                        return Poll::Ready(Ok(response));
                    }
                    *this = Answering::Rewriting(if *head {
                        Box::pin(async { headed(ensure_problem(response).await) })
                    } else {
                        Box::pin(ensure_problem(response))
                    });
                }
                Answering::Rewriting(rewriting) => return rewriting.as_mut().poll(cx).map(Ok),
            }
        }
    }
}

/// A `HEAD`'s answer: `problem`'s head without its body. Nor its length: the text axum took
/// out of the answer it rewrote is gone, and with it the length of the problem a `GET` gets;
/// none is said rather than a wrong one.
fn headed(problem: Response) -> Response {
    let (mut parts, _) = problem.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::empty())
}
