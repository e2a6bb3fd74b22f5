//! `inspect/`: an Inspect AI task in every release (issue 42 item 2), so a model developer
//! runs the benchmark with `inspect eval inspect/benchgen_task.py --model …` and no benchgen.
//!
//! - `inspect/benchgen_task.py` ([`TASK`]): the same bytes in every release of this version
//!   (`src/release/inspect_task.py`, embedded). It reads `samples.jsonl`, `cassettes.jsonl`,
//!   `tool_equivalence_sets.json` and `inspect/tools.json` of its release, offers each
//!   sample its oracle tools, answers their calls as `benchgen eval` does (the recording, or
//!   the sandbox's generated value, or its tool error) and scores the calls as `benchgen
//!   score` does (docs/release.md, "The Inspect AI task").
//! - `inspect/tools.json` ([`TOOLS`]): the rows of `tools.parquet` as JSON, which Inspect's
//!   Python reads without a Parquet library, with each input schema as a JSON value, and
//!   the `[project] seed` the sandbox generates unmatched answers from:
//!   `{"seed": 7, "tools": [{tool_id, server, tool, description, input_schema, catalog}]}`,
//!   tools in id order, one per line.

use std::path::Path;

use anyhow::{Context, Result};
use serde_json::{Map, Value, json};

use super::tables::ToolRow;

/// The task, relative to the release folder.
pub const TASK: &str = "inspect/benchgen_task.py";
/// The tools and seed the task reads.
pub const TOOLS: &str = "inspect/tools.json";
/// What this version of benchgen writes as [`TASK`].
pub const TASK_SOURCE: &str = include_str!("inspect_task.py");

/// One tool of [`TOOLS`]; `input_schema` is the table's JSON text.
fn entry(fields: [&str; 4], input_schema: &str, catalog: &str) -> Result<Value, serde_json::Error> {
    let [tool_id, server, tool, description] = fields;
    Ok(json!({
        "tool_id": tool_id,
        "server": server,
        "tool": tool,
        "description": description,
        "input_schema": serde_json::from_str::<Value>(input_schema)?,
        "catalog": catalog,
    }))
}

/// [`TOOLS`]' text: the seed, then one tool per line.
fn render(seed: u64, tools: &[Value]) -> String {
    let mut out = format!("{{\"seed\":{seed},\"tools\":[");
    for (i, t) in tools.iter().enumerate() {
        out.push_str(if i == 0 { "\n" } else { ",\n" });
        out.push_str(&t.to_string());
    }
    out.push_str(if tools.is_empty() { "]}\n" } else { "\n]}\n" });
    out
}

/// Write [`TASK`] and [`TOOLS`] into the release folder `dir`, from the rows of
/// `tools.parquet` and the project seed.
pub fn write(dir: &Path, seed: u64, rows: &[ToolRow]) -> Result<()> {
    let mut tools = Vec::with_capacity(rows.len());
    for r in rows {
        let fields: [&str; 4] = [&r.tool_id, &r.server, &r.tool, &r.description];
        let t = entry(fields, &r.input_schema, &r.catalog);
        tools.push(t.with_context(|| format!("tool `{}`: its input schema is not JSON", r.tool_id))?);
    }
    let folder = dir.join("inspect");
    std::fs::create_dir_all(&folder).with_context(|| format!("cannot create `{}`", folder.display()))?;
    std::fs::write(dir.join(TASK), TASK_SOURCE).with_context(|| format!("cannot write `{TASK}`"))?;
    std::fs::write(dir.join(TOOLS), render(seed, &tools)).with_context(|| format!("cannot write `{TOOLS}`"))?;
    Ok(())
}

/// For `release verify`: [`TASK`] is the task this benchgen writes, byte for byte, and
/// [`TOOLS`] holds a seed and the tools of `tools.parquet` (`rows`, as
/// [`super::tables::rows`] reads them), in its order. A release made before benchgen wrote
/// the task has neither file: a warning, not a failure.
pub fn verify(
    dir: &Path,
    rows: &[Map<String, Value>],
    checks: &mut Vec<String>,
    warnings: &mut Vec<String>,
    failures: &mut Vec<String>,
) {
    let sums = std::fs::read_to_string(dir.join("SHA256SUMS")).unwrap_or_default();
    let listed = |f: &str| sums.lines().any(|l| l.ends_with(&format!("  {f}")));
    if [TASK, TOOLS].into_iter().all(|f| !dir.join(f).exists() && !listed(f)) {
        warnings.push(format!("{TASK}: none (a release made before benchgen wrote an Inspect AI task)"));
        return;
    }
    let before = failures.len();
    match std::fs::read(dir.join(TASK)) {
        Err(e) => failures.push(format!("{TASK}: cannot read: {e}")),
        // Another benchgen version writes another task: not a defect of the release (an edit
        // after publishing is SHA256SUMS's to catch), so a warning, not a failure.
        Ok(b) if b != TASK_SOURCE.as_bytes() => warnings.push(format!(
            "{TASK}: not the task this benchgen writes (another version of benchgen writes another; SHA256SUMS cannot tell an edit whose checksums were recomputed, so read it before `inspect eval` runs it)"
        )),
        Ok(_) => {}
    }
    let tools = check_tools(dir, rows, failures);
    if failures.len() == before {
        checks.push(format!("{TASK}: this benchgen's Inspect AI task; {TOOLS}: {tools} tools, as in tools.parquet"));
    }
}

/// [`TOOLS`] parses, has a seed, and lists the tools of `rows`; returns how many it lists.
fn check_tools(dir: &Path, rows: &[Map<String, Value>], failures: &mut Vec<String>) -> usize {
    let doc: Value = match std::fs::read(dir.join(TOOLS)).map(|b| serde_json::from_slice::<Value>(&b)) {
        Err(e) => {
            failures.push(format!("{TOOLS}: cannot read: {e}"));
            return 0;
        }
        Ok(Err(e)) => {
            failures.push(format!("{TOOLS}: not JSON: {e}"));
            return 0;
        }
        Ok(Ok(doc)) => doc,
    };
    if doc["seed"].as_u64().is_none() {
        failures.push(format!("{TOOLS}: `seed` is {}, not a whole number", doc["seed"]));
    }
    let got = doc["tools"].as_array().cloned().unwrap_or_default();
    let text = |r: &Map<String, Value>, k: &str| r.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let mut want = Vec::with_capacity(rows.len());
    for r in rows {
        let owned = [text(r, "tool_id"), text(r, "server"), text(r, "tool"), text(r, "description")];
        let fields: [&str; 4] = [&owned[0], &owned[1], &owned[2], &owned[3]];
        match entry(fields, &text(r, "input_schema"), &text(r, "catalog")) {
            Ok(t) => want.push(t),
            Err(e) => {
                failures.push(format!("tools.parquet: tool `{}`: `input_schema` is not JSON: {e}", fields[0]));
                return got.len();
            }
        }
    }
    if want.len() != got.len() {
        failures.push(format!("{TOOLS}: {} tools, but tools.parquet has {}", got.len(), want.len()));
    } else if let Some((i, (w, g))) = want.iter().zip(&got).enumerate().find(|(_, (w, g))| w != g)
        && let Some((path, a, b)) = super::content::first_difference("", w, g)
    {
        failures.push(format!(
            "{TOOLS}: tools[{i}] (`{}`): field `{path}` is {b} but tools.parquet makes {a}",
            w["tool_id"].as_str().unwrap_or("")
        ));
    }
    got.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, schema: &str) -> ToolRow {
        ToolRow {
            tool_id: id.into(),
            server: "S".into(),
            tool: id.rsplit("::").next().unwrap_or(id).into(),
            description: "does it".into(),
            categories: String::new(),
            input_schema: schema.into(),
            catalog: "filter".into(),
            samples: 1,
        }
    }

    #[test]
    fn the_task_and_the_tools_are_written_and_verified_and_an_edit_fails() {
        let dir = tempfile::tempdir().unwrap();
        let rows = [row("S::a", r#"{"type":"object","properties":{"q":{"type":"string"}}}"#), row("S::b", "{}")];
        write(dir.path(), 7, &rows).unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join(TASK)).unwrap(), TASK_SOURCE);
        let text = std::fs::read_to_string(dir.path().join(TOOLS)).unwrap();
        assert!(text.starts_with("{\"seed\":7,\"tools\":[\n{\"tool_id\":\"S::a\""), "{text}");
        assert_eq!(text.lines().count(), 4, "the seed, a line per tool, the end: {text}");
        let doc: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(doc["tools"][0]["input_schema"]["properties"]["q"]["type"], "string");

        // `release verify` reads the table's rows as `tables::rows` gives them.
        let table: Vec<Map<String, Value>> =
            rows.iter().map(|r| serde_json::to_value(r).unwrap().as_object().cloned().unwrap()).collect();
        let (mut checks, mut warnings, mut failures) = (Vec::new(), Vec::new(), Vec::new());
        verify(dir.path(), &table, &mut checks, &mut warnings, &mut failures);
        assert!(failures.is_empty() && warnings.is_empty(), "{failures:?} {warnings:?}");
        assert_eq!(checks.len(), 1, "{checks:?}");

        // A tool description edited in tools.json fails; another task than this benchgen's
        // (another version's, or an edit SHA256SUMS catches) is a warning.
        std::fs::write(dir.path().join(TOOLS), text.replace("does it", "does more")).unwrap();
        std::fs::write(dir.path().join(TASK), format!("{TASK_SOURCE}\n# edited\n")).unwrap();
        verify(dir.path(), &table, &mut checks, &mut warnings, &mut failures);
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(failures[0].contains("tools[0] (`S::a`): field `description`"), "{failures:?}");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("not the task this benchgen writes"), "{warnings:?}");

        // A release made before the task: a warning.
        let old = tempfile::tempdir().unwrap();
        let (mut checks, mut warnings, mut failures) = (Vec::new(), Vec::new(), Vec::new());
        verify(old.path(), &table, &mut checks, &mut warnings, &mut failures);
        assert!(failures.is_empty() && checks.is_empty(), "{failures:?}");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
    }

    #[test]
    fn the_task_defaults_are_those_of_execute() {
        // The task's agent loop stands in for `benchgen eval`'s: the same prompt and limits.
        let d = crate::agent::ExecuteSettings::default();
        let start = TASK_SOURCE.find("SYSTEM_PROMPT = (").expect("the prompt") + "SYSTEM_PROMPT = (".len();
        let block = &TASK_SOURCE[start..start + TASK_SOURCE[start..].find(")\n").expect("its end")];
        let prompt: String = block.split('"').skip(1).step_by(2).collect();
        assert_eq!(prompt, format!("{} {}", d.system_prompt, crate::agent::NO_TOOL_FITS));
        assert!(TASK_SOURCE.contains(&format!("ANSWER_NUDGE = {:?}\n", d.answer_nudge)));
        assert!(TASK_SOURCE.contains(&format!("CALL_NUDGE = {:?}\n", d.call_nudge)));
        for (k, v) in [("max_calls", d.max_calls), ("tool_result_chars", d.tool_result_chars)] {
            assert!(TASK_SOURCE.contains(&format!("{k}={v}")), "{k}");
        }
    }
}
