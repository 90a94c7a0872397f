//! The benchmark crate's tests, in one binary: each benchmark's measurement and report on
//! throwaway servers, short.

// `pub` in a test module means shared with the other test modules: nothing here is reachable
// from outside the binary, by design.
#![allow(unreachable_pub)]

mod support;

mod binary;
mod http;
mod memory;
mod postgres;
mod redis;
mod scale;
mod tail;
