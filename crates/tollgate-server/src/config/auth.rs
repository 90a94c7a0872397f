//! `[auth.tokens.NAME]`: the named tokens, their secrets read from where the file points
//! (`secret_file`, `secret_env`) — never from the file itself.

use std::collections::BTreeMap;
use std::path::Path;

use toml::Spanned;

use super::ConfigError;
use super::file::TokenFile;
use super::policies::FaultAt;
use crate::auth::{Scopes, Secret, Token, Tokens};

/// The longest token name.
const MAX_NAME: usize = 64;

/// The shortest token secret: 16 bytes (128 bits of a random string's worth, out of reach of
/// guessing at the rate [`crate::auth::Strikes`] lets a client guess).
pub const MIN_SECRET: usize = 16;

/// The user `AUTH <password>` and `[resp] password` go by.
const PASSWORD_USER: &str = "default";

/// The file's tokens, their secrets read; `dir` is the config file's directory (relative
/// `secret_file`s are in it), `resp_password` whether `[resp] password` is set too.
pub(super) fn compile(
    tokens: BTreeMap<String, Spanned<TokenFile>>,
    dir: &Path,
    resp_password: bool,
    refuse: &FaultAt<'_>,
) -> Result<Tokens, ConfigError> {
    let mut compiled = Vec::with_capacity(tokens.len());
    let mut spans = Vec::with_capacity(tokens.len());
    for (name, token) in tokens {
        let field = format!("auth.tokens.{name}");
        let span = token.span();
        let refuse_here = |message: String| refuse(Some(span.clone()), &field, message);
        check_name(&name).map_err(refuse_here)?;
        if resp_password && name == PASSWORD_USER {
            return Err(refuse_here(format!(
                "[resp] password is the secret of the user {PASSWORD_USER:?} of AUTH already; \
                 name this token otherwise, or drop resp.password"
            )));
        }
        let token = token.into_inner();
        if let Some(written) = token.secret {
            return Err(refuse(
                Some(written.span()),
                &format!("{field}.secret"),
                "a secret is never written in the config file, where backups, diffs and \
                 `config check` would show it: put it in a file named by secret_file, or in an \
                 environment variable named by secret_env"
                    .to_owned(),
            ));
        }
        let secret = match (token.secret_file, token.secret_env) {
            (Some(file), None) => {
                let path = dir.join(file.get_ref());
                let at = |m: String| refuse(Some(file.span()), &format!("{field}.secret_file"), m);
                let bytes = crate::files::read(&path, crate::files::Kind::Secret)
                    .map_err(|e| at(e.to_string()))?;
                secret_of(&bytes).map_err(|length| {
                    at(short(&format!("{}", path.display()), "the file", length))
                })?
            }
            (None, Some(var)) => {
                let at = |m: String| refuse(Some(var.span()), &format!("{field}.secret_env"), m);
                let value = std::env::var_os(var.get_ref()).ok_or_else(|| {
                    at(format!(
                        "the environment variable {} is not set",
                        var.get_ref()
                    ))
                })?;
                secret_of(value.as_encoded_bytes()).map_err(|length| {
                    at(short(var.get_ref(), "the environment variable", length))
                })?
            }
            (Some(_), Some(_)) => {
                return Err(refuse_here(
                    "give secret_file or secret_env, not both".to_owned(),
                ));
            }
            (None, None) => {
                return Err(refuse_here(
                    "the token needs a secret: secret_file (a file holding it) or secret_env \
                     (an environment variable holding it)"
                        .to_owned(),
                ));
            }
        };
        if token.scopes.get_ref().is_empty() {
            return Err(refuse(
                Some(token.scopes.span()),
                &format!("{field}.scopes"),
                "name at least one of \"check\", \"read\", \"admin\"".to_owned(),
            ));
        }
        let scopes: Scopes = token.scopes.get_ref().iter().copied().collect();
        compiled.push(Token::new(&name, secret, scopes));
        spans.push((field, span));
    }
    Tokens::new(compiled).map_err(|(first, second)| {
        let (field, span) = spans
            .iter()
            .find(|(field, _)| *field == format!("auth.tokens.{second}"))
            .cloned()
            .unwrap_or_default();
        refuse(
            Some(span),
            &field,
            format!("has the same secret as auth.tokens.{first}; each token needs its own"),
        )
    })
}

/// The secret `bytes` hold, trailing whitespace aside (the newline an editor or `echo` ends a
/// file with); its length if that is shorter than [`MIN_SECRET`].
fn secret_of(bytes: &[u8]) -> Result<Secret, usize> {
    let secret = bytes.trim_ascii_end();
    if secret.len() < MIN_SECRET {
        return Err(secret.len());
    }
    Ok(Secret::new(secret))
}

/// Why a secret of `length` bytes in `what` `name` is refused (never the secret itself).
fn short(name: &str, what: &str, length: usize) -> String {
    match length {
        0 => format!("{what} {name} holds no secret (it is empty)"),
        n => format!(
            "{what} {name} holds a secret of {n} bytes; a token's secret must be at least \
             {MIN_SECRET} (make one with `openssl rand -hex 16`)"
        ),
    }
}

/// A name fit for `AUTH name secret` and a log line: letters, digits, `_`, `-`, `.`.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(format!(
            "a token's name must be 1 to {MAX_NAME} characters, got {}",
            name.len()
        ));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    {
        return Err(format!(
            "a token's name may hold ASCII letters and digits, `_`, `-` and `.`, not {name:?}"
        ));
    }
    Ok(())
}
