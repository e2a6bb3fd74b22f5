//! Anonymisation of log text before anything reaches `artifacts/`.
//!
//! Built-in detectors (each validated, so ordinary numbers stay): e-mail, Chinese
//! 18-digit resident id (ISO 7064 MOD 11-2 check digit), bank card (13–19 digits, Luhn),
//! IBAN (ISO 13616 mod 97), phone (international `+CC …` and 11-digit mobile `1[3-9]…`),
//! IPv4/IPv6. Configured regex rules run first (their first capture group, or the whole
//! match, is replaced). Each value becomes `<KIND>_<10 hex>`: HMAC-SHA256 keyed with the
//! secret from the configured environment variable over `kind \0 value`, so one customer
//! id maps to one pseudonym in every session and run (dependencies through ids survive)
//! and a different secret gives different pseudonyms. The leading `KIND_` keeps a
//! pseudonym from matching any detector again (an underscore is a word character, so no
//! `\b` digit run starts inside it).

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use regex::Regex;
use sha2::{Digest, Sha256};

use super::AnonSettings;

pub const DETECTORS: [&str; 7] = ["email", "id_cn", "bank_card", "iban", "phone", "ip", "mobile_cn"];

pub fn all_detectors() -> Vec<String> {
    DETECTORS.iter().map(|s| s.to_string()).collect()
}

/// HMAC-SHA256 (RFC 2104).
pub fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(k.map(|b| b ^ 0x36));
    inner.update(msg);
    let ih = inner.finalize();
    let mut outer = Sha256::new();
    outer.update(k.map(|b| b ^ 0x5c));
    outer.update(ih);
    outer.finalize().into()
}

/// A built-in detector: name, pattern, validation.
type Builtin = (&'static str, &'static str, fn(&str) -> bool);

struct Detector {
    name: String,
    re: Regex,
    /// Replace capture group 1 (rules) instead of the whole match.
    group: bool,
    valid: fn(&str) -> bool,
}

/// The anonymiser of one import run; counts per detector.
pub struct Anonymiser {
    secret: Vec<u8>,
    detectors: Vec<Detector>,
    /// All detector patterns in one automaton: a single pass tells which detectors can match.
    set: regex::RegexSet,
    pub counts: BTreeMap<String, u64>,
    /// Values found by configured rules → (rule, pseudonym): replaced wherever they appear
    /// later as a whole token, even without the rule's context ("user id is X" … "X").
    learned: std::collections::HashMap<String, (String, String)>,
}

fn always(_: &str) -> bool {
    true
}

/// ISO 7064 MOD 11-2 check digit of the Chinese resident id.
pub fn id_cn_valid(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 18 || !b[..17].iter().all(u8::is_ascii_digit) {
        return false;
    }
    const W: [u32; 17] = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2];
    let sum: u32 = b[..17].iter().zip(W).map(|(d, w)| (d - b'0') as u32 * w).sum();
    let check = b"10X98765432"[(sum % 11) as usize];
    b[17].to_ascii_uppercase() == check
}

pub fn luhn_valid(s: &str) -> bool {
    let digits: Vec<u32> = s.chars().filter_map(|c| c.to_digit(10)).collect();
    if !(13..=19).contains(&digits.len()) {
        return false;
    }
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| {
            if i % 2 == 1 {
                let x = d * 2;
                if x > 9 { x - 9 } else { x }
            } else {
                d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

pub fn iban_valid(s: &str) -> bool {
    let c: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    if c.len() < 15 || c.len() > 34 {
        return false;
    }
    let rearranged = format!("{}{}", &c[4..], &c[..4]);
    let mut rem: u32 = 0;
    for ch in rearranged.chars() {
        let v = match ch {
            '0'..='9' => ch as u32 - '0' as u32,
            'A'..='Z' => ch as u32 - 'A' as u32 + 10,
            _ => return false,
        };
        rem = if v >= 10 { (rem * 100 + v) % 97 } else { (rem * 10 + v) % 97 };
    }
    rem == 1
}

fn ip_valid(s: &str) -> bool {
    s.parse::<std::net::IpAddr>().is_ok()
}

fn phone_valid(s: &str) -> bool {
    let n = s.chars().filter(char::is_ascii_digit).count();
    (8..=15).contains(&n)
}

impl Anonymiser {
    /// Reads the secret from the environment variable the config names.
    pub fn from_settings(a: &AnonSettings) -> Result<Self> {
        let secret = std::env::var(&a.secret_env).map_err(|_| {
            crate::error::hinted(
                format!("the anonymisation secret is not set: environment variable `{}` is empty or missing", a.secret_env),
                format!(
                    "export {}=<a long random string> (keep it: the same secret gives the same pseudonyms); `[logs.anonymise] secret_env` names another variable",
                    a.secret_env
                ),
            )
        })?;
        if secret.is_empty() {
            anyhow::bail!("the anonymisation secret in `{}` is empty", a.secret_env);
        }
        Self::new(secret.as_bytes(), a)
    }

    pub fn new(secret: &[u8], a: &AnonSettings) -> Result<Self> {
        let mut detectors = Vec::new();
        for r in &a.rules {
            let re =
                Regex::new(&r.pattern).with_context(|| format!("anonymisation rule `{}`: invalid regex", r.name))?;
            let group = re.captures_len() > 1;
            detectors.push(Detector { name: r.name.clone(), re, group, valid: always });
        }
        let builtin: [Builtin; 7] = [
            ("email", r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}", always),
            ("iban", r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b", iban_valid),
            ("id_cn", r"\b\d{17}[\dXx]\b", id_cn_valid),
            ("bank_card", r"\b\d{4}(?:[ -]?\d{4}){2,3}(?:[ -]?\d{1,3})?\b|\b\d{13,19}\b", luhn_valid),
            ("phone", r"\+\d{1,3}[ -]?\(?\d{1,4}\)?(?:[ -]?\d{2,5}){1,4}\b", phone_valid),
            ("mobile_cn", r"\b1[3-9]\d{9}\b", always),
            (
                "ip",
                r"\b(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)\b|\b(?:[0-9A-Fa-f]{1,4}:){2,7}[0-9A-Fa-f]{1,4}\b",
                ip_valid,
            ),
        ];
        for name in &a.detectors {
            let Some((n, pat, valid)) = builtin.iter().find(|(n, _, _)| n == name) else {
                anyhow::bail!("unknown anonymisation detector `{name}`; known: {}", DETECTORS.join(", "));
            };
            detectors.push(Detector {
                name: n.to_string(),
                re: Regex::new(pat).expect("built-in regex"),
                group: false,
                valid: *valid,
            });
        }
        let set = regex::RegexSet::new(detectors.iter().map(|d| d.re.as_str())).context("anonymisation patterns")?;
        Ok(Self { secret: secret.to_vec(), detectors, set, counts: BTreeMap::new(), learned: Default::default() })
    }

    /// The stable pseudonym of one value.
    pub fn pseudonym(&self, kind: &str, value: &str) -> String {
        let mut msg = Vec::with_capacity(kind.len() + value.len() + 1);
        msg.extend_from_slice(kind.as_bytes());
        msg.push(0);
        msg.extend_from_slice(value.as_bytes());
        let h = hmac_sha256(&self.secret, &msg);
        format!("{}_{}", kind.to_ascii_uppercase(), &hex::encode(h)[..10])
    }

    /// Remember the values configured rules find in `text` (call on all of a session's
    /// texts before scrubbing them, so a value is caught even where it appears first).
    pub fn learn(&mut self, text: &str) {
        for i in 0..self.detectors.len() {
            if !self.detectors[i].group {
                continue;
            }
            let found: Vec<String> = self.detectors[i]
                .re
                .captures_iter(text)
                .filter_map(|c| c.get(1).map(|m| m.as_str().to_string()))
                .filter(|v| v.len() >= 4 && !self.learned.contains_key(v))
                .collect();
            for v in found {
                let name = self.detectors[i].name.clone();
                let p = self.pseudonym(&name, &v);
                self.learned.insert(v, (name, p));
            }
        }
    }

    /// `learn` over every string of a JSON value.
    pub fn learn_json(&mut self, v: &serde_json::Value) {
        match v {
            serde_json::Value::String(s) => self.learn(s),
            serde_json::Value::Array(a) => a.iter().for_each(|x| self.learn_json(x)),
            serde_json::Value::Object(o) => o.values().for_each(|x| self.learn_json(x)),
            _ => {}
        }
    }

    /// Replace learned values that stand as whole ASCII tokens.
    fn replace_learned(&mut self, text: &str) -> Option<String> {
        if self.learned.is_empty() {
            return None;
        }
        let tok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '@' | '+');
        let mut out = String::new();
        let mut last = 0;
        let mut hits: Vec<String> = Vec::new();
        let mut start = None;
        for (i, c) in text.char_indices().chain(std::iter::once((text.len(), ' '))) {
            match (tok(c) && i < text.len(), start) {
                (true, None) => start = Some(i),
                (false, Some(st)) => {
                    if let Some((name, p)) = self.learned.get(&text[st..i]) {
                        out.push_str(&text[last..st]);
                        out.push_str(p);
                        last = i;
                        hits.push(name.clone());
                    }
                    start = None;
                }
                _ => {}
            }
        }
        if hits.is_empty() {
            return None;
        }
        out.push_str(&text[last..]);
        for h in hits {
            *self.counts.entry(h).or_default() += 1;
        }
        Some(out)
    }

    /// Replace every detected value in `text`.
    pub fn scrub(&mut self, text: &str) -> String {
        let s = self.scrub_detectors(text);
        self.replace_learned(&s).unwrap_or(s)
    }

    fn scrub_detectors(&mut self, text: &str) -> String {
        // Cheap pre-check: every built-in detector needs a digit or an `@`.
        let has_digit_or_at = text.bytes().any(|b| b.is_ascii_digit() || b == b'@');
        if !has_digit_or_at && !self.detectors.iter().any(|d| d.group) {
            return text.to_string();
        }
        let mut cur = std::borrow::Cow::Borrowed(text);
        let candidates: Vec<usize> = self.set.matches(text).into_iter().collect();
        for i in candidates {
            let d = &self.detectors[i];
            let mut out = String::new();
            let mut last = 0;
            let mut n = 0u64;
            for caps in d.re.captures_iter(&cur) {
                let m = if d.group { caps.get(1) } else { caps.get(0) };
                let Some(m) = m else { continue };
                if m.as_str().is_empty() || !(d.valid)(m.as_str()) {
                    continue;
                }
                out.push_str(&cur[last..m.start()]);
                out.push_str(&self.pseudonym(&d.name, m.as_str()));
                last = m.end();
                n += 1;
            }
            if n > 0 {
                out.push_str(&cur[last..]);
                *self.counts.entry(d.name.clone()).or_default() += n;
                cur = std::borrow::Cow::Owned(out);
            }
        }
        cur.into_owned()
    }

    /// Scrub every string (and object key-free value) of a JSON value in place.
    pub fn scrub_json(&mut self, v: &mut serde_json::Value) {
        match v {
            serde_json::Value::String(s) => {
                let t = self.scrub(s);
                if t != *s {
                    *s = t;
                }
            }
            serde_json::Value::Number(n) => {
                // Ids logged as numbers (phone, card) are detected in their text form.
                let s = n.to_string();
                let t = self.scrub(&s);
                if t != s {
                    *v = serde_json::Value::String(t);
                }
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(|x| self.scrub_json(x)),
            serde_json::Value::Object(o) => o.values_mut().for_each(|x| self.scrub_json(x)),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anon(secret: &str) -> Anonymiser {
        let mut s = AnonSettings::default();
        s.rules.push(super::super::AnonRule { name: "user_id".into(), pattern: r"user id is ([0-9a-f]{8,})".into() });
        Anonymiser::new(secret.as_bytes(), &s).unwrap()
    }

    #[test]
    fn hmac_matches_rfc4231_case_2() {
        let h = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(hex::encode(h), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    }

    #[test]
    fn checksums() {
        assert!(id_cn_valid("11010519491231002X"));
        assert!(!id_cn_valid("110105194912310021"));
        assert!(luhn_valid("4111111111111111"));
        assert!(!luhn_valid("4111111111111112"));
        assert!(iban_valid("GB82WEST12345698765432"));
        assert!(iban_valid("GB82 WEST 1234 5698 7654 32"));
        assert!(!iban_valid("GB82WEST12345698765433"));
    }

    #[test]
    fn every_detector_fires_and_pseudonyms_are_stable() {
        let mut a = anon("k1");
        let text = "mail ann@example.com, id 11010519491231002X, card 4111 1111 1111 1111, iban GB82WEST12345698765432, \
                    call +44 20 7946 0958 or 13812345678, host 192.168.1.20, current user id is deadbeef01";
        let out = a.scrub(text);
        for raw in [
            "ann@example.com",
            "11010519491231002X",
            "4111 1111 1111 1111",
            "GB82WEST12345698765432",
            "7946 0958",
            "13812345678",
            "192.168.1.20",
            "deadbeef01",
        ] {
            assert!(!out.contains(raw), "{raw} survived: {out}");
        }
        for d in ["email", "id_cn", "bank_card", "iban", "phone", "mobile_cn", "ip", "user_id"] {
            assert_eq!(a.counts.get(d), Some(&1), "{d}: {:?} {out}", a.counts);
        }
        assert_eq!(a.scrub(text), out, "stable within a run");
        assert_eq!(anon("k1").scrub(text), out, "stable across runs");
        assert_ne!(anon("k2").scrub(text), out, "a new secret changes them");
        // Ordinary numbers stay.
        assert_eq!(a.scrub("order 12345, price 99.50, 2024-05-01"), "order 12345, price 99.50, 2024-05-01");
    }
}
