//! What a request costs each of a layer's policies: one cost for all by default, a cost of
//! its own for a named policy (requests per minute cost 1, tokens per minute the tokens), and
//! for reservations, the actual cost each reads from the response.

use http::request::Parts;

/// What a request costs a policy, from its head.
pub(crate) type CostFn = dyn Fn(&Parts) -> u64 + Send + Sync;
/// What a request costs a policy once its response is known (`None`: what was reserved).
pub(crate) type CostAfterFn = dyn Fn(&http::response::Parts) -> Option<u64> + Send + Sync;

/// The costs of one named policy, where they differ from the layer's.
pub(crate) struct Own {
    name: Box<str>,
    pub(crate) before: Option<Box<CostFn>>,
    pub(crate) after: Option<Box<CostAfterFn>>,
}

/// Every cost of a layer. A policy reads its actual cost after the response with its own
/// `after`; without one, with the layer's `default_after` when it is charged the layer's
/// `default` (a used amount measures what the reserved one did), and otherwise keeps what it
/// reserved.
pub(crate) struct Costs {
    pub(crate) default: Box<CostFn>,
    pub(crate) default_after: Option<Box<CostAfterFn>>,
    own: Vec<Own>,
}

impl Default for Costs {
    fn default() -> Costs {
        Costs {
            default: Box::new(|_: &Parts| 1),
            default_after: None,
            own: Vec::new(),
        }
    }
}

impl Costs {
    /// The costs of `name`, made if it had none.
    pub(crate) fn of(&mut self, name: &str) -> &mut Own {
        let at = match self.own.iter().position(|o| &*o.name == name) {
            Some(at) => at,
            None => {
                self.own.push(Own {
                    name: name.into(),
                    before: None,
                    after: None,
                });
                self.own.len() - 1
            }
        };
        &mut self.own[at]
    }

    /// The names given costs of their own.
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.own.iter().map(|o| &*o.name)
    }

    fn own(&self, name: &str) -> Option<&Own> {
        self.own.iter().find(|o| &*o.name == name)
    }

    /// What the request costs the policy `name`.
    pub(crate) fn before(&self, name: &str, parts: &Parts) -> u64 {
        match self.own(name).and_then(|o| o.before.as_ref()) {
            Some(cost) => cost(parts),
            None => (self.default)(parts),
        }
    }

    /// How the policy `name` reads its actual cost from a response, if it does.
    pub(crate) fn after(&self, name: &str) -> Option<&CostAfterFn> {
        match self.own(name) {
            Some(Own {
                after: Some(after), ..
            }) => Some(&**after),
            Some(Own {
                before: Some(_), ..
            }) => None,
            _ => self.default_after.as_deref(),
        }
    }

    /// Whether the policy `name` reads an actual cost after the response.
    pub(crate) fn reads_after(&self, name: &str) -> bool {
        self.after(name).is_some()
    }
}
