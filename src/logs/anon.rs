//! Anonymisation of log text before anything reaches `artifacts/`.
//!
//! Built-in detectors (each validated, so ordinary numbers stay): e-mail, Chinese
//! 18-digit resident id (ISO 7064 MOD 11-2 check digit), bank card (13–19 digits, Luhn),
//! IBAN (ISO 13616 mod 97), IPv4/IPv6, and phone numbers: international (`+CC …`) and the
//! national formats of the configured regions (`phone_regions`), found as digit runs and
//! kept only when libphonenumber's metadata (the `phonenumber` crate) says the number is
//! valid and the run's digit grouping fits how the number is written (see [`PhoneFinder`]).
//! Configured regex rules run first (their first capture group, or the whole match, is
//! replaced). Each value becomes `<KIND>_<10 hex>`: HMAC-SHA256 keyed with the secret from
//! the configured environment variable over `kind \0 value`, so one customer id maps to one
//! pseudonym in every session and run (dependencies through ids survive) and a different
//! secret gives different pseudonyms. A phone number is keyed by its E.164 form, so
//! `138 1234 5678` and `+86 13812345678` get one pseudonym. The leading `KIND_` keeps a
//! pseudonym from matching any detector again (an underscore is a word character, so no
//! `\b` digit run starts inside it, and a phone candidate must not follow one).

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use regex::Regex;
use sha2::{Digest, Sha256};

use super::AnonSettings;

/// In the order they run by default: addresses before phone numbers, so a dotted IPv4
/// address is never read as a number.
pub const DETECTORS: [&str; 6] = ["email", "id_cn", "bank_card", "iban", "ip", "phone"];

/// The former hand-written 11-digit Chinese mobile pattern: now the `phone` detector's
/// (region CN); the name is still accepted in `detectors`.
const MOBILE_CN_ALIAS: &str = "mobile_cn";

pub fn all_detectors() -> Vec<String> {
    DETECTORS.iter().map(|s| s.to_string()).collect()
}

/// Default `phone_regions`: China (where FinMCP's logs come from), the UK, the US, Germany,
/// France, India and Japan. Each region added widens what a bare digit run may be.
pub const DEFAULT_PHONE_REGIONS: [&str; 7] = ["CN", "GB", "US", "DE", "FR", "IN", "JP"];

pub fn default_phone_regions() -> Vec<String> {
    DEFAULT_PHONE_REGIONS.iter().map(|s| s.to_string()).collect()
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
    /// The phone detector: `re` finds candidate digit runs, [`PhoneFinder`] decides.
    phone: bool,
}

/// Candidate phone numbers: 7 or more digits, optionally after `+`, with at most two
/// separators (space, `.`, `-`, parentheses) between digits.
const PHONE_CANDIDATE: &str = r"\+?\(?\d(?:[ .\-()]{0,2}\d){6,}";

/// Finds phone numbers in a candidate digit run with libphonenumber's metadata.
///
/// A run (or, when the run strings several numbers together with spaces, a part of it
/// starting and ending at a space) is a phone number when it has 7–15 digits, stands
/// alone (no letter, digit or `_` glued to it), parses as a *valid* number — international
/// when it starts with `+`, else national for one of the configured regions — and is written
/// with the digits of the number's national or international format (a trunk prefix
/// included), grouped as that format or in unions of neighbouring groups (`138 1234 5678`,
/// `138-12345678`, `07700 900789`, `(020) 7946 0958`, `+44 20 7946 0958`). So a date with a
/// time (`2024-05-01 12`), a bare date (`20240501`), a Unix time, a version or an amount is
/// not taken for a number whose digits happen to be valid somewhere.
pub struct PhoneFinder {
    regions: Vec<phonenumber::country::Id>,
}

/// A number the numbering plan of its country code allows (general pattern and lengths),
/// assigned or not.
fn possible(n: &phonenumber::PhoneNumber) -> bool {
    let national = n.national().to_string();
    phonenumber::metadata::DATABASE
        .by_code(&n.code().value())
        .is_some_and(|ms| ms.iter().any(|m| m.descriptors().general().is_match(&national)))
}

fn digit_groups(s: &str) -> Vec<&str> {
    s.split(|c: char| !c.is_ascii_digit()).filter(|g| !g.is_empty()).collect()
}

/// `have` groups are `want` groups or unions of neighbouring ones (in order, all used).
fn coarsens(have: &[&str], want: &[&str]) -> bool {
    let mut w = want.iter();
    for h in have {
        let mut acc = String::new();
        while acc.len() < h.len() {
            let Some(next) = w.next() else { return false };
            acc.push_str(next);
        }
        if acc != *h {
            return false;
        }
    }
    w.next().is_none()
}

impl PhoneFinder {
    pub fn new(regions: &[String]) -> Result<Self> {
        let mut ids = Vec::new();
        for r in regions {
            let id: phonenumber::country::Id = r.trim().to_ascii_uppercase().parse().map_err(|_| {
                anyhow::anyhow!(
                    "`[logs.anonymise] phone_regions`: unknown region `{r}`; use ISO 3166 alpha-2 codes such as {}",
                    DEFAULT_PHONE_REGIONS.join(", ")
                )
            })?;
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        Ok(Self { regions: ids })
    }

    /// The E.164 form of `span` when it is a phone number written as such.
    pub fn number(&self, span: &str) -> Option<String> {
        use phonenumber::Mode;
        let groups = digit_groups(span);
        let digits: usize = groups.iter().map(|g| g.len()).sum();
        if !(7..=15).contains(&digits) {
            return None;
        }
        let grouped_as =
            |n: &phonenumber::PhoneNumber, m: Mode| coarsens(&groups, &digit_groups(&n.format().mode(m).to_string()));
        // The digits as written are those of the national or the international format (so a
        // trunk prefix the region writes is there: `01772 352000`, never a bare `1772352000`),
        // grouped as that format groups them or in unions of its groups.
        let fits = |n: &phonenumber::PhoneNumber| grouped_as(n, Mode::National) || grouped_as(n, Mode::International);
        let e164 = |n: &phonenumber::PhoneNumber| n.format().mode(Mode::E164).to_string();
        if span.starts_with('+') {
            // `+` and a country code say "phone number": any number the country's plan allows.
            let n = phonenumber::parse(None, span).ok()?;
            return (fits(&n) && possible(&n)).then(|| e164(&n));
        }
        for r in &self.regions {
            let Ok(n) = phonenumber::parse(Some(*r), span) else { continue };
            if !fits(&n) {
                continue;
            }
            // Or written the region's way, trunk prefix and grouping, in its numbering plan:
            // ranges the metadata does not list as assigned (Ofcom's 07700 900xxx) count too.
            let national_form = groups.len() > 1
                && grouped_as(&n, Mode::National)
                && phonenumber::metadata::DATABASE
                    .by_id(r.as_ref())
                    .and_then(|m| m.national_prefix())
                    .is_some_and(|p| groups[0].starts_with(p))
                && possible(&n);
            if phonenumber::is_valid(&n) || national_form {
                return Some(e164(&n));
            }
        }
        None
    }

    /// Phone numbers in the candidate match `start..end` of `text`: `(start, end, E.164)`.
    fn in_candidate(&self, text: &str, start: usize, end: usize, out: &mut Vec<(usize, usize, String)>) {
        let glued = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        let m = &text[start..end];
        // Parts that start and end at spaces (numbers strung together), longest first; an
        // end of the match glued to a word or a pseudonym is no place for a number to end.
        let mut cuts: Vec<usize> = Vec::new();
        // A `(` is punctuation between a word and the digits (`a(13812345678`): the number
        // may start at it (`(020) 7946 0958`) or just after it.
        if !glued(text[..start].chars().next_back()) || m.starts_with('(') {
            cuts.push(0);
        }
        if m.starts_with('(') {
            cuts.push(1);
        }
        cuts.extend(
            m.match_indices(' ')
                .map(|(i, _)| i + 1)
                .filter(|&i| m[i..].starts_with(|c: char| c.is_ascii_digit() || c == '(' || c == '+')),
        );
        let mut ends: Vec<usize> = m
            .match_indices(' ')
            .map(|(i, _)| i)
            .filter(|&i| m[..i].ends_with(|c: char| c.is_ascii_digit() || c == ')'))
            .collect();
        if m.ends_with(')') && m.len() > 1 {
            ends.push(m.len() - 1);
        }
        if !glued(text[end..].chars().next()) || m.ends_with(')') {
            ends.push(m.len());
        }
        cuts.sort_unstable();
        cuts.dedup();
        ends.sort_unstable();
        ends.dedup();
        // Of the ways to read the parts as numbers, the one covering the most digits: a
        // greedy left-to-right reading let a digit group before a number (`ref 0771 098765
        // 43210`) take the number's first group and leave the rest of it in the text.
        let digits = |t: &str| t.bytes().filter(u8::is_ascii_digit).count();
        let found: Vec<Vec<(usize, String)>> = cuts
            .iter()
            .map(|&a| ends.iter().filter(|&&b| b > a).filter_map(|&b| self.number(&m[a..b]).map(|e| (b, e))).collect())
            .collect();
        // best[i]: (digits covered, chosen (cut, end, number)…) reading from cuts[i] on.
        type Reading = (usize, Vec<(usize, usize, String)>);
        let mut best: Vec<Reading> = vec![(0, Vec::new()); cuts.len() + 1];
        for i in (0..cuts.len()).rev() {
            let mut choice = best[i + 1].clone();
            for (b, e164) in &found[i] {
                let next = cuts.iter().position(|&c| c >= *b).unwrap_or(cuts.len());
                let covered = digits(&m[cuts[i]..*b]) + best[next].0;
                if covered > choice.0 {
                    let mut picks = vec![(cuts[i], *b, e164.clone())];
                    picks.extend(best[next].1.iter().cloned());
                    choice = (covered, picks);
                }
            }
            best[i] = choice;
        }
        for (a, b, e164) in std::mem::take(&mut best[0].1) {
            out.push((start + a, start + b, e164));
        }
    }
}

/// The anonymiser of one import run; counts per detector.
pub struct Anonymiser {
    secret: Vec<u8>,
    detectors: Vec<Detector>,
    phones: PhoneFinder,
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
            detectors.push(Detector { name: r.name.clone(), re, group, valid: always, phone: false });
        }
        let builtin: [Builtin; 6] = [
            ("email", r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}", always),
            ("iban", r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b", iban_valid),
            ("id_cn", r"\b\d{17}[\dXx]\b", id_cn_valid),
            ("bank_card", r"\b\d{4}(?:[ -]?\d{4}){2,3}(?:[ -]?\d{1,3})?\b|\b\d{13,19}\b", luhn_valid),
            ("phone", PHONE_CANDIDATE, always),
            (
                "ip",
                r"\b(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)\b|\b(?:[0-9A-Fa-f]{1,4}:){2,7}[0-9A-Fa-f]{1,4}\b",
                ip_valid,
            ),
        ];
        for name in &a.detectors {
            let name = if name == MOBILE_CN_ALIAS { "phone" } else { name.as_str() };
            let Some((n, pat, valid)) = builtin.iter().find(|(n, _, _)| *n == name) else {
                anyhow::bail!("unknown anonymisation detector `{name}`; known: {}", DETECTORS.join(", "));
            };
            if detectors.iter().any(|d| d.name == *n) {
                continue;
            }
            detectors.push(Detector {
                name: n.to_string(),
                re: Regex::new(pat).expect("built-in regex"),
                group: false,
                valid: *valid,
                phone: *n == "phone",
            });
        }
        let phones = PhoneFinder::new(&a.phone_regions)?;
        let set = regex::RegexSet::new(detectors.iter().map(|d| d.re.as_str())).context("anonymisation patterns")?;
        Ok(Self {
            secret: secret.to_vec(),
            detectors,
            phones,
            set,
            counts: BTreeMap::new(),
            learned: Default::default(),
        })
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
            if d.phone {
                let mut hits = Vec::new();
                for m in d.re.find_iter(&cur) {
                    self.phones.in_candidate(&cur, m.start(), m.end(), &mut hits);
                }
                for (a, b, e164) in hits {
                    out.push_str(&cur[last..a]);
                    out.push_str(&self.pseudonym(&d.name, &e164));
                    last = b;
                    n += 1;
                }
            }
            for caps in d.re.captures_iter(&cur).filter(|_| !d.phone) {
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
        for d in ["email", "id_cn", "bank_card", "iban", "ip", "user_id"] {
            assert_eq!(a.counts.get(d), Some(&1), "{d}: {:?} {out}", a.counts);
        }
        assert_eq!(a.counts.get("phone"), Some(&2), "{:?} {out}", a.counts);
        assert_eq!(a.scrub(text), out, "stable within a run");
        assert_eq!(anon("k1").scrub(text), out, "stable across runs");
        assert_ne!(anon("k2").scrub(text), out, "a new secret changes them");
        // Ordinary numbers stay.
        assert_eq!(a.scrub("order 12345, price 99.50, 2024-05-01"), "order 12345, price 99.50, 2024-05-01");
    }

    /// National formats of several regions, as people write them.
    const NATIONAL: [&str; 14] = [
        "13812345678",
        "138 1234 5678",
        "138-1234-5678",
        "+86 138 1234 5678",
        "010-6552 9988",
        "07700 900123",
        "020 7946 0958",
        "(020) 7946 0958",
        "(212) 555-0147",
        "212-555-0147",
        "03-1234-5678",
        "030 901820",
        "01 42 68 53 00",
        "098765 43210",
    ];

    #[test]
    fn national_phone_numbers_of_every_default_region_are_replaced() {
        let mut a = anon("k1");
        for n in NATIONAL {
            for text in [format!("call {n} today"), format!("电话{n}。"), format!("{{\"phone\": \"{n}\"}}")] {
                let out = a.scrub(&text);
                assert!(!out.contains(n), "`{n}` survived: {out}");
                assert!(out.contains("PHONE_"), "{out}");
            }
        }
        // One number, one pseudonym, however it is written.
        let p = |a: &mut Anonymiser, t: &str| a.scrub(t);
        let one = p(&mut a, "13812345678");
        assert_eq!(p(&mut a, "138 1234 5678"), one);
        assert_eq!(p(&mut a, "+86 138-1234-5678"), one);
        // Numbers strung together: the phone number inside is still found.
        let out = a.scrub("ref 2024 13812345678 2025-01-02");
        assert!(!out.contains("13812345678") && out.contains("ref 2024 ") && out.ends_with(" 2025-01-02"), "{out}");
    }

    #[test]
    fn ordinary_numbers_stay() {
        let mut a = anon("k1");
        for t in [
            "order 12345, price 99.50, 2024-05-01",
            "at 2024-05-01 12:30 and 2026-03-01T08:00:00Z",
            "year 2026, version 1.2.3456789, amount 1,234,567.89",
            "ts 1772352000000, epoch 1772352000, INC-5120, E654321",
            "batch 20240501, qty 100000, ids 1234567 7654321",
            "3.14159265358979",
            "1381 2345 678",
        ] {
            assert_eq!(a.scrub(t), t);
        }
        assert!(a.counts.is_empty(), "{:?}", a.counts);
    }

    #[test]
    fn the_trade_off_a_bare_run_that_is_a_valid_number_is_replaced() {
        // Documented in docs/logs.md: an id that is a valid mobile of a configured region is a
        // phone number to the detector.
        let mut a = anon("k1");
        assert!(a.scrub("order 13912345678").starts_with("order PHONE_"));
        // Without the region it stays.
        let mut s = AnonSettings { phone_regions: vec!["GB".into()], ..Default::default() };
        let mut gb = Anonymiser::new(b"k", &s).unwrap();
        assert_eq!(gb.scrub("order 13912345678"), "order 13912345678");
        assert!(gb.scrub("call 07700 900123").starts_with("call PHONE_"));
        s.phone_regions = vec!["XX".into()];
        let e = Anonymiser::new(b"k", &s).err().unwrap().to_string();
        assert!(e.contains("phone_regions") && e.contains("`XX`"), "{e}");
    }

    #[test]
    fn mobile_cn_is_an_old_name_for_phone() {
        let s = AnonSettings { detectors: vec!["mobile_cn".into()], ..Default::default() };
        let mut a = Anonymiser::new(b"k", &s).unwrap();
        assert!(a.scrub("13812345678").starts_with("PHONE_"));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
        /// Planted national numbers in random surroundings (words, Chinese text, JSON
        /// punctuation, other numbers) never survive.
        #[test]
        fn planted_national_numbers_never_survive(
            k in 0..NATIONAL.len(),
            before in r#"([a-z :,"{}\[\]()=]{0,12}[ :"(=])?|[\u{4e00}-\u{4e20}：]{0,4}"#,
            after in r#"([ .,;:"\]})][a-z .,;:"{}\[\]()]{0,12})?|[\u{4e00}-\u{4e20}。]{0,4}"#,
            extra in "(ref [0-9]{2,4} )?",
        ) {
            let mut a = anon("k1");
            let n = NATIONAL[k];
            let text = format!("{before}{extra}{n}{after}");
            let out = a.scrub(&text);
            let digits: String = n.chars().filter(char::is_ascii_digit).collect();
            let out_digits: String = out.chars().filter(char::is_ascii_digit).collect();
            proptest::prop_assert!(!out.contains(n) && !out_digits.contains(&digits[digits.len() - 7..]), "{text} → {out}");
        }
    }
}
