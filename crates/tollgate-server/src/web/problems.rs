//! [`Problems`]: the layer on every router that makes each error answer a problem
//! ([`ensure_problem`]).
//!
//! A service of its own rather than `axum::middleware::map_response`, which boxes a future and
//! clones the inner (boxed) service for every request: here a request costs nothing more than a
//! look at its answer's status and content type, and only an answer to rewrite is boxed.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::extract::Request;
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
        Answering::Inner(self.0.call(request))
    }
}

/// The inner service's answer, then, if it is an error in plain text, its rewriting.
pub(super) enum Answering<F> {
    /// The inner service is answering.
    Inner(F),
    /// Its answer is being rewritten as a problem (its body read as the detail).
    Rewriting(Pin<Box<dyn Future<Output = Response> + Send>>),
}

impl<F: Future<Output = Result<Response, Infallible>> + Unpin> Future for Answering<F> {
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        loop {
            match this {
                Answering::Inner(inner) => {
                    let Ok(response) = ready!(Pin::new(inner).poll(cx));
                    if !needs_problem(&response) {
                        return Poll::Ready(Ok(response));
                    }
                    *this = Answering::Rewriting(Box::pin(ensure_problem(response)));
                }
                Answering::Rewriting(rewriting) => return rewriting.as_mut().poll(cx).map(Ok),
            }
        }
    }
}
