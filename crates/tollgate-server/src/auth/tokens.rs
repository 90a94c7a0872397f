//! The `[auth]` table: named tokens, each a secret and the scopes it grants.

use std::fmt;
use std::sync::Arc;

use serde::Deserialize;

use super::secret::Secret;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Decide: checks, reservations and their commits.
    Check,
    /// Read: a bucket's state, the policies.
    Read,
    /// Administer: reset and refund buckets, the metrics and `/rlconfig`.
    Admin,
}

impl Scope {
    /// The scope's name, as the config file writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Check => "check",
            Scope::Read => "read",
            Scope::Admin => "admin",
        }
    }

    fn bit(self) -> u8 {
        match self {
            Scope::Check => 1,
            Scope::Read => 2,
            Scope::Admin => 4,
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A set of scopes. Each is granted on its own: `admin` does not imply `read` or `check`, so a
/// token does what its list says and nothing more.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct Scopes(u8);

impl Scopes {
    /// Whether `scope` is in the set.
    pub fn contains(self, scope: Scope) -> bool {
        self.0 & scope.bit() != 0
    }
}

impl FromIterator<Scope> for Scopes {
    fn from_iter<I: IntoIterator<Item = Scope>>(scopes: I) -> Scopes {
        Scopes(scopes.into_iter().fold(0, |set, s| set | s.bit()))
    }
}

impl Scopes {
    fn each(self) -> impl Iterator<Item = Scope> {
        [Scope::Check, Scope::Read, Scope::Admin]
            .into_iter()
            .filter(move |s| self.contains(*s))
    }
}

impl fmt::Debug for Scopes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.each()).finish()
    }
}

impl fmt::Display for Scopes {
    /// `check, read`, as `config check` lists them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, scope) in self.each().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(scope.as_str())?;
        }
        Ok(())
    }
}

/// A named token. Its Debug shows the name and scopes, never the secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// The name logs and `AUTH name secret` know it by.
    pub name: Arc<str>,
    /// What it may do.
    pub scopes: Scopes,
    secret: Secret,
}

impl Token {
    /// The token `name`, proved by `secret`, granting `scopes`.
    pub fn new(name: &str, secret: Secret, scopes: Scopes) -> Token {
        Token {
            name: name.into(),
            scopes,
            secret,
        }
    }
}

/// The tokens in force; none: every endpoint is open, as without `[auth]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tokens {
    tokens: Vec<Token>,
}

impl Tokens {
    /// The table of `tokens`, or the names of two that share a secret (a secret must say
    /// which token it is).
    pub fn new(tokens: Vec<Token>) -> Result<Tokens, (Arc<str>, Arc<str>)> {
        for (i, a) in tokens.iter().enumerate() {
            if let Some(b) = tokens[i + 1..].iter().find(|b| b.secret == a.secret) {
                return Err((Arc::clone(&a.name), Arc::clone(&b.name)));
            }
        }
        Ok(Tokens { tokens })
    }

    /// Whether no token is configured.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// How many tokens there are.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// The tokens, by name.
    pub fn iter(&self) -> impl Iterator<Item = &Token> {
        self.tokens.iter()
    }

    /// The token named `name`, if any.
    pub fn named(&self, name: &str) -> Option<&Token> {
        self.tokens.iter().find(|t| &*t.name == name)
    }

    /// The token `secret` proves, if any. Every token's secret is compared, whichever matches,
    /// so the time taken does not tell which one did.
    pub fn proved_by(&self, secret: &[u8]) -> Option<&Token> {
        let mut found = None;
        for token in &self.tokens {
            if token.secret.matches(secret) && found.is_none() {
                found = Some(token);
            }
        }
        found
    }

    /// The token named `name`, if `secret` is its secret.
    pub fn login(&self, name: &[u8], secret: &[u8]) -> Option<&Token> {
        let name = std::str::from_utf8(name).ok()?;
        self.named(name).filter(|t| t.secret.matches(secret))
    }

    /// The scopes `token` grants now: none if a reload removed it or changed its secret.
    pub fn scopes_now(&self, token: &Token) -> Option<Scopes> {
        self.named(&token.name)
            .filter(|now| now.secret == token.secret)
            .map(|now| now.scopes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(name: &str, secret: &str, scopes: &[Scope]) -> Token {
        Token::new(
            name,
            Secret::new(secret.as_bytes()),
            scopes.iter().copied().collect(),
        )
    }

    #[test]
    fn tokens_are_found_by_secret_or_by_name_and_secret() {
        let tokens = Tokens::new(vec![
            token("app", "s-app", &[Scope::Check]),
            token("ops", "s-ops", &[Scope::Read, Scope::Admin]),
        ])
        .unwrap();
        assert_eq!(&*tokens.proved_by(b"s-ops").unwrap().name, "ops");
        assert!(tokens.proved_by(b"s-nobody").is_none());
        assert!(tokens.login(b"app", b"s-app").is_some());
        assert!(tokens.login(b"app", b"s-ops").is_none());
        let ops = tokens.named("ops").unwrap();
        assert!(ops.scopes.contains(Scope::Admin) && !ops.scopes.contains(Scope::Check));
        assert_eq!(
            format!("{ops:?}"),
            "Token { name: \"ops\", scopes: {Read, Admin}, secret: Secret(<redacted>) }"
        );
    }

    #[test]
    fn two_tokens_cannot_share_a_secret() {
        let refused = Tokens::new(vec![
            token("a", "same", &[Scope::Check]),
            token("b", "same", &[Scope::Admin]),
        ]);
        assert_eq!(refused, Err(("a".into(), "b".into())));
    }

    #[test]
    fn a_reload_that_changes_a_secret_drops_who_proved_the_old_one() {
        let old = token("app", "one", &[Scope::Check]);
        let reloaded = Tokens::new(vec![token("app", "two", &[Scope::Check])]).unwrap();
        assert_eq!(reloaded.scopes_now(&old), None);
        let rescoped = Tokens::new(vec![token("app", "one", &[Scope::Read])]).unwrap();
        assert_eq!(
            rescoped.scopes_now(&old),
            Some([Scope::Read].into_iter().collect())
        );
    }
}
