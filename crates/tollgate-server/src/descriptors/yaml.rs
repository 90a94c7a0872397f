//! YAML as envoyproxy/ratelimit reads it (Go's yaml.v2): a tree whose scalars keep their text,
//! resolved by YAML 1.1's rules (`yes` and `on` are booleans, `0x1F` an integer), and whose
//! nodes keep their line, so that type errors read as yaml.v2 words them.
//!
//! yaml-rust2 parses (it resolves by YAML 1.2, so its own tree is not used): its events are
//! pulled one by one (its own loader recurses once per level of nesting) and assembled here,
//! merge keys (`<<: *defaults`) applied as yaml.v2 applies them, aliases expanded up to
//! [`MAX_NODES`] nodes and [`MAX_BYTES`] of text, nesting bounded by [`MAX_DEPTH`], so that no
//! file can exhaust memory or the stack.

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser, Tag};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// The most nodes a file may hold, aliases expanded.
pub(crate) const MAX_NODES: usize = 1_000_000;

/// The most text a file's scalars may hold, aliases expanded.
pub(crate) const MAX_BYTES: usize = 64 << 20;

/// The deepest nesting of lists and maps.
pub(crate) const MAX_DEPTH: usize = 128;

/// A YAML node.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    /// Its line, 1-based.
    pub(crate) line: usize,
    pub(crate) kind: Kind,
}

#[derive(Debug, Clone)]
pub(crate) enum Kind {
    /// A scalar: its text, and how it resolves.
    Scalar(String, Value),
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

/// What a scalar is, by YAML 1.1's resolution (as yaml.v2 decodes into `interface{}`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Value {
    Null,
    Bool(bool),
    /// Beyond `i64` it is a `uint64` in Go (and refused where only `int` passes).
    Int(i128),
    Float(f64),
    Str,
}

impl Node {
    /// The text of a scalar (`None` for a list or map).
    pub(crate) fn text(&self) -> Option<&str> {
        match &self.kind {
            Kind::Scalar(text, _) => Some(text),
            _ => None,
        }
    }

    /// yaml.v2's short tag: `!!str`, `!!int`, `!!seq`, ...
    pub(crate) fn tag(&self) -> &'static str {
        match &self.kind {
            Kind::Seq(_) => "!!seq",
            Kind::Map(_) => "!!map",
            Kind::Scalar(_, Value::Null) => "!!null",
            Kind::Scalar(_, Value::Bool(_)) => "!!bool",
            Kind::Scalar(_, Value::Int(_)) => "!!int",
            Kind::Scalar(_, Value::Float(_)) => "!!float",
            Kind::Scalar(_, Value::Str) => "!!str",
        }
    }

    /// The node as Go's `%v` prints what yaml.v2 decoded it to.
    pub(crate) fn go_value(&self) -> String {
        match &self.kind {
            Kind::Scalar(_, Value::Null) => "<nil>".to_owned(),
            Kind::Scalar(_, Value::Bool(b)) => b.to_string(),
            Kind::Scalar(_, Value::Int(i)) => i.to_string(),
            Kind::Scalar(_, Value::Float(f)) => go_float(*f),
            Kind::Scalar(text, Value::Str) => text.clone(),
            Kind::Seq(items) => {
                let items: Vec<String> = items.iter().map(Node::go_value).collect();
                format!("[{}]", items.join(" "))
            }
            Kind::Map(pairs) => {
                let pairs: Vec<String> = pairs
                    .iter()
                    .map(|(k, v)| format!("{}:{}", k.go_value(), v.go_value()))
                    .collect();
                format!("map[{}]", pairs.join(" "))
            }
        }
    }
}

/// Go's `%v` of a float64 (`strconv.FormatFloat(f, 'g', -1, 64)` with `%v`'s exponent range).
fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.to_owned();
    }
    let magnitude = f.abs();
    if magnitude != 0.0 && !(1e-4..1e21).contains(&magnitude) {
        // Rust writes `1e21`, Go `1e+21`.
        let text = format!("{f:e}");
        return match text.split_once('e') {
            Some((mantissa, exp)) if !exp.starts_with('-') => format!("{mantissa}e+{exp:0>2}"),
            Some((mantissa, exp)) => format!("{mantissa}e-{:0>2}", &exp[1..]),
            None => text,
        };
    }
    format!("{f}")
}

/// Why a file is not YAML.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SyntaxError {
    pub(crate) line: usize,
    pub(crate) message: String,
}

/// The first document of `text` (`None` when it has none: an empty file, or only comments).
pub(crate) fn parse(text: &str) -> Result<Option<Node>, SyntaxError> {
    let mut builder = Builder::default();
    let mut parser = Parser::new_from_str(text);
    loop {
        let (event, mark) = parser.next_token().map_err(|e| SyntaxError {
            line: e.marker().line(),
            message: e.info().to_owned(),
        })?;
        let end = matches!(event, Event::StreamEnd | Event::DocumentEnd);
        builder.on_event(event, mark);
        if let Some(error) = builder.error.take() {
            return Err(error);
        }
        // yaml.v2 reads the first document only.
        if end || (builder.root.is_some() && builder.open.is_empty()) {
            return Ok(builder.root);
        }
    }
}

/// Assembles events into nodes.
#[derive(Default)]
struct Builder {
    /// Lists and maps being filled: the node, its anchor, and for a map the key waiting for
    /// its value.
    open: Vec<(Node, usize, Option<Node>)>,
    anchors: Vec<(usize, Node)>,
    root: Option<Node>,
    nodes: usize,
    bytes: usize,
    error: Option<SyntaxError>,
}

impl Builder {
    fn fail(&mut self, line: usize, message: String) {
        if self.error.is_none() {
            self.error = Some(SyntaxError { line, message });
        }
    }

    fn count(&mut self, node: &Node, line: usize) -> bool {
        let (nodes, bytes) = size(node);
        self.nodes = self.nodes.saturating_add(nodes);
        self.bytes = self.bytes.saturating_add(bytes);
        if self.nodes > MAX_NODES || self.bytes > MAX_BYTES {
            self.fail(
                line,
                format!(
                    "more than {MAX_NODES} nodes or {} MiB of text (aliases expanded)",
                    MAX_BYTES >> 20
                ),
            );
            return false;
        }
        true
    }

    /// Puts a finished node where it belongs: in the list or map being filled, or as the root.
    fn place(&mut self, node: Node, anchor: usize) {
        if anchor > 0 {
            self.anchors.retain(|(id, _)| *id != anchor);
            self.anchors.push((anchor, node.clone()));
        }
        match self.open.last_mut() {
            None => {
                if self.root.is_none() {
                    self.root = Some(node);
                }
            }
            Some((parent, _, pending)) => match &mut parent.kind {
                Kind::Seq(items) => items.push(node),
                Kind::Map(pairs) => match pending.take() {
                    None => *pending = Some(node),
                    Some(key) => pairs.push((key, node)),
                },
                Kind::Scalar(..) => {}
            },
        }
    }

    fn open(&mut self, kind: Kind, anchor: usize, line: usize) {
        if self.open.len() >= MAX_DEPTH {
            self.fail(line, format!("nested more than {MAX_DEPTH} deep"));
            return;
        }
        self.open.push((Node { line, kind }, anchor, None));
    }

    fn close(&mut self) {
        if let Some((mut node, anchor, _)) = self.open.pop() {
            if let Kind::Map(pairs) = &mut node.kind {
                merge_keys(pairs);
            }
            self.place(node, anchor);
        }
    }
}

/// Applies the merge keys of a map as yaml.v2 does: `<<: map` (or a list of maps) adds their
/// pairs whose keys the map does not set itself, the first map of a list winning.
fn merge_keys(pairs: &mut Vec<(Node, Node)>) {
    let is_merge = |k: &Node| matches!(&k.kind, Kind::Scalar(t, Value::Str) if t == "<<");
    if !pairs.iter().any(|(k, _)| is_merge(k)) {
        return;
    }
    let (merges, mut own): (Vec<_>, Vec<_>) = std::mem::take(pairs)
        .into_iter()
        .partition(|(k, _)| is_merge(k));
    let mut merged: Vec<(Node, Node)> = Vec::new();
    for (key, value) in merges {
        let line = value.line;
        let sources = match value.kind {
            Kind::Map(map) => vec![map],
            Kind::Seq(items) if items.iter().all(|i| matches!(i.kind, Kind::Map(_))) => items
                .into_iter()
                .filter_map(|i| match i.kind {
                    Kind::Map(map) => Some(map),
                    _ => None,
                })
                .collect(),
            // Nothing to merge: left for the key check to refuse, as yaml.v2 refuses it.
            other => {
                own.push((key, Node { line, kind: other }));
                continue;
            }
        };
        for map in sources {
            for (k, v) in map {
                let taken = |pairs: &[(Node, Node)]| {
                    pairs
                        .iter()
                        .any(|(o, _)| o.text().is_some() && o.text() == k.text())
                };
                if !taken(&own) && !taken(&merged) {
                    merged.push((k, v));
                }
            }
        }
    }
    own.extend(merged);
    *pairs = own;
}

/// A node's count of nodes, and of bytes of text.
fn size(node: &Node) -> (usize, usize) {
    let add = |(n, b): (usize, usize), (m, c): (usize, usize)| (n + m, b + c);
    match &node.kind {
        Kind::Scalar(text, _) => (1, text.len()),
        Kind::Seq(items) => items.iter().map(size).fold((1, 0), add),
        Kind::Map(pairs) => pairs
            .iter()
            .map(|(k, v)| add(size(k), size(v)))
            .fold((1, 0), add),
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, event: Event, mark: Marker) {
        if self.error.is_some() {
            return;
        }
        let line = mark.line();
        match event {
            Event::Scalar(text, style, anchor, tag) => {
                let value = resolve(&text, style, tag.as_ref());
                let node = Node {
                    line,
                    kind: Kind::Scalar(text, value),
                };
                if self.count(&node, line) {
                    self.place(node, anchor);
                }
            }
            Event::SequenceStart(anchor, _) => {
                self.nodes += 1;
                self.open(Kind::Seq(Vec::new()), anchor, line);
            }
            Event::MappingStart(anchor, _) => {
                self.nodes += 1;
                self.open(Kind::Map(Vec::new()), anchor, line);
            }
            Event::SequenceEnd | Event::MappingEnd => self.close(),
            Event::Alias(id) => {
                let Some(node) = self
                    .anchors
                    .iter()
                    .find(|(anchor, _)| *anchor == id)
                    .map(|(_, node)| node.clone())
                else {
                    self.fail(line, "unknown anchor".to_owned());
                    return;
                };
                if self.count(&node, line) {
                    self.place(node, 0);
                }
            }
            Event::Nothing
            | Event::StreamStart
            | Event::StreamEnd
            | Event::DocumentStart
            | Event::DocumentEnd => {}
        }
    }
}

/// What yaml.v2 makes of a scalar: quoted and block scalars, and those tagged `!!str`, are
/// strings; a plain one is null, a boolean, an integer or a float when it reads as one by
/// YAML 1.1, else a string.
fn resolve(text: &str, style: TScalarStyle, tag: Option<&Tag>) -> Value {
    if let Some(tag) = tag {
        return match (tag.handle.as_str(), tag.suffix.as_str()) {
            ("!!", "str") | ("tag:yaml.org,2002:", "str") => Value::Str,
            _ => resolve(text, style, None),
        };
    }
    if style != TScalarStyle::Plain {
        return Value::Str;
    }
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return Value::Bool(true);
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return Value::Bool(false);
        }
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Value::Float(f64::INFINITY);
        }
        "-.inf" | "-.Inf" | "-.INF" => return Value::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Value::Float(f64::NAN),
        _ => {}
    }
    if let Some(int) = integer(text) {
        return Value::Int(int);
    }
    if is_float(text)
        && let Ok(f) = text.replace('_', "").parse::<f64>()
    {
        return Value::Float(f);
    }
    Value::Str
}

/// An integer as yaml.v2 reads one: a sign, then decimal, `0x` hex, `0b` binary or `0` octal,
/// `_` ignored; within 64 bits (signed, or unsigned when positive).
fn integer(text: &str) -> Option<i128> {
    let plain = text.replace('_', "");
    let (negative, digits) = match plain.as_bytes().first()? {
        b'-' => (true, &plain[1..]),
        b'+' => (false, &plain[1..]),
        _ => (false, plain.as_str()),
    };
    // Go's ParseInt with base 0: `0x`, `0b` and `0o` in either case, or a leading 0.
    let prefix = digits.get(..2).map(str::to_ascii_lowercase);
    let (radix, digits) = match prefix.as_deref() {
        Some("0x") => (16, &digits[2..]),
        Some("0b") => (2, &digits[2..]),
        Some("0o") => (8, &digits[2..]),
        _ if digits.len() > 1 && digits.starts_with('0') => (8, &digits[1..]),
        _ => (10, digits),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let magnitude = i128::from_str_radix(digits, radix).ok()?;
    let value = if negative { -magnitude } else { magnitude };
    let fits = i128::from(i64::MIN) <= value && value <= i128::from(u64::MAX);
    fits.then_some(value)
}

/// YAML 1.1's float: `[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`.
fn is_float(text: &str) -> bool {
    let s = text.replace('_', "");
    let s = s.strip_prefix(['-', '+']).unwrap_or(&s);
    let (mantissa, exponent) = match s.find(['e', 'E']) {
        Some(at) => (&s[..at], Some(&s[at + 1..])),
        None => (s, None),
    };
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some(("", fraction)) => digits(fraction),
        Some((whole, fraction)) => digits(whole) && (fraction.is_empty() || digits(fraction)),
        None => digits(mantissa),
    };
    let exponent_ok = exponent.is_none_or(|e| digits(e.strip_prefix(['-', '+']).unwrap_or(e)));
    mantissa_ok && exponent_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(text: &str) -> Node {
        parse(text).expect("parses").expect("a document")
    }

    fn scalar(text: &str) -> Value {
        match root(&format!("k: {text}\n")).kind {
            Kind::Map(pairs) => match &pairs[0].1.kind {
                Kind::Scalar(_, value) => *value,
                other => panic!("not a scalar: {other:?}"),
            },
            other => panic!("not a map: {other:?}"),
        }
    }

    #[test]
    fn scalars_resolve_as_yaml_1_1() {
        assert_eq!(scalar("yes"), Value::Bool(true));
        assert_eq!(scalar("Off"), Value::Bool(false));
        assert_eq!(scalar("'yes'"), Value::Str);
        assert_eq!(scalar("~"), Value::Null);
        assert_eq!(scalar(""), Value::Null);
        assert_eq!(scalar("0x1F"), Value::Int(31));
        assert_eq!(scalar("017"), Value::Int(15));
        assert_eq!(scalar("0o17"), Value::Int(15));
        assert_eq!(scalar("0X1f"), Value::Int(31));
        assert_eq!(scalar("0B101"), Value::Int(5));
        assert_eq!(scalar("-12"), Value::Int(-12));
        assert_eq!(scalar("1_000"), Value::Int(1000));
        assert_eq!(
            scalar("18446744073709551615"),
            Value::Int(i128::from(u64::MAX))
        );
        // Beyond 64 bits an integer reads as a float, as in yaml.v2.
        assert_eq!(
            scalar("18446744073709551616"),
            Value::Float(18446744073709551616.0)
        );
        assert_eq!(scalar("0.25"), Value::Float(0.25));
        assert_eq!(scalar("1e3"), Value::Float(1000.0));
        assert_eq!(scalar("1.2.3"), Value::Str);
        assert_eq!(scalar("!!str 12"), Value::Str);
        assert_eq!(scalar("foo*"), Value::Str);
    }

    #[test]
    fn go_prints_values_as_yaml_v2_decoded_them() {
        assert_eq!(go_float(0.25), "0.25");
        assert_eq!(go_float(1000.0), "1000");
        assert_eq!(go_float(1e21), "1e+21");
        assert_eq!(go_float(1e-5), "1e-05");
        let list = root("- a\n- [b, c]\n- ~\n");
        assert_eq!(list.go_value(), "[a [b c] <nil>]");
    }

    #[test]
    fn lines_are_one_based_and_aliases_expand() {
        let doc = root("a: &x\n  b: 1\nc: *x\n");
        let Kind::Map(pairs) = doc.kind else {
            panic!("a map")
        };
        assert_eq!(pairs[0].0.line, 1);
        assert_eq!(pairs[1].1.go_value(), "map[b:1]");
    }

    #[test]
    fn merge_keys_apply_as_in_yaml_v2() {
        let doc = root(
            "base: &b {unit: second, requests_per_unit: 1}\n\
             over: {<<: *b, requests_per_unit: 5}\n\
             list: {<<: [{a: 1}, {a: 2, b: 2}]}\n",
        );
        let Kind::Map(pairs) = doc.kind else {
            panic!("a map")
        };
        assert_eq!(
            pairs[1].1.go_value(),
            "map[requests_per_unit:5 unit:second]"
        );
        assert_eq!(pairs[2].1.go_value(), "map[a:1 b:2]");
    }

    #[test]
    fn bombs_and_depth_are_refused() {
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 0..7 {
            let prev = if i == 0 {
                "a".to_owned()
            } else {
                format!("l{}", i - 1)
            };
            bomb.push_str(&format!(
                "l{i}: &l{i} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"
            ));
        }
        let error = parse(&bomb).expect_err("too many nodes");
        assert!(error.message.contains("nodes"), "{error:?}");
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert!(parse(&deep).is_err());
        // Far deeper than any stack would take, were the nesting followed by recursion.
        let block = "- ".repeat(100_000) + "x\n";
        assert!(parse(&block).is_err());
        let long = "x".repeat(100_000);
        let mut text = format!("a: &a {long}\nb: [");
        text.push_str(&"*a, ".repeat(1_000));
        text.push_str("*a]\n");
        let error = parse(&text).expect_err("too much text");
        assert!(error.message.contains("MiB"), "{error:?}");
        assert!(parse("").expect("empty parses").is_none());
        assert!(parse("# only a comment\n").expect("parses").is_none());
    }
}
