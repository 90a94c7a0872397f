//! The benchmark crate's tests, in one binary: each benchmark's measurement and report on
//! throwaway servers, short.

mod support;

mod binary;
mod http;
mod memory;
mod postgres;
mod redis;
