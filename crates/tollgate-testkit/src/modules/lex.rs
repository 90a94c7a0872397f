//! Rust source cut into the few tokens a path needs: identifiers, `::`, punctuation and the text
//! of doc comments. Literals and ordinary comments leave no trace but a placeholder, so that a
//! path spelled in a string (`"crate::x"`) or a `//` comment is never taken for a mention.

/// One token and the line it starts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Token {
    /// What it is.
    pub(super) kind: Kind,
    /// Its line, from 1.
    pub(super) line: usize,
}

/// The kinds of token the scanner tells apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Kind {
    /// An identifier or keyword (`r#type` as `type`, `$crate` as `crate`).
    Ident(String),
    /// `::`.
    PathSep,
    /// Any other punctuation character.
    Punct(char),
    /// The text of a doc comment (`///`, `//!`, `/** */`, `/*! */`).
    Doc(String),
    /// A literal or a lifetime.
    Other,
}

/// The tokens of `source`.
pub(super) fn tokens(source: &str) -> Vec<Token> {
    let mut lexer = Lexer {
        chars: source.chars().collect(),
        at: 0,
        line: 1,
        out: Vec::new(),
    };
    lexer.run();
    lexer.out
}

struct Lexer {
    chars: Vec<char>,
    at: usize,
    line: usize,
    out: Vec<Token>,
}

impl Lexer {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.at + ahead).copied()
    }

    fn push(&mut self, kind: Kind, line: usize) {
        self.out.push(Token { kind, line });
    }

    /// Moves past one character, counting lines.
    fn bump(&mut self) -> Option<char> {
        let c = self.peek(0)?;
        self.at += 1;
        if c == '\n' {
            self.line += 1;
        }
        Some(c)
    }

    fn run(&mut self) {
        while let Some(c) = self.peek(0) {
            let line = self.line;
            match c {
                _ if c.is_whitespace() => {
                    self.bump();
                }
                '/' if self.peek(1) == Some('/') => self.line_comment(),
                '/' if self.peek(1) == Some('*') => self.block_comment(),
                '"' => {
                    self.bump();
                    self.quoted('"');
                    self.push(Kind::Other, line);
                }
                '\'' => self.quote_or_lifetime(),
                '$' if self.word_at(1) == "crate" => {
                    self.at += 1 + "crate".len();
                    self.push(Kind::Ident("crate".into()), line);
                }
                ':' if self.peek(1) == Some(':') => {
                    self.at += 2;
                    self.push(Kind::PathSep, line);
                }
                _ if c.is_alphanumeric() || c == '_' => self.word(),
                _ => {
                    self.bump();
                    self.push(Kind::Punct(c), line);
                }
            }
        }
    }

    /// The identifier characters from `ahead` on, unread.
    fn word_at(&self, ahead: usize) -> String {
        self.chars[(self.at + ahead).min(self.chars.len())..]
            .iter()
            .take_while(|c| c.is_alphanumeric() || **c == '_')
            .collect()
    }

    /// An identifier, a keyword, a number, or the prefix of a literal (`b'x'`, `r#"…"#`, `c"…"`).
    fn word(&mut self) {
        let line = self.line;
        let word = self.word_at(0);
        let after = self.peek(word.chars().count());
        let raw = matches!(word.as_str(), "r" | "br" | "cr");
        if raw && (after == Some('"') || (after == Some('#') && self.raw_string_ahead(word.len())))
        {
            self.at += word.len();
            self.raw_string();
            self.push(Kind::Other, line);
            return;
        }
        if matches!(word.as_str(), "b" | "c") && after == Some('"') {
            self.at += word.len() + 1;
            self.quoted('"');
            self.push(Kind::Other, line);
            return;
        }
        if word == "b" && after == Some('\'') {
            self.at += 2;
            self.quoted('\'');
            self.push(Kind::Other, line);
            return;
        }
        self.at += word.chars().count();
        if word == "r" && after == Some('#') {
            // A raw identifier: `r#type` is the identifier `type`.
            self.at += 1;
            let name = self.word_at(0);
            self.at += name.chars().count();
            self.push(Kind::Ident(name), line);
        } else if word.starts_with(|c: char| c.is_ascii_digit()) {
            self.push(Kind::Other, line);
        } else {
            self.push(Kind::Ident(word), line);
        }
    }

    /// Whether `#…#"` follows the `skip` characters of a raw literal's prefix.
    fn raw_string_ahead(&self, skip: usize) -> bool {
        let rest = &self.chars[(self.at + skip).min(self.chars.len())..];
        let hashes = rest.iter().take_while(|c| **c == '#').count();
        rest.get(hashes) == Some(&'"')
    }

    /// A raw string from its `#`s on (the prefix read).
    fn raw_string(&mut self) {
        let mut hashes = 0;
        while self.peek(0) == Some('#') {
            self.bump();
            hashes += 1;
        }
        self.bump(); // the opening quote
        while let Some(c) = self.bump() {
            if c == '"' && (0..hashes).all(|i| self.peek(i) == Some('#')) {
                self.at += hashes;
                return;
            }
        }
    }

    /// The rest of a quoted literal, its opening quote read: to the unescaped `close`.
    fn quoted(&mut self, close: char) {
        while let Some(c) = self.bump() {
            if c == '\\' {
                self.bump();
            } else if c == close {
                return;
            }
        }
    }

    /// `'x'`, `'\n'` (a character) or `'a` (a lifetime or a label).
    fn quote_or_lifetime(&mut self) {
        let line = self.line;
        self.bump();
        if self.peek(0) == Some('\\') || self.peek(1) == Some('\'') {
            self.quoted('\'');
        } else {
            let name = self.word_at(0);
            self.at += name.chars().count();
        }
        self.push(Kind::Other, line);
    }

    /// `// …` to the end of the line; a doc comment (`///` but not `////`, or `//!`) keeps its text.
    fn line_comment(&mut self) {
        let line = self.line;
        let doc =
            (self.peek(2) == Some('/') && self.peek(3) != Some('/')) || self.peek(2) == Some('!');
        let start = self.at;
        while self.peek(0).is_some_and(|c| c != '\n') {
            self.at += 1;
        }
        if doc {
            let text = self.chars[start + 3..self.at].iter().collect();
            self.push(Kind::Doc(text), line);
        }
    }

    /// `/* … */`, nested ones inside; a doc comment (`/** */` but not `/***` or `/**/`, or `/*!`)
    /// keeps its text.
    fn block_comment(&mut self) {
        let line = self.line;
        let doc = (self.peek(2) == Some('*') && !matches!(self.peek(3), Some('*' | '/')))
            || self.peek(2) == Some('!');
        self.at += 2;
        // A doc comment's text starts after its `*` or `!`.
        let start = self.at + usize::from(doc);
        let mut depth = 1;
        while depth > 0 && self.peek(0).is_some() {
            if self.peek(0) == Some('/') && self.peek(1) == Some('*') {
                depth += 1;
                self.at += 2;
            } else if self.peek(0) == Some('*') && self.peek(1) == Some('/') {
                depth -= 1;
                self.at += 2;
            } else {
                self.bump();
            }
        }
        if doc {
            let end = self.at.saturating_sub(2).max(start);
            let text = self.chars[start..end].iter().collect();
            self.push(Kind::Doc(text), line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idents(source: &str) -> Vec<String> {
        tokens(source)
            .into_iter()
            .filter_map(|t| match t.kind {
                Kind::Ident(name) => Some(name),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn literals_and_comments_hide_their_words() {
        let source = r###"a "b \" c" r#"d "e" f"# b'g' 'h' '\'' 'i x // j
            /* k /* l */ m */ br"n" c"o" 1u8 r#type $crate"###;
        assert_eq!(idents(source), ["a", "x", "type", "crate"]);
    }

    #[test]
    fn doc_comments_keep_their_text_and_lines() {
        let source = "/// one\n//// not\n//! two\n/** three */\n/*! four */\n/**/ /*** five */ x";
        let docs: Vec<(String, usize)> = tokens(source)
            .into_iter()
            .filter_map(|t| match t.kind {
                Kind::Doc(text) => Some((text, t.line)),
                _ => None,
            })
            .collect();
        assert_eq!(
            docs,
            [
                (" one".to_owned(), 1),
                (" two".to_owned(), 3),
                (" three ".to_owned(), 4),
                (" four ".to_owned(), 5)
            ]
        );
        assert_eq!(tokens(source).last().unwrap().line, 6);
    }

    #[test]
    fn a_path_is_identifiers_between_separators() {
        let kinds: Vec<Kind> = tokens("super::a::{b, c}")
            .into_iter()
            .map(|t| t.kind)
            .collect();
        assert_eq!(
            kinds,
            [
                Kind::Ident("super".into()),
                Kind::PathSep,
                Kind::Ident("a".into()),
                Kind::PathSep,
                Kind::Punct('{'),
                Kind::Ident("b".into()),
                Kind::Punct(','),
                Kind::Ident("c".into()),
                Kind::Punct('}'),
            ]
        );
    }
}
