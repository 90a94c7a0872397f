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
use std::task::{Context, Poll, ready};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::Method;
use axum::response::Response;
use tower_layer::Layer as _;
use tower_service::Service;

use super::check;
use crate::limiter::Limiter;
use crate::web::auth::{Authenticate, Gated, Require, authentication};

/// `POST /v1/check` behind the bearer token and the check's scope, as the router has it.
type GatedCheck = Gated<Gated<Check, Require>, Authenticate>;

/// A router, with `POST /v1/check` answered before it. `App::router` and
/// [`api::front`](super::front) build one.
#[derive(Clone)]
pub struct Front {
    router: Router,
    check: GatedCheck,
}

impl Front {
    /// `router`, which serves `POST /v1/check` from `limiter` behind [`authentication`] and
    /// the check's gate, and answers every other request. That request never reaches
    /// `router`, whose layers do not apply to it: `router` must be the API's ([`super::router`]
    /// or [`super::data_router`], with whatever is merged beside it), authenticated by
    /// `limiter` ([`crate::web::auth::authenticate`]), for the Front to answer as it would.
    pub(crate) fn new(router: Router, limiter: Arc<Limiter>) -> Front {
        let check = Check(Arc::clone(&limiter));
        let check = authentication(limiter).layer(check::gate().layer(check));
        Front { router, check }
    }
}

impl Service<Request> for Front {
    type Response = Response;
    type Error = Infallible;
    type Future = FrontFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Either may take the next request, so both are asked (and both are always ready: a
        // router, and gates around a handler).
        ready!(Service::<Request>::poll_ready(&mut self.router, cx))?;
        self.check.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> FrontFuture {
        FrontFuture(
            if request.method() == Method::POST && request.uri().path() == check::PATH {
                Answer::Check(self.check.call(request))
            } else {
                Answer::Routed(self.router.call(request))
            },
        )
    }
}

/// The handler of `POST /v1/check`, as a service.
#[derive(Clone)]
struct Check(Arc<Limiter>);

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

/// A [`Front`]'s answer to a request: the check's, or the router's. (A future of its own, not
/// boxed: one allocation less a request.)
pub struct FrontFuture(Answer);

/// The check's answer or the router's.
// The router's future is the larger: boxing it to even them would cost every other request an
// allocation, to save a few words of a check's, which lives in its connection's task anyway.
#[allow(clippy::large_enum_variant)]
enum Answer {
    /// `POST /v1/check`, through its gates.
    Check(<GatedCheck as Service<Request>>::Future),
    /// Any other request.
    Routed(<Router as Service<Request>>::Future),
}

impl Future for FrontFuture {
    type Output = Result<Response, Infallible>;

    // Inlined into its caller's poll, as the generic future it replaces was (callgrind's
    // `http_check`: a call less a request).
    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.get_mut().0 {
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
    use crate::auth::{Scope, Secret, Token, Tokens};
    use crate::limiter::Limiter;
    use crate::web::auth::authenticate;

    /// A limiter on a memory store whose clock stands still, so that two of them answer the
    /// same requests with the same numbers; its tokens: `s-app` may check, `s-ops` only read.
    fn limiter() -> Arc<Limiter> {
        let store = MemoryStore::builder()
            .clock(ManualClock::new(Duration::from_secs(1)))
            .build();
        let token = |name: &str, scope| {
            Token::new(
                name,
                Secret::new(format!("s-{name}").as_bytes()),
                [scope].into_iter().collect(),
            )
        };
        let tokens =
            Tokens::new(vec![token("app", Scope::Check), token("ops", Scope::Read)]).unwrap();
        Arc::new(
            Limiter::builder(Arc::new(store))
                .tokens(tokens)
                .build()
                .unwrap(),
        )
    }

    /// Each request (method, path, bearer token, body) answered by `service`: its status, its
    /// headers but `Content-Length` (which axum's route sets and hyper sets on the wire when
    /// it is missing), and its body.
    async fn answers<S>(service: S, requests: &[(Method, &str, &str, &str)]) -> Vec<String>
    where
        S: tower_service::Service<
                Request<Body>,
                Response = axum::response::Response,
                Error = std::convert::Infallible,
            > + Clone,
    {
        let mut answers = Vec::new();
        for (method, uri, token, body) in requests {
            let mut request = Request::builder()
                .method(method)
                .uri(*uri)
                .header(header::CONTENT_TYPE, "application/json");
            if !token.is_empty() {
                request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
            }
            let request = request.body(Body::from(body.to_string())).unwrap();
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

    /// `POST /v1/check` answered before the router is answered as the authenticated router
    /// answers it: allowed, allowed with a query string, denied, a malformed body, an unknown
    /// policy, a body too long; refused without a token, with a wrong one (a strike each),
    /// with one that may only read; and what is not that request exactly (`HEAD`, `GET`, a
    /// trailing slash) is still the router's.
    #[tokio::test]
    async fn the_check_before_the_router_answers_as_the_router_does() {
        let bucket = r#"{"key": "k", "capacity": 2, "refill": 1, "period_ms": 60000}"#;
        let long = format!(r#"{{"key": "{}"}}"#, "k".repeat(70_000));
        let (check, app) = (Method::POST, "s-app");
        let requests = [
            (check.clone(), "/v1/check", app, bucket),
            (check.clone(), "/v1/check?x=1", app, bucket),
            (check.clone(), "/v1/check", app, bucket),
            (check.clone(), "/v1/check", app, "{"),
            (
                check.clone(),
                "/v1/check",
                app,
                r#"{"policy": "nope", "key": "k"}"#,
            ),
            (check.clone(), "/v1/check", app, long.as_str()),
            (check.clone(), "/v1/check", "", bucket),
            (check.clone(), "/v1/check", "s-nobody", bucket),
            (check.clone(), "/v1/check", "s-ops", bucket),
            (Method::HEAD, "/v1/check", app, ""),
            (Method::GET, "/v1/check", app, ""),
            (check, "/v1/check/", app, bucket),
        ];
        let router = limiter();
        let router = authenticate(super::super::router(Arc::clone(&router)), router);
        let by_router = answers(router, &requests).await;
        let by_front = answers(super::super::front(limiter()), &requests).await;
        assert_eq!(by_front, by_router);
        let statuses: Vec<&str> = by_front.iter().map(|a| &a[..3]).collect();
        assert_eq!(
            statuses,
            [
                "200", "200", "429", "400", "400", "413", "401", "401", "403", "405", "405", "404"
            ]
        );
    }

    /// The Front's own gates, not the router's, refuse `POST /v1/check`: before an open
    /// router, it still asks for a token and the scope `check`.
    #[tokio::test]
    async fn the_check_is_gated_whatever_the_router() {
        let limiter = limiter();
        let front = Front::new(axum::Router::new(), Arc::clone(&limiter));
        let bucket = r#"{"key": "k", "capacity": 2, "refill": 1, "period_ms": 60000}"#;
        let requests = [
            (Method::POST, "/v1/check", "", bucket),
            (Method::POST, "/v1/check", "s-ops", bucket),
            (Method::POST, "/v1/check", "s-app", bucket),
        ];
        let statuses: Vec<String> = answers(front, &requests)
            .await
            .iter()
            .map(|a| a[..3].to_owned())
            .collect();
        assert_eq!(statuses, ["401", "403", "200"]);
    }
}
