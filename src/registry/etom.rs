//! ETOM's `mcp_registry.json` snapshot format:
//! `{"total_servers": N, "total_tools": M, "servers": [{server_name,
//! server_description, server_summary, server_url, categories[], source_file,
//! tools: [{tool_name, tool_description, input_schema}]}]}`.
//!
//! The wire types are [`crate::formats::etom::Registry`] and its records (what release
//! export writes); parsing walks the JSON by hand instead, so each problem names its exact place
//! (`servers[3] "name" .tools[1] "tool" .input_schema`). All problems are
//! collected before reporting. In lenient mode, invalid or duplicate records
//! are left out and each is listed with its reason instead.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value};

use super::{Imported, Note, Origin, Rejected};
use crate::error::{Problem, json_type_name as type_name};
use crate::formats::etom::{REGISTRY_DERIVED_KEYS, RegistryServer, RegistryTool};
use crate::model::{Server, Tool, tool_id};

// The format's field names live with its wire types: what import reads is what export writes.
const SERVER_KEYS: &[&str] = RegistryServer::KEYS;
const TOOL_KEYS: &[&str] = RegistryTool::KEYS;
/// Keys that ETOM's own scripts add (embeddings); ignored without a note.
const DERIVED_KEYS: &[&str] = REGISTRY_DERIVED_KEYS;

/// Reads fields of one JSON object and collects problems about them.
struct Fields<'a> {
    obj: &'a Map<String, Value>,
    loc: String,
    problems: Vec<Problem>,
}

impl<'a> Fields<'a> {
    fn string(&mut self, key: &str, required: bool) -> Option<&'a str> {
        match self.obj.get(key) {
            Some(Value::String(s)) => Some(s),
            Some(Value::Null) | None if !required => None,
            None => {
                self.problems.push(Problem::new(&self.loc, format!("missing field `{key}`")));
                None
            }
            Some(other) => {
                self.problems.push(Problem::new(
                    format!("{}.{key}", self.loc),
                    format!("expected a string, found {}", type_name(other)),
                ));
                None
            }
        }
    }

    fn strings(&mut self, key: &str) -> Vec<String> {
        match self.obj.get(key) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => {
                let mut out = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    match item {
                        Value::String(s) => out.push(s.trim().to_string()),
                        other => self.problems.push(Problem::new(
                            format!("{}.{key}[{i}]", self.loc),
                            format!("expected a string, found {}", type_name(other)),
                        )),
                    }
                }
                out
            }
            Some(other) => {
                self.problems.push(Problem::new(
                    format!("{}.{key}", self.loc),
                    format!("expected an array of strings, found {}", type_name(other)),
                ));
                Vec::new()
            }
        }
    }

    fn ignored(&self, known: &[&str], notes: &mut Vec<Note>) {
        for k in self.obj.keys() {
            if !known.contains(&k.as_str()) && !DERIVED_KEYS.contains(&k.as_str()) {
                notes.push(Note {
                    location: format!("{}.{k}", self.loc),
                    kind: "ignored-field",
                    message: format!("field `{k}` is not part of the ETOM format; ignored"),
                });
            }
        }
    }
}

/// Check that a value is a JSON-Schema object schema.
fn check_schema(v: Option<&Value>, loc: &str, required: bool, problems: &mut Vec<Problem>) -> Option<Value> {
    match v {
        None | Some(Value::Null) if !required => None,
        None => {
            problems.push(Problem::new(loc, "missing input schema"));
            None
        }
        Some(Value::Object(m)) => match m.get("type") {
            Some(Value::String(t)) if t == "object" => Some(Value::Object(m.clone())),
            None if m.contains_key("properties") => Some(Value::Object(m.clone())),
            Some(t) => {
                problems.push(Problem::new(
                    format!("{loc}.type"),
                    format!("a tool schema must describe an object (`\"type\": \"object\"`), found {t}"),
                ));
                None
            }
            None => {
                problems.push(Problem::new(
                    loc,
                    "a tool schema must describe an object: it has neither `type` nor `properties`",
                ));
                None
            }
        },
        Some(other) => {
            problems.push(Problem::new(loc, format!("expected a JSON-Schema object, found {}", type_name(other))));
            None
        }
    }
}

fn trimmed(raw: &str, loc: &str, what: &str, notes: &mut Vec<Note>) -> (String, Option<String>) {
    let t = raw.trim();
    if t != raw {
        notes.push(Note {
            location: loc.to_string(),
            kind: "trimmed-name",
            message: format!("{what} {raw:?} trimmed to {t:?}"),
        });
        (t.to_string(), Some(raw.to_string()))
    } else {
        (t.to_string(), None)
    }
}

/// Parse an ETOM snapshot. `Err` is a structural failure (not JSON, no server
/// list); record-level problems come back in `Imported::problems` (strict) or
/// as `Imported::rejected` (lenient).
pub fn parse(bytes: &[u8], lenient: bool) -> Result<Imported, Vec<Problem>> {
    // Strict: a duplicate key is an error, not last-one-wins (issue 10, item 12).
    let root: Value = crate::json::value_from_slice(bytes).map_err(|e| {
        // serde_json's message ends with its own "at line L column C"; the location says it already.
        let msg = e.to_string();
        let msg = msg.rsplit_once(" at line ").map_or(msg.as_str(), |(m, _)| m).to_string();
        vec![Problem::new(format!("line {}, column {}", e.line(), e.column()), format!("invalid JSON: {msg}"))]
    })?;
    let Value::Object(top) = &root else {
        return Err(vec![Problem::new(
            "$",
            format!("expected an object with a `servers` list, found {}", type_name(&root)),
        )]);
    };
    let servers = match top.get("servers") {
        Some(Value::Array(s)) => s,
        Some(other) => {
            return Err(vec![Problem::new("servers", format!("expected an array, found {}", type_name(other)))]);
        }
        None => return Err(vec![Problem::new("$", "missing field `servers`")]),
    };

    let mut out = Imported::default();
    let mut seen_servers: HashMap<String, String> = HashMap::new();
    let mut total_tools_in_file = 0usize;

    for (si, sv) in servers.iter().enumerate() {
        total_tools_in_file += read_server(&mut out, lenient, si, sv, &mut seen_servers);
    }

    for (key, actual) in [("total_servers", servers.len()), ("total_tools", total_tools_in_file)] {
        match top.get(key) {
            Some(Value::Number(n)) if n.as_u64() == Some(actual as u64) => {}
            Some(v) => out.notes.push(Note {
                location: key.to_string(),
                kind: "header-mismatch",
                message: format!("header says {v} but the file holds {actual}"),
            }),
            None => {}
        }
    }
    out.catalog.sort();
    out.origins.sort_by(|a, b| a.id.cmp(&b.id).then(b.is_server.cmp(&a.is_server)));
    Ok(out)
}

/// Read one server record (`servers[si]`) into `out`: the server with its tools, or its
/// problems; the number of tools it lists, for the header check.
fn read_server(
    out: &mut Imported,
    lenient: bool,
    si: usize,
    sv: &Value,
    seen_servers: &mut HashMap<String, String>,
) -> usize {
    let sloc = located(format!("servers[{si}]"), sv, "server_name");
    let Value::Object(obj) = sv else {
        let p = Problem::new(&sloc, format!("expected a server object, found {}", type_name(sv)));
        reject_or_fail(out, lenient, p, format!("servers[{si}]"));
        return 0;
    };
    let mut f = Fields { obj, loc: sloc.clone(), problems: Vec::new() };
    let name = f.string("server_name", true);
    let description = f.string("server_description", false).unwrap_or("").to_string();
    let summary = f.string("server_summary", false).unwrap_or("").to_string();
    let url = f.string("server_url", false).unwrap_or("").to_string();
    let license = f.string("license", false).map(str::to_string);
    let _source_file = f.string("source_file", false);
    let categories = f.strings("categories");
    f.ignored(SERVER_KEYS, &mut out.notes);
    let tools_v = match obj.get("tools") {
        Some(Value::Array(t)) => Some(t),
        Some(other) => {
            f.problems
                .push(Problem::new(format!("{sloc}.tools"), format!("expected an array, found {}", type_name(other))));
            None
        }
        None => {
            f.problems.push(Problem::new(&sloc, "missing field `tools`"));
            None
        }
    };
    let mut server_problems = std::mem::take(&mut f.problems);
    let mut server_name = String::new();
    let mut original = None;
    match name {
        Some(n) if !n.trim().is_empty() => {
            (server_name, original) = trimmed(n, &sloc, "server name", &mut out.notes);
            if let Some(first) = seen_servers.get(&server_name) {
                server_problems
                    .push(Problem::new(&sloc, format!("duplicate server name {server_name:?} (first at {first})")));
            }
        }
        Some(_) => server_problems.push(Problem::new(format!("{sloc}.server_name"), "server name is empty")),
        None => {}
    }
    if !server_problems.is_empty() {
        let id = if server_name.is_empty() { format!("servers[{si}]") } else { server_name.clone() };
        settle(out, lenient, &sloc, id, server_problems);
        return tools_v.map_or(0, Vec::len);
    }
    seen_servers.insert(server_name.clone(), sloc.clone());
    out.origins.push(Origin {
        id: server_name.clone(),
        is_server: true,
        location: sloc.clone(),
        original_name: original,
    });

    let tools = server_tools(out, lenient, &server_name, &sloc, tools_v.map(Vec::as_slice).unwrap_or_default());
    out.catalog.servers.push(Server {
        name: server_name,
        description: description.trim().to_string(),
        summary: summary.trim().to_string(),
        url: url.trim().to_string(),
        categories,
        license,
        tools,
        registry: None,
    });
    tools_v.map_or(0, Vec::len)
}

/// The tools of one valid server (at `sloc`); a tool with problems is settled in `out`
/// instead (left out in lenient mode).
fn server_tools(out: &mut Imported, lenient: bool, server_name: &str, sloc: &str, tools_v: &[Value]) -> Vec<Tool> {
    let mut tools = Vec::new();
    let mut seen_tools: BTreeMap<String, String> = BTreeMap::new();
    for (ti, tv) in tools_v.iter().enumerate() {
        let tloc = located(format!("{sloc}.tools[{ti}]"), tv, "tool_name");
        let Value::Object(tobj) = tv else {
            let p = Problem::new(&tloc, format!("expected a tool object, found {}", type_name(tv)));
            reject_or_fail(out, lenient, p, tloc.clone());
            continue;
        };
        let mut tf = Fields { obj: tobj, loc: tloc.clone(), problems: Vec::new() };
        let tname = tf.string("tool_name", false);
        let tdesc = tf.string("tool_description", true).unwrap_or("").to_string();
        tf.ignored(TOOL_KEYS, &mut out.notes);
        let mut problems = std::mem::take(&mut tf.problems);
        let input_schema = check_schema(tobj.get("input_schema"), &format!("{tloc}.input_schema"), true, &mut problems);
        let output_schema =
            check_schema(tobj.get("output_schema"), &format!("{tloc}.output_schema"), false, &mut problems);
        let mut tool_name = String::new();
        let mut toriginal = None;
        match tname {
            Some(n) if !n.trim().is_empty() => {
                (tool_name, toriginal) = trimmed(n, &tloc, "tool name", &mut out.notes);
                if let Some(first) = seen_tools.get(&tool_name) {
                    problems.push(Problem::new(
                        &tloc,
                        format!("duplicate tool name {tool_name:?} in server {server_name:?} (first at {first})"),
                    ));
                }
            }
            _ => problems.push(Problem::new(&tloc, "tool without a name (`tool_name` missing or empty)")),
        }
        if tdesc.trim().is_empty() && problems.is_empty() {
            out.notes.push(Note {
                location: tloc.clone(),
                kind: "empty-description",
                message: "tool has no description".into(),
            });
        }
        if !problems.is_empty() {
            let id = if tool_name.is_empty() { tloc.clone() } else { tool_id(server_name, &tool_name) };
            settle(out, lenient, &tloc, id, problems);
            continue;
        }
        seen_tools.insert(tool_name.clone(), tloc.clone());
        let id = tool_id(server_name, &tool_name);
        out.origins.push(Origin { id: id.clone(), is_server: false, location: tloc, original_name: toriginal });
        tools.push(Tool {
            id,
            name: tool_name,
            description: tdesc.trim().to_string(),
            input_schema: input_schema.unwrap_or(Value::Null),
            output_schema,
        });
    }
    tools
}

fn reject_or_fail(out: &mut Imported, lenient: bool, p: Problem, id: String) {
    let location = p.location.clone();
    settle(out, lenient, &location, id, vec![p]);
}

/// A record's problems: fatal in strict mode; in lenient mode the record is
/// left out and listed with every reason.
fn settle(out: &mut Imported, lenient: bool, location: &str, id: String, problems: Vec<Problem>) {
    if lenient {
        let reason = problems.iter().map(|p| format!("{}: {}", p.location, p.message)).collect::<Vec<_>>().join("; ");
        out.rejected.push(Rejected { location: location.to_string(), id, reason });
    } else {
        out.problems.extend(problems);
    }
}

/// `base` plus the record's trimmed name when it has one, so messages point
/// at both the index and the name a user searches for.
fn located(base: String, record: &Value, name_key: &str) -> String {
    match record.get(name_key).and_then(Value::as_str).map(str::trim) {
        Some(n) if !n.is_empty() => format!("{base} {n:?}"),
        _ => base,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc(servers: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({ "servers": servers })).unwrap()
    }

    fn tool(name: &str) -> Value {
        json!({"tool_name": name, "tool_description": "d", "input_schema": {"type": "object", "properties": {}}})
    }

    #[test]
    fn trims_names_sorts_and_notes() {
        let b = doc(json!([
            {"server_name": " zeta ", "server_description": "", "categories": ["a"], "tools": [tool(" b "), tool("a")]},
            {"server_name": "alpha", "categories": ["b", "a"], "tools": [], "extra": 1}
        ]));
        let r = parse(&b, false).unwrap();
        assert!(r.problems.is_empty());
        assert_eq!(r.catalog.servers[0].name, "alpha");
        let z = &r.catalog.servers[1];
        assert_eq!(z.tools.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), ["zeta::a", "zeta::b"]);
        let kinds: Vec<_> = r.notes.iter().map(|n| n.kind).collect();
        assert_eq!(kinds, ["trimmed-name", "trimmed-name", "ignored-field"]);
    }

    #[test]
    fn every_problem_is_located() {
        let b = doc(json!([
            {"server_name": "s", "tools": [
                tool("a"), tool("a"),
                {"tool_description": "no name", "input_schema": {"type": "object"}},
                {"tool_name": "bad", "tool_description": "x", "input_schema": ["not", "object"]},
                {"tool_name": "str", "tool_description": "x", "input_schema": {"type": "string"}},
                {"tool_name": 5, "tool_description": "x", "input_schema": {"type": "object"}}
            ]},
            {"server_name": "s", "tools": []},
            {"server_name": "t", "categories": "x", "tools": []}
        ]));
        let r = parse(&b, false).unwrap();
        let got: Vec<String> = r.problems.iter().map(|p| format!("{}: {}", p.location, p.message)).collect();
        let want = [
            "servers[0] \"s\".tools[1] \"a\": duplicate tool name \"a\" in server \"s\" (first at servers[0] \"s\".tools[0] \"a\")",
            "servers[0] \"s\".tools[2]: tool without a name (`tool_name` missing or empty)",
            "servers[0] \"s\".tools[3] \"bad\".input_schema: expected a JSON-Schema object, found an array",
            "servers[0] \"s\".tools[4] \"str\".input_schema.type: a tool schema must describe an object (`\"type\": \"object\"`), found \"string\"",
            "servers[0] \"s\".tools[5].tool_name: expected a string, found a number",
            "servers[0] \"s\".tools[5]: tool without a name (`tool_name` missing or empty)",
            "servers[1] \"s\": duplicate server name \"s\" (first at servers[0] \"s\")",
            "servers[2] \"t\".categories: expected an array of strings, found a string",
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn lenient_mode_rejects_with_reasons_and_keeps_the_rest() {
        let b = doc(
            json!([{"server_name": "s", "tools": [tool("a"), tool("a"), {"tool_name": "x", "tool_description": "", "input_schema": 3}]}]),
        );
        let r = parse(&b, true).unwrap();
        assert!(r.problems.is_empty());
        assert_eq!(r.catalog.tool_count(), 1);
        assert_eq!(r.rejected.len(), 2);
        assert_eq!(r.rejected[1].id, "s::x");
    }

    #[test]
    fn truncated_json_names_line_and_column() {
        let e = parse(b"{\"servers\": [\n{\"server_name\": ", false).unwrap_err();
        assert!(e[0].location.starts_with("line 2, column"), "{:?}", e);
    }

    #[test]
    fn header_mismatch_is_a_note() {
        let b = serde_json::to_vec(
            &json!({"total_servers": 2, "total_tools": 1, "servers": [{"server_name": "s", "tools": [tool("a")]}]}),
        )
        .unwrap();
        let r = parse(&b, false).unwrap();
        assert_eq!(r.notes.len(), 1);
        assert_eq!(r.notes[0].kind, "header-mismatch");
    }
}
