//! Amounts by policy: a check's or a reservation's cost of each policy, and what a commit used
//! of each, named by the policies' names.

/// Why amounts by policy were refused: `field` names the one at fault (`cost.tokens`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmountsError {
    /// The request's field.
    pub field: String,
    /// What is wrong, for a person.
    pub message: String,
}

/// An amount as the request gave it: a number, or what it was instead (for the message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Amount {
    /// An integer from 0 to `u64::MAX`.
    Tokens(u64),
    /// Anything else, as the request wrote it.
    Invalid(String),
}

/// The amounts of `"<field>": {"name": n, ...}` (`given`), one per name of `names`, in their
/// order: every policy named, no other (`whose`: what holds the policies, for the messages).
pub fn by_policy(
    field: &str,
    whose: &str,
    names: &[&str],
    given: &[(String, Amount)],
) -> Result<Vec<u64>, AmountsError> {
    let refused = |name: &str, message: String| AmountsError {
        field: format!("{field}.{name}"),
        message,
    };
    if let Some((other, _)) = given.iter().find(|(k, _)| !names.contains(&k.as_str())) {
        return Err(refused(
            other,
            format!("{field} names {other:?}, which is not one of the {whose} policies"),
        ));
    }
    names
        .iter()
        .map(|name| match given.iter().find(|(k, _)| k == name) {
            None => Err(refused(
                name,
                format!("{field}.{name} is required: {field} by policy names every policy"),
            )),
            Some((_, Amount::Tokens(n))) => Ok(*n),
            Some((_, Amount::Invalid(value))) => Err(refused(
                name,
                format!(
                    "{field}.{name} must be an integer from 0 to {}, not {value}",
                    u64::MAX
                ),
            )),
        })
        .collect()
}
