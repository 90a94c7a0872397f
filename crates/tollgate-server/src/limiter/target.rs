//! What a request asks to be decided under, whichever front end it came through, and the
//! bounds on what it may ask.

use tollgate::Policy;

/// The longest key accepted, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;

/// The most policies one check may name.
pub const MAX_POLICIES_PER_CHECK: usize = 16;

/// Which policies a request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// An inline token-bucket policy: the client's numbers.
    Inline(Policy),
    /// Configured policies by name (`"policy"`: one; `"policies"`: one or more, and then the
    /// answer lists each).
    Named {
        /// The names, without duplicates.
        names: Vec<String>,
        /// Whether they came as a `"policies"` list.
        listed: bool,
    },
}
