//! The page formats of the three registry APIs: what a scraper must find in a page to go
//! on (the items and the next cursor or page), and what `registry import` turns into
//! catalog servers.
//!
//! One parser serves both, so a page the scraper accepted is a page the importer can read.
//! Parsing never panics on any input (fuzzed in the tests); every failure is a
//! [`PageError`] naming the source, the page and the field.
//!
//! Shapes (see `docs/registry.md`, "Sources"):
//! - Glama: `{servers: [{id, name, …, tools: [...]}], pageInfo: {endCursor, hasNextPage}}`.
//! - Official: `{servers: [{server: {name, …}, _meta: {…}}], metadata: {nextCursor}}`.
//! - Smithery list: `{servers: [{qualifiedName, …}], pagination: {currentPage, totalPages}}`;
//!   detail `GET /servers/{qualifiedName}`: `{qualifiedName, …, tools: [...]}`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::json_type_name;

/// Which registry API a source speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    Glama,
    Official,
    Smithery,
}

impl SourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Glama => "glama",
            SourceKind::Official => "official",
            SourceKind::Smithery => "smithery",
        }
    }
}

/// A page (or detail document) that cannot be used, located by source, page and field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("source `{source_name}`, {page}, field `{field}`: {message}")]
pub struct PageError {
    pub source_name: String,
    /// `page 3` or `detail of `@a/b``.
    pub page: String,
    /// A JSON path such as `servers[4].id` (`$` for the whole document).
    pub field: String,
    pub message: String,
}

/// What comes after a page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Next {
    /// Request the page after this cursor.
    Cursor(String),
    /// Request this page number (Smithery).
    Page(u64),
    /// Last page.
    End,
}

/// One item of a list page: its id in the source and the raw JSON object.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub id: String,
    pub value: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    pub items: Vec<Item>,
    pub next: Next,
    /// Total pages when the source says (Smithery), for the progress bar.
    pub total_pages: Option<u64>,
}

pub(crate) struct Loc<'a> {
    pub source: &'a str,
    pub page: String,
}

impl Loc<'_> {
    pub fn err(&self, field: impl Into<String>, message: impl Into<String>) -> PageError {
        PageError {
            source_name: self.source.to_string(),
            page: self.page.clone(),
            field: field.into(),
            message: message.into(),
        }
    }
}

fn obj<'a>(v: &'a Value, loc: &Loc, field: &str) -> Result<&'a Map<String, Value>, PageError> {
    v.as_object().ok_or_else(|| loc.err(field, format!("expected an object, found {}", json_type_name(v))))
}

fn get<'a>(m: &'a Map<String, Value>, key: &str, loc: &Loc, field: &str) -> Result<&'a Value, PageError> {
    m.get(key).ok_or_else(|| loc.err(format!("{field}.{key}").trim_start_matches('.'), "missing"))
}

fn opt_str<'a>(m: &'a Map<String, Value>, key: &str, loc: &Loc, field: &str) -> Result<Option<&'a str>, PageError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(loc.err(
            format!("{field}.{key}").trim_start_matches('.').to_string(),
            format!("expected a string, found {}", json_type_name(other)),
        )),
    }
}

fn req_str<'a>(m: &'a Map<String, Value>, key: &str, loc: &Loc, field: &str) -> Result<&'a str, PageError> {
    match opt_str(m, key, loc, field)? {
        Some(s) if !s.trim().is_empty() => Ok(s),
        _ => Err(loc.err(format!("{field}.{key}").trim_start_matches('.').to_string(), "missing or empty")),
    }
}

fn opt_u64(m: &Map<String, Value>, key: &str, loc: &Loc, field: &str) -> Result<Option<u64>, PageError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            loc.err(format!("{field}.{key}"), format!("expected a non-negative integer, found {}", json_type_name(v)))
        }),
    }
}

/// Parse the bytes of one list page. `page` is the 1-based page number (for errors).
pub fn parse_page(kind: SourceKind, source: &str, page: u64, bytes: &[u8]) -> Result<Page, PageError> {
    let loc = Loc { source, page: format!("page {page}") };
    let doc: Value = serde_json::from_slice(bytes).map_err(|e| loc.err("$", format!("not JSON: {e}")))?;
    let mut root = match doc {
        Value::Object(m) => m,
        other => return Err(loc.err("$", format!("expected an object, found {}", json_type_name(&other)))),
    };
    if let Some(e) = root.get("error") {
        return Err(loc.err("error", format!("the source answered with an error: {}", truncate(&e.to_string(), 300))));
    }
    // Items are moved out of the document, not copied (pages are large).
    let list = match root.remove("servers") {
        Some(Value::Array(a)) => a,
        Some(other) => return Err(loc.err("servers", format!("expected an array, found {}", json_type_name(&other)))),
        None => return Err(loc.err("servers", "missing")),
    };
    let root = &root;
    let mut items = Vec::with_capacity(list.len());
    for (i, v) in list.into_iter().enumerate() {
        let field = format!("servers[{i}]");
        let m = match v {
            Value::Object(m) => m,
            other => return Err(loc.err(field, format!("expected an object, found {}", json_type_name(&other)))),
        };
        let id = match kind {
            SourceKind::Glama => req_str(&m, "id", &loc, &field)?,
            SourceKind::Official => {
                let inner = obj(get(&m, "server", &loc, &field)?, &loc, &format!("{field}.server"))?;
                req_str(inner, "name", &loc, &format!("{field}.server"))?
            }
            SourceKind::Smithery => req_str(&m, "qualifiedName", &loc, &field)?,
        }
        .to_string();
        items.push(Item { id, value: m });
    }
    let (next, total_pages) = match kind {
        SourceKind::Glama => {
            let info = obj(get(root, "pageInfo", &loc, "")?, &loc, "pageInfo")?;
            let has_next = match get(info, "hasNextPage", &loc, "pageInfo")? {
                Value::Bool(b) => *b,
                other => {
                    return Err(
                        loc.err("pageInfo.hasNextPage", format!("expected a boolean, found {}", json_type_name(other)))
                    );
                }
            };
            let cursor = opt_str(info, "endCursor", &loc, "pageInfo")?;
            match (has_next, cursor) {
                (false, _) => (Next::End, None),
                (true, Some(c)) if !c.is_empty() => (Next::Cursor(c.to_string()), None),
                (true, _) => return Err(loc.err("pageInfo.endCursor", "`hasNextPage` is true but there is no cursor")),
            }
        }
        SourceKind::Official => {
            let meta = match root.get("metadata") {
                None | Some(Value::Null) => None,
                Some(v) => Some(obj(v, &loc, "metadata")?),
            };
            match meta.map(|m| opt_str(m, "nextCursor", &loc, "metadata")).transpose()?.flatten() {
                Some(c) if !c.is_empty() => (Next::Cursor(c.to_string()), None),
                _ => (Next::End, None),
            }
        }
        SourceKind::Smithery => {
            let p = obj(get(root, "pagination", &loc, "")?, &loc, "pagination")?;
            let current = opt_u64(p, "currentPage", &loc, "pagination")?
                .ok_or_else(|| loc.err("pagination.currentPage", "missing"))?;
            let total = opt_u64(p, "totalPages", &loc, "pagination")?
                .ok_or_else(|| loc.err("pagination.totalPages", "missing"))?;
            if current != page {
                return Err(loc.err(
                    "pagination.currentPage",
                    format!("page {page} was requested but the source says it is page {current}"),
                ));
            }
            if current < total { (Next::Page(current + 1), Some(total)) } else { (Next::End, Some(total)) }
        }
    };
    Ok(Page { items, next, total_pages })
}

/// Parse a Smithery detail document (`GET /servers/{qualifiedName}`), checking it is the
/// server that was asked for.
pub fn parse_detail(source: &str, qualified_name: &str, bytes: &[u8]) -> Result<Map<String, Value>, PageError> {
    let loc = Loc { source, page: format!("detail of `{qualified_name}`") };
    let doc: Value = serde_json::from_slice(bytes).map_err(|e| loc.err("$", format!("not JSON: {e}")))?;
    let m = obj(&doc, &loc, "$")?;
    let got = req_str(m, "qualifiedName", &loc, "")?;
    if got != qualified_name {
        return Err(loc.err("qualifiedName", format!("asked for `{qualified_name}`, got `{got}`")));
    }
    if let Some(t) = m.get("tools")
        && !t.is_array()
        && !t.is_null()
    {
        return Err(loc.err("tools", format!("expected an array, found {}", json_type_name(t))));
    }
    Ok(m.clone())
}

pub(crate) fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}
