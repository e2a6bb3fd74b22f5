//! Small text helpers shared by every stage family (no family of its own, imports none),
//! and the one vocabulary of words every check that matches a request to a tool uses: the
//! needed-call checks of synthesised samples (`synth::gold`), the level plan check
//! (`levels::plan_check`), curation's keep-by-rule (`logs::curate`), EFS's lexical signals
//! (`efs::lexical`) and eval's server shortlist (`eval::source`). Each keeps only the word
//! lists of its own domain (a tool name's generic verbs, a result's filler keys).

use std::collections::BTreeSet;

/// A model's (or a user's) text on one line: every run of whitespace, newlines included,
/// becomes one space, and the ends are trimmed.
pub fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Words of an identifier or a phrase: runs of letters and digits, split at camelCase,
/// lowercase. `getStockQuote`, `get-stock_quote` and `Get stock quote` all give
/// `get stock quote`.
pub fn words(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for c in s.chars() {
        if c.is_alphanumeric() {
            if c.is_uppercase() && prev_lower && !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            prev_lower = c.is_lowercase() || c.is_numeric();
            cur.extend(c.to_lowercase());
        } else {
            prev_lower = false;
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Three-letter plurals of the field's two-letter words (other three-letter words ending in
/// `s`, `gas`, `aws`, `dns`, `ops`, stay).
const SHORT_PLURALS: &[&str] = &["ids", "ips", "vms", "prs"];

/// Words of four letters or more that end in `s` and are no plural.
const NOT_PLURAL: &[&str] = &["this", "thus", "plus", "axis", "does", "news", "series", "species", "always", "lens"];

/// An English plural folded to its singular (`entries` → `entry`, `addresses` →
/// `address`, `boxes` → `box`, `batches` → `batch`, `caches` → `cache`, `causes` →
/// `cause`, `breaches` → `breach`, `statuses` → `status`, `cpus` → `cpu`, `ids` → `id`;
/// `status`, `analysis`, `dns` and `this` stay). A word of three letters folds only if it
/// is one of [`SHORT_PLURALS`]; one of five or more that ends in `us` or `is` is taken for
/// a singular (`status`, `virus`, `basis`; so `menus` stays too).
pub fn singular(w: &str) -> String {
    let n = w.len();
    let vowel = |c: Option<char>| c.is_some_and(|c| "aeiou".contains(c));
    if NOT_PLURAL.contains(&w) {
        return w.to_string();
    }
    if n > 4 && w.ends_with("ies") {
        return format!("{}y", &w[..n - 3]);
    }
    if n > 4 && ["sses", "xes", "shes", "zzes"].iter().any(|e| w.ends_with(e)) {
        return w[..n - 2].to_string();
    }
    // `batches`, `statuses`, `breaches`, `touches` drop `es`; `caches`, `causes`, `aches`
    // only `s` (one vowel before `ch`/`us`).
    if n > 4 && ["ches", "uses"].iter().any(|e| w.ends_with(e)) {
        let mut before = w[..n - 4].chars().rev();
        let cut = if vowel(before.next()) && !vowel(before.next()) { 1 } else { 2 };
        return w[..n - cut].to_string();
    }
    if SHORT_PLURALS.contains(&w) {
        return w[..n - 1].to_string();
    }
    let latin = n >= 5 && (w.ends_with("us") || w.ends_with("is"));
    if n >= 4 && w.ends_with('s') && !w.ends_with("ss") && !latin {
        return w[..n - 1].to_string();
    }
    w.to_string()
}

/// A word without its plural or verb ending, for loose matching of kindred words
/// (`alerts` → `alert`, `assigned` → `assign`, `paging` → `pag`); never shorter than three
/// letters. Unlike [`singular`] it may cut a word to no word at all.
pub fn root(w: &str) -> &str {
    for suffix in ["ies", "es", "s", "ing", "ed"] {
        if let Some(s) = w.strip_suffix(suffix)
            && s.len() >= 3
        {
            return s;
        }
    }
    w
}

/// Words that say nothing about which tool a request means: function words and the
/// generic verbs of requests ("get", "find", "show").
pub const FUNCTION_WORDS: &[&str] = &[
    "a", "about", "after", "all", "also", "an", "and", "any", "are", "as", "at", "be", "been", "before", "but", "by",
    "can", "could", "did", "do", "does", "done", "e", "each", "eg", "etc", "every", "fetch", "find", "for", "from",
    "g", "get", "give", "had", "has", "have", "he", "here", "how", "i", "if", "in", "into", "is", "it", "its", "just",
    "let", "like", "make", "may", "me", "might", "more", "most", "must", "my", "need", "no", "not", "of", "on", "one",
    "onto", "or", "other", "our", "out", "over", "per", "please", "retrieve", "she", "should", "show", "so", "some",
    "such", "tell", "than", "that", "the", "their", "them", "then", "there", "these", "they", "this", "those", "to",
    "up", "us", "use", "using", "via", "want", "was", "we", "were", "what", "when", "where", "which", "who", "whom",
    "why", "will", "with", "would", "you", "your",
];

/// The content words of `text` in their order (repeats kept, for how close they stand):
/// its [`words`] of two or more characters, [`FUNCTION_WORDS`] left out, plurals folded.
pub fn content_words(text: &str) -> Vec<String> {
    words(text)
        .into_iter()
        .filter(|w| w.chars().count() >= 2 && !FUNCTION_WORDS.contains(&w.as_str()))
        .map(|w| singular(&w))
        .filter(|w| !FUNCTION_WORDS.contains(&w.as_str()))
        .collect()
}

/// The set of [`content_words`] of `text`.
pub fn content(text: &str) -> BTreeSet<String> {
    content_words(text).into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_in_any_case_style_give_the_same_words() {
        for s in ["getStockQuote", "get-stock_quote", "Get stock quote", "get_stock_quote"] {
            assert_eq!(words(s), ["get", "stock", "quote"], "{s}");
        }
        assert_eq!(words("getUserIds"), ["get", "user", "ids"]);
        assert_eq!(words("v2Api"), ["v2", "api"]);
    }

    #[test]
    fn plurals_fold_to_singulars_and_roots_are_looser() {
        let pairs = [
            ("entries", "entry"),
            ("addresses", "address"),
            ("boxes", "box"),
            ("ids", "id"),
            ("alerts", "alert"),
            ("batches", "batch"),
            ("caches", "cache"),
            ("causes", "cause"),
            ("aches", "ache"),
            ("breaches", "breach"),
            ("touches", "touch"),
            ("speeches", "speech"),
            ("ips", "ip"),
            ("houses", "house"),
            ("statuses", "status"),
            ("viruses", "virus"),
            ("cpus", "cpu"),
            ("apis", "api"),
            ("uses", "use"),
            ("tables", "table"),
        ];
        for (w, s) in pairs {
            assert_eq!(singular(w), s, "{w}");
        }
        for w in ["status", "analysis", "class", "bus", "gas", "dns", "aws", "this", "plus", "news", "cpu"] {
            assert_eq!(singular(w), w, "{w}");
        }
        assert_eq!(root("assigned"), "assign");
        assert_eq!(root("alerts"), "alert");
        assert_eq!(root("is"), "is");
    }

    #[test]
    fn content_words_leave_function_words_out_and_keep_their_order() {
        assert_eq!(content_words("Get the open issues of the repos"), ["open", "issue", "repo"]);
        assert_eq!(content("list_issues and issues"), BTreeSet::from(["list".to_string(), "issue".to_string()]));
    }

    #[test]
    fn one_line_joins_whitespace_runs() {
        assert_eq!(super::one_line("  a\n\tb  c \r\n"), "a b c");
        assert_eq!(super::one_line(""), "");
    }
}
