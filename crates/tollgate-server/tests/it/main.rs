//! The server's integration tests, in one binary: each module drives the real `tollgate`
//! binary, or the server's library in process, against real stores the test kit starts.

// `pub` in a test module means shared with the other test modules: nothing here is reachable
// from outside the binary, by design.
#![allow(unreachable_pub)]

mod support;

mod admin;
mod auth;
mod binary;
mod cluster_faults;
mod config;
mod connections;
mod dashboard;
mod docs;
mod envoy;
mod envoy_config;
mod envoy_exact;
mod envoy_metadata;
mod envoy_mtls;
mod envoy_reflection;
mod examples;
mod faults;
mod five_minutes;
mod flood;
mod front_door;
mod hostile_input;
mod http;
mod image;
mod layers;
mod leases;
mod postgres;
mod ratelimit_env;
mod readme_options;
mod redis;
mod redis_tls;
mod reload;
mod resp;
mod resp_conversation;
mod resp_decoder;
mod security;
mod sentinel;
mod store_config;
mod tls;
mod top;
mod traces;
mod xds;
mod xds_envoy;
mod xds_fixtures;
