//! Deterministic tool outputs for the sandbox.
//!
//! Every answer is drawn from a ChaCha8 stream seeded by
//! `sha256(seed ‖ tool id ‖ canonical JSON of the arguments)`, so the same call gets the
//! same bytes on every run, in any order, on any machine.
//!
//! - With an output schema, the value follows it: objects get every required property
//!   and each optional one with probability ½, arrays 1–3 items, strings honour `enum`,
//!   `const`, `format` (date, date-time, email, uri, uuid) and length bounds, numbers
//!   their bounds; `anyOf`/`oneOf` pick one branch; `$ref`s and depth past 6 give `null`.
//! - Without one, the **generic shape** is
//!   `{"tool": ID, "arguments": ARGS, "result_id": "r-<12 hex>", "summary": TEXT,
//!   "items": [{"id": "<8 hex>", "name": TEXT, "value": NUMBER}, …1–3]}`.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

/// JSON with object keys sorted at every level (the canonical form that seeds outputs).
pub fn canonical(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<_> = m.keys().collect();
            keys.sort();
            Value::Object(keys.into_iter().map(|k| (k.clone(), canonical(&m[k]))).collect::<Map<_, _>>())
        }
        Value::Array(a) => Value::Array(a.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// The 32-byte seed of one call (also used to pick faults, with a salt).
pub fn call_seed(seed: u64, salt: &str, tool_id: &str, args: &Value) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(seed.to_le_bytes());
    h.update(salt.as_bytes());
    h.update([0]);
    h.update(tool_id.as_bytes());
    h.update([0]);
    h.update(canonical(args).to_string().as_bytes());
    h.finalize().into()
}

/// A uniform number in [0, 1) for one call and purpose (fault decisions).
pub fn unit(seed: u64, salt: &str, tool_id: &str, args: &Value) -> f64 {
    let s = call_seed(seed, salt, tool_id, args);
    (u64::from_le_bytes(s[..8].try_into().expect("8 bytes")) >> 11) as f64 / (1u64 << 53) as f64
}

const WORDS: &[&str] = &[
    "alpha", "amber", "atlas", "beacon", "cedar", "cobalt", "delta", "ember", "falcon", "garnet", "harbor", "indigo",
    "juniper", "kestrel", "lumen", "maple", "nimbus", "onyx", "orbit", "prairie", "quartz", "raven", "sierra",
    "tundra", "umber", "vertex", "willow", "zenith",
];

fn words(rng: &mut ChaCha8Rng, n: usize) -> String {
    (0..n).map(|_| WORDS[rng.random_range(0..WORDS.len())]).collect::<Vec<_>>().join(" ")
}

fn hex(rng: &mut ChaCha8Rng, n: usize) -> String {
    (0..n).map(|_| format!("{:x}", rng.random_range(0..16u8))).collect()
}

/// The output for one valid call.
pub fn output(seed: u64, tool_id: &str, args: &Value, output_schema: Option<&Value>) -> Value {
    let mut rng = ChaCha8Rng::from_seed(call_seed(seed, "output", tool_id, args));
    match output_schema {
        Some(schema) => from_schema(&mut rng, schema, 0),
        None => {
            let tool_name = tool_id.rsplit(crate::model::TOOL_ID_SEP).next().unwrap_or(tool_id);
            let n = rng.random_range(1..=3);
            let items: Vec<Value> = (0..n)
                .map(|_| {
                    let value = (rng.random_range(0..100_000) as f64) / 100.0;
                    json!({"id": hex(&mut rng, 8), "name": words(&mut rng, 2), "value": value})
                })
                .collect();
            json!({
                "tool": tool_id,
                "arguments": canonical(args),
                "result_id": format!("r-{}", hex(&mut rng, 12)),
                "summary": format!("{tool_name}: {} result(s), {}", items.len(), words(&mut rng, 4)),
                "items": items,
            })
        }
    }
}

/// Is this value the generic shape [`output`] answers with when a tool has no output
/// schema (exactly its five keys)? Its fields are the sandbox's, not the tool's.
pub fn is_generic(v: &Value) -> bool {
    const KEYS: [&str; 5] = ["arguments", "items", "result_id", "summary", "tool"];
    v.as_object().is_some_and(|o| o.len() == KEYS.len() && KEYS.iter().all(|k| o.contains_key(*k)))
}

fn from_schema(rng: &mut ChaCha8Rng, s: &Value, depth: usize) -> Value {
    let Some(o) = s.as_object() else {
        // `true` or a malformed schema: any value will do.
        return Value::String(words(rng, 2));
    };
    if depth > 6 || o.contains_key("$ref") {
        return Value::Null;
    }
    if let Some(c) = o.get("const") {
        return c.clone();
    }
    if let Some(e) = o.get("enum").and_then(Value::as_array).filter(|e| !e.is_empty()) {
        return e[rng.random_range(0..e.len())].clone();
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(alts) = o.get(key).and_then(Value::as_array).filter(|a| !a.is_empty()) {
            let pick = &alts[rng.random_range(0..alts.len())];
            return from_schema(rng, pick, depth + 1);
        }
    }
    if let Some(all) = o.get("allOf").and_then(Value::as_array).filter(|a| !a.is_empty()) {
        // Merge object branches; otherwise the first branch decides.
        let mut merged = Map::new();
        for b in all {
            if let Value::Object(m) = from_schema(rng, b, depth + 1) {
                merged.extend(m);
            }
        }
        return if merged.is_empty() { from_schema(rng, &all[0], depth + 1) } else { Value::Object(merged) };
    }
    let ty = match o.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(ts)) => {
            let ts: Vec<&str> = ts.iter().filter_map(Value::as_str).filter(|t| *t != "null").collect();
            if ts.is_empty() { "null" } else { ts[rng.random_range(0..ts.len())] }
        }
        _ if o.contains_key("properties") => "object",
        _ if o.contains_key("items") => "array",
        _ => "string",
    };
    match ty {
        "object" => {
            let required: Vec<&str> = o
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut out = Map::new();
            if let Some(props) = o.get("properties").and_then(Value::as_object) {
                for (k, ps) in props {
                    if required.contains(&k.as_str()) || rng.random_bool(0.5) {
                        out.insert(k.clone(), from_schema(rng, ps, depth + 1));
                    }
                }
            }
            Value::Object(out)
        }
        "array" => {
            let min = o.get("minItems").and_then(Value::as_u64).unwrap_or(1) as usize;
            let max = o.get("maxItems").and_then(Value::as_u64).map(|m| m as usize).unwrap_or(3).max(min);
            let n = rng.random_range(min..=max.min(min + 3));
            let item = o.get("items").cloned().unwrap_or(Value::Bool(true));
            Value::Array((0..n).map(|_| from_schema(rng, &item, depth + 1)).collect())
        }
        "integer" => {
            let lo = o.get("minimum").and_then(Value::as_i64).unwrap_or(0);
            let hi = o.get("maximum").and_then(Value::as_i64).unwrap_or(lo.saturating_add(1000)).max(lo);
            json!(rng.random_range(lo..=hi))
        }
        "number" => {
            let lo = o.get("minimum").and_then(Value::as_f64).unwrap_or(0.0);
            let hi = o.get("maximum").and_then(Value::as_f64).unwrap_or(lo + 1000.0).max(lo);
            let x = lo + (hi - lo) * rng.random::<f64>();
            json!((x * 100.0).round() / 100.0)
        }
        "boolean" => Value::Bool(rng.random_bool(0.5)),
        "null" => Value::Null,
        _ => Value::String(string(rng, o)),
    }
}

fn string(rng: &mut ChaCha8Rng, o: &Map<String, Value>) -> String {
    let s = match o.get("format").and_then(Value::as_str) {
        Some("date-time") => format!(
            "2026-{:02}-{:02}T{:02}:{:02}:00Z",
            rng.random_range(1..=12),
            rng.random_range(1..=28),
            rng.random_range(0..24),
            rng.random_range(0..60)
        ),
        Some("date") => format!("2026-{:02}-{:02}", rng.random_range(1..=12), rng.random_range(1..=28)),
        Some("email") => format!("{}@example.com", words(rng, 1)),
        Some("uri" | "url") => format!("https://example.com/{}", hex(rng, 8)),
        Some("uuid") => format!("{}-{}-4{}-a{}-{}", hex(rng, 8), hex(rng, 4), hex(rng, 3), hex(rng, 3), hex(rng, 12)),
        _ => words(rng, 2),
    };
    let min = o.get("minLength").and_then(Value::as_u64).unwrap_or(0) as usize;
    let max = o.get("maxLength").and_then(Value::as_u64).map(|m| m as usize);
    let mut s = s;
    while s.chars().count() < min {
        s.push('x');
    }
    if let Some(max) = max {
        s = s.chars().take(max).collect();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_call_same_output_regardless_of_key_order() {
        let a = output(1, "s::t", &json!({"a": 1, "b": [1, {"y": 2, "x": 1}]}), None);
        let b = output(1, "s::t", &json!({"b": [1, {"x": 1, "y": 2}], "a": 1}), None);
        assert_eq!(a, b);
        assert_ne!(a, output(2, "s::t", &json!({"a": 1}), None));
        assert_eq!(a["tool"], "s::t");
        assert!(a["result_id"].as_str().unwrap().starts_with("r-"));
        assert!(is_generic(&a), "{a}");
        assert!(!is_generic(&json!({"tool": "s::t", "arguments": {}})));
    }

    #[test]
    fn output_follows_the_schema() {
        let schema = json!({
            "type": "object",
            "required": ["id", "when", "tags", "n", "kind"],
            "properties": {
                "id": {"type": "string", "format": "uuid"},
                "when": {"type": "string", "format": "date-time"},
                "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
                "n": {"type": "integer", "minimum": 5, "maximum": 7},
                "kind": {"enum": ["a", "b"]}
            }
        });
        for i in 0..20 {
            let v = output(i, "s::t", &json!({}), Some(&schema));
            let validator = jsonschema::validator_for(&schema).unwrap();
            assert!(validator.is_valid(&v), "{v}");
        }
    }
}
