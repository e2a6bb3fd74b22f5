//! Test double: loopback registry APIs (Glama, official MCP Registry, Smithery) serving
//! generated, seeded fixtures in the recorded shapes, with scripted faults, and counting
//! every request so tests can prove no page is fetched twice.
//!
//! The generated universe has known overlaps across sources (see [`Universe`]) so merge
//! tests know which servers are duplicates and which fields conflict.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Glama,
    Official,
    Smithery,
}

/// Scripted faults, by 1-based page number (list pages) unless said otherwise.
#[derive(Debug, Default, Clone)]
pub struct Faults {
    /// Answer these statuses (with an optional Retry-After) to the first requests of a page.
    pub statuses: BTreeMap<u64, Vec<(u16, Option<String>)>>,
    /// Wait this long before answering the first request of a page.
    pub delay_once: BTreeMap<u64, Duration>,
    /// Cut the first answer of a page in half.
    pub truncate_once: BTreeSet<u64>,
    /// From this page on, the next cursor points back at the previous page.
    pub cursor_loop_at: Option<u64>,
    /// Never say "last page" (cursors go on past the data).
    pub endless: bool,
    /// Pad this page to more than this many bytes.
    pub oversized: Option<(u64, usize)>,
    /// Serve this page with `servers` as an object.
    pub wrong_shape: Option<u64>,
    /// Wait before every answer (for kill tests).
    pub every_delay: Option<Duration>,
    /// Required `Authorization` value (401 otherwise).
    pub require_auth: Option<String>,
}

#[derive(Debug, Default)]
pub struct Log {
    /// Request URI (path and query) → times requested.
    pub counts: BTreeMap<String, usize>,
    /// Every request: (uri, status, time since start).
    pub seen: Vec<(String, u16, Duration)>,
    pub user_agents: BTreeSet<String>,
    pub auth: BTreeSet<String>,
    pub if_none_match: usize,
    /// Times each page was answered in full (status 200), by page number.
    pub served_pages: BTreeMap<u64, usize>,
}

struct Shared {
    kind: Kind,
    items: Vec<Value>,
    /// The items serialised once (pages are assembled from these: fast even unoptimised).
    items_json: Vec<String>,
    details: BTreeMap<String, Value>,
    faults: Faults,
    log: Log,
    hits: BTreeMap<u64, usize>,
    started: Instant,
}

pub struct FixtureServer {
    pub addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
    _rt: tokio::runtime::Runtime,
}

impl FixtureServer {
    pub fn start(kind: Kind, items: Vec<Value>, details: BTreeMap<String, Value>, faults: Faults) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let items_json = items.iter().map(|v| serde_json::to_string(v).unwrap()).collect();
        let shared = Arc::new(Mutex::new(Shared {
            kind,
            items_json,
            items,
            details,
            faults,
            log: Log::default(),
            hits: BTreeMap::new(),
            started: Instant::now(),
        }));
        let s2 = shared.clone();
        let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        rt.spawn(async move {
            let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
                let s = s2.clone();
                async move { handle(s, req).await }
            });
            axum::serve(listener, app).await.unwrap();
        });
        Self { addr, shared, _rt: rt }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn log<T>(&self, f: impl FnOnce(&Log) -> T) -> T {
        f(&self.shared.lock().unwrap().log)
    }

    pub fn set_faults(&self, faults: Faults) {
        let mut s = self.shared.lock().unwrap();
        s.faults = faults;
        s.hits.clear();
    }

    pub fn reset_log(&self) {
        self.shared.lock().unwrap().log = Log::default();
    }

    pub fn total_requests(&self) -> usize {
        self.log(|l| l.seen.len())
    }
}

fn query(uri: &axum::http::Uri) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for pair in uri.query().unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        out.insert(k.to_string(), decode(v));
    }
    out
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap_or(b'?'));
            i += 3;
        } else {
            out.push(if b[i] == b'+' { b' ' } else { b[i] });
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn respond(status: u16, body: Vec<u8>, headers: &[(&str, String)]) -> axum::response::Response {
    let mut r = axum::response::Response::builder().status(status).header("content-type", "application/json");
    for (k, v) in headers {
        r = r.header(*k, v);
    }
    r.body(axum::body::Body::from(body)).unwrap()
}

fn etag_of(body: &[u8]) -> String {
    use sha2::Digest;
    format!("\"{}\"", &hex::encode(sha2::Sha256::digest(body))[..16])
}

async fn handle(shared: Arc<Mutex<Shared>>, req: axum::extract::Request) -> axum::response::Response {
    let (status, body, headers, delay) = decide(&shared, req.uri().clone(), req.headers().clone());
    if let Some(d) = delay {
        tokio::time::sleep(d).await;
    }
    respond(status, body, &headers)
}

type Decision = (u16, Vec<u8>, Vec<(&'static str, String)>, Option<Duration>);

fn decide(shared: &Mutex<Shared>, uri: axum::http::Uri, hdrs: axum::http::HeaderMap) -> Decision {
    let path_q = uri.path_and_query().map(|p| p.as_str().to_string()).unwrap_or_default();
    let header = |k: &str| hdrs.get(k).and_then(|v| v.to_str().ok()).map(str::to_string);
    let (ua, auth, inm) = (header("user-agent"), header("authorization"), header("if-none-match"));
    let q = query(&uri);

    {
        let mut s = shared.lock().unwrap();
        let elapsed = s.started.elapsed();
        *s.log.counts.entry(path_q.clone()).or_default() += 1;
        if let Some(u) = ua {
            s.log.user_agents.insert(u);
        }
        if let Some(a) = &auth {
            s.log.auth.insert(a.clone());
        }
        if inm.is_some() {
            s.log.if_none_match += 1;
        }
        let mut delay = s.faults.every_delay;
        let out: (u16, Vec<u8>, Vec<(&'static str, String)>, u64) = 'out: {
            if let Some(want) = &s.faults.require_auth
                && auth.as_deref() != Some(want.as_str())
            {
                break 'out (401, br#"{"error":{"code":"unauthorized","message":"bad key"}}"#.to_vec(), vec![], 0);
            }
            // Detail documents (Smithery).
            if s.kind == Kind::Smithery && uri.path().starts_with("/servers/") {
                let qn = decode(&uri.path()["/servers/".len()..]);
                match s.details.get(&qn) {
                    Some(d) => {
                        let body = serde_json::to_vec(d).unwrap();
                        let tag = etag_of(&body);
                        if inm.as_deref() == Some(tag.as_str()) {
                            break 'out (304, vec![], vec![("etag", tag)], 0);
                        }
                        break 'out (200, body, vec![("etag", tag)], 0);
                    }
                    None => break 'out (404, br#"{"error":"not found"}"#.to_vec(), vec![], 0),
                }
            }
            let (size, offset, page_no) = match s.kind {
                Kind::Glama => {
                    let size: usize = q.get("first").and_then(|v| v.parse().ok()).unwrap_or(10);
                    let off =
                        q.get("after").map(|c| c.trim_start_matches("cur-").parse::<usize>().unwrap_or(0)).unwrap_or(0);
                    (size, off, (off / size.max(1)) as u64 + 1)
                }
                Kind::Official => {
                    let size: usize = q.get("limit").and_then(|v| v.parse().ok()).unwrap_or(30);
                    let off = q
                        .get("cursor")
                        .map(|c| c.trim_start_matches("off:").parse::<usize>().unwrap_or(0))
                        .unwrap_or(0);
                    (size, off, (off / size.max(1)) as u64 + 1)
                }
                Kind::Smithery => {
                    let size: usize = q.get("pageSize").and_then(|v| v.parse().ok()).unwrap_or(10);
                    let p: u64 = q.get("page").and_then(|v| v.parse().ok()).unwrap_or(1);
                    (size, (p as usize - 1) * size, p)
                }
            };
            let hit = {
                let h = s.hits.entry(page_no).or_default();
                *h += 1;
                *h
            };
            if let Some(list) = s.faults.statuses.get(&page_no)
                && let Some((st, ra)) = list.get(hit - 1)
            {
                let h = ra.iter().map(|v| ("retry-after", v.clone())).collect();
                break 'out (
                    *st,
                    format!(r#"{{"error":{{"code":"e{st}","message":"scripted"}}}}"#).into_bytes(),
                    h,
                    page_no,
                );
            }
            // A delayed first answer arrives after the client gave up: not "served".
            let delayed = hit == 1 && s.faults.delay_once.contains_key(&page_no);
            if delayed {
                delay = s.faults.delay_once.get(&page_no).copied();
            }
            let total = s.items.len();
            let end = (offset + size).min(total);
            let special =
                s.faults.wrong_shape == Some(page_no) || s.faults.oversized.is_some_and(|(p, _)| p == page_no);
            let slice: Vec<Value> = if offset < total && special { s.items[offset..end].to_vec() } else { vec![] };
            let joined = if offset < total { s.items_json[offset..end].join(",") } else { String::new() };
            let more = end < total || s.faults.endless;
            let mut next_off = end.max(offset + size);
            if let Some(at) = s.faults.cursor_loop_at
                && page_no >= at
            {
                next_off = offset.saturating_sub(size);
            }
            let mut doc = match s.kind {
                Kind::Glama => json!({
                    "servers": slice,
                    "pageInfo": {"startCursor": format!("cur-{offset}"), "endCursor": if more { json!(format!("cur-{next_off}")) } else { Value::Null },
                                 "hasNextPage": more, "hasPreviousPage": offset > 0}
                }),
                Kind::Official => json!({
                    "servers": slice,
                    "metadata": {"nextCursor": if more { format!("off:{next_off}") } else { String::new() }, "count": end.saturating_sub(offset)}
                }),
                Kind::Smithery => {
                    let pages = total.div_ceil(size.max(1)).max(1) as u64;
                    let total_pages = if s.faults.endless { page_no + 1 } else { pages };
                    json!({"servers": slice, "pagination": {"currentPage": page_no, "pageSize": size,
                           "totalPages": total_pages, "totalCount": total}})
                }
            };
            if s.faults.wrong_shape == Some(page_no) {
                doc["servers"] = json!({"oops": true});
            }
            if let Some((p, bytes)) = s.faults.oversized
                && p == page_no
            {
                doc["padding"] = json!("x".repeat(bytes + 1));
            }
            let mut body = serde_json::to_vec(&doc).unwrap();
            if !special {
                // `"servers":[]` was rendered empty; splice the pre-serialised items in.
                let text =
                    String::from_utf8(body).unwrap().replacen("\"servers\":[]", &format!("\"servers\":[{joined}]"), 1);
                body = text.into_bytes();
            }
            let tag = etag_of(&body);
            if hit == 1 && s.faults.truncate_once.contains(&page_no) {
                body.truncate(body.len() / 2);
                break 'out (200, body, vec![], page_no);
            }
            if inm.as_deref() == Some(tag.as_str()) {
                break 'out (304, vec![], vec![("etag", tag)], page_no);
            }
            if !delayed {
                *s.log.served_pages.entry(page_no).or_default() += 1;
            }
            (200, body, vec![("etag", tag)], page_no)
        };
        s.log.seen.push((path_q.clone(), out.0, elapsed));
        (out.0, out.1, out.2, delay)
    }
}

// ---------------------------------------------------------------------------------------
// Generated data.

/// One server of the generated universe, before a source renders it.
#[derive(Debug, Clone)]
pub struct Base {
    pub i: usize,
    pub slug: String,
    pub title: String,
    pub description: String,
    pub repo: String,
    pub npm: String,
    pub version: String,
    pub license: String,
    pub category: &'static str,
    pub tools: Vec<(String, String)>,
}

pub const CATS: &[&str] = &["finance", "database", "search", "file-system", "communication", "security"];
const WORDS: &[&str] = &["alpha", "bravo", "cedar", "delta", "ember", "fjord", "garnet", "harbor", "indigo", "juniper"];

/// `n` servers. Membership and overlaps (all by index `i`):
/// - Glama lists every server;
/// - the official registry lists `i % 2 == 0` (same npm package → certain duplicates);
/// - Smithery lists `i % 3 == 0`, by display name only (no repository, no package) →
///   doubtful name matches; its description differs when `i % 9 == 0` (a conflict);
/// - servers `i % 10 == 5` share the monorepo `github.com/acme/monorepo` with distinct names.
pub struct Universe {
    pub servers: Vec<Base>,
}

impl Universe {
    pub fn generate(seed: u64, n: usize) -> Self {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut servers = Vec::new();
        for i in 0..n {
            let w1 = WORDS[rng.random_range(0..WORDS.len())];
            let w2 = WORDS[rng.random_range(0..WORDS.len())];
            let slug = format!("{w1}-{w2}-{i:05}");
            let cat = CATS[i % CATS.len()];
            let ntools = rng.random_range(1..5);
            let tools =
                (0..ntools).map(|t| (format!("{w1}_op_{t}"), format!("Do {w1} operation {t} for {cat}."))).collect();
            let repo = if i % 10 == 5 {
                "https://github.com/acme/monorepo".to_string()
            } else {
                format!("https://github.com/owner{}/{slug}", i % 37)
            };
            servers.push(Base {
                i,
                title: format!("{} {} {i:05}", capital(w1), capital(w2)),
                description: format!("A {cat} server: {w1} and {w2} tools ({i})."),
                npm: format!("@fixture/{slug}"),
                version: format!("1.{}.{}", i % 7, rng.random_range(0..20)),
                license: if i % 4 == 0 { "MIT".into() } else { "Apache-2.0".into() },
                category: cat,
                tools,
                repo,
                slug,
            });
        }
        Self { servers }
    }

    fn tools_json(b: &Base) -> Vec<Value> {
        b.tools
            .iter()
            .map(|(n, d)| json!({"name": n, "description": d, "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}}}))
            .collect()
    }

    pub fn glama(&self) -> Vec<Value> {
        self.servers
            .iter()
            .map(|b| {
                json!({
                    "id": format!("g{:05}", b.i),
                    "name": b.title,
                    "namespace": format!("owner{}", b.i % 37),
                    "slug": b.slug,
                    "description": b.description,
                    "url": format!("https://glama.ai/mcp/servers/owner{}/{}", b.i % 37, b.slug),
                    "attributes": [if b.i % 2 == 0 { "hosting:remote-capable" } else { "hosting:local-only" }, b.category],
                    "repository": {"url": b.repo},
                    "spdxLicense": {"name": b.license, "url": format!("https://spdx.org/licenses/{}.html", b.license)},
                    "environmentVariablesJsonSchema": {"type": "object", "properties": {}},
                    "tools": Self::tools_json(b),
                })
            })
            .collect()
    }

    pub fn official(&self) -> Vec<Value> {
        self.servers
            .iter()
            .filter(|b| b.i % 2 == 0)
            .map(|b| {
                json!({
                    "server": {
                        "$schema": "https://static.modelcontextprotocol.io/schemas/2025-10-17/server.schema.json",
                        "name": format!("io.github.owner{}/{}", b.i % 37, b.slug),
                        "description": b.description,
                        "version": b.version,
                        "repository": {"url": b.repo, "source": "github"},
                        "packages": [{"registryType": "npm", "identifier": b.npm, "version": b.version,
                                      "transport": {"type": "stdio"}, "runtimeHint": "npx"}],
                        "remotes": if b.i % 4 == 0 { json!([{"type": "streamable-http", "url": format!("https://{}.example.com/mcp", b.slug)}]) } else { json!([]) },
                    },
                    "_meta": {"io.modelcontextprotocol.registry/official": {
                        "status": "active", "publishedAt": "2026-01-01T00:00:00Z", "updatedAt": "2026-02-01T00:00:00Z", "isLatest": true}}
                })
            })
            .collect()
    }

    pub fn smithery(&self) -> (Vec<Value>, BTreeMap<String, Value>) {
        let mut list = Vec::new();
        let mut details = BTreeMap::new();
        for b in self.servers.iter().filter(|b| b.i % 3 == 0) {
            let qn = format!("@owner{}/{}", b.i % 37, b.slug);
            let description =
                if b.i % 9 == 0 { format!("Smithery says: {}", b.description) } else { b.description.clone() };
            list.push(json!({
                "qualifiedName": qn, "displayName": b.title, "description": description,
                "homepage": format!("https://smithery.ai/server/{qn}"), "useCount": b.i * 3, "verified": b.i % 2 == 0,
                "remote": true, "createdAt": "2026-01-01T00:00:00Z"
            }));
            let mut tools = Self::tools_json(b);
            if b.i % 6 == 0 {
                tools.push(json!({"name": "smithery_only", "description": "Only Smithery lists this.", "inputSchema": {"type": "object"}}));
            }
            details.insert(qn.clone(), json!({
                "qualifiedName": qn, "displayName": b.title, "description": description,
                "deploymentUrl": format!("https://server.smithery.ai/{qn}/mcp"),
                "connections": [{"type": "http", "url": format!("https://server.smithery.ai/{qn}/mcp"), "configSchema": {}}],
                "security": {"scanPassed": true},
                "tools": tools
            }));
        }
        (list, details)
    }
}

fn capital(w: &str) -> String {
    let mut c = w.chars();
    c.next().map(|f| f.to_uppercase().collect::<String>() + c.as_str()).unwrap_or_default()
}
