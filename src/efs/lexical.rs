//! Lexical signals that sharpen embedding similarity for candidate pairs:
//! tool-name tokens, parameter-name tokens and the action a tool performs.
//!
//! Why: small sentence models (MiniLM) rate two "generate image" tools from
//! different vendors at 0.5–0.6 cosine, because descriptions are padded with
//! vendor names and options, while `get_user` and `get_repo` of one server score
//! 0.8+. Equal name tokens lift the first; differing actions (read vs delete)
//! and a shared server push the second down.

use std::collections::BTreeSet;

use crate::model::Tool;
use crate::text::{singular, words};

/// Words that say nothing about what a tool does (generic verbs, filler, "mcp").
const STOP: &[&str] = &[
    "get",
    "list",
    "fetch",
    "retrieve",
    "read",
    "show",
    "view",
    "find",
    "by",
    "the",
    "a",
    "an",
    "of",
    "for",
    "to",
    "from",
    "in",
    "on",
    "with",
    "and",
    "or",
    "mcp",
    "tool",
    "tools",
    "info",
    "information",
    "data",
    "detail",
    "details",
    "all",
    "new",
    "api",
];

/// Action classes: tools whose actions fall in different classes are rarely equivalent.
const VERBS: &[(&str, &[&str])] = &[
    (
        "read",
        &[
            "get",
            "fetch",
            "retrieve",
            "read",
            "list",
            "show",
            "view",
            "query",
            "search",
            "find",
            "lookup",
            "look",
            "describe",
            "check",
            "inspect",
            "load",
            "display",
            "obtain",
            "access",
            "browse",
            "extract",
            "scan",
            "analyze",
            "analyse",
            "monitor",
            "explore",
            "count",
            "calculate",
            "compute",
        ],
    ),
    (
        "create",
        &["create", "add", "new", "insert", "make", "generate", "build", "register", "open", "start", "initiate"],
    ),
    (
        "update",
        &["update", "edit", "modify", "set", "patch", "rename", "change", "configure", "replace", "toggle", "manage"],
    ),
    (
        "delete",
        &[
            "delete",
            "remove",
            "drop",
            "destroy",
            "clear",
            "archive",
            "cancel",
            "close",
            "stop",
            "kill",
            "terminate",
            "erase",
            "purge",
            "uninstall",
            "unregister",
        ],
    ),
    ("send", &["send", "post", "reply", "notify", "publish", "share", "broadcast", "email", "message"]),
    ("execute", &["run", "execute", "exec", "eval", "evaluate", "invoke", "call", "perform", "trigger"]),
    ("transfer", &["download", "save", "export", "write", "upload", "store", "import"]),
    ("convert", &["convert", "transform", "translate", "format", "parse", "render"]),
];

/// Content words of an identifier, stemmed, without stop words.
pub fn content_tokens(s: &str) -> BTreeSet<String> {
    words(s).into_iter().filter(|w| !STOP.contains(&w.as_str())).map(|w| singular(&w)).collect()
}

/// The action class of a tool: from the first word of its description (ETOM's
/// descriptions start with the verb), else the first word of its name.
pub fn action(tool: &Tool) -> Option<&'static str> {
    let first_desc = tool
        .description
        .split_whitespace()
        .next()
        .map(|w| w.chars().filter(|c| c.is_alphabetic()).collect::<String>().to_lowercase());
    let first_name = words(&tool.name).into_iter().next();
    for w in [first_desc, first_name].into_iter().flatten() {
        let singular = w.strip_suffix('s').unwrap_or(&w);
        for (class, verbs) in VERBS {
            if verbs.contains(&w.as_str()) || verbs.contains(&singular) {
                return Some(class);
            }
        }
    }
    None
}

/// Jaccard overlap of two token sets; 0 when either is empty.
pub fn jaccard(a: &[u32], b: &[u32]) -> f32 {
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    // Both sorted: one merge pass.
    let (mut i, mut j, mut common) = (0, 0, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                common += 1;
                i += 1;
                j += 1;
            }
        }
    }
    common as f32 / (a.len() + b.len() - common) as f32
}

/// Per-tool lexical features with tokens interned as sorted ids (fast overlap).
#[derive(Debug, Clone, Default)]
pub struct Features {
    pub name: Vec<u32>,
    pub params: Vec<u32>,
    /// Content words of the description, without the server's own name.
    pub desc: Vec<u32>,
    pub action: Option<&'static str>,
}

/// Interns tokens across a catalog.
#[derive(Default)]
pub struct Interner {
    ids: std::collections::HashMap<String, u32>,
}

impl Interner {
    fn ids(&mut self, tokens: BTreeSet<String>) -> Vec<u32> {
        let mut v: Vec<u32> = tokens
            .into_iter()
            .map(|t| {
                let next = self.ids.len() as u32;
                *self.ids.entry(t).or_insert(next)
            })
            .collect();
        v.sort_unstable();
        v
    }

    pub fn features(&mut self, tool: &Tool) -> Features {
        self.features_of(tool, "")
    }

    /// Features, with the words of `server` (its name) left out of the description's.
    pub fn features_of(&mut self, tool: &Tool, server: &str) -> Features {
        let params: BTreeSet<String> = tool
            .input_schema
            .get("properties")
            .and_then(serde_json::Value::as_object)
            .map(|p| p.keys().flat_map(|k| content_tokens(k)).collect())
            .unwrap_or_default();
        let own = content_tokens(server);
        let desc: BTreeSet<String> =
            content_tokens(&tool.description).into_iter().filter(|w| !own.contains(w)).collect();
        Features {
            name: self.ids(content_tokens(&tool.name)),
            params: self.ids(params),
            desc: self.ids(desc),
            action: action(tool),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, desc: &str) -> Tool {
        Tool {
            id: format!("s::{name}"),
            name: name.into(),
            description: desc.into(),
            input_schema: serde_json::json!({"type": "object"}),
            output_schema: None,
        }
    }

    #[test]
    fn content_tokens_leave_generic_tool_words_out() {
        assert_eq!(content_tokens("list_issues"), BTreeSet::from(["issue".to_string()]));
        assert_eq!(content_tokens("generateImage"), content_tokens("generate-image"));
    }

    #[test]
    fn action_comes_from_description_then_name() {
        assert_eq!(action(&tool("x", "Retrieve the latest price.")), Some("read"));
        assert_eq!(action(&tool("delete_task", "Permanently gone.")), Some("delete"));
        assert_eq!(action(&tool("create_issue", "Creates an issue.")), Some("create"));
        assert_eq!(action(&tool("foo", "Bar baz.")), None);
    }

    #[test]
    fn jaccard_of_sorted_ids() {
        assert_eq!(jaccard(&[1, 2, 3], &[2, 3, 4]), 0.5);
        assert_eq!(jaccard(&[], &[1]), 0.0);
        assert_eq!(jaccard(&[7], &[7]), 1.0);
    }
}
