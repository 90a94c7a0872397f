//! What the HTTP/JSON API and the Envoy front end (gRPC, `/json`) share of HTTP: the counted
//! listener, serving a router with bounds on slow clients, bounded bodies, and
//! `application/problem+json` errors.

pub mod body;
pub mod conn;
mod parse_error;
pub mod problem;
mod serve;

pub use serve::{HEADER_READ_TIMEOUT, serve};
