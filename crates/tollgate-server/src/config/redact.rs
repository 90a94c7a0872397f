//! What a refusal may quote of the file: nothing of an `[auth]` table's values, nor the text a
//! syntax error stops at in `[store]` or `[resp]`. A secret written unquoted (`secret =
//! LITERALSECRET`), where a path belongs, or in a store URL is still a secret, and errors go to
//! logs, terminals, CI output and the console's `GET /v1/status`.

use std::ops::Range;

/// What a syntax error in an `[auth]` table adds, in place of the text it stopped at (which
/// other syntax errors quote).
pub(super) const NOT_SHOWN: &str = "(the [auth] table's text is not shown: it may hold a \
    secret; quote every value, as in secret_file = \"ops.secret\")";

/// Whether byte `span` of `text`, or the dotted `field`, is in the `[auth]` table: under an
/// `[auth]` or `[auth.*]` header, or on a line of the root table that sets `auth...`.
pub(super) fn in_auth(text: &str, span: Option<&Range<usize>>, field: &str) -> bool {
    in_table(text, span, field, "auth")
}

/// Whether a syntax error's text at `span` may be quoted: not in `[auth]`, nor in `[store]`
/// (a URL's password) or `[resp]` (its `password`). The message says where, by line and
/// column, all the same.
pub(super) fn may_quote(text: &str, span: Option<&Range<usize>>) -> bool {
    !["auth", "store", "resp"]
        .iter()
        .any(|table| in_table(text, span, "", table))
}

/// Whether byte `span` of `text`, or the dotted `field`, is in the table `table`: under a
/// `[table]` or `[table.*]` header, or on a line of the root table that sets `table...`.
fn in_table(text: &str, span: Option<&Range<usize>>, field: &str, table: &str) -> bool {
    if field == table
        || field
            .strip_prefix(table)
            .is_some_and(|f| f.starts_with('.'))
    {
        return true;
    }
    let Some(span) = span else { return false };
    let before = text.get(..span.start.min(text.len())).unwrap_or(text);
    let line = |l: &str| l.trim_start().to_owned();
    let this_line = before.rsplit('\n').next().map(line).unwrap_or_default();
    let header = before
        .lines()
        .rev()
        .map(line)
        .find(|l| l.starts_with('['))
        .map(|h| h.trim_start_matches('[').trim_start().to_owned());
    let table_key = |s: &str| {
        s.strip_prefix(table)
            .is_some_and(|rest| rest.trim_start().starts_with(['.', ']', '=']))
    };
    match header {
        Some(h) => table_key(&h) || this_line.starts_with('[') && table_key(&this_line[1..]),
        None => table_key(&this_line),
    }
}

/// serde's `message` without the value it quotes: `invalid type: string "...", expected a
/// map` reads `invalid type: string (not shown), expected a map`.
pub(super) fn without_values(message: &str) -> String {
    let (head, tail) = match message.find(", expected") {
        Some(at) => message.split_at(at),
        None => (message, ""),
    };
    let mut out = String::with_capacity(message.len());
    let mut quoted: Option<char> = None;
    for c in head.chars() {
        match quoted {
            Some(close) if c == close => quoted = None,
            Some(_) => {}
            None if c == '`' || c == '"' => {
                quoted = Some(c);
                out.push_str("(not shown)");
            }
            None => out.push(c),
        }
    }
    out.push_str(tail);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_tables_are_found_by_header_or_dotted_key() {
        let text = "[policies.a]\ncapacity = 1\n[auth.tokens.app]\nsecret = X\n";
        let at = |needle: &str| {
            let start = text.find(needle).unwrap();
            start..start + 1
        };
        assert!(in_auth(text, Some(&at("X")), ""));
        assert!(!in_auth(text, Some(&at("capacity")), ""));
        assert!(in_auth("auth.tokens.a.secret = X\n", Some(&(22..23)), ""));
        assert!(in_auth("[ auth ]\ntokens = X\n", Some(&(18..19)), ""));
        assert!(!in_auth("[authority]\nx = X\n", Some(&(16..17)), ""));
        assert!(in_auth("", None, "auth.tokens.app.scopes[0]"));
        assert!(!in_auth("", None, "authority"));
    }

    #[test]
    fn syntax_errors_in_store_or_resp_are_not_quoted() {
        let text =
            "[policies.a]\ncapacity = 1\n[store]\nurl = \"redis://:X@h\"\n[resp]\npassword = Y\n";
        let at = |needle: &str| {
            let start = text.find(needle).unwrap();
            Some(start..start + 1)
        };
        assert!(may_quote(text, at("capacity").as_ref()));
        assert!(!may_quote(text, at("X").as_ref()));
        assert!(!may_quote(text, at("Y").as_ref()));
        assert!(!may_quote(
            "store.url = \"redis://:X@h\" z\n",
            Some(&(26..27))
        ));
    }

    #[test]
    fn a_store_password_is_not_quoted_by_any_refusal() {
        for text in [
            "[store]\nurl = \"redi://:hunter2@h\"\n",
            "[store]\nurl = \"hunter2@h\"\n",
            "[store]\nurl = redis://:hunter2@h\n",
            "[store]\nurl = \"redis://:hunter2@h\" hunter2\n",
            "store.url = \"redis://:hunter2@h\" hunter2\n",
            "[resp]\npassword = hunter2\n",
        ] {
            let e = super::super::Config::parse(std::path::Path::new("t.toml"), text);
            let e = e.unwrap_err().to_string();
            assert!(!e.contains("hunter2"), "{text:?}: {e}");
        }
    }

    #[test]
    fn quoted_values_are_not_shown() {
        assert_eq!(
            without_values("invalid type: string \"LITERALSECRET\", expected a map"),
            "invalid type: string (not shown), expected a map"
        );
        assert_eq!(
            without_values("unknown variant `S3CRET`, expected one of `check`, `read`"),
            "unknown variant (not shown), expected one of `check`, `read`"
        );
    }
}
