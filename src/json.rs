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

/// Python's `json.loads` as the published evaluators run it: like `serde_json`, and also
/// `NaN`, `Infinity`, `-Infinity`, numbers beyond f64 (`1e400`, infinity) and lone UTF-16
/// surrogate escapes (`"\ud800"`), which JSON forbids and Python accepts (its `json.dumps`
/// writes `NaN` by default). Those floats become marker strings ([`py_float`] tells them
/// apart; each `NaN` is distinct, as `nan != nan`; every infinity of one sign is equal); a
/// lone surrogate escape is kept as its escape text. Duplicate keys: the last wins, as in
/// Python. For the compat modes only.
pub fn python_loads(text: &str) -> Result<Value, serde_json::Error> {
    serde_json::from_str(text).or_else(|e| match python_sanitise(text) {
        Some(clean) => serde_json::from_str(&clean),
        None => Err(e),
    })
}

const PY_FLOAT: &str = "\u{0}py-float:";

/// The Python float a [`python_loads`] marker stands for: `nan`, `inf` or `-inf`.
pub fn py_float(s: &str) -> Option<&'static str> {
    let rest = s.strip_prefix(PY_FLOAT)?;
    Some(if rest.starts_with("nan") {
        "nan"
    } else if rest == "-inf" {
        "-inf"
    } else {
        "inf"
    })
}

/// The text with Python-only tokens (`NaN`, `Infinity`, `1e400`, lone surrogate escapes)
/// rewritten as the marker JSON [`python_loads`] reads, or `None` when there are none. For
/// typed readers of the compat modes: parse the text, and on a syntax error parse this.
pub(crate) fn python_sanitise(text: &str) -> Option<String> {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len() + 16);
    let (mut i, mut last, mut changed, mut in_str) = (0usize, 0usize, false, false);
    let marker = |kind: &str| format!("\"\\u0000py-float:{kind}\"");
    let hex = |at: usize| -> Option<u32> {
        let h = text.get(at..at + 4)?;
        u32::from_str_radix(h, 16).ok()
    };
    while i < b.len() {
        let c = b[i];
        if in_str {
            match c {
                b'"' => in_str = false,
                b'\\' if b.get(i + 1) == Some(&b'u') => {
                    if let Some(u) = hex(i + 2) {
                        let paired = (0xD800..0xDC00).contains(&u)
                            && b.get(i + 6) == Some(&b'\\')
                            && b.get(i + 7) == Some(&b'u')
                            && hex(i + 8).is_some_and(|l| (0xDC00..0xE000).contains(&l));
                        if paired {
                            i += 12;
                            continue;
                        }
                        if (0xD800..0xE000).contains(&u) {
                            // A lone surrogate: keep its escape as text.
                            out.push_str(&text[last..i]);
                            out.push_str("\\\\");
                            last = i + 1;
                            changed = true;
                        }
                    }
                    i += 6;
                    continue;
                }
                b'\\' => {
                    i += 2;
                    continue;
                }
                _ => {}
            }
            i += 1;
            continue;
        }
        if !c.is_ascii() {
            i += 1; // inside a multi-byte character: no token starts here
            continue;
        }
        let rest = &text[i..];
        let (token_len, kind) = if c == b'"' {
            in_str = true;
            i += 1;
            continue;
        } else if rest.starts_with("NaN") {
            (3, format!("nan:{i}"))
        } else if rest.starts_with("Infinity") {
            (8, "inf".to_string())
        } else if rest.starts_with("-Infinity") {
            (9, "-inf".to_string())
        } else if c == b'-' || c.is_ascii_digit() {
            let n = rest.bytes().take_while(|x| matches!(x, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')).count();
            match rest[..n].parse::<f64>() {
                Ok(f) if f.is_infinite() => (n, if f < 0.0 { "-inf".into() } else { "inf".into() }),
                _ => {
                    i += n.max(1);
                    continue;
                }
            }
        } else {
            i += 1;
            continue;
        };
        out.push_str(&text[last..i]);
        out.push_str(&marker(&kind));
        i += token_len;
        last = i;
        changed = true;
    }
    out.push_str(&text[last..]);
    changed.then_some(out)
}

/// [`value_from_slice`] for text.
pub fn value_from_str(text: &str) -> Result<Value, serde_json::Error> {
    value_from_slice(text.as_bytes())
}

/// Parse into `T` after checking for duplicate keys (type errors keep their position).
pub fn from_slice<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, serde_json::Error> {
    check_unique_keys(bytes)?;
    serde_json::from_slice(bytes)
}

/// [`from_slice`] for text.
pub fn from_str<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, serde_json::Error> {
    from_slice(text.as_bytes())
}

/// Check `bytes` is one JSON value without duplicate object keys, building nothing (a
/// pass before a typed parse: serde's derives refuse a known field twice, but skip an
/// unknown one, and a `Value` field would keep the last).
pub fn check_unique_keys(bytes: &[u8]) -> Result<(), serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    Check.deserialize(&mut de)?;
    de.end()
}

/// A [`DeserializeSeed`] giving a `Value` and refusing duplicate keys, for streams
/// (`seq.next_element_seed(Strict)`).
pub struct Strict;

/// Walks a value refusing duplicate keys and keeps nothing (for typed readers: the values
/// of fields they do not read).
pub(crate) struct Check;

/// An object key, borrowed from the input when it has no escapes.
pub(crate) struct Key<'de>(pub std::borrow::Cow<'de, str>);

/// Skip the next map value: walked for duplicate keys when `strict`, else ignored.
pub(crate) fn skip_value<'de, A: MapAccess<'de>>(map: &mut A, strict: bool) -> Result<(), A::Error> {
    if strict { map.next_value_seed(Check) } else { map.next_value::<de::IgnoredAny>().map(|_| ()) }
}

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_str(V)
    }
}

impl<'de> DeserializeSeed<'de> for Check {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Check {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
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
    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        Check.deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Check)?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        // Objects are small: a linear scan beats hashing until a few dozen keys.
        let mut seen: Vec<std::borrow::Cow<'de, str>> = Vec::new();
        let mut set: std::collections::HashSet<std::borrow::Cow<'de, str>> = std::collections::HashSet::new();
        while let Some(Key(k)) = map.next_key::<Key<'de>>()? {
            let dup = if seen.len() < 32 {
                let d = seen.contains(&k);
                seen.push(k.clone());
                if seen.len() == 32 {
                    set.extend(seen.iter().cloned());
                }
                d
            } else {
                !set.insert(k.clone())
            };
            if dup {
                return Err(de::Error::custom(format!("duplicate key `{k}`")));
            }
            map.next_value_seed(Check)?;
        }
        Ok(())
    }
}

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

    #[test]
    fn the_check_pass_agrees_with_the_strict_value() {
        let many: String = (0..40).map(|i| format!("\"k{i}\": {i}, ")).collect();
        for (text, dup) in [
            (r#"{"a": 1, "b": {"a": 2}}"#.to_string(), false),
            (r#"{"a": 1, "\u0061": 2}"#.to_string(), true),
            (r#"[{"x": [{"y": 1, "y": 2}]}]"#.to_string(), true),
            (format!("{{{many}\"z\": 0}}"), false),
            (format!("{{{many}\"k35\": 0}}"), true),
            (format!("{{{many}\"k3\": 0}}"), true),
        ] {
            assert_eq!(check_unique_keys(text.as_bytes()).is_err(), dup, "{text}");
            assert_eq!(value_from_str(&text).is_err(), dup, "{text}");
        }
        let e = from_str::<serde_json::Value>("{\"id\": 1,\n\"id\": 2}").unwrap_err();
        assert!(e.to_string().starts_with("duplicate key `id` at line 2"), "{e}");
    }

    #[test]
    fn python_loads_accepts_what_json_loads_does() {
        let v =
            python_loads(r#"{"a": NaN, "b": NaN, "c": Infinity, "d": 1e400, "e": -Infinity, "f": -1e999}"#).unwrap();
        let f = |k: &str| py_float(v[k].as_str().unwrap());
        assert_eq!(
            [f("a"), f("c"), f("d"), f("e"), f("f")],
            [Some("nan"), Some("inf"), Some("inf"), Some("-inf"), Some("-inf")]
        );
        assert_ne!(v["a"], v["b"], "nan != nan");
        assert_eq!(v["c"], v["d"], "inf == 1e400");
        assert_eq!(v["e"], v["f"]);
        let v = python_loads(r#"["a\ud800", "\ud83d\ude00", "NaN", "x\\ud800"]"#).unwrap();
        assert_eq!(v[0], "a\\ud800");
        assert_eq!(v[1], "\u{1F600}");
        assert_eq!(v[2], "NaN", "inside a string, NaN is text");
        assert_eq!(v[3], "x\\ud800");
        assert!(py_float("nan").is_none());
        assert_eq!(python_loads("[1, 2.5, -3]").unwrap(), serde_json::json!([1, 2.5, -3]));
        assert!(python_loads("[1,").is_err());
        assert!(python_loads("é漢[NaN]").is_err(), "found by the fuzz suite: no panic mid-character");
        assert!(py_float(python_loads("[\"é\", NaN]").unwrap()[1].as_str().unwrap()).is_some());
        assert_eq!(python_loads(r#"{"k": 1, "k": 2}"#).unwrap()["k"], 2, "last one wins");
    }
}
