//! Strict JSON reading: like `serde_json::from_slice::<Value>`, but an object with the
//! same key twice is an error naming the key, line and column, instead of the last value
//! silently winning (a registry ending in `"servers": []` would otherwise import nothing,
//! with exit 0). Use it for every JSON input a user gives us; compat modes that must read
//! what a reference Python evaluator reads (`json.load`: last one wins) keep serde_json.

use serde::Deserializer;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Parse `bytes` into a `Value`, rejecting duplicate object keys. The error's message
/// ends with serde_json's own "at line L column C" (also in `line()` / `column()`).
pub fn value_from_slice(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let v = Strict.deserialize(&mut de)?;
    de.end()?;
    Ok(v)
}

/// [`value_from_slice`] for text.
pub fn value_from_str(text: &str) -> Result<Value, serde_json::Error> {
    value_from_slice(text.as_bytes())
}

/// Parse into `T` after checking for duplicate keys (type errors keep their position).
pub fn from_slice<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, serde_json::Error> {
    value_from_slice(bytes)?;
    serde_json::from_slice(bytes)
}

struct Strict;

impl<'de> DeserializeSeed<'de> for Strict {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Strict.deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(Strict)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            if out.contains_key(&k) {
                return Err(de::Error::custom(format!("duplicate key `{k}`")));
            }
            let v = map.next_value_seed(Strict)?;
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_keys_are_errors_with_key_line_and_column() {
        let text = "{\"servers\": [{\"name\": \"a\"}],\n \"servers\": []}";
        let e = value_from_str(text).unwrap_err();
        assert!(e.to_string().starts_with("duplicate key `servers` at line 2 column"), "{e}");
        assert_eq!(e.line(), 2);
        let nested = "[{\"a\": {\"b\": 1, \"b\": 2}}]";
        assert!(value_from_str(nested).unwrap_err().to_string().contains("duplicate key `b`"));
        // The same key in different objects is fine; values equal serde_json's.
        let ok = r#"{"a": {"k": 1}, "b": {"k": [1.5, -2, 18446744073709551615, null, true, "x"]}}"#;
        assert_eq!(value_from_str(ok).unwrap(), serde_json::from_str::<Value>(ok).unwrap());
        assert!(value_from_str("{} x").is_err(), "trailing characters");
        assert!(from_slice::<Vec<u8>>(b"[1, 2]").is_ok());
    }
}
