//! Which MCP servers exist and how to reach them: `[mcp]` in the pipeline config,
//! plus the `mcpServers` JSON that desktop MCP clients use (importable as is).
//!
//! ```toml
//! [mcp]
//! import = "raw/mcp.json"          # optional: a desktop-client `mcpServers` file
//! call_timeout_secs = 30
//!
//! [mcp.servers.time]
//! command = "mcp-server-time"
//! args = ["--local-timezone", "UTC"]
//! env = { TZ = "UTC" }
//!
//! [mcp.servers.remote]
//! url = "http://127.0.0.1:3001/mcp"
//! headers = { Authorization = "Bearer ${REMOTE_MCP_TOKEN}" }
//! ```
//!
//! `${VAR}` in `args`, `env`, `headers` and `url` is replaced from the environment when
//! the server is started, so secrets stay out of config files, logs and the ledger.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config_doc::Key;
use crate::error::{InputError, Problem};

/// `[mcp]`: servers and client limits.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct McpSettings {
    /// Servers by name (the name is the `server` part of tool ids such as `time::get_current_time`).
    #[serde(default)]
    pub servers: BTreeMap<String, ServerSpec>,
    /// A desktop-client `mcpServers` JSON file whose servers are added (relative to the root).
    #[serde(default)]
    pub import: Option<PathBuf>,
    /// Default per-call timeout (a server's `timeout_secs` overrides it).
    #[serde(default = "default_call_timeout")]
    pub call_timeout_secs: f64,
    /// Time allowed to spawn or reach a server and finish the handshake.
    #[serde(default = "default_startup_timeout")]
    pub startup_timeout_secs: f64,
    /// Tool output kept per call; longer output is cut and the cut is noted in the result.
    #[serde(default = "default_max_result_bytes")]
    pub max_result_bytes: usize,
    /// Largest single message accepted from a server; a larger one fails its call
    /// (`result_too_large`) instead of exhausting memory.
    #[serde(default = "default_max_message_bytes")]
    pub max_message_bytes: usize,
    /// Bounds on one tool listing (`tools/list` and its `nextCursor` pages): a server that
    /// always returns a new cursor would otherwise be paged forever.
    #[serde(default = "default_max_list_pages")]
    pub max_list_pages: usize,
    #[serde(default = "default_max_list_tools")]
    pub max_list_tools: usize,
    #[serde(default = "default_list_timeout")]
    pub list_timeout_secs: f64,
}

/// `[mcp]`; absent: its defaults.
impl crate::settings::Section for McpSettings {
    const NAME: &'static str = "mcp";
    type Value = crate::settings::Always<Self>;
    const KEYS: &'static [Key] = &[
        Key::unset(
            "import",
            "path",
            "A desktop-client `mcpServers` JSON file whose servers are added (relative to the root).",
        ),
        Key::new(
            "call_timeout_secs",
            "number",
            "30.0",
            "Per-call timeout in seconds (a server's `timeout_secs` wins).",
        ),
        Key::new(
            "startup_timeout_secs",
            "number",
            "30.0",
            "Seconds to spawn or reach a server and finish the handshake.",
        ),
        Key::new(
            "max_result_bytes",
            "integer",
            "262144",
            "Tool output kept per call; longer output is cut, and the cut noted.",
        ),
        Key::new(
            "max_message_bytes",
            "integer",
            "16777216",
            "Largest message taken from a server; a larger one fails its call.",
        ),
        Key::new("max_list_pages", "integer", "1000", "Most `tools/list` pages of one listing."),
        Key::new("max_list_tools", "integer", "100000", "Most tools of one listing."),
        Key::new("list_timeout_secs", "number", "120.0", "Seconds for one whole listing."),
        Key::table(
            "servers.<name>",
            "One MCP server, spawned (`command`) or reached (`url`); its name is the `server` part of tool ids.",
        ),
        Key::unset("servers.<name>.command", "string", "Program to spawn (stdio)."),
        Key::new(
            "servers.<name>.args",
            "list of strings",
            "[]",
            "Its arguments; `${VAR}` is replaced from the environment.",
        ),
        Key::new("servers.<name>.env", "table of strings", "{}", "Its environment variables; `${VAR}` is replaced."),
        Key::unset("servers.<name>.cwd", "path", "Its working folder, relative to the project root."),
        Key::unset("servers.<name>.url", "string", "Streamable HTTP endpoint; `${VAR}` is replaced."),
        Key::new(
            "servers.<name>.headers",
            "table of strings",
            "{}",
            "HTTP headers sent to `url`; `${VAR}` is replaced.",
        ),
        Key::derived(
            "servers.<name>.timeout_secs",
            "number",
            "`call_timeout_secs`",
            "Per-call timeout for this server.",
        ),
        Key::new(
            "servers.<name>.lifecycle",
            r#""initialize" | "auto""#,
            r#""initialize""#,
            "Plain `initialize`, or probe with `server/discover` and fall back to `initialize`.",
        ),
        Key::new(
            "servers.<name>.tool_ids",
            r#""qualified" | "as-is""#,
            r#""qualified""#,
            "Tool ids `<server>::<tool>`, or the tool names as they are (a sandbox serving a catalog).",
        ),
    ];
    const EXAMPLE: &'static str = r#"
[mcp.servers.time]
command = "mcp-server-time"
"#;
    fn check(m: &Self::Value, _: &crate::settings::Settings, problems: &mut Vec<Problem>) {
        problems.extend(m.check());
    }
}

impl Default for McpSettings {
    fn default() -> Self {
        Self {
            servers: BTreeMap::new(),
            import: None,
            call_timeout_secs: default_call_timeout(),
            startup_timeout_secs: default_startup_timeout(),
            max_result_bytes: default_max_result_bytes(),
            max_message_bytes: default_max_message_bytes(),
            max_list_pages: default_max_list_pages(),
            max_list_tools: default_max_list_tools(),
            list_timeout_secs: default_list_timeout(),
        }
    }
}

fn default_call_timeout() -> f64 {
    30.0
}
fn default_startup_timeout() -> f64 {
    30.0
}
fn default_max_result_bytes() -> usize {
    256 * 1024
}
fn default_max_message_bytes() -> usize {
    16 * 1024 * 1024
}
fn default_max_list_pages() -> usize {
    1000
}
fn default_max_list_tools() -> usize {
    100_000
}
fn default_list_timeout() -> f64 {
    120.0
}

/// How the client opens the MCP lifecycle.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Lifecycle {
    /// Plain `initialize` offering protocol 2025-11-25, which npm and Python servers accept.
    #[default]
    Initialize,
    /// Probe with `server/discover` (2026-07-28), fall back to `initialize`.
    Auto,
}

/// How a server's tool names become benchgen tool ids.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ToolIds {
    /// `<server name>::<tool name>`.
    #[default]
    Qualified,
    /// The tool name is already a catalog tool id (a `benchgen sandbox` serving a catalog).
    AsIs,
}

/// One server: `command` (spawned, stdio) or `url` (Streamable HTTP).
#[derive(Debug, Clone, Deserialize, Serialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServerSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Working folder of the spawned server (relative to the project root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Per-call timeout for this server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<f64>,
    #[serde(default)]
    pub lifecycle: Lifecycle,
    #[serde(default)]
    pub tool_ids: ToolIds,
    /// Spawn the server with none of benchgen's environment but `PATH` and `HOME`
    /// ([`super::stdio::INHERITED_ENV`]) and the variables of `env`: set for a start read
    /// from a release (`release verify --servers`), whose command the user did not configure.
    /// Never read from a config.
    #[serde(skip)]
    pub env_clear: bool,
}

/// The transport a spec selects.
#[derive(Debug, Clone, PartialEq)]
pub enum Endpoint {
    Stdio { command: String, args: Vec<String>, env: BTreeMap<String, String>, cwd: Option<PathBuf> },
    Http { url: String, headers: BTreeMap<String, String> },
}

impl ServerSpec {
    /// Problems with this spec, each with its location under `loc`.
    pub fn check(&self, loc: &str) -> Vec<Problem> {
        let mut p = Vec::new();
        match (&self.command, &self.url) {
            (None, None) => p.push(Problem::new(loc, "needs `command` (stdio) or `url` (Streamable HTTP)")),
            (Some(_), Some(_)) => p.push(Problem::new(loc, "has both `command` and `url`; keep one")),
            (Some(c), None) if c.trim().is_empty() => p.push(Problem::new(format!("{loc}.command"), "is empty")),
            (None, Some(u)) if !(u.starts_with("http://") || u.starts_with("https://")) => {
                p.push(Problem::new(format!("{loc}.url"), format!("`{u}` is not an http(s) URL")))
            }
            _ => {}
        }
        if self.url.is_some() && (!self.args.is_empty() || !self.env.is_empty() || self.cwd.is_some()) {
            p.push(Problem::new(loc, "`args`, `env` and `cwd` apply to spawned (`command`) servers only"));
        }
        if self.command.is_some() && !self.headers.is_empty() {
            p.push(Problem::new(loc, "`headers` apply to `url` servers only"));
        }
        if let Some(t) = self.timeout_secs
            && !(t > 0.0 && t.is_finite())
        {
            p.push(Problem::new(format!("{loc}.timeout_secs"), "must be a positive number of seconds"));
        }
        p
    }

    /// The endpoint with `${VAR}` references replaced from the environment.
    pub fn endpoint(&self, root: &Path) -> anyhow::Result<Endpoint> {
        if let Some(command) = &self.command {
            Ok(Endpoint::Stdio {
                command: expand_env(command)?,
                args: self.args.iter().map(|a| expand_env(a)).collect::<anyhow::Result<_>>()?,
                env: self.env.iter().map(|(k, v)| Ok((k.clone(), expand_env(v)?))).collect::<anyhow::Result<_>>()?,
                cwd: self.cwd.as_ref().map(|c| if c.is_absolute() { c.clone() } else { root.join(c) }),
            })
        } else if let Some(url) = &self.url {
            Ok(Endpoint::Http {
                url: expand_env(url)?,
                headers: self
                    .headers
                    .iter()
                    .map(|(k, v)| Ok((k.clone(), expand_env(v)?)))
                    .collect::<anyhow::Result<_>>()?,
            })
        } else {
            anyhow::bail!("server needs `command` or `url`")
        }
    }
}

/// Replace `${VAR}` with the variable's value; a missing variable is an error that
/// names it (never its would-be value).
pub fn expand_env(s: &str) -> anyhow::Result<String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let Some(j) = after.find('}') else {
            anyhow::bail!("unclosed `${{` in `{s}`");
        };
        let name = &after[..j];
        let value = std::env::var(name).map_err(|_| {
            crate::error::hinted(
                format!("environment variable `{name}` is not set"),
                "the MCP server config refers to it as `${...}`; export it before running",
            )
        })?;
        out.push_str(&value);
        rest = &after[j + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

impl McpSettings {
    /// Servers from the config plus the imported `mcpServers` file (a name in both is an error).
    pub fn all_servers(&self, root: &Path) -> anyhow::Result<BTreeMap<String, ServerSpec>> {
        let mut servers = self.servers.clone();
        if let Some(file) = &self.import {
            let path = if file.is_absolute() { file.clone() } else { root.join(file) };
            for (name, spec) in import_desktop_json(&path)? {
                if servers.contains_key(&name) {
                    return Err(InputError {
                        file: path.display().to_string(),
                        problems: vec![Problem::new(
                            format!("mcpServers.{name}"),
                            "also declared in `[mcp.servers]`; rename one of them",
                        )],
                    }
                    .into());
                }
                servers.insert(name, spec);
            }
        }
        Ok(servers)
    }

    /// Problems of the `[mcp]` section (for the config check).
    pub fn check(&self) -> Vec<Problem> {
        let mut p = Vec::new();
        for (name, spec) in &self.servers {
            if !valid_server_name(name) {
                p.push(Problem::new(format!("mcp.servers.{name}"), "server names may not contain `::`"));
            }
            p.extend(spec.check(&format!("mcp.servers.{name}")));
        }
        for (key, v) in
            [("call_timeout_secs", self.call_timeout_secs), ("startup_timeout_secs", self.startup_timeout_secs)]
        {
            if !(v > 0.0 && v.is_finite()) {
                p.push(Problem::new(format!("mcp.{key}"), "must be a positive number of seconds"));
            }
        }
        if self.max_result_bytes == 0 || self.max_message_bytes < 1024 {
            p.push(Problem::new("mcp", "`max_result_bytes` must be > 0 and `max_message_bytes` ≥ 1024"));
        }
        p
    }
}

fn valid_server_name(name: &str) -> bool {
    !name.contains(crate::model::TOOL_ID_SEP) && !name.trim().is_empty()
}

/// Read a desktop-client `mcpServers` file: `{"mcpServers": {NAME: {command, args, env,
/// cwd} | {url, headers, type?}}}`. Every problem is reported at once.
pub fn import_desktop_json(path: &Path) -> anyhow::Result<BTreeMap<String, ServerSpec>> {
    let bytes = std::fs::read(path).map_err(|e| anyhow::anyhow!("cannot read `{}`: {e}", path.display()))?;
    let file = path.display().to_string();
    let doc: Value = serde_json::from_slice(&bytes)
        .map_err(|e| InputError { file: file.clone(), problems: vec![Problem::new("json", e.to_string())] })?;
    let Some(servers) = doc.get("mcpServers").and_then(Value::as_object) else {
        return Err(InputError { file, problems: vec![Problem::new("mcpServers", "missing or not an object")] }.into());
    };
    let mut out = BTreeMap::new();
    let mut problems = Vec::new();
    for (name, v) in servers {
        let loc = format!("mcpServers.{name}");
        let Some(obj) = v.as_object() else {
            problems.push(Problem::new(&loc, "is not an object"));
            continue;
        };
        let mut spec = ServerSpec::default();
        for (key, val) in obj {
            let at = format!("{loc}.{key}");
            let bad = |what: &str| Problem::new(&at, format!("must be {what}"));
            match key.as_str() {
                "command" => match val.as_str() {
                    Some(s) => spec.command = Some(s.to_string()),
                    None => problems.push(bad("a string")),
                },
                "url" => match val.as_str() {
                    Some(s) => spec.url = Some(s.to_string()),
                    None => problems.push(bad("a string")),
                },
                "cwd" => match val.as_str() {
                    Some(s) => spec.cwd = Some(PathBuf::from(s)),
                    None => problems.push(bad("a string")),
                },
                "args" => match val.as_array().and_then(|a| a.iter().map(|x| x.as_str().map(str::to_string)).collect())
                {
                    Some(a) => spec.args = a,
                    None => problems.push(bad("an array of strings")),
                },
                "env" | "headers" => {
                    match val.as_object().and_then(|o| {
                        o.iter().map(|(k, x)| x.as_str().map(|s| (k.clone(), s.to_string()))).collect::<Option<_>>()
                    }) {
                        Some(m) if key == "env" => spec.env = m,
                        Some(m) => spec.headers = m,
                        None => problems.push(bad("an object of strings")),
                    }
                }
                "timeout" => match val.as_f64() {
                    // Desktop clients give milliseconds.
                    Some(ms) => spec.timeout_secs = Some(ms / 1000.0),
                    None => problems.push(bad("a number of milliseconds")),
                },
                "type" | "transport" => match val.as_str() {
                    Some("stdio" | "http" | "streamable-http" | "streamableHttp") => {}
                    Some(other) => problems.push(Problem::new(
                        &at,
                        format!("transport `{other}` is not supported (stdio and Streamable HTTP are)"),
                    )),
                    None => problems.push(bad("a string")),
                },
                // Client-side switches with no meaning for benchgen.
                "disabled" | "autoApprove" | "alwaysAllow" | "description" => {}
                other => problems.push(Problem::new(&at, format!("unknown key `{other}`"))),
            }
        }
        if !valid_server_name(name) {
            problems.push(Problem::new(&loc, "server names may not contain `::`"));
        }
        problems.extend(spec.check(&loc));
        out.insert(name.clone(), spec);
    }
    if problems.is_empty() { Ok(out) } else { Err(InputError { file, problems }.into()) }
}

/// The `[mcp.servers.*]` TOML for imported servers (what `benchgen mcp import` prints).
pub fn to_toml(servers: &BTreeMap<String, ServerSpec>) -> anyhow::Result<String> {
    #[derive(Serialize)]
    struct Wrap<'a> {
        mcp: Inner<'a>,
    }
    #[derive(Serialize)]
    struct Inner<'a> {
        servers: &'a BTreeMap<String, ServerSpec>,
    }
    Ok(toml::to_string(&Wrap { mcp: Inner { servers } })?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn desktop_json_imports_stdio_and_http_and_reports_every_problem() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good.json");
        std::fs::write(
            &good,
            r#"{"mcpServers": {
                "fs": {"command": "npx", "args": ["-y", "x"], "env": {"A": "1"}},
                "web": {"type": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"X": "y"}, "timeout": 5000}
            }}"#,
        )
        .unwrap();
        let s = import_desktop_json(&good).unwrap();
        assert_eq!(s["fs"].command.as_deref(), Some("npx"));
        assert_eq!(s["fs"].args, ["-y", "x"]);
        assert_eq!(s["web"].timeout_secs, Some(5.0));
        assert!(to_toml(&s).unwrap().contains("[mcp.servers.fs]"));

        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, r#"{"mcpServers": {"a": {"args": [1]}, "b::c": {"command": "x", "url": "http://h"}}}"#)
            .unwrap();
        let err = import_desktop_json(&bad).unwrap_err();
        let e = err.downcast_ref::<InputError>().unwrap();
        let locs: Vec<_> = e.problems.iter().map(|p| p.location.as_str()).collect();
        assert!(locs.contains(&"mcpServers.a.args"), "{e}");
        assert!(locs.contains(&"mcpServers.a"), "{e}");
        assert!(locs.contains(&"mcpServers.b::c"), "{e}");
    }

    #[test]
    fn env_references_expand_and_missing_ones_name_the_variable() {
        // SAFETY: tests in this module do not read this variable concurrently.
        unsafe { std::env::set_var("BENCHGEN_TEST_TOKEN_X", "s3cret") };
        assert_eq!(expand_env("Bearer ${BENCHGEN_TEST_TOKEN_X}!").unwrap(), "Bearer s3cret!");
        let err = expand_env("${BENCHGEN_SURELY_UNSET_VAR}").unwrap_err().to_string();
        assert!(err.contains("BENCHGEN_SURELY_UNSET_VAR"), "{err}");
    }
}
