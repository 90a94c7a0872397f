//! A request body's JSON, read as a tree with every key of every object once: a body that says
//! `"used": 999999, "used": 0` is refused naming the key, not taken with its last value winning
//! (a proxy or a log that reads the first would see another request than the server decided).

use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::problem::Problem;

/// `body` as JSON, or the problem: malformed (serde_json's message, which says where), or an
/// object with a key twice (naming the key).
pub fn parse(body: &[u8]) -> Result<Value, Problem> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| Problem::malformed_body(format!("malformed JSON: {e}")))?;
    let twice = RefCell::new(None);
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    if Once(&twice).deserialize(&mut deserializer).is_err()
        && let Some(key) = twice.into_inner()
    {
        return Err(Problem::invalid_field(
            key.clone(),
            format!("the key {key:?} appears more than once in an object; give it once"),
        ));
    }
    Ok(value)
}

/// Walks a value, noting the first key an object holds twice.
#[derive(Clone, Copy)]
struct Once<'a>(&'a RefCell<Option<String>>);

impl<'de> DeserializeSeed<'de> for Once<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Once<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<(), A::Error> {
        while items.next_element_seed(self)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = entries.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                *self.0.borrow_mut() = Some(key);
                return Err(de::Error::custom("a key appears twice"));
            }
            entries.next_value_seed(self)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_given_twice_is_refused_by_name_at_any_depth() {
        let refused = parse(br#"{"reservation": "r", "used": 999999, "used": 0}"#).unwrap_err();
        assert_eq!(refused.field(), Some("used"));
        let nested = parse(br#"{"a": [{"b": 1, "b": 2}]}"#).unwrap_err();
        assert_eq!(nested.field(), Some("b"));
        assert!(parse(br#"{"a": {"b": 1}, "b": {"a": 2}}"#).is_ok());
        assert!(parse(b"{").is_err());
    }
}
