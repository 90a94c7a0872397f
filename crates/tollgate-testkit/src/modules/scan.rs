//! What one file says about modules: the inline modules it opens (`mod tests { … }`), the names
//! its `use` declarations bring in, and every path it spells that starts at `crate`, `super` or
//! `self` (in code and in doc comments), each with the inline module it sits in.

use super::lex::{Kind, Token, tokens};

/// A file's findings. Scopes are inline module names below the file's own module (empty for
/// the file's module itself).
#[derive(Debug, Default)]
pub(super) struct FileScan {
    /// Each inline module: its scope (the last name is the module's) and the line it opens on.
    pub(super) inline: Vec<(Vec<String>, usize)>,
    /// Each name a `use` brings into a scope, and the path it stands for.
    pub(super) imports: Vec<Import>,
    /// Each path spelled.
    pub(super) paths: Vec<Spelled>,
}

/// A name a `use` declaration brings into a scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Import {
    /// Where the `use` sits.
    pub(super) scope: Vec<String>,
    /// The name it brings in (after `as`, if any).
    pub(super) name: String,
    /// The path it stands for, as written (first segment `crate`, `super`, `self` or a name).
    pub(super) path: Vec<String>,
}

/// A path as written, where it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Spelled {
    /// The scope it is written in.
    pub(super) scope: Vec<String>,
    /// Its segments (first `crate`, `super`, `self`, or, in a `use`, a name).
    pub(super) segments: Vec<String>,
    /// Its line.
    pub(super) line: usize,
}

/// The findings of one file's text.
pub(super) fn scan(source: &str) -> FileScan {
    let tokens = tokens(source);
    let mut found = FileScan::default();
    // The inline modules open around the cursor, each with the brace depth inside it.
    let mut open: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut at = 0;
    while at < tokens.len() {
        let scope: Vec<String> = open.iter().map(|(name, _)| name.clone()).collect();
        let after_sep = at > 0 && tokens[at - 1].kind == Kind::PathSep;
        match &tokens[at].kind {
            Kind::Punct('{') => depth += 1,
            Kind::Punct('}') => {
                if open.last().is_some_and(|(_, inside)| *inside == depth) {
                    open.pop();
                }
                depth -= 1;
            }
            Kind::Ident(word) if word == "mod" && !after_sep => {
                if let (Some(Kind::Ident(name)), Some(Kind::Punct('{'))) = (
                    tokens.get(at + 1).map(|t| &t.kind),
                    tokens.get(at + 2).map(|t| &t.kind),
                ) {
                    let mut inner = scope.clone();
                    inner.push(name.clone());
                    found.inline.push((inner, tokens[at].line));
                    depth += 1;
                    open.push((name.clone(), depth));
                    at += 3;
                    continue;
                }
            }
            Kind::Ident(word) if word == "use" && !after_sep => {
                let line = tokens[at].line;
                let mut trees = Vec::new();
                at = use_tree(&tokens, at + 1, &mut Vec::new(), &mut trees);
                for (path, name) in trees {
                    if let Some(name) = name.filter(|n| n != "_") {
                        found.imports.push(Import {
                            scope: scope.clone(),
                            name,
                            path: path.clone(),
                        });
                    }
                    found.paths.push(Spelled {
                        scope: scope.clone(),
                        segments: path,
                        line,
                    });
                }
                continue;
            }
            Kind::Ident(word) if is_start(word) && !after_sep => {
                let (segments, next) = path(&tokens, at);
                if segments.len() > 1 {
                    found.paths.push(Spelled {
                        scope,
                        segments,
                        line: tokens[at].line,
                    });
                    at = next;
                    continue;
                }
            }
            Kind::Doc(text) => {
                for segments in doc_paths(text) {
                    found.paths.push(Spelled {
                        scope: scope.clone(),
                        segments,
                        line: tokens[at].line,
                    });
                }
            }
            _ => {}
        }
        at += 1;
    }
    found
}

/// The words a path that names this crate's modules starts with.
fn is_start(word: &str) -> bool {
    matches!(word, "crate" | "super" | "self")
}

/// The identifiers of the path starting at `at` (`a::b::c`), and the index after it.
fn path(tokens: &[Token], mut at: usize) -> (Vec<String>, usize) {
    let mut segments = Vec::new();
    while let Some(Kind::Ident(name)) = tokens.get(at).map(|t| &t.kind) {
        segments.push(name.clone());
        at += 1;
        if tokens.get(at).map(|t| &t.kind) != Some(&Kind::PathSep) {
            break;
        }
        at += 1;
    }
    (segments, at)
}

/// One use tree from `at` (after `use`, or inside a group), under `prefix`: each leaf's full
/// path and the name it brings in (none for a glob). Returns the index after the tree (and
/// after the `;` ending a declaration).
fn use_tree(
    tokens: &[Token],
    at: usize,
    prefix: &mut Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>)>,
) -> usize {
    let kind = |at: usize| tokens.get(at).map(|t| &t.kind);
    let mut at = at;
    if kind(at) == Some(&Kind::PathSep) {
        // `use ::name` names an outside crate.
        at += 1;
    }
    let (segments, mut at) = path(tokens, at);
    let depth = prefix.len();
    prefix.extend(segments);
    match kind(at) {
        Some(Kind::Punct('{')) => {
            at += 1;
            while !matches!(kind(at), None | Some(Kind::Punct('}'))) {
                at = use_tree(tokens, at, prefix, out);
                if kind(at) == Some(&Kind::Punct(',')) {
                    at += 1;
                }
            }
            at += 1;
        }
        Some(Kind::Punct('*')) => {
            out.push((prefix.clone(), None));
            at += 1;
        }
        _ => {
            // `use a::b::{self}` names `a::b` itself.
            if prefix.last().is_some_and(|s| s == "self") && prefix.len() > 1 {
                prefix.pop();
            }
            let mut name = prefix.last().cloned();
            if let (Some(Kind::Ident(word)), Some(Kind::Ident(rename))) = (kind(at), kind(at + 1))
                && word == "as"
            {
                name = Some(rename.clone());
                at += 2;
            }
            if !prefix.is_empty() {
                out.push((prefix.clone(), name));
            }
        }
    }
    prefix.truncate(depth);
    if kind(at) == Some(&Kind::Punct(';')) {
        at += 1;
    }
    at
}

/// The paths starting at `crate`, `super` or `self` in a doc comment's text
/// (``[`Store`](crate::store::Store)``, ``[`super::Plan`]``).
fn doc_paths(text: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let mut rest = text;
    while let Some(start) = rest.find(|c: char| is_word(c)) {
        let before = rest[..start].chars().last();
        let tail = &rest[start..];
        let mut segments = Vec::new();
        let mut end = 0;
        loop {
            let len = tail[end..]
                .find(|c: char| !is_word(c))
                .unwrap_or(tail.len() - end);
            if len == 0 {
                break;
            }
            segments.push(tail[end..end + len].to_owned());
            end += len;
            if !tail[end..].starts_with("::") {
                break;
            }
            end += 2;
        }
        // A word inside a longer path (`std::crate::`) or inside a word starts nothing.
        let whole = !matches!(before, Some(':')) && before.is_none_or(|c| !is_word(c));
        if whole && segments.len() > 1 && is_start(&segments[0]) {
            paths.push(segments);
        }
        rest = &tail[end.max(1)..];
    }
    paths
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| (*w).to_owned()).collect()
    }

    #[test]
    fn use_trees_bring_in_each_leaf() {
        let found = scan(
            "use super::a::{self, b::{C, D as E}, *};\nuse std::io;\nuse ::x::y;\nuse super::z as _;",
        );
        let imports: Vec<(String, Vec<String>)> = found
            .imports
            .iter()
            .map(|i| (i.name.clone(), i.path.clone()))
            .collect();
        assert_eq!(
            imports,
            [
                ("a".to_owned(), strings(&["super", "a"])),
                ("C".to_owned(), strings(&["super", "a", "b", "C"])),
                ("E".to_owned(), strings(&["super", "a", "b", "D"])),
                ("io".to_owned(), strings(&["std", "io"])),
                ("y".to_owned(), strings(&["x", "y"])),
            ]
        );
        let glob = found.paths.iter().filter(|p| p.segments == ["super", "a"]);
        assert_eq!(glob.count(), 2, "the `self` leaf and the glob");
        assert!(
            found
                .paths
                .iter()
                .any(|p| p.segments == ["super", "z"] && p.line == 4)
        );
    }

    #[test]
    fn inline_modules_scope_what_is_inside() {
        let found = scan(
            "fn f() { crate::a::f(); }\nmod tests {\n    fn g() { let c = '}'; super::b(); }\n}\nconst X: u8 = self::Y;",
        );
        assert_eq!(found.inline, [(strings(&["tests"]), 2)]);
        let paths: Vec<(Vec<String>, Vec<String>)> = found
            .paths
            .iter()
            .map(|p| (p.scope.clone(), p.segments.clone()))
            .collect();
        assert_eq!(
            paths,
            [
                (vec![], strings(&["crate", "a", "f"])),
                (strings(&["tests"]), strings(&["super", "b"])),
                (vec![], strings(&["self", "Y"])),
            ]
        );
    }

    #[test]
    fn doc_links_count_and_strings_do_not() {
        let found = scan(
            "/// See [`Plan`](super::plan::Plan) and [`crate::x`], not std::crate::y.\nconst S: &str = \"crate::z::w\";",
        );
        let paths: Vec<Vec<String>> = found.paths.into_iter().map(|p| p.segments).collect();
        assert_eq!(
            paths,
            [
                strings(&["super", "plan", "Plan"]),
                strings(&["crate", "x"])
            ]
        );
    }
}
