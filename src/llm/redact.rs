//! Removing an API key from text an endpoint sent back before that text is shown or stored.
//!
//! A hostile or careless endpoint may echo the request's `Authorization` header in an error
//! body, a header or a URL, raw or encoded. Every form is replaced by `[redacted]` on the
//! whole text, and only then may the text be cut for display: cutting first leaves the
//! key's first characters when it straddles the cut (issue 10, item 1).
//!
//! Forms removed: the key as sent; JSON-escaped (`"` `\` and `/` escaped, as a JSON error
//! body carries it); percent-encoded (upper- and lower-case hex); base64 and base64url at
//! every byte alignment (so a key inside a longer encoded blob, such as an echoed
//! `Basic`/`Bearer` header, is found too).

use serde_json::Value;

pub const REDACTED: &str = "[redacted]";

/// The key's searchable forms, longest first (so a longer form is replaced before a form
/// that is a substring of it).
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    needles: Vec<String>,
}

impl Redactor {
    /// A redactor for `key` (none for an empty key).
    pub fn new(key: &str) -> Self {
        if key.is_empty() {
            return Self::default();
        }
        let mut needles = vec![key.to_string()];
        let json = serde_json::to_string(key).unwrap_or_default();
        let json = json.trim_matches('"').to_string();
        needles.push(json.replace('/', "\\/"));
        needles.push(json);
        needles.push(percent(key, true));
        needles.push(percent(key, false));
        for shift in 0..3 {
            for url_safe in [false, true] {
                let core = base64_core(key.as_bytes(), shift, url_safe);
                // A core shorter than 8 characters would match unrelated text.
                if core.len() >= 8 {
                    needles.push(core);
                }
            }
        }
        needles.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        needles.dedup();
        Self { needles }
    }

    pub fn is_empty(&self) -> bool {
        self.needles.is_empty()
    }

    /// `text` with every form of the key replaced.
    pub fn text(&self, text: &str) -> String {
        let mut out = text.to_string();
        for n in &self.needles {
            if out.contains(n.as_str()) {
                out = out.replace(n.as_str(), REDACTED);
            }
        }
        out
    }

    /// Every string (and object key) of `v` redacted, in place.
    pub fn value(&self, v: &mut Value) {
        if self.is_empty() {
            return;
        }
        match v {
            Value::String(s) if self.needles.iter().any(|n| s.contains(n.as_str())) => *s = self.text(s),
            Value::Array(a) => a.iter_mut().for_each(|x| self.value(x)),
            Value::Object(m) => {
                if m.keys().any(|k| self.needles.iter().any(|n| k.contains(n.as_str()))) {
                    let old = std::mem::take(m);
                    for (k, x) in old {
                        m.insert(self.text(&k), x);
                    }
                }
                m.values_mut().for_each(|x| self.value(x));
            }
            _ => {}
        }
    }
}

/// Cut `s` to `n` characters (with `…` when cut). Callers redact before cutting.
pub fn truncate(s: &str, n: usize) -> String {
    let mut out: String = s.chars().take(n).collect();
    if s.chars().count() > n {
        out.push('…');
    }
    out
}

fn percent(s: &str, upper: bool) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else if upper {
            out.push_str(&format!("%{b:02X}"));
        } else {
            out.push_str(&format!("%{b:02x}"));
        }
    }
    out
}

/// The base64 characters fixed by `key` alone when it starts `shift` bytes into an encoded
/// stream: characters that mix in neighbouring bytes are left out.
fn base64_core(key: &[u8], shift: usize, url_safe: bool) -> String {
    const STD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let alphabet = if url_safe { URL } else { STD };
    let mut bytes = vec![0u8; shift];
    bytes.extend_from_slice(key);
    let mut chars = Vec::new();
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let count = chunk.len() + 1;
        for i in 0..count {
            chars.push(alphabet[((n >> (18 - 6 * i)) & 63) as usize]);
        }
    }
    // Character i carries bits [6i, 6i+6) of the stream; the key holds bits
    // [8*shift, 8*(shift+len)).
    let first = (8 * shift).div_ceil(6);
    let last = (8 * (shift + key.len())) / 6;
    if first >= last || last > chars.len() {
        return String::new();
    }
    String::from_utf8_lossy(&chars[first..last]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(bytes: &[u8]) -> String {
        base64_core(bytes, 0, false)
    }

    #[test]
    fn base64_matches_the_standard_encoding() {
        // "Man" → "TWFu"; "Ma" → "TWE" (unpadded; the last character mixes in padding bits
        // only when the length is not a multiple of 3, and is dropped then).
        assert_eq!(b64(b"Man"), "TWFu");
        assert_eq!(b64(b"Ma"), "TW");
        assert_eq!(b64(b"hello world!"), "aGVsbG8gd29ybGQh");
    }

    #[test]
    fn every_form_at_every_alignment_is_removed() {
        let key = "sk-T3st\"k/e\\y+9=Zq~x";
        let r = Redactor::new(key);
        for prefix in ["", "a", "ab", "abc"] {
            let blob = format!("{prefix}Bearer {key} tail");
            let enc = base64_core(blob.as_bytes(), 0, false);
            let out = r.text(&format!("header: {enc}"));
            let core0 = base64_core(key.as_bytes(), (prefix.len() + 7) % 3, false);
            assert!(!out.contains(&core0), "{out}");
            assert!(out.contains(REDACTED), "{out}");
        }
        let json = serde_json::json!({"m": key}).to_string();
        assert!(!r.text(&json).contains("T3st"), "{}", r.text(&json));
        assert!(!r.text(&percent(key, false)).contains("T3st"));
        let mut v = serde_json::json!({"a": [format!("x{key}y")], key: 1});
        r.value(&mut v);
        assert!(!v.to_string().contains("T3st"), "{v}");
    }

    #[test]
    fn redact_then_truncate_leaves_no_prefix() {
        let key = "sk-abcdefghijklmnopqrstuvwxyz";
        let r = Redactor::new(key);
        for at in 0..320 {
            let body = format!("{}{key}{}", "x".repeat(at), "y".repeat(400));
            let shown = truncate(&r.text(&body), 300);
            assert!(!shown.contains("sk-a"), "offset {at}: {shown}");
        }
    }
}
