//! The sample as the review web app shows it: turn by turn, each tool call with its
//! tool's description, its arguments as a table (with what the tool's schema says of
//! each), its full result (collapsible, a preview of `[review] result_chars` while
//! closed), and its place in the reference plan (step, dependencies, EFS
//! alternatives); the final answer apart; the rubric beside it.
//!
//! Descriptions come from the catalogs the pipeline built, when they exist: the
//! filtered catalog (`artifacts/filter/catalog.json`), else the imported one
//! (`artifacts/registry-import/catalog.json`), and a log track's tool list
//! (`artifacts/logs-import/catalog.json`). A sample brought from elsewhere may name tools
//! none of them knows; the page says so instead of showing nothing.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

use crate::model::{PlanCall, RecordedCall, Sample};
use crate::settings::Settings;

/// What the catalog says of one tool.
#[derive(Debug, Clone, Default)]
pub struct ToolInfo {
    pub description: String,
    /// Parameter name → (JSON type, description), from the input schema.
    pub params: BTreeMap<String, (String, String)>,
    pub required: Vec<String>,
    /// Whether the input schema lists its properties (so an argument outside it is news).
    pub has_properties: bool,
}

impl ToolInfo {
    fn from_schema(description: &str, schema: &Value) -> Self {
        let props = schema.get("properties").and_then(Value::as_object);
        let params = props
            .into_iter()
            .flatten()
            .map(|(k, v)| {
                let ty = match v.get("type") {
                    Some(Value::String(t)) => t.clone(),
                    Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" | "),
                    _ => String::new(),
                };
                let d = v.get("description").and_then(Value::as_str).unwrap_or("").trim().to_string();
                (k.clone(), (ty, d))
            })
            .collect();
        let required = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).map(str::to_string).collect())
            .unwrap_or_default();
        ToolInfo { description: description.trim().to_string(), params, required, has_properties: props.is_some() }
    }
}

/// The tools the page can describe, by id, and by bare name when that is unambiguous.
#[derive(Debug, Clone, Default)]
pub struct Tools {
    by_id: BTreeMap<String, ToolInfo>,
    /// Tool name (the part after `server::`) → its id, `None` when two servers share it.
    by_name: BTreeMap<String, Option<String>>,
}

impl Tools {
    pub fn insert(&mut self, id: &str, info: ToolInfo) {
        if self.by_id.contains_key(id) {
            return; // the first catalog read wins (the filtered one before the imported one)
        }
        if let Some((_, name)) = crate::model::split_tool_id(id) {
            self.by_name
                .entry(name.to_string())
                .and_modify(|e| {
                    if e.as_deref() != Some(id) {
                        *e = None
                    }
                })
                .or_insert_with(|| Some(id.to_string()));
        }
        self.by_id.insert(id.to_string(), info);
    }

    /// A tool by its id; failing that, by its bare name (`nav` for `fin::nav`, or the other
    /// way round) when only one catalog tool has it.
    pub fn get(&self, id: &str) -> Option<&ToolInfo> {
        if let Some(t) = self.by_id.get(id) {
            return Some(t);
        }
        let name = crate::model::split_tool_id(id).map(|(_, n)| n).unwrap_or(id);
        if let Some(t) = self.by_id.get(name) {
            return Some(t);
        }
        self.by_name.get(name).cloned().flatten().and_then(|full| self.by_id.get(&full))
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

/// HTML escaping for text and attribute values (the sample page's, and the server's
/// other pages').
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            _ => o.push(c),
        }
    }
    o
}

/// Every tool description the pipeline's catalogs hold; unreadable catalogs are warnings
/// (the page then shows calls without descriptions), returned with the tools.
pub fn load_tools(s: &Settings) -> (Tools, Vec<String>) {
    let mut tools = Tools::default();
    let mut warnings = Vec::new();
    for art in [crate::filter::CATALOG, crate::registry::CATALOG] {
        let p = art.path(s);
        if !p.exists() {
            continue;
        }
        match crate::model::Catalog::load(&p) {
            Ok(c) => {
                for (_, t) in c.tools() {
                    tools.insert(&t.id, ToolInfo::from_schema(&t.description, &t.input_schema));
                }
            }
            Err(e) => warnings.push(format!("tool descriptions from `{}` are not shown: {e:#}", s.display_path(&p))),
        }
    }
    let p = crate::logs::import::CATALOG.path(s);
    if p.exists() {
        let read = std::fs::read(&p)
            .map_err(anyhow::Error::from)
            .and_then(|b| serde_json::from_slice::<Vec<crate::logs::import::LogTool>>(&b).map_err(anyhow::Error::from));
        match read {
            Ok(list) => {
                for t in list {
                    tools.insert(&t.name, ToolInfo::from_schema(&t.description, &t.input_schema));
                }
            }
            Err(e) => warnings.push(format!("tool descriptions from `{}` are not shown: {e:#}", s.display_path(&p))),
        }
    }
    (tools, warnings)
}

/// Text with its line breaks kept (`white-space: pre-wrap` in the style sheet).
fn text_block(class: &str, s: &str) -> String {
    format!("<div class=\"{class}\">{}</div>", esc(s.trim()))
}

/// A tool result as shown in full: pretty-printed when it is a JSON object or array.
fn full_result(r: &str) -> String {
    match serde_json::from_str::<Value>(r) {
        Ok(v @ (Value::Object(_) | Value::Array(_))) => serde_json::to_string_pretty(&v).unwrap_or_else(|_| r.into()),
        _ => r.to_string(),
    }
}

/// One argument value for the table: text as it is, anything else as JSON (pretty when long).
fn arg_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("<span class=\"str\">{}</span>", esc(s)),
        _ => {
            let compact = v.to_string();
            if compact.chars().count() > 80 {
                format!("<pre class=\"json\">{}</pre>", esc(&serde_json::to_string_pretty(v).unwrap_or(compact)))
            } else {
                format!("<code>{}</code>", esc(&compact))
            }
        }
    }
}

fn args_table(args: &Value, info: Option<&ToolInfo>) -> String {
    let mut b = String::from(
        "<table class=\"args\"><thead><tr><th>argument</th><th>value</th><th>in the tool's schema</th></tr></thead><tbody>",
    );
    let meaning = |k: &str| match info.and_then(|i| i.params.get(k)) {
        Some((ty, d)) => {
            let req = if info.is_some_and(|i| i.required.iter().any(|r| r == k)) { ", required" } else { "" };
            let ty = if ty.is_empty() { String::new() } else { format!("<span class=\"ty\">{}{req}</span> ", esc(ty)) };
            format!("{ty}{}", esc(d))
        }
        None if info.is_some_and(|i| i.has_properties) => {
            "<span class=\"warn\">not a parameter of this tool</span>".into()
        }
        None => String::new(),
    };
    match args {
        Value::Object(m) if m.is_empty() => b.push_str("<tr><td colspan=\"3\" class=\"none\">no arguments</td></tr>"),
        Value::Object(m) => {
            for (k, v) in m {
                let _ = write!(
                    b,
                    "<tr><th scope=\"row\"><code>{}</code></th><td>{}</td><td>{}</td></tr>",
                    esc(k),
                    arg_value(v),
                    meaning(k)
                );
            }
        }
        other => {
            let _ = write!(b, "<tr><th scope=\"row\">(not an object)</th><td>{}</td><td></td></tr>", arg_value(other));
        }
    }
    if let Some(i) = info {
        for r in &i.required {
            if args.get(r).is_none() {
                let _ = write!(
                    b,
                    "<tr class=\"missing\"><th scope=\"row\"><code>{}</code></th><td><span class=\"warn\">missing</span></td><td>{}</td></tr>",
                    esc(r),
                    meaning(r)
                );
            }
        }
    }
    b.push_str("</tbody></table>");
    b
}

/// A collapsible block holding a text in full; open at once when it is short, else a
/// preview of `preview` characters while closed.
fn collapsible(class: &str, label: &str, text: &str, preview: usize) -> String {
    let n = text.chars().count();
    let short = n <= preview;
    let head = if short {
        format!("{label} <span class=\"len\">({n} characters)</span>")
    } else {
        format!(
            "{label} <span class=\"len\">({n} characters; showing the first {preview}: open for all)</span>\
             <span class=\"preview\">{}…</span>",
            esc(&text.chars().take(preview).collect::<String>())
        )
    };
    format!(
        "<details class=\"{class}\"{}><summary>{head}</summary><pre class=\"full\">{}</pre></details>",
        if short { " open" } else { "" },
        esc(text)
    )
}

/// Where an executed call sits in its turn's plan: the plan call (index) it carries out.
/// Calls of the `g`-th trajectory step holding a plan call belong to the plan's `g`-th
/// group (the order `execute` and the release use); inside it, to the first unused plan call listing the tool.
fn match_plan(plan: &[PlanCall], trajectory: &[Vec<RecordedCall>]) -> Vec<Vec<Option<usize>>> {
    let mut groups: Vec<u32> = plan.iter().map(|c| c.group).collect();
    groups.sort_unstable();
    groups.dedup();
    let mut used = vec![false; plan.len()];
    let mut out = Vec::new();
    // Left-out calls carry out no plan call, and a step of only left-out calls no group.
    let mut gi = 0;
    for step in trajectory {
        let g = groups.get(gi).copied();
        if step.iter().any(|c| c.left_out.is_none()) {
            gi += 1;
        }
        let mut row = Vec::new();
        for c in step {
            if c.left_out.is_some() {
                row.push(None);
                continue;
            }
            let hit = (0..plan.len())
                .find(|&i| !used[i] && Some(plan[i].group) == g && plan[i].alternatives.contains(&c.tool))
                .or_else(|| (0..plan.len()).find(|&i| !used[i] && plan[i].alternatives.contains(&c.tool)));
            if let Some(i) = hit {
                used[i] = true;
            }
            row.push(hit);
        }
        out.push(row);
    }
    out
}

fn step_of(plan: &[PlanCall], i: usize) -> usize {
    let mut groups: Vec<u32> = plan.iter().map(|c| c.group).collect();
    groups.sort_unstable();
    groups.dedup();
    groups.iter().position(|g| *g == plan[i].group).unwrap_or(0) + 1
}

fn plan_ref(plan: &[PlanCall], i: usize, tool: &str) -> String {
    let c = &plan[i];
    let mut parts = vec![format!("plan call #{} · step {}", i + 1, step_of(plan, i))];
    if !c.depends_on.is_empty() {
        let deps: Vec<String> = c
            .depends_on
            .iter()
            .map(|d| match plan.get(*d) {
                Some(p) => format!("#{} {}", d + 1, p.alternatives.first().map(String::as_str).unwrap_or("")),
                None => format!("#{} (not in the plan)", d + 1),
            })
            .collect();
        parts.push(format!("uses the output of {}", deps.join(", ")));
    }
    if c.alternatives.len() > 1 {
        let others: Vec<&str> = c.alternatives.iter().map(String::as_str).filter(|a| *a != tool).collect();
        parts.push(format!("EFS alternatives: {}", others.join(", ")));
    }
    esc(&parts.join(" · "))
}

fn plan_table(plan: &[PlanCall], executed: &[Option<(usize, usize)>], tools: &Tools, turn: usize) -> String {
    let steps = {
        let mut g: Vec<u32> = plan.iter().map(|c| c.group).collect();
        g.sort_unstable();
        g.dedup();
        g.len()
    };
    let mut b = format!(
        "<details class=\"plan\" open><summary>Reference plan: {} call(s) in {steps} step(s)</summary>\
         <table class=\"plan\"><thead><tr><th>#</th><th>step</th><th>tool (EFS alternatives)</th>\
         <th>uses the output of</th><th>executed</th></tr></thead><tbody>",
        plan.len()
    );
    for (i, c) in plan.iter().enumerate() {
        let alts: Vec<String> = c
            .alternatives
            .iter()
            .map(|a| {
                let d = tools.get(a).map(|t| t.description.as_str()).unwrap_or("");
                if d.is_empty() {
                    format!("<code>{}</code>", esc(a))
                } else {
                    format!("<code title=\"{}\">{}</code>", esc(d), esc(a))
                }
            })
            .collect();
        let deps: Vec<String> = c.depends_on.iter().map(|d| format!("#{}", d + 1)).collect();
        let ex = match executed.get(i).copied().flatten() {
            Some((g, k)) => format!("<a href=\"#{}\">step {}</a>", call_anchor(turn, g, k), g + 1),
            None => "<span class=\"warn\">not executed</span>".into(),
        };
        let _ = write!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{ex}</td></tr>",
            i + 1,
            step_of(plan, i),
            alts.join(" | "),
            if deps.is_empty() { "—".into() } else { deps.join(", ") }
        );
    }
    b.push_str("</tbody></table></details>");
    b
}

/// The page anchor of call `k` of step `g` of a turn (all 1-based in the anchor).
fn call_anchor(turn: usize, g: usize, k: usize) -> String {
    format!("call-{turn}-{}-{}", g + 1, k + 1)
}

fn call_html(
    c: &RecordedCall,
    anchor: &str,
    plan: &[PlanCall],
    at: Option<usize>,
    tools: &Tools,
    preview: usize,
) -> String {
    let info = tools.get(&c.tool);
    let mut b =
        format!("<article class=\"call\" id=\"{anchor}\"><header><code class=\"tool\">{}</code> ", esc(&c.tool));
    match at {
        Some(i) => {
            let _ = write!(b, "<span class=\"plan-ref\">{}</span>", plan_ref(plan, i, &c.tool));
        }
        None if c.left_out.is_some() => {
            let why = c.left_out.as_deref().unwrap_or_default();
            let _ = write!(b, "<span class=\"plan-ref left-out\">left out of the reference plan: {}</span>", esc(why));
        }
        None if plan.is_empty() => {}
        None => b.push_str("<span class=\"plan-ref warn\">not in the reference plan</span>"),
    }
    b.push_str("</header>");
    match info.map(|i| i.description.as_str()) {
        Some(d) if !d.is_empty() => b.push_str(&text_block("desc", d)),
        _ => b.push_str("<div class=\"desc none\">No description of this tool in the catalog.</div>"),
    }
    b.push_str(&args_table(&c.arguments, info));
    if let Some(e) = &c.error {
        b.push_str(&collapsible("result error", "<b>Error</b>", e, preview));
    }
    match &c.result {
        Some(r) => b.push_str(&collapsible("result", "<b>Result</b>", &full_result(r), preview)),
        None if c.error.is_none() => b.push_str("<p class=\"warn\">No result was recorded.</p>"),
        None => {}
    }
    b.push_str("</article>");
    b
}

/// The sample, turn by turn, for a reviewer.
pub fn sample_html(s: &Sample, tools: &Tools, preview: usize) -> String {
    let calls: usize = s.turns.iter().map(|t| t.trajectory.iter().map(Vec::len).sum::<usize>()).sum();
    let n = s.turns.len();
    let mut b = format!(
        "<div class=\"sample\"><p class=\"meta\">{} · {} · {} · {n} turn(s) · {calls} tool call(s) · {} planned</p>",
        esc(s.kind.as_str()),
        esc(&s.scenario.join(" / ")),
        esc(s.difficulty.as_str()),
        s.reference_calls()
    );
    b.push_str(
        "<p class=\"tools\"><button type=\"button\" id=\"expand-all\">Open every result</button> \
         <button type=\"button\" id=\"collapse-all\">Close long results</button></p>",
    );
    if n > 1 {
        b.push_str("<nav class=\"turns\">Turns:");
        for i in 1..=n {
            let _ = write!(b, " <a href=\"#turn-{i}\">{i}</a>");
        }
        b.push_str(" · <a href=\"#final-answer\">final answer</a></nav>");
    }
    for (ti, t) in s.turns.iter().enumerate() {
        let tn = ti + 1;
        let _ = write!(b, "<section class=\"turn\" id=\"turn-{tn}\">");
        if n > 1 {
            let _ = write!(b, "<h2>Turn {tn} of {n}</h2>");
        }
        let _ =
            write!(b, "<div class=\"msg user\"><span class=\"who\">User</span>{}</div>", text_block("text", &t.user));
        let matched = match_plan(&t.reference_plan, &t.trajectory);
        let mut executed: Vec<Option<(usize, usize)>> = vec![None; t.reference_plan.len()];
        for (g, row) in matched.iter().enumerate() {
            for (k, at) in row.iter().enumerate() {
                if let Some(i) = at {
                    executed[*i] = Some((g, k));
                }
            }
        }
        if !t.reference_plan.is_empty() {
            b.push_str(&plan_table(&t.reference_plan, &executed, tools, tn));
        }
        if t.trajectory.is_empty() {
            b.push_str("<p class=\"warn\">No tool call was executed in this turn.</p>");
        } else {
            b.push_str("<ol class=\"steps\">");
            for (g, step) in t.trajectory.iter().enumerate() {
                let par = if step.len() > 1 {
                    format!(" <span class=\"par\">({} calls in parallel)</span>", step.len())
                } else {
                    String::new()
                };
                let _ = write!(b, "<li class=\"step\"><h3>Step {}{par}</h3>", g + 1);
                for (k, c) in step.iter().enumerate() {
                    b.push_str(&call_html(c, &call_anchor(tn, g, k), &t.reference_plan, matched[g][k], tools, preview));
                }
                b.push_str("</li>");
            }
            b.push_str("</ol>");
        }
        if tn < n {
            match &t.gold_reply {
                Some(a) => {
                    let _ = write!(
                        b,
                        "<div class=\"msg reply\"><span class=\"who\">Assistant's reply to turn {tn}</span>{}</div>",
                        text_block("text", a)
                    );
                }
                None => b.push_str("<p class=\"warn\">No reply in this turn.</p>"),
            }
        }
        b.push_str("</section>");
    }
    b.push_str("<section class=\"final-answer\" id=\"final-answer\"><h2>Final answer</h2>");
    match s.turns.last().and_then(|t| t.gold_reply.as_deref()).filter(|a| !a.trim().is_empty()) {
        Some(a) => b.push_str(&text_block("text", a)),
        None => b.push_str("<p class=\"warn\">The sample has no final answer.</p>"),
    }
    b.push_str("</section></div>");
    b
}

/// The rubric above the score form: the scale, the acceptance rule.
pub fn rubric_intro(scale_min: u8, scale_max: u8, accept_min: u8) -> String {
    format!(
        "<p class=\"rule\">Score each dimension from {scale_min} (very poor) to {scale_max} (excellent). \
         You accept the sample when every dimension scores at least {accept_min}; it is kept when both \
         reviewers accept it.</p>"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(tool: &str) -> RecordedCall {
        RecordedCall {
            tool: tool.into(),
            arguments: serde_json::json!({}),
            result: Some("ok".into()),
            error: None,
            left_out: None,
        }
    }

    #[test]
    fn executed_calls_find_their_plan_calls_by_step_and_tool() {
        let plan = vec![
            PlanCall { alternatives: vec!["S::a".into(), "T::a".into()], group: 0, depends_on: vec![] },
            PlanCall { alternatives: vec!["S::b".into()], group: 0, depends_on: vec![] },
            PlanCall { alternatives: vec!["S::c".into()], group: 3, depends_on: vec![0, 1] },
        ];
        let traj = vec![vec![call("S::b"), call("T::a")], vec![call("S::c"), call("S::x")]];
        assert_eq!(match_plan(&plan, &traj), vec![vec![Some(1), Some(0)], vec![Some(2), None]]);
        assert_eq!(step_of(&plan, 2), 2, "plan groups are numbered by rank");
        let r = plan_ref(&plan, 0, "T::a");
        assert!(r.contains("plan call #1 · step 1") && r.contains("EFS alternatives: S::a"), "{r}");
        assert!(plan_ref(&plan, 2, "S::c").contains("uses the output of #1 S::a, #2 S::b"));
    }

    #[test]
    fn long_results_are_collapsed_with_a_preview_and_kept_whole() {
        let long = "x".repeat(50) + "END";
        let h = collapsible("result", "Result", &long, 10);
        assert!(!h.contains(" open>") && h.contains("xxxxxxxxxx…") && h.contains(&long), "{h}");
        let h = collapsible("result", "Result", "short", 10);
        assert!(h.contains("<details class=\"result\" open>"), "{h}");
        assert_eq!(full_result("{\"a\":1}"), "{\n  \"a\": 1\n}");
        assert_eq!(full_result("12"), "12", "a JSON scalar stays as the tool said it");
    }

    #[test]
    fn tools_are_found_by_id_or_by_an_unambiguous_name() {
        let mut t = Tools::default();
        t.insert("S::nav", ToolInfo { description: "NAV".into(), ..Default::default() });
        t.insert("S::dup", ToolInfo { description: "1".into(), ..Default::default() });
        t.insert("T::dup", ToolInfo { description: "2".into(), ..Default::default() });
        assert_eq!(t.get("S::nav").unwrap().description, "NAV");
        assert_eq!(t.get("X::nav").unwrap().description, "NAV");
        assert!(t.get("dup").is_none(), "ambiguous");
        assert_eq!(t.get("S::dup").unwrap().description, "1");
    }
}
