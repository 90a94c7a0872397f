//! What the server answers while the store fails, by name.

use std::fmt;

use serde::Deserialize;

/// The fail policy by name (`--on-store-error`, `[store] on_error`). It is the library's
/// [`FailPolicy`](tollgate::store::guarded::FailPolicy) before its local store exists: `local`
/// needs a memory store sized by `max_keys`, which only the resolved settings know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnStoreError {
    /// Fail open: allow.
    Allow,
    /// Fail closed: 503.
    Deny,
    /// Decide locally, in memory.
    Local,
}

impl fmt::Display for OnStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OnStoreError::Allow => "allow",
            OnStoreError::Deny => "deny",
            OnStoreError::Local => "local",
        })
    }
}

impl std::str::FromStr for OnStoreError {
    type Err = String;

    fn from_str(s: &str) -> Result<OnStoreError, String> {
        match s {
            "allow" => Ok(OnStoreError::Allow),
            "deny" => Ok(OnStoreError::Deny),
            "local" => Ok(OnStoreError::Local),
            other => Err(format!(
                "unknown fail policy {other:?}; expected `allow`, `deny` or `local`"
            )),
        }
    }
}
