//! What the core's unit tests share.

use std::sync::Arc;

use tollgate::MemoryStore;

use super::{Limiter, Policies};

/// A limiter on a fresh memory store, without configured policies, taking the client's own
/// numbers only if `inline`.
pub(super) fn limiter(inline: bool) -> Limiter {
    Limiter::builder(Arc::new(MemoryStore::new()))
        .policies(Policies::default(), inline)
        .build()
        .unwrap()
}
