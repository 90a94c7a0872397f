//! What the HTTP/JSON API and the Envoy front end (gRPC, `/json`) share of HTTP: the counted
//! listener, serving a router with bounds on slow clients, bounded bodies, bearer tokens, and
//! `application/problem+json` errors.

pub mod auth;
pub mod body;
pub mod conn;
pub mod problem;
mod serve;

pub use serve::{HEADER_READ_TIMEOUT, serve};
