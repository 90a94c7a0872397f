//! The test kit's own tests, in one binary: each throwaway server starts, answers, and is
//! gone when dropped.

mod abrupt_exit;
mod cluster;
mod postgres;
mod redis;
