//! What the HTTP/JSON API and the Envoy front end (gRPC, `/json`) share of HTTP: serving a
//! router with bounds on slow and silent clients, bounded bodies (JSON with each key once),
//! bearer tokens, and
//! `application/problem+json` errors.

mod activity;
pub mod auth;
pub mod body;
pub mod json;
mod parse_error;
mod peer;
pub mod problem;
mod problems;
mod repoll;
mod serve;

pub use activity::BodyStalled;
pub use peer::Peer;
pub use serve::{Listener, serve};
