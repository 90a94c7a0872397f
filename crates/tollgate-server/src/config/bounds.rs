//! A cheap pass over the file's TOML tokens before it is parsed: it counts the policies the file
//! names and refuses the file at the first one past [`MAX_POLICIES`], and refuses a file of more
//! than [`MAX_TOKENS`] tokens, all without building anything.
//!
//! The TOML parser builds the whole document before a field of it is checked: about 2 KiB of
//! memory for each policy table, so a 16 MiB file of small tables took the server to 800 MB to
//! be refused for holding too many. This pass streams the lexer's tokens and keeps only the
//! table path in force, the key being read and the distinct policy names seen, at most
//! [`MAX_POLICIES`] + 1 of them.
//!
//! It follows TOML's grammar only as far as counting needs: where the file is not valid TOML,
//! what it counts does not matter, since the parser that runs next refuses the file with its
//! own message.

use std::borrow::Cow;
use std::collections::HashSet;
use std::path::Path;

use toml_parser::lexer::{Token, TokenKind};
use toml_parser::{Raw, Source};

use super::ConfigError;
use crate::limiter::MAX_POLICIES;

/// The most TOML tokens (keys, values, punctuation, whitespace, comments) a config file may
/// hold. A file of [`MAX_POLICIES`] policies, each with every key set and a comment, takes about
/// 170,000; the parser's memory grows with the tokens, about 150 bytes each.
pub const MAX_TOKENS: usize = 1 << 19;

/// Refuses `text`, the file at `path`, if it names more than [`MAX_POLICIES`] policies or holds
/// more than [`MAX_TOKENS`] tokens.
pub(super) fn check(path: &Path, text: &str) -> Result<(), ConfigError> {
    let mut counter = Counter::default();
    for (n, token) in Source::new(text).lex().enumerate() {
        if n >= MAX_TOKENS {
            return Err(ConfigError::at(
                path,
                text,
                Some(token.span().start()..token.span().end()),
                "",
                format!(
                    "the file holds more than {MAX_TOKENS} TOML tokens, the most read; a config \
                     file of {MAX_POLICIES} policies needs about a third of that"
                ),
            ));
        }
        if let Some(name) = counter.feed(text, token)
            && counter.names.len() > MAX_POLICIES
        {
            return Err(ConfigError::at(
                path,
                text,
                Some(counter.start..counter.start),
                format!("policies.{name}"),
                format!("more than {MAX_POLICIES} policies; at most {MAX_POLICIES} are allowed"),
            ));
        }
    }
    Ok(())
}

/// Where the pass is in TOML's grammar.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading a key (at the start of a line, or in an inline table).
    #[default]
    Key,
    /// Reading a `[table]` or `[[table]]` header.
    Header,
    /// After `=`, or in an array: a value starts.
    Value,
    /// After a value or a header: until a `,`, a closing bracket or the end of the line.
    Rest,
}

/// An inline table or array the pass is inside.
#[derive(Debug)]
enum Frame<'t> {
    /// An inline table and its path; `None` inside an array, where no policy can be.
    Table(Option<Vec<Cow<'t, str>>>),
    Array,
}

#[derive(Debug, Default)]
struct Counter<'t> {
    state: State,
    /// The path of the last `[table]` header.
    table: Vec<Cow<'t, str>>,
    /// The key being read, relative to the table or inline table it is in.
    key: Vec<Cow<'t, str>>,
    stack: Vec<Frame<'t>>,
    names: HashSet<Cow<'t, str>>,
    /// Where the header or key being read starts.
    start: usize,
}

impl<'t> Counter<'t> {
    /// Takes in the next token of `text`; returns the policy name it completed, if any.
    fn feed(&mut self, text: &'t str, token: Token) -> Option<Cow<'t, str>> {
        use TokenKind as T;
        let kind = token.kind();
        match (self.state, kind) {
            (_, T::Whitespace | T::Comment | T::Eof) => None,
            (_, T::Newline) => {
                // Inside an array or an inline table a value may go on over lines.
                if self.stack.is_empty() {
                    self.state = State::Key;
                    self.key.clear();
                }
                None
            }
            (State::Key, T::LeftSquareBracket) if self.stack.is_empty() && self.key.is_empty() => {
                self.state = State::Header;
                self.start = token.span().start();
                None
            }
            (State::Key | State::Header, T::Atom | T::BasicString | T::LiteralString) => {
                if self.key.is_empty() && self.state == State::Key {
                    self.start = token.span().start();
                }
                self.key.push(decode(text, token));
                None
            }
            (State::Key | State::Header, T::Dot) => None,
            // `[[`: the second bracket of an array table's header.
            (State::Header, T::LeftSquareBracket) => None,
            (State::Header, T::RightSquareBracket) => {
                self.table = std::mem::take(&mut self.key);
                self.state = State::Rest;
                self.policy(&self.table.clone())
            }
            (State::Key, T::Equals) => {
                let key = std::mem::take(&mut self.key);
                let full = self.prefix().map(|prefix| [prefix, &key].concat());
                self.state = State::Value;
                let name = full.as_deref().and_then(|full| self.policy(full));
                // A value that is an inline table opens with this path.
                self.stack.push(Frame::Table(full));
                name
            }
            (State::Value, T::LeftCurlyBracket) => {
                // The frame pushed at `=` is this table's; in an array, a table of its own.
                if matches!(self.stack.last(), Some(Frame::Array)) {
                    self.stack.push(Frame::Table(None));
                }
                self.state = State::Key;
                None
            }
            (State::Value, T::LeftSquareBracket) => {
                self.end_of_key_value();
                self.stack.push(Frame::Array);
                None
            }
            (State::Value | State::Rest, T::RightSquareBracket) => {
                // The key's own frame went when the array opened.
                if matches!(self.stack.last(), Some(Frame::Array)) {
                    self.stack.pop();
                }
                self.state = State::Rest;
                None
            }
            (State::Value, _) => {
                self.end_of_key_value();
                self.state = State::Rest;
                None
            }
            (State::Key | State::Rest, T::RightCurlyBracket) => {
                // The inline table's frame is the one its key pushed at `=`.
                if matches!(self.stack.last(), Some(Frame::Table(_))) {
                    self.stack.pop();
                }
                self.state = State::Rest;
                None
            }
            (State::Rest, T::Comma) => {
                self.state = match self.stack.last() {
                    Some(Frame::Array) => State::Value,
                    _ => State::Key,
                };
                None
            }
            _ => None,
        }
    }

    /// After a value that was not an inline table: drops the frame pushed at its `=`.
    fn end_of_key_value(&mut self) {
        if let Some(Frame::Table(_)) = self.stack.last()
            && self.state == State::Value
        {
            self.stack.pop();
        }
    }

    /// The path keys are read under: the table's, or the inline table's; `None` in an array.
    fn prefix(&self) -> Option<&[Cow<'t, str>]> {
        match self.stack.last() {
            None => Some(&self.table),
            Some(Frame::Table(path)) => path.as_deref(),
            Some(Frame::Array) => None,
        }
    }

    /// Notes the policy `path` is in, if it is in one; returns its name when new.
    fn policy(&mut self, path: &[Cow<'t, str>]) -> Option<Cow<'t, str>> {
        match path {
            [section, name, ..] if section == "policies" => {
                self.names.insert(name.clone()).then(|| name.clone())
            }
            _ => None,
        }
    }
}

/// A key as TOML reads it: quotes removed and escapes resolved.
fn decode<'t>(text: &'t str, token: Token) -> Cow<'t, str> {
    let span = token.span();
    let raw = Raw::new_unchecked(
        &text[span.start()..span.end()],
        token.kind().encoding(),
        span,
    );
    let mut key = Cow::Borrowed("");
    raw.decode_key(&mut key, &mut ());
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(text: &str) -> Vec<String> {
        let mut counter = Counter::default();
        for token in Source::new(text).lex() {
            counter.feed(text, token);
        }
        let mut names: Vec<String> = counter.names.into_iter().map(String::from).collect();
        names.sort();
        names
    }

    #[test]
    fn counts_each_way_toml_can_name_a_policy_once() {
        let text = r#"
[store]
url = "memory" # [policies.not_a_header]

[policies.a]
capacity = 1
period = "1s"

[policies."b c"]
capacity = 1

[policies]
d = { capacity = 1, period = "1s" }
e.capacity = 1
e.period = "1s"
'f' = {
  capacity = 1,
}

[grpc.domains.policies]
algorithm = "token_bucket"

[http]
listen = "[policies.x]"
"#;
        assert_eq!(names(text), ["a", "b c", "d", "e", "f"]);
        assert_eq!(
            names("policies.g.capacity = 1\npolicies = { h = { capacity = 1 } }\n"),
            ["g", "h"]
        );
        assert_eq!(
            names("x = [[1, 2], { policies = { y = 1 } }]\n[policies.\"i\\u0041\"]\n"),
            ["iA"]
        );
    }

    #[test]
    fn refuses_the_first_policy_past_the_cap_where_it_is_named() {
        let text: String = (0..=MAX_POLICIES)
            .map(|i| format!("[policies.p{i}]\ncapacity = 1\nperiod = \"1s\"\n"))
            .collect();
        let e = check(Path::new("t.toml"), &text).unwrap_err();
        assert_eq!(e.field, format!("policies.p{MAX_POLICIES}"));
        assert_eq!(e.at, Some((3 * MAX_POLICIES + 1, 1)));
        assert!(e.message.contains("more than 4096 policies"), "{e}");
        let at_cap = text
            .rsplit_once("[policies.")
            .map(|(head, _)| head)
            .unwrap();
        assert_eq!(check(Path::new("t.toml"), at_cap), Ok(()));
    }

    #[test]
    fn refuses_a_file_of_too_many_tokens() {
        let text = "#\n".repeat(MAX_TOKENS);
        let e = check(Path::new("t.toml"), &text).unwrap_err();
        assert!(e.message.contains("TOML tokens"), "{e}");
        assert_eq!(
            check(Path::new("t.toml"), &"#\n".repeat(MAX_TOKENS / 2 - 1)),
            Ok(())
        );
    }
}
