//! The config file the environment amounts to: TOML tables of tollgate's own keys, each key
//! remembering the variables it came from, so that a refusal of the file's reader names the
//! variable to change rather than a key of a file nobody wrote.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

/// A value of a key.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Value {
    Str(String),
    Bool(bool),
    Int(i64),
    Float(f64),
    Strings(Vec<String>),
    Map(BTreeMap<String, String>),
}

impl Value {
    /// A duration as the config file writes one (humantime): whole seconds, milliseconds, or
    /// nanoseconds, whichever says it exactly.
    pub(super) fn duration(d: Duration) -> Value {
        let text = if d.subsec_nanos() == 0 {
            format!("{}s", d.as_secs())
        } else if d.subsec_nanos().is_multiple_of(1_000_000) {
            format!("{}ms", d.as_millis())
        } else {
            format!("{}ns", d.as_nanos())
        };
        Value::Str(text)
    }
}

/// Tables of keys, by their dotted names.
#[derive(Debug, Default)]
pub(super) struct Doc {
    tables: BTreeMap<String, Vec<Key>>,
}

#[derive(Debug)]
struct Key {
    name: String,
    value: Value,
    from: Vec<&'static str>,
}

impl Doc {
    /// Sets `[table] key = value`, from the variables `from`.
    pub(super) fn set(&mut self, table: &str, key: &str, value: Value, from: &[&'static str]) {
        let keys = self.tables.entry(table.to_owned()).or_default();
        keys.retain(|k| k.name != key);
        keys.push(Key {
            name: key.to_owned(),
            value,
            from: from.to_vec(),
        });
    }

    /// Makes `[table]` present, even without keys (a table whose presence means something).
    pub(super) fn table(&mut self, table: &str) {
        self.tables.entry(table.to_owned()).or_default();
    }

    /// The value of `[table] key`, if set.
    #[cfg(test)]
    pub(super) fn get(&self, table: &str, key: &str) -> Option<&Value> {
        self.tables
            .get(table)?
            .iter()
            .find(|k| k.name == key)
            .map(|k| &k.value)
    }

    /// The TOML text.
    pub(super) fn render(&self) -> String {
        let mut out = String::new();
        for (table, keys) in &self.tables {
            let _ = writeln!(out, "[{table}]");
            for key in keys {
                let _ = writeln!(out, "{} = {}", key.name, render(&key.value));
            }
            out.push('\n');
        }
        out
    }

    /// The variables behind the dotted `field` the reader refused: the key's own, or, for a
    /// table (an unknown key in it, say), those of every key under it; for a key not set (one
    /// missing beside another), those of its table.
    pub(super) fn variables_of(&self, field: &str) -> Vec<&'static str> {
        let mut field = field;
        loop {
            let found = self.variables_at(field);
            match field.rsplit_once('.') {
                Some((parent, _)) if found.is_empty() => field = parent,
                _ => return found,
            }
        }
    }

    fn variables_at(&self, field: &str) -> Vec<&'static str> {
        let mut found = Vec::new();
        for (table, keys) in &self.tables {
            for key in keys {
                let dotted = format!("{table}.{}", key.name);
                let under = dotted == field
                    || dotted.starts_with(&format!("{field}."))
                    || field.starts_with(&format!("{dotted}."));
                if under || field.is_empty() {
                    found.extend(key.from.iter().copied());
                }
            }
        }
        found.sort_unstable();
        found.dedup();
        found
    }
}

fn render(value: &Value) -> String {
    match value {
        Value::Str(s) => quote(s),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) if f.is_nan() => "nan".to_owned(),
        Value::Float(f) if f.is_infinite() => if *f > 0.0 { "inf" } else { "-inf" }.to_owned(),
        // Debug keeps the `.0` that makes `1.0` a float.
        Value::Float(f) => format!("{f:?}"),
        Value::Strings(items) => {
            let items: Vec<String> = items.iter().map(|s| quote(s)).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Map(map) => {
            let items: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{} = {}", quote(k), quote(v)))
                .collect();
            format!("{{ {} }}", items.join(", "))
        }
    }
}

/// A TOML basic string.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_tables_that_toml_reads_back() {
        let mut doc = Doc::default();
        doc.set(
            "grpc",
            "listen",
            Value::Str("0.0.0.0:8081".into()),
            &["GRPC_HOST", "GRPC_PORT"],
        );
        doc.set(
            "grpc",
            "near_limit_ratio",
            Value::Float(1.0),
            &["NEAR_LIMIT_RATIO"],
        );
        doc.set(
            "grpc.xds",
            "headers",
            Value::Map([("x-a\"b".to_owned(), "v\n".to_owned())].into()),
            &["H"],
        );
        doc.set(
            "grpc.tls",
            "client_san",
            Value::Strings(vec!["a".into()]),
            &["S"],
        );
        doc.table("grpc.xds.tls");
        let text = doc.render();
        let parsed: toml::Table = toml::from_str(&text).unwrap();
        assert_eq!(parsed["grpc"]["near_limit_ratio"].as_float(), Some(1.0));
        assert_eq!(
            parsed["grpc"]["xds"]["headers"]["x-a\"b"].as_str(),
            Some("v\n")
        );
        assert!(parsed["grpc"]["xds"]["tls"].as_table().unwrap().is_empty());
        assert_eq!(
            doc.variables_of("grpc.listen"),
            vec!["GRPC_HOST", "GRPC_PORT"]
        );
        assert_eq!(doc.variables_of("grpc.xds"), vec!["H"]);
        assert_eq!(doc.variables_of("grpc.tls.client_san.0"), vec!["S"]);
    }

    #[test]
    fn durations_are_written_exactly() {
        let s = |d| match Value::duration(d) {
            Value::Str(s) => s,
            _ => unreachable!(),
        };
        assert_eq!(s(Duration::from_secs(86_400)), "86400s");
        assert_eq!(s(Duration::from_millis(1_500)), "1500ms");
        assert_eq!(s(Duration::from_nanos(1_000_001)), "1000001ns");
    }
}
