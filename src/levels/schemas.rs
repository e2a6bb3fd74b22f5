//! `benchgen levels schemas` (stage `levels-schemas`): an output JSON Schema for every tool
//! (ETOM A.7). The catalog's own `output_schema` is used when it has properties; otherwise
//! the writer infers one from name, description and inputs. Every schema is checked
//! against the JSON Schema meta-schema and must be an object schema. The writer's answer
//! schema ([`schema_answer`]) allows only such schemas (object, typed and described
//! properties); an answer that is not one anyway is re-asked with the reason, and one
//! still unusable after the re-asks fails its item (recorded in `failed.json`, the tool
//! then has no outputs for L3).
//!
//! Review: `schemas.csv` (`tool_id,source,output_schema`) is the review sheet; a copy
//! edited by a person and named in `[levels.schemas] review` replaces the schemas it lists
//! (checked the same way; a bad row is an error naming file, row and tool).

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::llm::Prompt;
use crate::llm::batch::{Batch, Item};
use crate::settings::Settings;
use crate::stage::{Artifact, ConfigRef, Ctx, Inputs, Output, Plan, PromptRef, Stage, StageSpec};

pub const STAGE: &str = "levels-schemas";
pub const SCHEMAS: Artifact<Schemas> = Artifact::new(STAGE, "schemas.json");
pub const TEMPLATE: &str = "levels_output_schema";

pub static SPEC: StageSpec = StageSpec {
    name: STAGE,
    command: "levels schemas",
    // 2: the answer schema is stated in the system message, the prompt's fixed part.
    version: 2,
    about: "an output JSON Schema per tool (the catalog's, inferred by the LLM, or from the review sheet)",
    reads: &[crate::filter::CATALOG.read()],
    writes: &["schemas.json", "schemas.csv", crate::llm::batch::FAILED_FILE],
    section: Some("levels"),
};

#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
pub struct SchemaAnswer {
    /// A JSON Schema object describing the tool's output (`{"type": "object", "properties": {...}}`).
    pub output_schema: Value,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SchemaEntry {
    /// `catalog`, `inferred` or `review`.
    pub source: String,
    pub schema: Value,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub exchange: String,
}

/// `schemas.json`: tool id → output schema.
pub type Schemas = BTreeMap<String, SchemaEntry>;

/// The JSON types an inferred property may have.
const JSON_TYPES: [&str; 7] = ["string", "number", "integer", "boolean", "array", "object", "null"];

/// The writer's answer: `output_schema` is an object schema whose properties each may have
/// a `type` (one of [`JSON_TYPES`]), a `description` and, for arrays, an item `type` (an
/// untyped property is compatible with any input) — a shape every value of which is a
/// usable output schema, so a
/// grammar-constrained server cannot write a string or a malformed schema. The check
/// ([`schema_problem`]) still runs for servers that ignore the schema; its refusal is
/// re-asked with the reason.
pub(crate) fn schema_answer() -> crate::llm::Answer<SchemaAnswer> {
    let types = json!({"type": "string", "enum": JSON_TYPES});
    let property = json!({
        "type": "object",
        "properties": {
            "type": types,
            "description": {"type": "string"},
            "items": {"type": "object", "properties": {"type": types}, "required": ["type"], "additionalProperties": false},
        },
        "additionalProperties": false,
    });
    let schema = json!({
        "type": "object",
        "properties": {"output_schema": {
            "description": "A JSON Schema object describing the tool's output (`{\"type\": \"object\", \"properties\": {...}}`).",
            "type": "object",
            "properties": {
                "type": {"type": "string", "enum": ["object"]},
                "properties": {"type": "object", "additionalProperties": property},
            },
            "required": ["type", "properties"],
            "additionalProperties": false,
        }},
        "required": ["output_schema"],
        "additionalProperties": false,
    });
    crate::llm::Answer::new("SchemaAnswer", schema).same_for_every_item().check(
        |a: &SchemaAnswer| match schema_problem(&a.output_schema) {
            Some(p) => Err(format!("`output_schema` is not usable: {p}")),
            None => Ok(()),
        },
    )
}

/// Why `schema` cannot serve as an output schema, if it cannot.
pub fn schema_problem(schema: &Value) -> Option<String> {
    if !schema.is_object() {
        return Some("not a JSON object".into());
    }
    if let Err(e) = jsonschema::meta::validate(schema) {
        return Some(format!("not a valid JSON Schema: {e}"));
    }
    match schema.get("properties") {
        None => None,
        Some(p) if p.is_object() => None,
        Some(_) => Some("`properties` is not an object".into()),
    }
}

fn has_properties(v: &Option<Value>) -> bool {
    v.as_ref().and_then(|s| s.get("properties")).and_then(|p| p.as_object()).is_some_and(|p| !p.is_empty())
}

/// Read a review sheet: `tool_id,output_schema` (other columns ignored).
pub fn read_review(path: &std::path::Path, display: &str) -> Result<BTreeMap<String, Value>> {
    let mut r = csv::Reader::from_path(path).with_context(|| format!("cannot read review sheet `{display}`"))?;
    let headers = r.headers().with_context(|| format!("`{display}`: no header row"))?.clone();
    let col = |name: &str| headers.iter().position(|h| h == name);
    let (Some(ti), Some(si)) = (col("tool_id"), col("output_schema")) else {
        bail!("`{display}`: the header must name `tool_id` and `output_schema`");
    };
    let mut out = BTreeMap::new();
    for (n, rec) in r.records().enumerate() {
        let row = n + 2;
        let rec = rec.with_context(|| format!("`{display}` row {row}: not valid CSV"))?;
        let id = crate::model::norm_tool_id(crate::csvout::restore(rec.get(ti).unwrap_or_default()));
        let text = crate::csvout::restore(rec.get(si).unwrap_or_default());
        let v: Value = serde_json::from_str(text)
            .with_context(|| format!("`{display}` row {row}, tool `{id}`, field `output_schema`: not JSON"))?;
        if let Some(p) = schema_problem(&v) {
            bail!("`{display}` row {row}, tool `{id}`, field `output_schema`: {p}");
        }
        out.insert(id, v);
    }
    Ok(out)
}

pub struct SchemasStage;

impl Stage for SchemasStage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }
    fn help(&self) -> &'static str {
        "An output JSON Schema per tool: the catalog's, inferred by the writer, or from
         the review sheet `[levels.schemas] review`.

         Reads `filter/catalog.json`. Writes `artifacts/levels-schemas/schemas.json` and the
         review sheet `schemas.csv` (and `failed.json`)."
    }
    fn roles(&self, s: &Settings) -> Vec<ConfigRef> {
        vec![ConfigRef::new("levels.writer_role", &super::settings(s).writer_role)]
    }
    fn estimate(&self, s: &Settings) -> Vec<crate::stage::Estimate> {
        let l = super::settings(s);
        let c = match super::estimate_catalog(s) {
            Ok(c) => c,
            Err(unknown) => return unknown,
        };
        // Tools with a reviewed or catalogued output schema are not asked: fewer, never more.
        let n = crate::stage::capped(c.tools, l.schemas.max_tools);
        let basis = format!("≤ {n} tools without an output schema ({})", c.from);
        super::estimates(s, vec![crate::stage::Estimate::typed(&l.writer_role, n, basis)])
    }
    fn prompts(&self, _s: &Settings) -> Vec<PromptRef> {
        let tool = json!({"id": "s::t", "name": "t", "server": "s", "description": "d", "inputs": ["`x` (required):  (Type: string)"]});
        vec![PromptRef::new("levels.output_schema", TEMPLATE, json!({"tool": tool}))]
    }
    fn plan(&self, s: &Settings) -> Result<Plan> {
        let l = super::settings(s);
        let inputs = l.schemas.review.iter().map(|p| s.resolve(p)).collect();
        Ok(Plan { inputs, config_hash: super::common_hash(s, &l.schemas)? })
    }

    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let s = ctx.settings;
        let l = super::settings(s);
        let catalog = inputs.json(&crate::filter::CATALOG)?;
        let review = match &l.schemas.review {
            Some(p) => read_review(&s.resolve(p), &s.display_path(&s.resolve(p)))?,
            None => BTreeMap::new(),
        };
        let mut doc = Schemas::new();
        let mut todo = Vec::new();
        for (srv, t) in catalog.tools() {
            let id = crate::model::tool_id(&srv.name, &t.name);
            if let Some(v) = review.get(&id) {
                doc.insert(id, SchemaEntry { source: "review".into(), schema: v.clone(), exchange: String::new() });
            } else if has_properties(&t.output_schema) && schema_problem(t.output_schema.as_ref().unwrap()).is_none() {
                doc.insert(
                    id,
                    SchemaEntry {
                        source: "catalog".into(),
                        schema: t.output_schema.clone().unwrap(),
                        exchange: String::new(),
                    },
                );
            } else {
                todo.push((id, Prompt::new(TEMPLATE, json!({"tool": super::tool_vars(srv, t)}))));
            }
        }
        let skipped = if l.schemas.max_tools > 0 && todo.len() > l.schemas.max_tools {
            todo.len() - l.schemas.max_tools
        } else {
            0
        };
        todo.truncate(todo.len() - skipped);
        let mut batch = Batch::new(ctx, super::batch_options(STAGE, "schemas", "tools", s))?;
        let role = l.writer_role.as_str();
        let done = batch.run(todo, |p: Prompt, llm: Item| async move {
            let r = llm.ask(role, &p, None, &schema_answer()).await?;
            Ok(SchemaEntry { source: "inferred".into(), schema: r.value.output_schema, exchange: r.exchange })
        })?;
        doc.extend(done.values);
        batch.finish(out)?;
        // The project's one CSV writer (formula cells neutralised; `read_review` restores them).
        let mut w = crate::csvout::Writer::new();
        w.write_record(["tool_id", "source", "output_schema"])?;
        for (id, e) in &doc {
            w.write_record([id.as_str(), e.source.as_str(), &serde_json::to_string(&e.schema)?])?;
        }
        out.file("schemas.csv", w.into_bytes()?);
        let by = |src: &str| doc.values().filter(|e| e.source == src).count();
        out.count("catalog", by("catalog"));
        out.count("inferred", by("inferred"));
        out.count("review", by("review"));
        if skipped > 0 {
            out.count("not_inferred", skipped);
            out.notes.push(format!("{skipped} tools left without an output schema (`levels.schemas.max_tools`)"));
        }
        out.notes.push(format!(
            "{} output schemas ({} from the catalog, {} inferred, {} from review)",
            doc.len(),
            by("catalog"),
            by("inferred"),
            by("review")
        ));
        out.json("schemas.json", &doc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_are_checked() {
        assert_eq!(schema_problem(&json!({"type": "object", "properties": {"id": {"type": "string"}}})), None);
        assert!(schema_problem(&json!({"type": "objekt"})).is_some());
        assert!(schema_problem(&json!({"properties": []})).is_some());
        assert!(schema_problem(&json!("x")).is_some());
    }

    #[test]
    fn the_review_sheet_round_trips_and_a_bad_row_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("schemas.csv");
        // The shape `schemas.csv` is written in, as a reviewer edits it.
        let mut w = csv::Writer::from_path(&path).unwrap();
        w.write_record(["tool_id", "source", "output_schema"]).unwrap();
        w.write_record(["S :: t", "inferred", r#"{"type": "object", "properties": {"id": {"type": "string"}}}"#])
            .unwrap();
        w.flush().unwrap();
        drop(w);
        let got = read_review(&path, "reviews/schemas.csv").unwrap();
        assert_eq!(got["S::t"]["properties"]["id"]["type"], "string");
        let mut w = csv::Writer::from_path(&path).unwrap();
        w.write_record(["tool_id", "source", "output_schema"]).unwrap();
        w.write_record(["S::t", "review", r#"{"type": "objekt"}"#]).unwrap();
        w.flush().unwrap();
        drop(w);
        let e = read_review(&path, "reviews/schemas.csv").unwrap_err().to_string();
        assert!(
            e.contains("`reviews/schemas.csv` row 2, tool `S::t`, field `output_schema`: not a valid JSON Schema"),
            "{e}"
        );
    }
}
