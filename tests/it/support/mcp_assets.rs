//! Finding the third-party MCP servers that `scripts/setup.d/30-mcp.sh` installs, and a
//! small catalog fixture for sandbox tests. Missing assets fail under `CI=true` ("run
//! make setup") and skip with a printed reason elsewhere.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use serde_json::json;

/// `$BENCHGEN_CACHE/mcp` (default `~/.cache/benchgen/mcp`).
pub fn mcp_cache() -> PathBuf {
    let base = std::env::var_os("BENCHGEN_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/benchgen"));
    base.join("mcp")
}

/// Return the path if it exists; otherwise fail (CI) or print why the test is skipped.
pub fn require(path: PathBuf, what: &str) -> Option<PathBuf> {
    if path.exists() {
        return Some(path);
    }
    let msg = format!("{what} not found at `{}`: run make setup", path.display());
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{msg}");
    }
    eprintln!("skipped: {msg}");
    None
}

pub fn npm_server_js(pkg: &str) -> Option<PathBuf> {
    require(mcp_cache().join("npm/node_modules/@modelcontextprotocol").join(pkg).join("dist/index.js"), pkg)
}

pub fn venv_bin(name: &str) -> Option<PathBuf> {
    require(mcp_cache().join("venv/bin").join(name), name)
}

/// `../shared/data/...` relative to the repository root (or under `$BENCHGEN_SHARED_DATA`
/// when set), or `None` with a printed reason.
pub fn shared_data(rel: &str) -> Option<PathBuf> {
    let base = std::env::var_os("BENCHGEN_SHARED_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data"));
    let p = base.join(rel);
    if p.exists() {
        Some(p)
    } else {
        eprintln!("skipped: `{}` is absent (the shared data sits beside the clone)", p.display());
        None
    }
}

/// A three-tool catalog: one tool with an output schema, one without, one strict.
pub fn fixture_catalog() -> serde_json::Value {
    json!({"servers": [
        {"name": "books", "description": "", "summary": "", "url": "", "categories": ["Reading"], "tools": [
            {"id": "books::find_book", "name": "find_book", "description": "Find a book by title.",
             "input_schema": {"type": "object", "properties": {
                 "title": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}},
                 "required": ["title"]},
             "output_schema": {"type": "object", "required": ["isbn", "title", "year"], "properties": {
                 "isbn": {"type": "string"}, "title": {"type": "string"},
                 "year": {"type": "integer", "minimum": 1450, "maximum": 2026}}}},
            {"id": "books::get_reviews", "name": "get_reviews", "description": "Reviews of a book by ISBN.",
             "input_schema": {"type": "object", "properties": {"isbn": {"type": "string"}}, "required": ["isbn"]}}
        ]},
        {"name": "weather", "description": "", "summary": "", "url": "", "categories": ["Weather"], "tools": [
            {"id": "weather::forecast", "name": "forecast", "description": "Forecast for a city.",
             "input_schema": {"type": "object", "additionalProperties": false, "properties": {
                 "city": {"type": "string"}, "days": {"type": "integer", "maximum": 14}}, "required": ["city"]}}
        ]}
    ]})
}

/// Write the fixture catalog into `dir` and return its path.
pub fn write_fixture_catalog(dir: &std::path::Path) -> PathBuf {
    let p = dir.join("catalog.json");
    std::fs::write(&p, serde_json::to_vec_pretty(&fixture_catalog()).unwrap()).unwrap();
    p
}

/// A free loopback port (bound then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `benchgen --quiet sandbox --catalog <catalog> --http` on a free loopback port, killed
/// when dropped, with that port and the endpoint URL it prints once it listens.
pub fn sandbox_http(catalog: &Path) -> (KillOnDrop, u16, String) {
    let port = free_port();
    let mut server = KillOnDrop(
        super::bin()
            .args([
                "--quiet",
                "sandbox",
                "--catalog",
                catalog.to_str().unwrap(),
                "--http",
                &format!("127.0.0.1:{port}"),
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut url = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(server.0.stdout.take().unwrap()), &mut url).unwrap();
    (server, port, url.trim().to_string())
}

/// A child process killed when dropped.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
