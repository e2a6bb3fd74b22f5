//! `registry import --format glama|official|smithery`: a scraped snapshot folder into
//! catalog servers, keeping source ids, URLs, licence, repository, packages, remotes and
//! source categories, and every field we do not model in `registry.extra`.
//!
//! The snapshot is read through `state.json` (which pages and details exist, in order),
//! so an unfinished snapshot is refused rather than silently imported in part.
//! A server listed twice (on two pages) is kept once; names that collide between
//! different servers get the source id appended; both are noted.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Result, bail};
use serde_json::{Map, Value};

use super::pages::{self, Loc, PageError, SourceKind};
use super::scrape::State;
use super::{Imported, Note, Origin};
use crate::error::json_type_name;
use crate::model::{Package, RegistryInfo, Remote, Server, SourceRef, Tool, tool_id};

/// Read a snapshot through `read(relative path)`. `label` names the snapshot in errors.
pub fn import(kind: SourceKind, label: &str, read: &dyn Fn(&str) -> Result<Vec<u8>>) -> Result<Imported> {
    let state: State = serde_json::from_slice(&read("state.json")?)
        .map_err(|e| anyhow::anyhow!("`{label}/state.json` is not a scrape state file: {e}"))?;
    if state.kind != kind {
        bail!(crate::error::hinted(
            format!("`{label}` is a {} snapshot, not {}", state.kind.as_str(), kind.as_str()),
            format!("use `--format {}`", state.kind.as_str()),
        ));
    }
    if !state.complete {
        bail!(crate::error::hinted(
            format!("snapshot `{label}` is unfinished ({} pages so far)", state.pages.len()),
            format!("finish it with `benchgen registry scrape --source {}`", state.source),
        ));
    }
    let source = state.source.as_str();
    let mut out = Imported::default();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut records: Vec<(String, String, Map<String, Value>)> = Vec::new();
    for p in &state.pages {
        let bytes = read(&p.file)?;
        if crate::store::sha256_hex(&bytes) != p.sha256 {
            bail!("`{label}/{}` does not match its hash in state.json (edited after the scrape?)", p.file);
        }
        let page = pages::parse_page(kind, source, p.page, &bytes)?;
        for (i, it) in page.items.into_iter().enumerate() {
            let location = format!("{}: servers[{i}]", p.file);
            if !seen.insert(it.id.clone()) {
                out.notes.push(Note {
                    location,
                    kind: "duplicate",
                    message: format!("server `{}` was listed again; the first listing is kept", it.id),
                });
                continue;
            }
            records.push((location, it.id, it.value));
        }
    }
    let fetched_at = state.finished_at.clone().unwrap_or_else(|| state.started_at.clone());
    let mut servers = Vec::with_capacity(records.len());
    for (location, id, item) in records {
        let detail = match (kind, state.details.get(&id)) {
            (SourceKind::Smithery, Some(d)) => {
                let b = read(&d.file)?;
                Some(pages::parse_detail(source, &id, &b)?)
            }
            _ => None,
        };
        let has_tool_list = kind == SourceKind::Glama || detail.is_some();
        let loc = Loc { source, page: location.clone() };
        let mut s = match kind {
            SourceKind::Glama => glama(&item, &loc)?,
            SourceKind::Official => official(&item, &loc)?,
            SourceKind::Smithery => smithery(&item, detail.as_ref(), &loc)?,
        };
        let info = s.registry.get_or_insert_with(Default::default);
        info.sources.insert(
            source.to_string(),
            SourceRef {
                id: id.clone(),
                url: s.url.clone(),
                snapshot: state.snapshot.clone(),
                fetched_at: fetched_at.clone(),
            },
        );
        if has_tool_list {
            info.tools_from = Some(format!("{source} snapshot {}", state.snapshot));
        }
        out.origins.push(Origin { id: s.name.clone(), is_server: true, location, original_name: Some(id) });
        servers.push(s);
    }
    // Names are tool-id prefixes: two different servers must not share one.
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for s in &servers {
        *count.entry(s.name.clone()).or_default() += 1;
    }
    for s in &mut servers {
        if count[&s.name] > 1 {
            let id = s.registry.as_ref().and_then(|r| r.sources.get(source)).map(|r| r.id.clone()).unwrap_or_default();
            let new = format!("{} ({id})", s.name);
            out.notes.push(Note {
                location: format!("server `{id}`"),
                kind: "renamed",
                message: format!("name `{}` is shared by several servers; this one is `{new}`", s.name),
            });
            s.name = new;
        }
        let name = s.name.clone();
        for t in &mut s.tools {
            t.id = tool_id(&name, &t.name);
        }
    }
    out.catalog.servers = servers;
    out.catalog.sort();
    Ok(out)
}

/// Import a snapshot folder from disk.
pub fn import_dir(kind: SourceKind, dir: &std::path::Path) -> Result<Imported> {
    let label = dir.display().to_string();
    import(kind, &label, &|rel| {
        std::fs::read(dir.join(rel)).map_err(|e| anyhow::anyhow!("cannot read `{}/{rel}`: {e}", dir.display()))
    })
}

fn s_of(m: &Map<String, Value>, key: &str, loc: &Loc, field: &str) -> Result<String, PageError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.trim().to_string()),
        Some(v) => Err(loc.err(format!("{field}.{key}"), format!("expected a string, found {}", json_type_name(v)))),
    }
}

fn o_of<'a>(
    m: &'a Map<String, Value>,
    key: &str,
    loc: &Loc,
    field: &str,
) -> Result<Option<&'a Map<String, Value>>, PageError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(o)) => Ok(Some(o)),
        Some(v) => Err(loc.err(format!("{field}.{key}"), format!("expected an object, found {}", json_type_name(v)))),
    }
}

fn a_of<'a>(m: &'a Map<String, Value>, key: &str, loc: &Loc, field: &str) -> Result<&'a [Value], PageError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(v) => Err(loc.err(format!("{field}.{key}"), format!("expected an array, found {}", json_type_name(v)))),
    }
}

fn tools(list: &[Value], loc: &Loc, field: &str) -> Result<Vec<Tool>, PageError> {
    let mut out: Vec<Tool> = Vec::new();
    let mut names = BTreeSet::new();
    for (i, t) in list.iter().enumerate() {
        let f = format!("{field}[{i}]");
        let m = t.as_object().ok_or_else(|| loc.err(&f, format!("expected an object, found {}", json_type_name(t))))?;
        let name = s_of(m, "name", loc, &f)?;
        if name.is_empty() {
            return Err(loc.err(format!("{f}.name"), "missing or empty"));
        }
        let schema = match m.get("inputSchema").or_else(|| m.get("input_schema")) {
            None | Some(Value::Null) => serde_json::json!({"type": "object"}),
            Some(Value::Object(o)) => Value::Object(o.clone()),
            Some(v) => {
                return Err(
                    loc.err(format!("{f}.inputSchema"), format!("expected an object, found {}", json_type_name(v)))
                );
            }
        };
        let output_schema = match m.get("outputSchema") {
            Some(Value::Object(o)) => Some(Value::Object(o.clone())),
            _ => None,
        };
        if !names.insert(name.clone()) {
            continue; // a tool listed twice by one server: the first listing stands
        }
        out.push(Tool {
            id: String::new(),
            description: s_of(m, "description", loc, &f)?,
            name,
            input_schema: schema,
            output_schema,
        });
    }
    Ok(out)
}

fn extra(info: &mut RegistryInfo, source: &str, m: &Map<String, Value>, known: &[&str]) {
    for (k, v) in m {
        if !known.contains(&k.as_str()) && !v.is_null() {
            info.extra.insert(format!("{source}.{k}"), v.clone());
        }
    }
}

fn server(
    name: String,
    description: String,
    url: String,
    license: Option<String>,
    tools: Vec<Tool>,
    info: RegistryInfo,
) -> Server {
    Server {
        name,
        description,
        summary: String::new(),
        url,
        categories: vec![],
        license,
        tools,
        registry: Some(Box::new(info)),
    }
}

fn glama(m: &Map<String, Value>, loc: &Loc) -> Result<Server, PageError> {
    let f = "";
    let id = s_of(m, "id", loc, f)?;
    let mut name = s_of(m, "name", loc, f)?;
    if name.is_empty() {
        name = id.clone();
    }
    let mut info = RegistryInfo::default();
    if let Some(r) = o_of(m, "repository", loc, f)? {
        let u = s_of(r, "url", loc, "repository")?;
        if !u.is_empty() {
            info.repository = Some(u);
        }
    }
    let license = match o_of(m, "spdxLicense", loc, f)? {
        Some(l) => Some(s_of(l, "name", loc, "spdxLicense")?).filter(|s| !s.is_empty()),
        None => None,
    };
    for (i, a) in a_of(m, "attributes", loc, f)?.iter().enumerate() {
        match a {
            Value::String(s) => info.source_categories.push(s.trim().to_string()),
            v => {
                return Err(
                    loc.err(format!("attributes[{i}]"), format!("expected a string, found {}", json_type_name(v)))
                );
            }
        }
    }
    let tools = tools(a_of(m, "tools", loc, f)?, loc, "tools")?;
    extra(
        &mut info,
        "glama",
        m,
        &["id", "name", "description", "url", "repository", "spdxLicense", "attributes", "tools"],
    );
    if let Some(l) = o_of(m, "spdxLicense", loc, f)?
        && let Some(u) = l.get("url").filter(|u| !u.is_null())
    {
        info.extra.insert("glama.spdxLicense.url".into(), u.clone());
    }
    Ok(server(name, s_of(m, "description", loc, f)?, s_of(m, "url", loc, f)?, license, tools, info))
}

fn official(m: &Map<String, Value>, loc: &Loc) -> Result<Server, PageError> {
    let sm = o_of(m, "server", loc, "")?.ok_or_else(|| loc.err("server", "missing"))?;
    let f = "server";
    let name = s_of(sm, "name", loc, f)?;
    let mut info = RegistryInfo::default();
    if let Some(r) = o_of(sm, "repository", loc, f)? {
        let u = s_of(r, "url", loc, "server.repository")?;
        if !u.is_empty() {
            info.repository = Some(u);
        }
        for (k, v) in r {
            if k != "url" {
                info.extra.insert(format!("official.repository.{k}"), v.clone());
            }
        }
    }
    for (i, p) in a_of(sm, "packages", loc, f)?.iter().enumerate() {
        let pf = format!("server.packages[{i}]");
        let pm =
            p.as_object().ok_or_else(|| loc.err(&pf, format!("expected an object, found {}", json_type_name(p))))?;
        let transport = match o_of(pm, "transport", loc, &pf)? {
            Some(t) => Some(s_of(t, "type", loc, &format!("{pf}.transport"))?).filter(|s| !s.is_empty()),
            None => None,
        };
        let registry_type = s_of(pm, "registryType", loc, &pf)?;
        let identifier = s_of(pm, "identifier", loc, &pf)?;
        if identifier.is_empty() {
            return Err(loc.err(format!("{pf}.identifier"), "missing or empty"));
        }
        info.packages.push(Package {
            registry_type,
            identifier,
            version: Some(s_of(pm, "version", loc, &pf)?).filter(|s| !s.is_empty()),
            transport,
        });
        let known = ["registryType", "identifier", "version", "transport"];
        for (k, v) in pm {
            if !known.contains(&k.as_str()) {
                info.extra.insert(format!("official.packages[{i}].{k}"), v.clone());
            }
        }
    }
    for (i, r) in a_of(sm, "remotes", loc, f)?.iter().enumerate() {
        let rf = format!("server.remotes[{i}]");
        let rm =
            r.as_object().ok_or_else(|| loc.err(&rf, format!("expected an object, found {}", json_type_name(r))))?;
        info.remotes.push(Remote { transport: s_of(rm, "type", loc, &rf)?, url: s_of(rm, "url", loc, &rf)? });
    }
    extra(&mut info, "official", sm, &["name", "description", "repository", "packages", "remotes", "websiteUrl"]);
    if let Some(meta) = m.get("_meta") {
        info.extra.insert("official._meta".into(), meta.clone());
    }
    let url = match s_of(sm, "websiteUrl", loc, f)? {
        u if !u.is_empty() => u,
        _ => info.repository.clone().unwrap_or_default(),
    };
    Ok(server(name, s_of(sm, "description", loc, f)?, url, None, vec![], info))
}

fn smithery(m: &Map<String, Value>, detail: Option<&Map<String, Value>>, loc: &Loc) -> Result<Server, PageError> {
    let f = "";
    let qn = s_of(m, "qualifiedName", loc, f)?;
    let mut name = s_of(m, "displayName", loc, f)?;
    if name.is_empty() {
        name = qn.clone();
    }
    let mut info = RegistryInfo::default();
    let homepage = s_of(m, "homepage", loc, f)?;
    let url = if homepage.is_empty() { format!("https://smithery.ai/server/{qn}") } else { homepage };
    extra(&mut info, "smithery", m, &["qualifiedName", "displayName", "description", "homepage"]);
    let mut tool_list = vec![];
    if let Some(d) = detail {
        let dloc = Loc { source: loc.source, page: format!("detail of `{qn}`") };
        tool_list = tools(a_of(d, "tools", &dloc, "")?, &dloc, "tools")?;
        if let Some(u) = d.get("deploymentUrl").and_then(Value::as_str).filter(|u| !u.is_empty()) {
            info.remotes.push(Remote { transport: "streamable-http".into(), url: u.to_string() });
        }
        for (i, c) in a_of(d, "connections", &dloc, "")?.iter().enumerate() {
            if let Some(cm) = c.as_object()
                && cm.get("type").and_then(Value::as_str) == Some("http")
                && let Some(u) = cm.get("url").and_then(Value::as_str)
                && !info.remotes.iter().any(|r| r.url == u)
            {
                info.remotes.push(Remote { transport: "streamable-http".into(), url: u.to_string() });
            } else if !c.is_object() {
                return Err(
                    dloc.err(format!("connections[{i}]"), format!("expected an object, found {}", json_type_name(c)))
                );
            }
        }
        for (k, v) in d {
            let known = ["qualifiedName", "displayName", "description", "tools", "deploymentUrl", "homepage"];
            if !known.contains(&k.as_str()) && !m.contains_key(k) && !v.is_null() {
                info.extra.insert(format!("smithery.detail.{k}"), v.clone());
            }
        }
    }
    let description = match s_of(m, "description", loc, f)? {
        d if !d.is_empty() => d,
        _ => detail
            .map(|d| d.get("description").and_then(Value::as_str).unwrap_or("").trim().to_string())
            .unwrap_or_default(),
    };
    Ok(server(name, description, url, None, tool_list, info))
}
