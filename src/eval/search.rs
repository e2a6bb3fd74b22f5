//! The `full` tool space: every released tool of the sample's track behind a tool search.
//!
//! A track's catalog is far more than a model's request can list, so the agent is offered
//! two tools (the common tool-retrieval pattern, which keeps the agent loop's tool list
//! fixed):
//!
//! - `search_tools {query, limit?}`: the `limit` (default 5, at most 20) released tools of
//!   the track nearest to `query`, as JSON `{"tools": [{name, description, input_schema}]}`,
//!   best first. `name` is the OpenAI function name the agent would have been given for the
//!   tool ([`ToolNames`] over the whole track). Ranked as the `standard` space ranks its
//!   distractors ([`source::nearest`]): the cosine between the bags of words of the query
//!   and of the tool's function name and description; equally near tools come in an order
//!   seeded by `[project] seed` and the sample id, so the same search gives the same tools.
//! - `call_tool {name, arguments}`: calls that tool on the sandbox, which answers it as a
//!   direct call (the sample's recording, or a value shaped by the tool's schema). An
//!   unknown name, a missing name or arguments that are not an object get a tool error
//!   that says so, which the model may correct.
//!
//! [`ToolSearch`] is the index both the server ([`SearchServer`]) and the run record use:
//! the record unwraps each `call_tool` call into a call of the named tool
//! ([`called_name`], [`called_arguments`]), so predictions, scores and the item analysis
//! see the real tool, and recomputes what each `search_tools` call found.

use std::collections::BTreeMap;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};
use serde_json::{Value, json};

use super::source::{self, Release};
use crate::agent::names::ToolNames;
use crate::sandbox::Sandbox;

/// The search tool's name (also its OpenAI function name).
pub const SEARCH_TOOLS: &str = "search_tools";
/// The call tool's name.
pub const CALL_TOOL: &str = "call_tool";
/// Tools a search returns when it names no `limit`.
pub const DEFAULT_LIMIT: usize = 5;
/// Most tools one search returns (a larger `limit` is cut to it).
pub const MAX_LIMIT: usize = 20;
/// The seeded stream of the search's tie order (the distractors' is `eval.distractors`).
const STREAM: &str = "eval.search";

/// One searchable tool.
#[derive(Debug, Clone)]
pub struct Listed {
    pub id: String,
    /// Its OpenAI function name over the whole track.
    pub name: String,
    pub description: String,
    pub input_schema: Value,
    /// What the search compares with the query: function name and description.
    text: String,
}

/// The tools behind one run's search, and how it breaks ties.
#[derive(Debug, Clone)]
pub struct ToolSearch {
    names: ToolNames,
    /// By tool id.
    tools: BTreeMap<String, Listed>,
    seed: u64,
    /// The sample id: each sample breaks its ties its own way.
    key: String,
}

impl ToolSearch {
    /// The search over the released tools `ids` (the sample's track), ties seeded by `seed`
    /// and `key` (the sample id).
    pub fn new(rel: &Release, ids: &[String], seed: u64, key: &str) -> Self {
        let names = ToolNames::new(ids.iter().map(String::as_str));
        let mut tools = BTreeMap::new();
        for id in ids {
            let Some(t) = rel.tools.get(id) else { continue };
            let name = names.name(id).unwrap_or(id).to_string();
            let description = t.tool.description.clone();
            let listed = Listed {
                id: id.clone(),
                text: format!("{name}\n{description}"),
                name,
                description,
                input_schema: t.tool.input_schema.clone(),
            };
            tools.insert(id.clone(), listed);
        }
        ToolSearch { names, tools, seed, key: key.to_string() }
    }

    /// The `limit` tools nearest to `query`, nearest first (all of them when there are fewer).
    pub fn search(&self, query: &str, limit: usize) -> Vec<&Listed> {
        let candidates: Vec<(&str, &str)> = self.tools.values().map(|t| (t.id.as_str(), t.text.as_str())).collect();
        let found = source::nearest(STREAM, query, &candidates, limit, self.seed, &self.key);
        found.into_iter().filter_map(|id| self.tools.get(id)).collect()
    }

    /// The tool id a `call_tool` name stands for: a function name a search gives, or (as a
    /// model may send it) the tool id itself.
    pub fn resolve(&self, name: &str) -> Option<&str> {
        self.names.id(name).or_else(|| self.tools.get_key_value(name).map(|(id, _)| id.as_str()))
    }

    /// The function name of a tool id (the id itself when it is not behind the search).
    pub fn name<'a>(&'a self, id: &'a str) -> &'a str {
        self.names.name(id).unwrap_or(id)
    }

    /// A direct call of `id` as the agent makes it in this space: a `call_tool` call's
    /// arguments (the gold history of earlier turns shows its calls so).
    pub fn wrap(&self, id: &str, arguments: &Value) -> Value {
        json!({"name": self.name(id), "arguments": arguments})
    }

    /// A `search_tools` call's answer; `Err` is the tool-error text naming the bad field.
    pub fn answer(&self, args: &Value) -> Result<String, String> {
        let (query, limit) = search_arguments(args)?;
        let tools: Vec<Value> = self
            .search(&query, limit)
            .into_iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
            .collect();
        Ok(json!({"tools": tools}).to_string())
    }

    /// The function names a `search_tools` call with these arguments found (the search is
    /// deterministic, so this is what its answer listed); `None` when its arguments were refused.
    pub fn found(&self, args: &Value) -> Option<Vec<String>> {
        let (query, limit) = search_arguments(args).ok()?;
        Some(self.search(&query, limit).into_iter().map(|t| t.name.clone()).collect())
    }
}

/// `search_tools` arguments: the query and the limit (default [`DEFAULT_LIMIT`], cut to
/// [`MAX_LIMIT`]); `Err` names the field that is wrong.
pub fn search_arguments(args: &Value) -> Result<(String, usize), String> {
    let query = match args.get("query") {
        Some(Value::String(q)) => q.clone(),
        Some(other) => return Err(format!("`arguments.query`: {other} is not a string")),
        None => return Err("`arguments.query` is missing: say in a few words what the tool should do".to_string()),
    };
    let limit = match args.get("limit") {
        None | Some(Value::Null) => DEFAULT_LIMIT,
        // JSON Schema's `integer` allows `3.0`, so the check does too.
        Some(v) => {
            match v.as_u64().or_else(|| v.as_f64().filter(|f| f.fract() == 0.0 && *f >= 0.0).map(|f| f as u64)) {
                Some(n) if n >= 1 => usize::try_from(n).unwrap_or(MAX_LIMIT).min(MAX_LIMIT),
                _ => return Err(format!("`arguments.limit`: {v} is not a whole number of at least 1")),
            }
        }
    };
    Ok((query, limit))
}

/// The tool a `call_tool` call names (`arguments.name`), when it names one.
pub fn called_name(args: &Value) -> Option<&str> {
    args.get("name").and_then(Value::as_str).filter(|n| !n.trim().is_empty())
}

/// The arguments a `call_tool` call passes on (`arguments.arguments`): none given is `{}`
/// (models leave out an empty object), a string holding a JSON object is that object (models
/// often send arguments as a string); anything else is passed as is, and refused.
pub fn called_arguments(args: &Value) -> Value {
    match args.get("arguments") {
        None | Some(Value::Null) => json!({}),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(v) if v.is_object() => v,
            _ => Value::String(s.clone()),
        },
        Some(v) => v.clone(),
    }
}

/// The two tools the agent is offered.
fn meta_tools() -> Vec<Tool> {
    let search = json!({
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "what the tool should do, in a few words"},
            "limit": {"type": "integer", "minimum": 1,
                      "description": format!("how many tools to return (default {DEFAULT_LIMIT}, at most {MAX_LIMIT})")}
        },
        "required": ["query"]
    });
    let call = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "the `name` of a tool that search_tools returned"},
            "arguments": {"type": "object", "description": "the tool's arguments, as its input_schema asks"}
        },
        "required": ["name", "arguments"]
    });
    let described = [
        (
            SEARCH_TOOLS,
            "Find tools for a task among every tool available: returns the best-matching tools as JSON \
             (name, description, input_schema), best first. Call one with call_tool.",
            search,
        ),
        (CALL_TOOL, "Call a tool that search_tools returned, by its name, with its arguments.", call),
    ];
    described
        .into_iter()
        .map(|(name, description, schema)| {
            Tool::new(name, description, Arc::new(schema.as_object().cloned().unwrap_or_default()))
        })
        .collect()
}

/// The `full` space's MCP server: the two tools in front of a sandbox over the track.
#[derive(Clone)]
pub struct SearchServer {
    index: Arc<ToolSearch>,
    sandbox: Sandbox,
}

impl SearchServer {
    pub fn new(index: Arc<ToolSearch>, sandbox: Sandbox) -> Self {
        SearchServer { index, sandbox }
    }

    /// A `call_tool` call: refused with a tool error the model can act on, or answered by the
    /// sandbox as a direct call of the tool.
    async fn call(&self, args: &Value) -> Result<CallToolResult, ErrorData> {
        let Some(name) = called_name(args) else {
            return Ok(refused(format!(
                "`arguments.name` is missing: give the `name` of a tool that {SEARCH_TOOLS} returned"
            )));
        };
        let Some(id) = self.index.resolve(name) else {
            return Ok(refused(format!(
                "unknown tool `{name}`: call {SEARCH_TOOLS} for the names of the tools there are"
            )));
        };
        let arguments = called_arguments(args);
        if !arguments.is_object() {
            return Ok(refused(format!(
                "`arguments.arguments` of `{name}` is not a JSON object; send the tool's arguments as one"
            )));
        }
        self.sandbox.answer(id, arguments).await
    }
}

/// A tool error the model reads (and may correct its call after).
fn refused(text: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

impl ServerHandler for SearchServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("benchgen-tool-search", env!("CARGO_PKG_VERSION")))
            .with_instructions("benchgen eval: search the tools of the benchmark's track, then call one")
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(meta_tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        let result = match &*request.name {
            SEARCH_TOOLS => match self.index.answer(&args) {
                Ok(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
                Err(why) => refused(format!("invalid arguments for `{SEARCH_TOOLS}`: {why}")),
            },
            CALL_TOOL => self.call(&args).await?,
            other => refused(format!("unknown tool `{other}`: the tools are {SEARCH_TOOLS} and {CALL_TOOL}")),
        };
        Ok(result.into())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, HashMap};

    use super::*;
    use crate::eval::source::ReleasedTool;
    use crate::model::Tool as ModelTool;

    fn release(tools: &[(&str, &str)]) -> Release {
        let tools = tools
            .iter()
            .map(|(id, description)| {
                let (server, name) = id.split_once("::").unwrap_or(("", id));
                let tool = ModelTool {
                    id: id.to_string(),
                    name: name.to_string(),
                    description: description.to_string(),
                    input_schema: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
                    output_schema: None,
                };
                let released = ReleasedTool { server: server.to_string(), tool, catalog: "filter".to_string() };
                (id.to_string(), released)
            })
            .collect();
        Release {
            shown: "test".to_string(),
            samples: Vec::new(),
            tools,
            cassettes: BTreeMap::new(),
            efs: HashMap::new(),
            benches: BTreeMap::new(),
            invented: BTreeMap::new(),
        }
    }

    fn index(rel: &Release, seed: u64, key: &str) -> ToolSearch {
        let ids: Vec<String> = rel.tools.keys().cloned().collect();
        ToolSearch::new(rel, &ids, seed, key)
    }

    fn catalog() -> Release {
        release(&[
            ("Meteo::forecast", "Weather forecast for a city"),
            ("WeatherAlt::get_alerts", "Severe weather alerts for a region"),
            ("Stocks::get_quote", "Latest stock quote for a ticker symbol"),
            ("Music::play_song", "Play a song by an artist"),
            ("Files::read", "Read a file"),
            ("Files::write", "Write a file"),
            ("Mail::send", "Send an email"),
        ])
    }

    #[test]
    fn a_search_ranks_the_tools_that_share_its_words_first_and_keeps_to_its_limit() {
        let rel = catalog();
        let s = index(&rel, 7, "L1-1");
        let names =
            |q: &str, limit: usize| -> Vec<String> { s.search(q, limit).iter().map(|t| t.name.clone()).collect() };
        let found = names("What is the weather forecast for Paris tomorrow?", 5);
        assert_eq!(found.len(), 5, "{found:?}");
        assert_eq!(found[..2].to_vec(), ["Meteo__forecast", "WeatherAlt__get_alerts"], "weather tools first");
        assert_eq!(names("weather forecast", 1), ["Meteo__forecast"]);
        assert_eq!(names("stock quote", 3)[0], "Stocks__get_quote");
        assert_eq!(names("anything", 50).len(), 7, "fewer tools than the limit: all of them");
        // The answer is JSON the model reads: function names, descriptions and schemas.
        let answer: Value = serde_json::from_str(&s.answer(&json!({"query": "weather forecast"})).unwrap()).unwrap();
        let tools = answer["tools"].as_array().unwrap();
        assert_eq!(tools.len(), DEFAULT_LIMIT);
        assert_eq!(tools[0]["name"], "Meteo__forecast");
        assert_eq!(tools[0]["description"], "Weather forecast for a city");
        assert_eq!(tools[0]["input_schema"]["properties"]["city"]["type"], "string");
        let many: Value = serde_json::from_str(&s.answer(&json!({"query": "x", "limit": 100})).unwrap()).unwrap();
        assert_eq!(many["tools"].as_array().unwrap().len(), 7, "the whole catalog, under the cut");
        assert_eq!(search_arguments(&json!({"query": "x", "limit": 100})).unwrap().1, MAX_LIMIT);
        assert_eq!(search_arguments(&json!({"query": "x"})).unwrap(), ("x".to_string(), DEFAULT_LIMIT));
        // What the run record says a search found is what its answer listed.
        let args = json!({"query": "weather forecast", "limit": 2});
        assert_eq!(s.found(&args).unwrap(), ["Meteo__forecast", "WeatherAlt__get_alerts"]);
        // Refused arguments name the field.
        assert!(s.answer(&json!({})).unwrap_err().contains("`arguments.query` is missing"));
        assert!(s.answer(&json!({"query": 3})).unwrap_err().contains("`arguments.query`"));
        assert!(s.answer(&json!({"query": "x", "limit": 0})).unwrap_err().contains("`arguments.limit`"));
        assert!(s.answer(&json!({"query": "x", "limit": "five"})).unwrap_err().contains("`arguments.limit`"));
        assert!(s.found(&json!({"query": "x", "limit": 0})).is_none());
    }

    #[test]
    fn equally_near_tools_come_in_a_seeded_order_that_the_same_inputs_repeat() {
        let rel = catalog();
        let ids = |seed: u64, query: &str, limit: usize| -> Vec<String> {
            index(&rel, seed, "L1-1").search(query, limit).iter().map(|t| t.id.clone()).collect()
        };
        // No word in common with any tool: every tool is equally near.
        let firsts: BTreeSet<String> = (0..32).map(|seed| ids(seed, "zebra", 3)[0].clone()).collect();
        assert!(firsts.len() > 1, "ties fall differently under different seeds: {firsts:?}");
        for seed in 0..8 {
            let a = ids(seed, "zebra", 7);
            assert_eq!(a, ids(seed, "zebra", 7), "seed {seed}: the same search, the same tools");
            assert_eq!(a.iter().collect::<BTreeSet<_>>().len(), 7, "every tool once");
            assert_eq!(ids(seed, "zebra", 3), a[..3].to_vec(), "a smaller limit takes the first of the same order");
            // The nearer tools come before the tied ones, whatever the seed.
            let w: BTreeSet<String> = ids(seed, "weather zebra", 2).into_iter().collect();
            assert_eq!(w, BTreeSet::from(["Meteo::forecast".to_string(), "WeatherAlt::get_alerts".to_string()]));
        }
        // The ids given in another order make the same index.
        let mut reversed: Vec<String> = rel.tools.keys().cloned().collect();
        reversed.reverse();
        let other = ToolSearch::new(&rel, &reversed, 3, "L1-1");
        let got: Vec<String> = other.search("zebra", 7).iter().map(|t| t.id.clone()).collect();
        assert_eq!(got, ids(3, "zebra", 7));
    }

    #[test]
    fn call_tool_names_resolve_to_tool_ids_and_its_arguments_are_unwrapped() {
        let rel = catalog();
        let s = index(&rel, 0, "L1-1");
        assert_eq!(s.resolve("Meteo__forecast"), Some("Meteo::forecast"));
        assert_eq!(s.resolve("Meteo::forecast"), Some("Meteo::forecast"), "the tool id itself");
        assert_eq!(s.resolve("forecast"), None);
        let wrapped = s.wrap("Meteo::forecast", &json!({"city": "Paris"}));
        assert_eq!(wrapped, json!({"name": "Meteo__forecast", "arguments": {"city": "Paris"}}));
        assert_eq!(called_name(&wrapped), Some("Meteo__forecast"));
        assert_eq!(called_arguments(&wrapped), json!({"city": "Paris"}));
        assert_eq!(called_arguments(&json!({"name": "x"})), json!({}), "no arguments: none");
        assert_eq!(called_arguments(&json!({"name": "x", "arguments": "{\"a\": 1}"})), json!({"a": 1}));
        assert_eq!(called_arguments(&json!({"name": "x", "arguments": [1]})), json!([1]), "passed on, to be refused");
        assert_eq!(called_name(&json!({"name": " "})), None);
        assert_eq!(called_name(&json!({"arguments": {}})), None);
    }

    #[tokio::test]
    async fn call_tool_answers_as_a_direct_call_would_and_refuses_what_it_cannot_call_with_a_tool_error() {
        let rel = catalog();
        let ids: Vec<String> = rel.tools.keys().cloned().collect();
        let sandbox = Sandbox::new(&rel.catalog(&ids), crate::sandbox::SandboxOptions::default()).unwrap();
        let server = SearchServer::new(Arc::new(index(&rel, 0, "L1-1")), sandbox.clone());
        let paris = json!({"city": "Paris"});
        let direct = sandbox.answer("Meteo::forecast", paris.clone()).await.unwrap();
        let via = server.call(&json!({"name": "Meteo__forecast", "arguments": paris})).await.unwrap();
        assert_eq!(via, direct, "the sandbox's answer to the direct call");
        assert_ne!(via.is_error, Some(true));
        // Each refusal is a result the model reads (not a transport failure), naming what is wrong.
        for (call, says) in [
            (json!({"name": "Nope__x", "arguments": {}}), "unknown tool `Nope__x`"),
            (json!({"arguments": {}}), "`arguments.name` is missing"),
            (json!({"name": "Meteo__forecast", "arguments": [1]}), "is not a JSON object"),
            (json!({"name": "Meteo__forecast", "arguments": {"city": 3}}), "invalid arguments for `Meteo::forecast`"),
        ] {
            let r = server.call(&call).await.expect("a tool error, not a transport failure");
            assert_eq!(r.is_error, Some(true), "{call}");
            let text = serde_json::to_string(&r.content).unwrap();
            assert!(text.contains(says), "{call}: {text}");
        }
    }
}
