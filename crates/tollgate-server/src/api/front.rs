//! [`Front`]: the HTTP API as a listener serves it, `POST /v1/check` taken before axum's router.
//!
//! The router costs every request a path lookup, a matched path and the original URI in the
//! request's extensions, and for a layered route a boxed service cloned and a boxed future per
//! layer (the authentication gate, the route's scope): on `POST /v1/check` about a sixth of
//! the instructions, much of it allocation. The one hot request is matched here exactly (method
//! and path) and goes through the same gates to the same handler; everything else, `GET
//! /v1/check`'s 405 included, is the router's.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::Method;
use axum::response::Response;
use tower_layer::Layer as _;
use tower_service::Service;

use super::check;
use crate::auth::Scope;
use crate::limiter::Limiter;
use crate::web::auth::{Authenticate, Gated, Require, authentication, require};

/// The path answered before the router.
const CHECK: &str = "/v1/check";

/// A router, with `POST /v1/check` answered before it.
#[derive(Clone)]
pub struct Front {
    router: Router,
    /// `POST /v1/check` behind the bearer token and the scope `check`, as the router has it.
    check: Gated<Gated<Check, Require>, Authenticate>,
}

impl Front {
    /// `router`, which serves `POST /v1/check` from `limiter` behind [`authentication`] (as
    /// [`crate::web::auth::authenticate`] layers it) and answers every other request.
    pub fn new(router: Router, limiter: Arc<Limiter>) -> Front {
        let check = Check(Arc::clone(&limiter));
        let check = authentication(limiter).layer(require(Scope::Check).layer(check));
        Front { router, check }
    }
}

impl Service<Request> for Front {
    type Response = Response;
    type Error = Infallible;
    type Future = Answer<<Router as Service<Request>>::Future>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // A router is always ready, and so is the check.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        if request.method() == Method::POST && request.uri().path() == CHECK {
            Answer::Check(self.check.call(request))
        } else {
            Answer::Routed(self.router.call(request))
        }
    }
}

/// The handler of `POST /v1/check`, as a service.
#[derive(Clone)]
pub struct Check(Arc<Limiter>);

/// A check's answer: boxed once (the router boxed it at every layer).
type Checking = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

impl Service<Request> for Check {
    type Response = Response;
    type Error = Infallible;
    type Future = Checking;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Checking {
        let limiter = Arc::clone(&self.0);
        Box::pin(async move { Ok(check::check(State(limiter), request).await) })
    }
}

/// The check's answer or the router's.
pub enum Answer<R> {
    /// `POST /v1/check`, through its gates.
    Check(<Gated<Gated<Check, Require>, Authenticate> as Service<Request>>::Future),
    /// Any other request.
    Routed(R),
}

impl<R: Future<Output = Result<Response, Infallible>> + Unpin> Future for Answer<R> {
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Answer::Check(check) => Pin::new(check).poll(cx),
            Answer::Routed(routed) => Pin::new(routed).poll(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use axum::body::Body;
    use axum::http::{Method, Request, header};
    use http_body_util::BodyExt as _;
    use tollgate::{ManualClock, MemoryStore};
    use tower::ServiceExt as _;

    use super::Front;
    use crate::limiter::Limiter;

    /// A limiter on a memory store whose clock stands still, so that two of them answer the
    /// same requests with the same numbers.
    fn limiter() -> Arc<Limiter> {
        let store = MemoryStore::builder()
            .clock(ManualClock::new(Duration::from_secs(1)))
            .build();
        Arc::new(Limiter::builder(Arc::new(store)).build().unwrap())
    }

    /// Each request answered by `service`: its status, its headers but `Content-Length` (which
    /// axum's route sets and hyper sets on the wire when it is missing), and its body.
    async fn answers<S>(service: S, requests: &[(Method, &str, &str)]) -> Vec<String>
    where
        S: tower_service::Service<
                Request<Body>,
                Response = axum::response::Response,
                Error = std::convert::Infallible,
            > + Clone,
    {
        let mut answers = Vec::new();
        for (method, uri, body) in requests {
            let request = Request::builder()
                .method(method)
                .uri(*uri)
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(body.to_string()))
                .unwrap();
            let response = service.clone().oneshot(request).await.unwrap();
            let mut headers: Vec<String> = response
                .headers()
                .iter()
                .filter(|(name, _)| **name != header::CONTENT_LENGTH)
                .map(|(name, value)| format!("{name}: {value:?}"))
                .collect();
            headers.sort();
            let status = response.status();
            let body = response.into_body().collect().await.unwrap().to_bytes();
            answers.push(format!("{status} {headers:?} {body:?}"));
        }
        answers
    }

    /// `POST /v1/check` answered before the router is answered as the router answers it:
    /// allowed, then denied, a query string, a malformed body, a body too long; and what is
    /// not that request exactly (another method, a trailing slash) is still the router's.
    #[tokio::test]
    async fn the_check_before_the_router_answers_as_the_router_does() {
        let bucket = r#"{"key": "k", "capacity": 2, "refill": 1, "period_ms": 60000}"#;
        let long = format!(r#"{{"key": "{}"}}"#, "k".repeat(70_000));
        let requests = [
            (Method::POST, "/v1/check", bucket),
            (Method::POST, "/v1/check?x=1", bucket),
            (Method::POST, "/v1/check", bucket),
            (Method::POST, "/v1/check", "{"),
            (
                Method::POST,
                "/v1/check",
                r#"{"policy": "nope", "key": "k"}"#,
            ),
            (Method::POST, "/v1/check", long.as_str()),
            (Method::GET, "/v1/check", ""),
            (Method::POST, "/v1/check/", bucket),
        ];
        let router = super::super::router(limiter());
        let front_limiter = limiter();
        let front = Front::new(
            super::super::router(Arc::clone(&front_limiter)),
            front_limiter,
        );
        let by_router = answers(router, &requests).await;
        let by_front = answers(front, &requests).await;
        assert_eq!(by_front, by_router);
        let statuses: Vec<&str> = by_front.iter().map(|a| &a[..3]).collect();
        assert_eq!(
            statuses,
            ["200", "200", "429", "400", "400", "413", "405", "404"]
        );
    }
}
