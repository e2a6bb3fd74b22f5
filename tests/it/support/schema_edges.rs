//! Values at the edges of a JSON Schema, for the tests that hold answer schemas to their
//! checks: the property test of every typed call (`src/typed_calls.rs` includes this
//! file) and the scripted server that answers exactly at each request's schema minimum or
//! maximum (`tests/it/answers.rs`), as a grammar-constrained server may.
//!
//! Each schema node offers its edges in order, lowest first: `enum` members, `[minimum,
//! maximum]`, `[minLength, maxLength]` (the text is one long word, neither blank nor a
//! repetition loop), `[minItems, maxItems]` (exactly the `prefixItems` when given;
//! distinct members for `uniqueItems` over an `enum`), an optional property absent or
//! present, `anyOf`/`oneOf` branches. `choices` pick among them, cyclically: `k` picks
//! option `k mod n`, `usize::MAX` always the last (every maximum, the longest lists).
#![allow(dead_code)]

use serde_json::{Value, json};

/// One value allowed by `schema`, every choice at an edge as `choices` pick them.
pub fn edge_value(schema: &Value, choices: &[usize]) -> Value {
    let mut i = 0;
    let mut pick = |k: usize| {
        let c = match choices[i % choices.len().max(1)] {
            usize::MAX => k.saturating_sub(1),
            c => c % k.max(1),
        };
        i += 1;
        c
    };
    node(schema, schema, &mut pick)
}

/// Every choice at its lowest.
pub fn minimum(schema: &Value) -> Value {
    edge_value(schema, &[0])
}

/// Every choice at its highest.
pub fn maximum(schema: &Value) -> Value {
    edge_value(schema, &[usize::MAX])
}

type Pick<'a> = &'a mut dyn FnMut(usize) -> usize;

fn node(root: &Value, s: &Value, pick: Pick) -> Value {
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        let target = r.trim_start_matches("#/").split('/').fold(root, |v, k| &v[k]);
        return node(root, target, pick);
    }
    if let Some(c) = s.get("const") {
        return c.clone();
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array) {
        return e[pick(e.len())].clone();
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(xs) = s.get(key).and_then(Value::as_array) {
            return node(root, &xs[pick(xs.len())], pick);
        }
    }
    let ty = match s.get("type") {
        Some(Value::Array(ts)) => ts[pick(ts.len())].as_str().unwrap_or("null").to_string(),
        Some(Value::String(t)) => t.clone(),
        _ if s.get("properties").is_some() => "object".into(),
        // `true` or `{}` (anything, e.g. schemars' `serde_json::Value`).
        _ => ["null", "string", "object"][pick(3)].to_string(),
    };
    let int = |k: &str| s.get(k).and_then(Value::as_i64);
    match ty.as_str() {
        "null" => Value::Null,
        "boolean" => json!(pick(2) == 1),
        "integer" => {
            let format = s.get("format").and_then(Value::as_str).unwrap_or("");
            let (lo, hi): (i64, i64) = match format {
                "uint8" => (0, 255),
                "uint16" => (0, 65_535),
                "uint32" | "uint" | "uint64" => (0, u32::MAX as i64),
                "int8" => (-128, 127),
                "int16" => (-32_768, 32_767),
                _ => (i32::MIN as i64, i32::MAX as i64),
            };
            json!([int("minimum").unwrap_or(lo), int("maximum").unwrap_or(hi)][pick(2)])
        }
        "number" => {
            let lo = s.get("minimum").and_then(Value::as_f64).unwrap_or(-1e9);
            let hi = s.get("maximum").and_then(Value::as_f64).unwrap_or(1e9);
            json!([lo, hi][pick(2)])
        }
        "string" if s.get("pattern").is_some() => json!(pattern_edge(s["pattern"].as_str().unwrap_or(""), pick)),
        "string" => {
            let lo = int("minLength").unwrap_or(0) as usize;
            let hi = int("maxLength").map_or(lo + 1_000, |m| m as usize);
            json!("x".repeat([lo, hi][pick(2)]))
        }
        "array" => {
            let lo = int("minItems").unwrap_or(0) as usize;
            if let Some(prefix) = s.get("prefixItems").and_then(Value::as_array) {
                // No entry beyond the prefix (`maxItems` bounds it): between `minItems` and all of it.
                let hi = int("maxItems").map_or(prefix.len(), |m| (m as usize).min(prefix.len()));
                let n = [lo.min(hi), hi][pick(2)];
                return Value::Array(prefix[..n].iter().map(|p| node(root, p, pick)).collect());
            }
            let hi = int("maxItems").map_or(lo + 3, |m| m as usize);
            let n = [lo, hi][pick(2)];
            let item = s.get("items").cloned().unwrap_or(json!({}));
            let unique = s.get("uniqueItems") == Some(&json!(true));
            match item.get("enum").and_then(Value::as_array).filter(|_| unique) {
                Some(members) => {
                    let n = n.min(members.len());
                    let from = [0, members.len() - n][pick(2)];
                    Value::Array(members[from..from + n].to_vec())
                }
                None => Value::Array((0..n).map(|_| node(root, &item, pick)).collect()),
            }
        }
        "object" => {
            let required: Vec<&str> =
                s.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
            let mut out = serde_json::Map::new();
            if let Some(props) = s.get("properties").and_then(Value::as_object) {
                for (k, p) in props {
                    if required.contains(&k.as_str()) || pick(2) == 1 {
                        out.insert(k.clone(), node(root, p, pick));
                    }
                }
            }
            if let Some(extra) = s.get("additionalProperties").filter(|a| a.is_object()) {
                for k in ["extra_a", "extra_b"].iter().take([0, 2][pick(2)]) {
                    out.insert(k.to_string(), node(root, extra, pick));
                }
            }
            Value::Object(out)
        }
        other => panic!("the edge generator does not know JSON type `{other}` in {s}"),
    }
}

/// A text `pattern` matches, each repetition at its lowest or highest as `pick` chooses.
/// Knows the subset answer schemas use (grammar builders handle no more): anchored with
/// `^…$`, literal and `\`-escaped characters, `[…]` and `[^…]` classes, `{m}` and `{m,n}`.
/// Anything else panics, naming the pattern, so that a schema using more gets a generator
/// that knows it before its property test can pass.
fn pattern_edge(pattern: &str, pick: Pick) -> String {
    let unknown = |what: &str| -> ! { panic!("the edge generator does not know {what} in pattern `{pattern}`") };
    let Some(body) = pattern.strip_prefix('^').and_then(|p| p.strip_suffix('$')) else {
        unknown("an unanchored pattern")
    };
    let cs: Vec<char> = body.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < cs.len() {
        // One atom: the character it stands for.
        let c = match cs[i] {
            '\\' => {
                i += 2;
                match cs.get(i - 1) {
                    // `\d`, `\w`, `\n`, `\x41`: a class or a code, not the letter.
                    Some(c) if c.is_alphanumeric() => unknown(&format!("`\\{c}` outside a class")),
                    Some(c) => *c,
                    None => unknown("a trailing backslash"),
                }
            }
            '[' => {
                let end = (i + 1..cs.len())
                    .find(|&j| cs[j] == ']' && cs[j - 1] != '\\')
                    .unwrap_or_else(|| unknown("an open class"));
                let class: String = cs[i + 1..end].iter().collect();
                i = end + 1;
                match class.strip_prefix('^') {
                    // A letter the negated class does not name anywhere (escapes included).
                    Some(not) => "yqkzjw".chars().find(|c| !not.contains(*c)).unwrap_or_else(|| unknown("a class")),
                    None => class.trim_start_matches('\\').chars().next().unwrap_or_else(|| unknown("an empty class")),
                }
            }
            '(' | ')' | '|' | '*' | '+' | '?' | '.' | '^' | '$' => unknown(&format!("`{}`", cs[i])),
            c => {
                i += 1;
                c
            }
        };
        let (lo, hi) = match cs.get(i) {
            Some('{') => {
                let end = (i..cs.len()).find(|&j| cs[j] == '}').unwrap_or_else(|| unknown("an open `{`"));
                let inner: String = cs[i + 1..end].iter().collect();
                i = end + 1;
                let num = |t: &str| t.trim().parse::<usize>().unwrap_or_else(|_| unknown("a repetition"));
                match inner.split_once(',') {
                    Some((a, b)) => (num(a), num(b)),
                    None => (num(&inner), num(&inner)),
                }
            }
            _ => (1, 1),
        };
        out.extend(std::iter::repeat_n(c, [lo, hi][pick(2)]));
    }
    out
}
