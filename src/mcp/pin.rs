//! Server pins: what identified an MCP server's tools when benchgen executed against it, so
//! a release can name the servers its samples ran against (`servers.json`) and `benchgen
//! release verify --servers` can tell, tool by tool, what changed since. `execute` and
//! `synth roleplay` record a pin as an `mcp.server` ledger event when they connect
//! ([`crate::agent::Executor::record_servers`]), so the release starts no server.
//!
//! A pin holds how the server was started (a spawned command with its arguments as
//! configured, `${VAR}` references unexpanded; a URL; or benchgen's in-process sandbox) with
//! only the *names* of its environment variables and headers, never a value (they hold
//! secrets), and with any credential written literally in an argument or the URL replaced by
//! `***` ([`Start::redact`]: a release is published, a config is not); the npm or PyPI
//! package and exact version where the start names one or the install it runs from tells it;
//! the protocol version and `serverInfo` of the handshake;
//! and hashes of its `tools/list`: one of the whole list and, per tool, one of its input
//! schema and one of its definition (name, description, input and output schema). Each
//! hash is the sha256 of canonical JSON (object keys sorted at every level), so a server
//! that only reorders keys has not changed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::client::{McpClient, ToolInfo};
use super::config::{Lifecycle, ServerSpec, ToolIds};

/// How a pinned server was started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "transport", rename_all = "kebab-case")]
pub enum Start {
    /// A spawned process on stdio: command, arguments and folder as configured, and the
    /// names of the environment variables it was given.
    Stdio {
        command: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        args: Vec<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        env: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cwd: Option<PathBuf>,
        /// A literal credential of `args` was replaced by `***`: starting it again needs the
        /// user's own value.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        redacted: bool,
    },
    /// Streamable HTTP: the URL as configured and the names of the headers sent.
    Http {
        url: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        headers: Vec<String>,
        /// A literal credential of `url` (userinfo, a query value) was replaced by `***`.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        redacted: bool,
    },
    /// benchgen's sandbox served inside the process that executed (the domain sandbox over
    /// the log catalog): there is nothing to start again.
    InProcess,
}

impl Start {
    /// A spec that starts the server again: the same command, arguments and folder, or URL.
    /// Each environment variable takes its value from the variable of that name where it
    /// is started (as `${NAME}` in a config); no header is sent. The command comes from a
    /// release, not from the user's config, so it gets no other variable of the verifier's
    /// environment but `PATH` and `HOME` ([`crate::mcp::stdio::INHERITED_ENV`]). `None` for
    /// the in-process sandbox.
    pub fn spec(&self, lifecycle: Lifecycle, tool_ids: ToolIds) -> Option<ServerSpec> {
        match self {
            Start::Stdio { command, args, env, cwd, .. } => Some(ServerSpec {
                command: Some(command.clone()),
                args: args.clone(),
                env: env.iter().map(|k| (k.clone(), format!("${{{k}}}"))).collect(),
                cwd: cwd.clone(),
                lifecycle,
                tool_ids,
                env_clear: true,
                ..Default::default()
            }),
            Start::Http { url, .. } => {
                Some(ServerSpec { url: Some(url.clone()), lifecycle, tool_ids, ..Default::default() })
            }
            Start::InProcess => None,
        }
    }

    /// Whether a literal credential was replaced by `***` in it.
    pub fn redacted(&self) -> bool {
        matches!(self, Start::Stdio { redacted: true, .. } | Start::Http { redacted: true, .. })
    }

    /// The same start with every credential written literally in its arguments or URL
    /// replaced by `***` (`redact_args`, `redact_url`), marked `redacted` when one was.
    pub fn redact(self) -> Start {
        match self {
            Start::Stdio { command, args, env, cwd, redacted } => {
                let (args, any) = redact_args(&args);
                Start::Stdio { command, args, env, cwd, redacted: redacted || any }
            }
            Start::Http { url, headers, redacted } => {
                let (url, any) = redact_url(&url);
                Start::Http { url, headers, redacted: redacted || any }
            }
            Start::InProcess => Start::InProcess,
        }
    }

    /// A stdio start's command line as a person reads it before letting it run: the command
    /// and its arguments (each holding a space, a quote or a control character quoted and
    /// escaped, so nothing is hidden), the names of the variables it gets and its folder.
    pub fn command_line(&self) -> Option<String> {
        let Start::Stdio { command, args, env, cwd, .. } = self else { return None };
        let words: Vec<String> =
            std::iter::once(command.as_str()).chain(args.iter().map(String::as_str)).map(shown).collect();
        let mut line = words.join(" ");
        if !env.is_empty() {
            line.push_str(&format!(" (env: {})", env.join(", ")));
        }
        if let Some(dir) = cwd {
            line.push_str(&format!(" (in {})", shown(&dir.display().to_string())));
        }
        Some(line)
    }
}

/// `s` as is, or quoted and escaped when it is empty or holds a space, a quote, a backslash
/// or a control character (which could rewrite the terminal line it is printed on).
pub fn shown(s: &str) -> String {
    let plain =
        !s.is_empty() && !s.chars().any(|c| c.is_whitespace() || c.is_control() || matches!(c, '"' | '\\' | '\''));
    if plain { s.to_string() } else { format!("{s:?}") }
}

/// What stands for a redacted credential.
pub const REDACTED: &str = "***";

/// Words of an option or variable name (split at `-`, `_` and `.`, lowercased) that say its
/// value is a credential.
const SECRET_WORDS: &[&str] = &[
    "token",
    "key",
    "apikey",
    "password",
    "passwd",
    "pass",
    "pwd",
    "secret",
    "credential",
    "credentials",
    "auth",
    "bearer",
    "cookie",
    // `--header "Authorization: Bearer …"` is how remote MCP bridges take their credential.
    "header",
    "headers",
];

/// Whether an option (`--api-key`) or variable (`GITHUB_TOKEN`) name holds a credential.
fn secret_name(name: &str) -> bool {
    let name = name.trim_start_matches('-');
    // `-H`: curl's and mcp-remote's short form of `--header`.
    if name == "H" {
        return true;
    }
    // camelCase (`--accessToken`, `--clientSecret`) splits into its words too.
    let mut words = String::with_capacity(name.len() + 4);
    let mut prev_lower = false;
    for c in name.chars() {
        if c.is_ascii_uppercase() && prev_lower {
            words.push('-');
        }
        prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        words.push(c);
    }
    !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && words.to_ascii_lowercase().split(['-', '_', '.']).any(|w| SECRET_WORDS.contains(&w))
}

/// A credential that says what it is: `Bearer …`, `Basic …`, or an `Authorization:` header.
fn credential_value(a: &str) -> bool {
    let lower = a.trim_start().to_ascii_lowercase();
    ["bearer ", "basic ", "authorization:"].iter().any(|p| lower.starts_with(p))
}

/// `--api-key=V` or `API_KEY=V` as its name and value, when the name holds a credential
/// (`secret-mcp==1.0`, a package and its version, is none).
fn secret_assignment(a: &str) -> Option<(&str, &str)> {
    let (name, value) = a.split_once('=')?;
    let variable = name.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    ((name.starts_with('-') || variable) && !value.starts_with('=') && secret_name(name)).then_some((name, value))
}

/// Whether `s` holds anything besides `${VAR}` references: a reference names a variable of
/// whoever starts the server, not a secret, and is kept.
fn literal(s: &str) -> bool {
    let mut rest = s;
    while let Some(after) = rest.strip_prefix("${") {
        match after.find('}') {
            Some(j) => rest = &after[j + 1..],
            None => return true,
        }
    }
    !rest.is_empty()
}

/// `***` for a literal value; a value of `${VAR}` references as is. Also whether it was
/// replaced.
fn redact_whole(v: &str) -> (String, bool) {
    if literal(v) { (REDACTED.to_string(), true) } else { (v.to_string(), false) }
}

/// Arguments with every literal credential replaced by `***`: the value after an option
/// named like a secret (`--token V`, `--api-key V`, `--key V`, `--password V`, `--secret V`),
/// the value of `--api-key=V` or `API_KEY=V`, and the userinfo and query values of a URL
/// (`postgresql://user:pw@host/db`, `https://h/mcp?api_key=V`). Also whether any was.
fn redact_args(args: &[String]) -> (Vec<String>, bool) {
    let mut out = Vec::with_capacity(args.len());
    let mut any = false;
    let mut after_secret_option = false;
    for a in args {
        let (kept, replaced) = if (after_secret_option && !a.starts_with("--")) || credential_value(a) {
            redact_whole(a)
        } else if let Some((name, value)) = secret_assignment(a) {
            let (value, replaced) = redact_whole(value);
            (format!("{name}={value}"), replaced)
        } else {
            redact_url(a)
        };
        after_secret_option = a.starts_with('-') && !a.contains('=') && secret_name(a);
        any |= replaced;
        out.push(kept);
    }
    (out, any)
}

/// `s` with the URL it holds (from its `scheme://` on) cleared of literal credentials: the
/// userinfo (`scheme://user:pw@host` → `scheme://***@host`) and the value of every query
/// parameter (`?api_key=V&region=eu` → `?api_key=***&region=***`: which parameters are
/// secrets is the server's business, so none is kept). `s` as is when it holds no URL. Also
/// whether anything was replaced.
fn redact_url(s: &str) -> (String, bool) {
    let Some(i) = s.find("://") else { return (s.to_string(), false) };
    let (head, rest) = s.split_at(i + 3);
    let (authority, tail) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
    let mut any = false;
    let mut out = head.to_string();
    match authority.rsplit_once('@') {
        Some((userinfo, host)) if userinfo.split(':').any(literal) => {
            any = true;
            out.push_str(&format!("{REDACTED}@{host}"));
        }
        _ => out.push_str(authority),
    }
    let (before_fragment, fragment) = tail.split_at(tail.find('#').unwrap_or(tail.len()));
    match before_fragment.split_once('?') {
        Some((path, query)) => {
            let params: Vec<String> = query
                .split('&')
                .map(|p| match p.split_once('=') {
                    Some((k, v)) if literal(v) => {
                        any = true;
                        format!("{k}={REDACTED}")
                    }
                    _ => p.to_string(),
                })
                .collect();
            out.push_str(&format!("{path}?{}", params.join("&")));
        }
        None => out.push_str(before_fragment),
    }
    out.push_str(fragment);
    (out, any)
}

/// The npm or PyPI package a server runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Package {
    /// `npm` or `pypi`.
    pub manager: String,
    pub name: String,
    /// The exact version; absent when the start asks for a range, a tag or the newest one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// The `serverInfo` a server sent in its handshake.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Implementation {
    pub name: String,
    pub version: String,
}

/// The hashes of one tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolHash {
    /// sha256 of the canonical input schema.
    pub input_schema: String,
    /// sha256 of the canonical definition (name, description, input and output schema);
    /// absent where only the schema is known (a registry snapshot's tool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition: Option<String>,
}

/// One server as benchgen met it: the payload of an `mcp.server` ledger event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerPin {
    pub name: String,
    pub start: Start,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package: Option<Package>,
    #[serde(default)]
    pub lifecycle: Lifecycle,
    #[serde(default)]
    pub tool_ids: ToolIds,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_info: Option<Implementation>,
    /// sha256 of the canonical `tools/list`: every tool's definition, sorted by name.
    pub tools_sha256: String,
    /// Per tool, by the name the server lists it under.
    pub tools: BTreeMap<String, ToolHash>,
}

impl ServerPin {
    /// The pin of a connected client whose tools were just listed.
    pub async fn of(client: &McpClient, tools: &[ToolInfo]) -> Self {
        let spec = client.spec();
        let (protocol_version, server_info) = match client.handshake().await {
            Some((p, info)) => (Some(p), info.map(|(name, version)| Implementation { name, version })),
            None => (None, None),
        };
        let (tools_sha256, hashes) = tool_hashes(tools);
        ServerPin {
            name: client.name().to_string(),
            start: start_of(spec),
            package: package_of(spec, client.root()),
            lifecycle: spec.lifecycle,
            tool_ids: spec.tool_ids,
            protocol_version,
            server_info,
            tools_sha256,
            tools: hashes,
        }
    }

    /// The ids samples name this server's tools by (`server::tool`, or the name as is).
    pub fn tool_ids(&self) -> impl Iterator<Item = String> {
        self.tools.keys().map(|t| match self.tool_ids {
            ToolIds::Qualified => crate::model::tool_id(&self.name, t),
            ToolIds::AsIs => t.clone(),
        })
    }
}

/// How a spec starts its server, without a value of its environment or headers, and with
/// the credentials written literally in its arguments or URL redacted.
fn start_of(spec: &ServerSpec) -> Start {
    let start = match (&spec.command, &spec.url) {
        (Some(command), _) => Start::Stdio {
            command: command.clone(),
            args: spec.args.clone(),
            env: spec.env.keys().cloned().collect(),
            cwd: spec.cwd.clone(),
            redacted: false,
        },
        (None, Some(url)) => {
            Start::Http { url: url.clone(), headers: spec.headers.keys().cloned().collect(), redacted: false }
        }
        (None, None) => Start::InProcess,
    };
    start.redact()
}

/// The hash of a `tools/list` and the hashes of each of its tools, by name.
pub fn tool_hashes(tools: &[ToolInfo]) -> (String, BTreeMap<String, ToolHash>) {
    let mut defs: BTreeMap<String, Value> = BTreeMap::new();
    let mut hashes = BTreeMap::new();
    for t in tools {
        let def = canonical(&json!({
            "name": t.name, "description": t.description,
            "input_schema": t.input_schema, "output_schema": t.output_schema,
        }));
        let hash = ToolHash { input_schema: schema_hash(&t.input_schema), definition: Some(sha256_json(&def)) };
        hashes.insert(t.name.clone(), hash);
        defs.insert(t.name.clone(), def);
    }
    (sha256_json(&Value::Array(defs.into_values().collect())), hashes)
}

/// sha256 of a canonical input schema.
pub fn schema_hash(schema: &Value) -> String {
    sha256_json(&canonical(schema))
}

fn sha256_json(v: &Value) -> String {
    crate::store::sha256_hex(v.to_string().as_bytes())
}

/// Object keys sorted at every level, as `sandbox::generate::canonical` (which `mcp` cannot
/// import: the sandbox imports `mcp`).
fn canonical(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            Value::Object(keys.into_iter().map(|k| (k.clone(), canonical(&m[k]))).collect::<Map<_, _>>())
        }
        Value::Array(a) => Value::Array(a.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// How one tool differs from its pin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolChange {
    pub tool: String,
    /// `added`, `removed`, `input schema changed`, or `description or output schema
    /// changed` (the input schema is the same).
    pub change: &'static str,
}

/// Every tool added, removed or changed between a pinned listing and a live one, sorted
/// by tool name. A pinned tool with no definition hash (a registry snapshot's) is compared
/// by its input schema only.
pub fn diff(pinned: &BTreeMap<String, ToolHash>, live: &BTreeMap<String, ToolHash>) -> Vec<ToolChange> {
    let mut out = Vec::new();
    for (name, was) in pinned {
        let change = match live.get(name) {
            None => "removed",
            Some(now) if now.input_schema != was.input_schema => "input schema changed",
            Some(now) if was.definition.is_some() && now.definition != was.definition => {
                "description or output schema changed"
            }
            Some(_) => continue,
        };
        out.push(ToolChange { tool: name.clone(), change });
    }
    let added = live.keys().filter(|n| !pinned.contains_key(*n));
    out.extend(added.map(|n| ToolChange { tool: n.clone(), change: "added" }));
    out.sort_by(|a, b| a.tool.cmp(&b.tool));
    out
}

/// The npm or PyPI package a spec runs, where its command names one (`npx -y pkg@1.2.3`,
/// `uvx pkg==1.2.3`, `uvx --from pkg==1.2.3 cmd`) or runs from an install that tells it
/// (`node …/node_modules/pkg/…`: its `package.json`; a script of a Python virtual
/// environment, found on `PATH` when the command is a bare name: the distribution that
/// declares it as a console script).
pub fn package_of(spec: &ServerSpec, root: &Path) -> Option<Package> {
    let command = spec.command.as_deref()?;
    let cwd = match &spec.cwd {
        Some(c) if c.is_absolute() => c.clone(),
        Some(c) => root.join(c),
        None => root.to_path_buf(),
    };
    match Path::new(command).file_name()?.to_str()? {
        "npx" | "npx.cmd" => named(&spec.args, "npm"),
        "uvx" | "uvx.exe" => named(&spec.args, "pypi"),
        "node" | "node.exe" => {
            let script = spec.args.iter().find(|a| !a.starts_with('-'))?;
            npm_install(&cwd.join(script))
        }
        _ => venv_install(&which(command, &cwd)?),
    }
}

/// The package `npx` or `uvx` runs: the value of `--package`/`-p` (npx) or `--from` (uvx),
/// else the first argument that is not an option (skipping the value of uvx's options that
/// take one).
fn named(args: &[String], manager: &str) -> Option<Package> {
    let (package_flags, valued): (&[&str], &[&str]) = if manager == "npm" {
        (&["--package", "-p"][..], &["--call", "-c"][..])
    } else {
        (&["--from"][..], &["--python", "-p", "--with", "--index-url", "--extra-index-url"][..])
    };
    let mut it = args.iter().map(String::as_str);
    while let Some(a) = it.next() {
        if let Some((flag, value)) = a.split_once('=')
            && package_flags.contains(&flag)
        {
            return split_spec(value, manager);
        }
        if package_flags.contains(&a) {
            return split_spec(it.next()?, manager);
        }
        if valued.contains(&a) {
            it.next();
        } else if !a.starts_with('-') {
            return split_spec(a, manager);
        }
    }
    None
}

/// `name@1.2.3`, `@scope/name@1.2.3` or `name==1.2.3` as a package; a range, a tag or no
/// version leaves the version out.
fn split_spec(spec: &str, manager: &str) -> Option<Package> {
    // A scoped npm name starts with `@`: its version follows the second one.
    let at = spec.get(1..).and_then(|rest| rest.find('@')).map(|i| i + 1);
    let (name, version) = match (spec.split_once("=="), at) {
        (Some((n, v)), _) => (n, Some(v)),
        (None, Some(i)) => (&spec[..i], Some(&spec[i + 1..])),
        (None, None) => (spec, None),
    };
    // PyPI extras (`pkg[cli]`) are not part of the name.
    let name = name.split('[').next().unwrap_or(name).trim();
    if name.is_empty() {
        return None;
    }
    let version = version.filter(|v| is_exact(v, manager)).map(str::to_string);
    Some(Package { manager: manager.to_string(), name: name.to_string(), version })
}

/// `1.2.3`, `2026.8.31`, `1.0.0-rc.1` (npm needs all three parts: `1.2` is a range there);
/// not `^1`, `>=2`, `1.x` or `latest`.
fn is_exact(v: &str, manager: &str) -> bool {
    let core = v.split(['-', '+']).next().unwrap_or("");
    let parts: Vec<&str> = core.split('.').collect();
    parts.iter().all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
        && v.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+'))
        && (manager != "npm" || parts.len() >= 3)
}

/// The npm package installed around `script`: the `package.json` of the folder right under
/// `node_modules` (or under its `@scope`) that holds it.
fn npm_install(script: &Path) -> Option<Package> {
    let in_modules = |p: &Path| p.file_name().is_some_and(|n| n == "node_modules");
    for dir in script.ancestors() {
        let parent = dir.parent()?;
        let scoped = parent.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with('@'));
        if in_modules(parent) || (scoped && parent.parent().is_some_and(in_modules)) {
            let v: Value = serde_json::from_slice(&std::fs::read(dir.join("package.json")).ok()?).ok()?;
            return Some(Package {
                manager: "npm".into(),
                name: v["name"].as_str()?.to_string(),
                version: v["version"].as_str().map(str::to_string),
            });
        }
    }
    None
}

/// The command as a file: a path (relative to `cwd`), or a bare name found on `PATH`.
fn which(command: &str, cwd: &Path) -> Option<PathBuf> {
    if command.contains('/') {
        let p = cwd.join(command);
        return p.is_file().then_some(p);
    }
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(command)).find(|p| p.is_file())
}

/// The PyPI distribution of a virtual environment (`<venv>/bin/<script>` beside
/// `pyvenv.cfg`) that declares `script` as a console script: its `Name` and `Version`.
fn venv_install(script: &Path) -> Option<Package> {
    let name = script.file_name()?.to_str()?;
    let venv = script.parent()?.parent()?;
    if !venv.join("pyvenv.cfg").is_file() {
        return None;
    }
    let mut dists: Vec<PathBuf> = Vec::new();
    for lib in std::fs::read_dir(venv.join("lib")).ok()?.flatten() {
        let Ok(rd) = std::fs::read_dir(lib.path().join("site-packages")) else { continue };
        dists.extend(rd.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "dist-info")));
    }
    // Sorted, so the same install always gives the same answer.
    dists.sort();
    let dist = dists
        .into_iter()
        .find(|d| std::fs::read_to_string(d.join("entry_points.txt")).is_ok_and(|eps| console_script(&eps, name)))?;
    let meta = std::fs::read_to_string(dist.join("METADATA")).ok()?;
    let field = |k: &str| meta.lines().find_map(|l| l.strip_prefix(k)).map(|v| v.trim().to_string());
    Some(Package { manager: "pypi".into(), name: field("Name:")?, version: field("Version:") })
}

/// Whether an `entry_points.txt` declares `name` as a console script.
fn console_script(entry_points: &str, name: &str) -> bool {
    let mut section = "";
    for l in entry_points.lines().map(str::trim) {
        if l.starts_with('[') {
            section = l;
        } else if section == "[console_scripts]" && l.split('=').next().is_some_and(|k| k.trim() == name) {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(command: &str, args: &[&str]) -> ServerSpec {
        ServerSpec {
            command: Some(command.into()),
            args: args.iter().map(|a| a.to_string()).collect(),
            ..Default::default()
        }
    }

    fn pkg(manager: &str, name: &str, version: Option<&str>) -> Option<Package> {
        Some(Package { manager: manager.into(), name: name.into(), version: version.map(str::to_string) })
    }

    #[test]
    fn npx_and_uvx_starts_name_their_package_and_only_an_exact_version() {
        let root = Path::new("/nowhere");
        let cases = [
            (
                spec("npx", &["-y", "@modelcontextprotocol/server-everything@2026.8.31"]),
                "npm",
                "@modelcontextprotocol/server-everything",
                Some("2026.8.31"),
            ),
            (spec("npx", &["-y", "server-memory@^1.2.0"]), "npm", "server-memory", None),
            (spec("npx", &["--package=srv@1.2", "srv"]), "npm", "srv", None),
            (spec("/usr/bin/npx", &["-p", "srv@1.2.3", "srv"]), "npm", "srv", Some("1.2.3")),
            (
                spec("uvx", &["mcp-server-time==2026.10.19", "--local-timezone", "UTC"]),
                "pypi",
                "mcp-server-time",
                Some("2026.10.19"),
            ),
            (
                spec("uvx", &["--python", "3.12", "--from", "mcp-server-git[cli]==1.0", "mcp-server-git"]),
                "pypi",
                "mcp-server-git",
                Some("1.0"),
            ),
            (spec("uvx", &["mcp-server-fetch@latest"]), "pypi", "mcp-server-fetch", None),
        ];
        for (s, manager, name, version) in cases {
            assert_eq!(package_of(&s, root), pkg(manager, name, version), "{:?}", s.args);
        }
        assert_eq!(package_of(&ServerSpec { url: Some("http://h/mcp".into()), ..Default::default() }, root), None);
    }

    #[test]
    fn an_install_on_disk_tells_its_package_and_version() {
        let dir = tempfile::tempdir().unwrap();
        let pkg_dir = dir.path().join("npm/node_modules/@scope/srv");
        std::fs::create_dir_all(pkg_dir.join("dist")).unwrap();
        std::fs::write(pkg_dir.join("package.json"), r#"{"name": "@scope/srv", "version": "2026.8.31"}"#).unwrap();
        let s = spec("node", &["npm/node_modules/@scope/srv/dist/index.js"]);
        assert_eq!(package_of(&s, dir.path()), pkg("npm", "@scope/srv", Some("2026.8.31")));

        let venv = dir.path().join("venv");
        let dist = venv.join("lib/python3.12/site-packages/mcp_server_time-2026.10.19.dist-info");
        std::fs::create_dir_all(&dist).unwrap();
        std::fs::create_dir_all(venv.join("bin")).unwrap();
        std::fs::write(venv.join("pyvenv.cfg"), "home = /usr/bin\n").unwrap();
        std::fs::write(venv.join("bin/mcp-server-time"), "#!/bin/sh\n").unwrap();
        std::fs::write(dist.join("entry_points.txt"), "[console_scripts]\nmcp-server-time = mcp_server_time:main\n")
            .unwrap();
        std::fs::write(dist.join("METADATA"), "Metadata-Version: 2.1\nName: mcp-server-time\nVersion: 2026.10.19\n")
            .unwrap();
        let s = spec("venv/bin/mcp-server-time", &["--local-timezone", "UTC"]);
        assert_eq!(package_of(&s, dir.path()), pkg("pypi", "mcp-server-time", Some("2026.10.19")));
        assert_eq!(package_of(&spec("venv/bin/other", &[]), dir.path()), None);
    }

    fn tool(name: &str, schema: Value, description: &str) -> ToolInfo {
        ToolInfo { name: name.into(), description: description.into(), input_schema: schema, output_schema: None }
    }

    #[test]
    fn the_diff_names_every_added_removed_and_changed_tool_and_ignores_key_order() {
        let a = json!({"type": "object", "properties": {"x": {"type": "string"}, "y": {"type": "integer"}}});
        let reordered = json!({"properties": {"y": {"type": "integer"}, "x": {"type": "string"}}, "type": "object"});
        let (all, pinned) = tool_hashes(&[
            tool("keep", a.clone(), "k"),
            tool("gone", a.clone(), "g"),
            tool("edit", a.clone(), "e"),
            tool("doc", a.clone(), "d"),
        ]);
        let (same, live) = tool_hashes(&[
            tool("doc", a.clone(), "d"),
            tool("edit", a.clone(), "e"),
            tool("gone", a.clone(), "g"),
            tool("keep", reordered.clone(), "k"),
        ]);
        assert_eq!(all, same, "listing order and key order do not count");
        assert!(diff(&pinned, &live).is_empty());

        let (_, live) = tool_hashes(&[
            tool("keep", reordered, "k"),
            tool("edit", json!({"type": "object", "required": ["x"]}), "e"),
            tool("doc", a.clone(), "now says more"),
            tool("new", a, "n"),
        ]);
        let found = diff(&pinned, &live);
        let changes: Vec<(&str, &str)> = found.iter().map(|c| (c.tool.as_str(), c.change)).collect();
        assert_eq!(
            changes,
            [
                ("doc", "description or output schema changed"),
                ("edit", "input schema changed"),
                ("gone", "removed"),
                ("new", "added")
            ]
        );
        // A registry snapshot's tool (no definition hash) is compared by its schema only.
        let snapshot: BTreeMap<String, ToolHash> = pinned
            .iter()
            .map(|(k, h)| (k.clone(), ToolHash { input_schema: h.input_schema.clone(), definition: None }))
            .collect();
        let found = diff(&snapshot, &live);
        let changes: Vec<&str> = found.iter().map(|c| c.tool.as_str()).collect();
        assert_eq!(changes, ["edit", "gone", "new"]);
    }

    #[test]
    fn a_start_keeps_env_and_header_names_never_their_values() {
        let mut s = spec("srv", &["--token", "${TOKEN}"]);
        s.env.insert("API_KEY".into(), "s3cret".into());
        let start = start_of(&s);
        let text = serde_json::to_string(&start).unwrap();
        assert!(!text.contains("s3cret"), "{text}");
        assert_eq!(
            serde_json::to_value(&start).unwrap(),
            json!({"transport": "stdio", "command": "srv", "args": ["--token", "${TOKEN}"], "env": ["API_KEY"]})
        );
        let again = start.spec(Lifecycle::Initialize, ToolIds::AsIs).unwrap();
        assert_eq!(again.env["API_KEY"], "${API_KEY}", "started again, the value comes from the environment");
        let mut h = ServerSpec { url: Some("http://h/mcp".into()), ..Default::default() };
        h.headers.insert("Authorization".into(), "Bearer s3cret".into());
        let text = serde_json::to_string(&start_of(&h)).unwrap();
        assert_eq!(text, r#"{"transport":"http","url":"http://h/mcp","headers":["Authorization"]}"#);
        assert_eq!(serde_json::to_value(start_of(&ServerSpec::default())).unwrap(), json!({"transport": "in-process"}));
        assert_eq!(Start::InProcess.spec(Lifecycle::Initialize, ToolIds::AsIs), None);
    }

    #[test]
    fn literal_credentials_in_arguments_and_urls_are_redacted_and_marked() {
        let redacts = |args: &[&str], want: &[&str]| {
            let Start::Stdio { args: got, redacted, .. } = start_of(&spec("srv", args)) else { panic!("{args:?}") };
            assert_eq!(got, want, "{args:?}");
            assert!(redacted, "{args:?} is marked redacted");
        };
        redacts(&["postgresql://user:pw@db.local:5432/app"], &["postgresql://***@db.local:5432/app"]);
        redacts(&["--dsn=mysql://root@h/db", "-v"], &["--dsn=mysql://***@h/db", "-v"]);
        redacts(&["https://h/mcp?api_key=abc&region=eu#top"], &["https://h/mcp?api_key=***&region=***#top"]);
        redacts(&["--token", "ghp_1", "--verbose"], &["--token", "***", "--verbose"]);
        redacts(
            &["--api-key", "sk-1", "--key", "k", "--password", "p"],
            &["--api-key", "***", "--key", "***", "--password", "***"],
        );
        redacts(&["--secret", "s", "--x-token=t"], &["--secret", "***", "--x-token=***"]);
        redacts(&["--api-key=sk-1"], &["--api-key=***"]);
        redacts(&["-e", "GITHUB_TOKEN=ghp_1"], &["-e", "GITHUB_TOKEN=***"]);
        // How remote MCP bridges take their credential, and camelCase option names.
        redacts(
            &["mcp-remote", "https://h/mcp", "--header", "Authorization: Bearer sk-1"],
            &["mcp-remote", "https://h/mcp", "--header", "***"],
        );
        redacts(&["-H", "X-Api: v", "Bearer sk-2"], &["-H", "***", "***"]);
        redacts(&["--accessToken", "a", "--clientSecret", "c"], &["--accessToken", "***", "--clientSecret", "***"]);

        // `${VAR}` references name a variable, not a secret; a package and its version and
        // other arguments are kept.
        let kept = [
            "--token",
            "${TOKEN}",
            "--api-key=${KEY}",
            "postgresql://${DB_USER}:${DB_PW}@h/db?sslmode=${MODE}",
            "secret-mcp==1.0.0",
            "--local-timezone",
            "UTC",
        ];
        let start = start_of(&spec("srv", &kept));
        assert!(!start.redacted(), "{start:?}");
        assert_eq!(start.spec(Lifecycle::Initialize, ToolIds::AsIs).unwrap().args, kept);

        let h = ServerSpec { url: Some("https://me:pw@h/mcp?api_key=abc&v=${V}".into()), ..Default::default() };
        assert_eq!(
            serde_json::to_value(start_of(&h)).unwrap(),
            json!({"transport": "http", "url": "https://***@h/mcp?api_key=***&v=${V}", "redacted": true})
        );
        let plain = ServerSpec { url: Some("http://127.0.0.1:3001/mcp".into()), ..Default::default() };
        assert!(!start_of(&plain).redacted());
    }

    #[test]
    fn a_command_line_shows_every_argument_as_it_will_run() {
        let mut s = spec("uvx", &["mcp-server-time==1.0", "a b", "x\u{1b}[2Ky", ""]);
        s.env.insert("TZ".into(), "UTC".into());
        s.cwd = Some("srv".into());
        let line = start_of(&s).command_line().unwrap();
        assert_eq!(line, r#"uvx mcp-server-time==1.0 "a b" "x\u{1b}[2Ky" "" (env: TZ) (in srv)"#);
        assert_eq!(Start::InProcess.command_line(), None);
    }
}
