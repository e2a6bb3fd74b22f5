//! Prompt templates: built into the binary, overridable per project.
//!
//! Every template a stage uses ships inside benchgen (authored in the repository's
//! `pipeline/prompts/`, which is also the demo project's own prompts folder). A project's
//! `<prompts_dir>/<name>.md` (default `pipeline/prompts/`) overrides the built-in of that
//! name; a name that is neither is an error. A template's hash is the sha256 of its text,
//! wherever it came from, so an unchanged template hashes (and replays from the ledger)
//! exactly as the file did. `benchgen prompts list|show|export` shows and copies them.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

macro_rules! builtins {
    ($($name:literal),* $(,)?) => {
        &[$(($name, include_str!(concat!("../../pipeline/prompts/", $name, ".md")))),*]
    };
}

/// `(name, text)` of every built-in template, sorted by name (a unit test checks the list
/// against `pipeline/prompts/`).
pub const BUILTIN: &[(&str, &str)] = builtins![
    "efs_requests",
    "efs_select",
    "efs_verify",
    "efs_verify_list",
    "filter-classify",
    "graph_edge",
    "levels_l1_verify",
    "levels_l1_write",
    "levels_l2_verify",
    "levels_l2_write",
    "levels_l3_deps",
    "levels_l3_query",
    "levels_l3_verify",
    "levels_l4_feasible",
    "levels_l4_qc",
    "levels_l4_scenario",
    "levels_l5_can",
    "levels_l5_challenge",
    "levels_l5_consensus",
    "levels_l5_judge",
    "levels_l5_label",
    "levels_l5_queries",
    "levels_l5_self_check",
    "levels_l5_tasks",
    "levels_output_schema",
    "levels_platform",
    "levels_query_again",
    "levels_query_rewrite",
    "levels_step_need",
    "levels_tool_profile",
    "llm-ping",
    "llm-probe",
    "logs_answer",
    "logs_label",
    "logs_need",
    "registry-categories",
    "review_score",
    "synth_answer_again",
    "synth_chain_query",
    "synth_check",
    "synth_goal",
    "synth_need_call",
    "synth_user",
];

/// The built-in text of `name`, if there is one.
pub fn builtin(name: &str) -> Option<&'static str> {
    BUILTIN.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// Where a template's text came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The project's override file.
    File(PathBuf),
    /// Built into benchgen.
    Builtin,
}

/// A template's text and where it came from.
#[derive(Debug, Clone)]
pub struct Template {
    pub name: String,
    pub text: String,
    pub origin: Origin,
}

impl Template {
    /// sha256 of the text: the same for a built-in and a file holding the same bytes.
    pub fn hash(&self) -> String {
        crate::store::sha256_hex(self.text.as_bytes())
    }

    /// How manifests and messages name it: the file's path as shown, or `builtin:<name>`.
    pub fn shown(&self, display: impl Fn(&Path) -> String) -> String {
        match &self.origin {
            Origin::File(p) => display(p),
            Origin::Builtin => format!("builtin:{}", self.name),
        }
    }
}

/// The override file's path for `name` under `dir` (it may not exist).
pub fn override_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.md"))
}

/// Resolve `name`: the override file under `dir` when it exists, else the built-in.
/// An override that exists but cannot be read is an error, never a silent fallback.
pub fn resolve(dir: &Path, name: &str) -> std::result::Result<Template, String> {
    let path = override_path(dir, name);
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Template { name: name.to_string(), text, origin: Origin::File(path) }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match builtin(name) {
            Some(text) => Ok(Template { name: name.to_string(), text: text.to_string(), origin: Origin::Builtin }),
            None => Err(format!(
                "prompt template `{name}` is not built in and `{}` does not exist (built-in names: `benchgen prompts list`)",
                path.display()
            )),
        },
        Err(e) => Err(format!("prompt template `{}` cannot be read: {e}", path.display())),
    }
}

/// `benchgen prompts export DIR`: write every built-in template as `DIR/<name>.md`.
/// Existing files are left alone unless `force` (they may be a user's edits); returns
/// `(written, kept)` names.
pub fn export(dir: &Path, force: bool) -> Result<(Vec<String>, Vec<String>)> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create `{}`", dir.display()))?;
    let (mut written, mut kept) = (Vec::new(), Vec::new());
    for (name, text) in BUILTIN {
        let path = override_path(dir, name);
        if path.exists() && !force {
            kept.push(name.to_string());
            continue;
        }
        crate::store::write_atomic(&path, text.as_bytes())?;
        written.push(name.to_string());
    }
    Ok((written, kept))
}

/// One row of `benchgen prompts list`.
#[derive(Debug, serde::Serialize)]
struct Row {
    name: String,
    hash: String,
    /// `builtin`, or the override file's path.
    source: String,
    /// The built-in's hash when an override replaces it.
    #[serde(skip_serializing_if = "Option::is_none")]
    builtin_hash: Option<String>,
    /// Stages of the pipeline that use it (empty without a config).
    stages: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum PromptsCommand {
    /// Every built-in template: its name, hash, the stages of the pipeline that use it,
    /// and whether the project overrides it.
    List,
    /// Print one template as a stage will use it (the project's override, else the
    /// built-in); `--builtin` prints the built-in even when overridden.
    Show(PromptsShowArgs),
    /// Write every built-in template into DIR (default: the project's prompts folder) as
    /// `NAME.md`, to edit. Existing files are kept unless `--force`. Keep only the files
    /// you change: an unchanged copy pins that template to this version of benchgen.
    Export(PromptsExportArgs),
}

#[derive(Debug, Args)]
pub struct PromptsShowArgs {
    /// Template name (`benchgen prompts list`).
    pub name: String,
    /// The built-in text, even when the project overrides it.
    #[arg(long)]
    pub builtin: bool,
}

#[derive(Debug, Args)]
pub struct PromptsExportArgs {
    /// Target folder (default: `[llm] prompts_dir`, i.e. `pipeline/prompts/`).
    pub dir: Option<PathBuf>,
    /// Overwrite files that exist.
    #[arg(long)]
    pub force: bool,
}

/// `benchgen prompts list|show|export`. `settings` is the project's, when there is one, and
/// `used` the templates its pipeline's stages name, each with those stages (the caller reads
/// them off the stage list, which `llm` does not import).
pub fn command(
    settings: Option<&crate::settings::Settings>,
    used: std::collections::BTreeMap<String, Vec<String>>,
    c: &PromptsCommand,
    printer: &crate::printer::Printer,
) -> Result<()> {
    let dir = settings.map(|s| s.resolve(&s.section::<crate::llm::LlmSettings>().prompts_dir));
    let shown = |p: &Path| settings.map(|s| s.display_path(p)).unwrap_or_else(|| p.display().to_string());
    match c {
        PromptsCommand::List => {
            let mut names: Vec<String> = BUILTIN.iter().map(|(n, _)| n.to_string()).collect();
            // Templates a config names that are not built in (a project's own) are listed too.
            names.extend(used.keys().filter(|n| builtin(n).is_none()).cloned());
            let mut rows = Vec::new();
            for name in names {
                let t = match &dir {
                    Some(d) => resolve(d, &name).map_err(anyhow::Error::msg)?,
                    None => Template {
                        name: name.clone(),
                        text: builtin(&name).unwrap_or_default().into(),
                        origin: Origin::Builtin,
                    },
                };
                let builtin_hash = match (&t.origin, builtin(&name)) {
                    (Origin::File(_), Some(b)) => Some(crate::store::sha256_hex(b.as_bytes())),
                    _ => None,
                };
                rows.push(Row {
                    hash: t.hash(),
                    source: t.shown(shown),
                    builtin_hash,
                    stages: used.get(&name).cloned().unwrap_or_default(),
                    name,
                });
            }
            let width = rows.iter().map(|r| r.name.len()).max().unwrap_or(0);
            let mut text = String::new();
            for r in &rows {
                let short = r.hash.trim_start_matches("sha256:").get(..12).unwrap_or_default();
                let source = match (&r.builtin_hash, r.source.starts_with("builtin:")) {
                    (_, true) => "built-in".to_string(),
                    (Some(b), false) if *b == r.hash => format!("{} (same text as the built-in)", r.source),
                    (Some(_), false) => format!("{} (overrides the built-in)", r.source),
                    (None, false) => r.source.clone(),
                };
                let stages =
                    if r.stages.is_empty() { String::new() } else { format!("  used by {}", r.stages.join(", ")) };
                text.push_str(&format!("{:width$}  {short}  {source}{stages}\n", r.name));
            }
            if settings.is_none() {
                text.push_str("(no pipeline config here: built-ins only)\n");
            }
            printer.summary(text.trim_end(), &rows);
        }
        PromptsCommand::Show(a) => {
            let t = match (&dir, a.builtin) {
                (Some(d), false) => resolve(d, &a.name).map_err(anyhow::Error::msg)?,
                _ => match builtin(&a.name) {
                    Some(text) => Template { name: a.name.clone(), text: text.into(), origin: Origin::Builtin },
                    None => anyhow::bail!("`{}` is not a built-in prompt template (`benchgen prompts list`)", a.name),
                },
            };
            // The text itself on stdout (to redirect into a file); its source on stderr.
            printer.info(&format!("{} ({})", t.shown(shown), t.hash()));
            if printer.json {
                printer.summary(
                    "",
                    &serde_json::json!({"name": t.name, "source": t.shown(shown), "hash": t.hash(), "text": t.text}),
                );
            } else {
                crate::printer::out(t.text.trim_end_matches('\n'));
            }
        }
        PromptsCommand::Export(a) => {
            let target = match (&a.dir, &dir) {
                (Some(d), _) => d.clone(),
                (None, Some(d)) => d.clone(),
                (None, None) => PathBuf::from("pipeline/prompts"),
            };
            let (written, kept) = export(&target, a.force)?;
            let mut text = format!("wrote {} templates into `{}`", written.len(), shown(&target));
            if !kept.is_empty() {
                text.push_str(&format!("; kept {} that exist ({}; `--force` overwrites)", kept.len(), kept.join(", ")));
            }
            text.push_str(
                ".\nEach file overrides its built-in: keep the ones you change and delete the rest, or they pin benchgen's current text.",
            );
            printer.summary(&text, &serde_json::json!({"dir": shown(&target), "written": written, "kept": kept}));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    #[test]
    fn the_builtin_list_is_the_prompts_folder_sorted() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("pipeline/prompts");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
            .collect();
        on_disk.sort();
        let listed: Vec<String> = BUILTIN.iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(listed, on_disk, "add new templates to BUILTIN in src/llm/prompts.rs");
    }

    #[test]
    fn a_builtin_hashes_as_its_file_did_and_an_override_wins() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("pipeline/prompts");
        let empty = std::env::temp_dir().join(format!("benchgen-prompts-{}", std::process::id()));
        std::fs::create_dir_all(&empty).unwrap();
        let b = resolve(&empty, "efs_verify").unwrap();
        assert_eq!(b.origin, Origin::Builtin);
        assert_eq!(b.hash(), crate::store::hash_file(&repo.join("efs_verify.md")).unwrap());
        std::fs::write(empty.join("efs_verify.md"), "Mine: {{ x }}\n").unwrap();
        let o = resolve(&empty, "efs_verify").unwrap();
        assert_eq!(o.origin, Origin::File(empty.join("efs_verify.md")));
        assert_ne!(o.hash(), b.hash());
        let err = resolve(&empty, "no_such_template").unwrap_err();
        assert!(err.contains("not built in") && err.contains("benchgen prompts list"), "{err}");
        std::fs::remove_dir_all(&empty).unwrap();
    }

    // Fixed text first, data last (issue 39): llama-server and vLLM reuse the longest
    // common prefix of consecutive requests, so whatever precedes a template's first
    // variable is evaluated once, and whatever follows it is evaluated for every item.

    /// A minijinja tag: `{{ … }}`, `{% … %}` or `{# … #}`.
    fn tag() -> regex::Regex {
        regex::Regex::new(r"(?s)\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}").unwrap()
    }

    /// A template's system and user parts, split at its `--- user ---` line.
    fn parts<'a>(name: &str, text: &'a str) -> (&'a str, &'a str) {
        const MARK: &str = "\n--- user ---\n";
        let at = text.find(MARK).unwrap_or_else(|| panic!("built-in `{name}` has no `--- user ---` line"));
        (&text[..at], &text[at + MARK.len()..])
    }

    /// The user part's text before its first tag: what every item's user message starts with.
    fn fixed_head(user: &str) -> &str {
        user[..tag().find(user).map_or(user.len(), |m| m.start())].trim()
    }

    /// Variables every built-in template renders with: each name any of them uses, in a
    /// shape that fits every use (a tool has every field some template reads; `{{ server }}`
    /// and `{{ persona }}` print an object as well as `server.name` and `persona | items`
    /// read it). A template that uses a new name fails to render until it is added here.
    fn example_vars() -> Value {
        let tool = json!({
            "id": "s::t", "name": "t", "server": "s", "description": "what t does",
            "inputs": ["`x` (required): the x"], "required": ["x"],
            "parameters": [{"name": "x", "description": "the x"}]
        });
        let mut candidate = tool.clone();
        candidate["n"] = json!(1);
        let call = json!({"n": 1, "tool": "t", "arguments": "x=1", "result": "ok"});
        // Pairs, not one `json!` object: one that large reaches the macro recursion limit.
        let vars = [
            ("a", json!(17)),
            ("b", json!(25)),
            ("n", json!(2)),
            ("count", json!(3)),
            ("sessions", json!(2)),
            ("turn", json!(1)),
            ("min_requests", json!(2)),
            ("max_requests", json!(3)),
            ("turn_cap", json!(2)),
            ("round", json!(1)),
            ("scale_min", json!(1)),
            ("scale_max", json!(5)),
            ("name", json!("t")),
            ("description", json!("what it does")),
            ("query", json!("the query")),
            ("request", json!("the request")),
            ("answer", json!("the answer")),
            ("domain", json!("finance")),
            ("rule", json!("MUST mention the platform \"P\" explicitly")),
            ("platform", json!("P")),
            ("entity", json!("Morvira")),
            ("task", json!("the task")),
            ("gap", json!("the gap")),
            ("perspective", json!("a user")),
            ("target", json!("tool")),
            ("server_name", json!("s")),
            ("server_description", json!("the server")),
            ("server_tools", json!(["t"])),
            ("rule_reason", json!("unsure")),
            ("kind", json!("chain")),
            ("sample", json!("the sample")),
            ("goal", json!("the goal")),
            ("note", json!("a note")),
            ("feedback", json!("too vague")),
            ("level", json!(4)),
            ("reason", json!("the query asks only for `s::t`")),
            ("sub_scenario", json!("the sub-scenario")),
            ("tool", json!(tool)),
            ("tool_a", json!(tool)),
            ("tool_b", json!(tool)),
            ("anchor", json!(tool)),
            ("from", json!(tool)),
            ("to", json!(tool)),
            ("tools", json!([tool])),
            ("candidates", json!([candidate])),
            ("server", json!({"name": "s", "description": "the server", "summary": "a summary"})),
            ("scenario", json!({"query": "the scenario"})),
            ("call", json!(call)),
            ("calls", json!([call])),
            ("before", json!([call])),
            ("steps", json!([{"n": 1, "tool": "t", "description": "d"}])),
            ("step", json!({"n": 1, "tool": "t", "description": "d"})),
            ("services", json!([{"n": 1, "name": "s", "description": "the server", "tools": [tool]}])),
            ("labels", json!(["a label"])),
            ("descriptions", json!(["a description"])),
            ("requests", json!(["a request"])),
            ("taxonomy", json!(["a scenario"])),
            ("problems", json!(["claims too much"])),
            ("source_categories", json!(["a category"])),
            ("value_flow", json!(["x"])),
            ("dimensions", json!([{"id": "d", "name": "a dimension", "description": "what it means"}])),
            ("examples", json!([{"tool": "t", "query": "an example"}])),
            ("persona", json!({"mood": "patient"})),
            ("conversation", json!([{"role": "user", "text": "hi"}])),
            ("turns", json!([{"turn": 1, "user": "hi", "tools": ["t"], "reply": "hello"}])),
        ];
        Value::Object(vars.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
    }

    /// The same shape with every string and number changed: another item.
    fn vary(v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(format!("{s} 2")),
            Value::Number(n) => json!(n.as_i64().unwrap_or_default() + 1),
            Value::Array(a) => Value::Array(a.iter().map(vary).collect()),
            Value::Object(o) => Value::Object(o.iter().map(|(k, x)| (k.clone(), vary(x))).collect()),
            other => other.clone(),
        }
    }

    /// The messages' contents joined, as a server's chat template lays them out in order.
    fn joined(messages: &[Value]) -> String {
        messages.iter().filter_map(|m| m["content"].as_str()).collect::<Vec<_>>().join("\n")
    }

    /// The layout rule, read from the text: the system part holds no tag, and after the user
    /// part's first tag the fixed text (split at tags into stretches) is only what data needs:
    /// the rest of a line that holds a tag (a label, or the rest of a sentence with a variable)
    /// of at most 200 bytes, then whole lines of at most 120 bytes (a lead-in before more data
    /// or one short closing line). A paragraph of instructions after the data fails.
    #[test]
    fn builtin_templates_put_their_fixed_text_before_their_data() {
        let tag = tag();
        for &(name, text) in BUILTIN {
            let (system, user) = parts(name, text);
            assert!(
                !tag.is_match(system) && !system.contains("{{") && !system.contains("{%"),
                "`{name}`: its system part uses a variable or tag; move it into the user part's data"
            );
            let first = tag.find(user).map_or(user.len(), |m| m.start());
            for stretch in tag.split(&user[first..]) {
                let (rest_of_line, lines) = stretch.split_once('\n').unwrap_or((stretch, ""));
                let (rest_of_line, lines) = (rest_of_line.trim(), lines.trim());
                assert!(
                    rest_of_line.len() <= 200,
                    "`{name}`: {} bytes of fixed text follow a variable on its line (at most 200): {rest_of_line:?}; \
                     put instructions before the first variable",
                    rest_of_line.len()
                );
                assert!(
                    lines.len() <= 120,
                    "`{name}`: {} bytes of fixed text after the data (at most 120: a lead-in or one short \
                     closing line): {lines:?}; put instructions before the first variable",
                    lines.len()
                );
            }
        }
    }

    /// Rendered by the real renderer for two different items, every built-in's messages
    /// share at least the system message and the user part's text before its first tag:
    /// the prefix a server evaluates once.
    #[test]
    fn builtin_templates_render_a_shared_fixed_prefix_for_any_item() {
        let (vars, other) = (example_vars(), vary(&example_vars()));
        for &(name, text) in BUILTIN {
            let render = |v: &Value| {
                let rendered = crate::llm::render_template(name, text, v)
                    .unwrap_or_else(|e| panic!("{e}: give `example_vars` the variables `{name}` uses"));
                crate::llm::split_messages(&rendered)
            };
            let (one, two) = (render(&vars), render(&other));
            assert_ne!(one, two, "`{name}` renders the same messages for two different items");
            assert_eq!(one.len(), 2, "`{name}`: a system and a user message: {one:?}");
            assert_eq!(one[0], two[0], "`{name}`: the system message differs between two items");
            let head = fixed_head(parts(name, text).1);
            let fixed = one[0]["content"].as_str().unwrap_or_default().len() + 1 + head.len();
            let (a, b) = (joined(&one), joined(&two));
            let shared = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
            assert!(
                shared >= fixed,
                "`{name}`: two items share {shared} bytes, less than the system message and the fixed \
                 text {head:?} ({fixed} bytes):\n{a}\n---\n{b}"
            );
        }
    }
}
