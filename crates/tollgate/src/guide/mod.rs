// The chapters are Markdown files beside this module, so that they read as well in the
// repository as in rustdoc; their code blocks run as doc tests.
#![doc = include_str!("overview.md")]

#[doc = include_str!("buckets.md")]
pub mod buckets {}

#[doc = include_str!("memory.md")]
pub mod memory {}

#[doc = include_str!("redis.md")]
pub mod redis {}

#[doc = include_str!("postgres.md")]
pub mod postgres {}

#[doc = include_str!("settle.md")]
pub mod settle {}

#[doc = include_str!("failures.md")]
pub mod failures {}

#[doc = include_str!("middleware.md")]
pub mod middleware {}

#[doc = include_str!("comparison.md")]
pub mod comparison {}
