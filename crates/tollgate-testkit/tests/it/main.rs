//! The test kit's own tests, in one binary: each throwaway server starts, answers, and is
//! gone when dropped; and no crate of the workspace has an import circle.

mod abrupt_exit;
mod circles;
mod cluster;
mod postgres;
mod redis;
