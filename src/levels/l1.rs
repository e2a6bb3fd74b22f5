//! `benchgen levels l1` (stage `levels-l1`): explicit single-tool queries (ETOM A.6).
//!
//! Per eligible tool (see `levels-profiles`) the writer drafts `candidates` queries that
//! name the platform; each is verified against ETOM's four rules (intent matches the
//! description, platform named, self-contained, no meta-language) plus a mechanical check
//! that the platform's name really occurs. One verified query is kept per tool, chosen
//! with the project seed. The shared write-then-verify step lives here (L2 uses it too).

use anyhow::Result;
use futures::future::join_all;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::profiles::{PROFILES, Profiles};
use super::{Funnel, LevelOut, Step};
use crate::llm::Prompt;
use crate::llm::batch::{self, Batch, Item, ItemError};
use crate::settings::Settings;
use crate::stage::{Artifact, ConfigRef, Ctx, Inputs, Output, Plan, PromptRef, Stage, StageSpec};

pub const STAGE: &str = "levels-l1";
pub const QUERIES: Artifact<LevelOut> = Artifact::new(STAGE, "queries.json");
pub const WRITE_TEMPLATE: &str = "levels_l1_write";
pub const VERIFY_TEMPLATE: &str = "levels_l1_verify";
/// The writer's template for a query whose every candidate was refused (L1 and L2).
pub const AGAIN_TEMPLATE: &str = "levels_query_rewrite";

pub static SPEC: StageSpec = StageSpec {
    name: STAGE,
    command: "levels l1",
    // 2: a query that copies a tool's description, signature or function name is refused.
    // 3: the plan check (`plan_check`, issue 38) on every kept query.
    // 4: an item whose every candidate was refused is asked again once, with the reason.
    // 5: a draft that shares no word with what its tool does is refused by rule.
    // 6: the draft's schema holds the mention and function-name rules (`Mention::pattern`).
    // 7: a camelCase function name or an input line's form is refused; no backquotes.
    // 8: a query that makes the platform its subject ("Alpha Markets' CEO") is refused.
    // 9: the platform may come after up to 300 characters (150 forced it in mid-word).
    // 10: ... and one that asks for something of the platform ("the company profile for
    //     Alpha Markets?") too.
    // 11: a tool is named only by its name's words close together (plan check, `unrelated`).
    // 12: a drafted query is at most 500 characters (`MAX_QUERY_CHARS`; 1,000 before), the
    //     platform's name within its first 250 (300).
    // 13: the needed-call check's schema describes the answer only (its developer
    //     note, with a bad reason about a price, had reached the prompt).
    // 14: the answer's schema says what is asked, not "the X's typed answer" (developer
    //     wording the model read).
    // 15: the plan check's plurals fold by the shared `text::singular` as refined: `caches` → `cache`, `causes` →
    //     `cause`, `cpus` → `cpu`; three-letter words but `ids` and `this`, `news` stay.
    // 16: the plan check weighs the step's embedding similarity to the query, as in L3
    //     and L4 (a step clearly low by it and by its words is pruned, and the query
    //     rejected), so the level's judge is not the only guard.
    // 17: a plan-check step the rules leave open is put to the per-step judge
    //     (`levels_step_need`), as in L3 and L4; plurals fold by `text::singular` with two vowels before `ch`/`us` read as one
    //     (`breaches` → `breach`, not `breache`), and `ips`, `vms`, `prs` fold.
    // 18: the verifier's reason is at most 160 characters (`QueryCheck`).
    // 19: v18's cap withdrawn: the 0.5B verifier's verdicts changed with its prompt and the
    //     demo lost its L2.
    version: 19,
    about: "ETOM L1: per eligible tool, queries naming the platform, verified by ETOM's four rules; one kept",
    reads: &[crate::filter::CATALOG.read(), PROFILES.read()],
    writes: &["queries.json", crate::llm::batch::FAILED_FILE],
    section: Some("levels"),
};

#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
pub struct Drafts {
    pub queries: Vec<String>,
}

// Doc comments of answer types are schema descriptions the model reads (typed_calls checks them).
/// Does the query follow each rule? One true or false per rule, and a one-sentence reason.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
pub struct QueryCheck {
    pub intent_matches: bool,
    pub platform_rule_obeyed: bool,
    pub self_contained: bool,
    pub no_meta_language: bool,
    // Not capped below the 300 of other explanations, though the demo's 0.5B verifier
    // fills them by repeating itself (all 10 answers of a run): with 160 (v18) the same
    // model changed its verdicts and refused all four of the demo's L2 queries.
    pub reason: String,
}

/// One drafted query and its verdict.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Candidate {
    pub query: String,
    pub verified: bool,
    pub reason: String,
    pub exchange: String,
    /// The exchange that asked the writer again for this query, after every first
    /// candidate was refused (absent on first candidates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asked_again: Option<String>,
}

/// A write-and-verify item's checkpointed value.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Drafted {
    pub write_exchange: String,
    pub candidates: Vec<Candidate>,
}

/// The word before the platform's name (`p`, lower case) in `q` (lower case) where the
/// name ends a sentence of the request and follows "for", "of" or "about": the platform
/// is then what is asked about ("the company profile for alpha markets?").
fn asked_of(q: &str, p: &str) -> Option<&'static str> {
    q.match_indices(p).find_map(|(i, _)| {
        let after = q[i + p.len()..].trim_start();
        let ends = after.is_empty() || after.starts_with(['?', '.', '!', ',', ';']);
        let before = q[..i].trim_end();
        let word = ["for", "of", "about"].into_iter().find(|w| {
            before.ends_with(w) && !before[..before.len() - w.len()].ends_with(|c: char| c.is_alphanumeric())
        })?;
        ends.then_some(word)
    })
}

/// The platform-mention rule of a query.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub enum Mention {
    /// The query must name this platform.
    Must(String),
    /// The query must name none of these platforms.
    MustNot(Vec<String>),
}

impl Mention {
    /// The mechanical half of the rule (the verifier judges the rest).
    pub fn check(&self, query: &str) -> Option<String> {
        let q = query.to_lowercase();
        match self {
            Mention::Must(p) if !q.contains(&p.to_lowercase()) => {
                Some(format!("platform not named: `{p}` does not occur"))
            }
            // "What is Alpha Markets' company profile?": the platform is where to ask, not
            // what is asked about (the demo's 1.5B wrote this; its verifier passed it).
            Mention::Must(p) if q.contains(&format!("{}'", p.to_lowercase())) => {
                Some(format!("asks about the platform itself (\"{p}'…\") instead of asking it for something"))
            }
            // "What is the company profile for Alpha Markets?" (released as an L2 by the
            // demo): the request's object is the platform, not something it should look up.
            Mention::Must(p) if let Some(w) = asked_of(&q, &p.to_lowercase()) => Some(format!(
                "asks about the platform itself (\"{w} {p}\" ends the request) instead of asking it for something"
            )),
            Mention::MustNot(ps) => ps
                .iter()
                .find(|p| !p.is_empty() && q.contains(&p.to_lowercase()))
                .map(|p| format!("platform named: `{p}` occurs although the function is generic")),
            _ => None,
        }
    }
    pub fn text(&self) -> String {
        match self {
            Mention::Must(p) => format!("MUST mention the platform \"{p}\" explicitly"),
            Mention::MustNot(_) => "MUST NOT mention any platform, brand or product name".into(),
        }
    }

    /// The `pattern` of a drafted query: plain text with no function-call characters and,
    /// under `Must`, the platform's name as written. Why in the schema and not only in the
    /// check: grammar-constrained servers (llama-server, vLLM, SGLang) then cannot decode a
    /// query that the mention rule or the snake_case-name rule would refuse. The demo's
    /// local models wrote `get_company_profile(JPM)` or left the platform out of every
    /// L1 draft, and every item was lost. Under `Must` the pattern is never looser than
    /// the mention rule (a name in other letter case passes the rule, not the pattern);
    /// the names `MustNot` forbids are refused by the rule alone. `None` for a platform
    /// holding a character a query may not (`"`, `\\`, a control character), or too long
    /// for a query of [`MAX_QUERY_CHARS`]: no query could both name it and match.
    ///
    /// A pattern cannot bound a total length, so it bounds both sides of the name: at most
    /// 250 characters before it, and after it what is left of [`MAX_QUERY_CHARS`] (a query
    /// that opens with "Alpha Markets" has about 237 more), never more than the items'
    /// `maxLength`.
    pub fn pattern(&self) -> Option<String> {
        let text = QUERY_CHARS;
        match self {
            Mention::Must(p) if p.chars().any(|c| c == '"' || c == '\\' || c.is_control()) => None,
            Mention::Must(p) if p.chars().count() > MAX_QUERY_CHARS => None,
            // 250 characters before the name: a bound of 150 made the grammar force the name
            // into a long query mid-word ("Please provide aAlpha Markets API token.").
            // At most `MAX_QUERY_CHARS` in all, as the items' `maxLength` says.
            Mention::Must(p) => {
                let name = p.chars().count();
                let before = BEFORE_NAME.min(MAX_QUERY_CHARS - name);
                let rest = MAX_QUERY_CHARS - before - name;
                Some(format!("^{text}{{0,{before}}}{}{text}{{0,{rest}}}$", pattern_literal(p)))
            }
            Mention::MustNot(_) => Some(format!("^{text}{{1,{MAX_QUERY_CHARS}}}$")),
        }
    }
}

/// A drafted query's characters: none of a function call's (`x=1`, `{…}`, a snake_case
/// name, a backquoted name; parentheses stay, as in "Tesla (TSLA)") and none that JSON must escape, so that the pattern means the same
/// text to a grammar builder (which reads the JSON string as written) and to a validator
/// (which reads it decoded).
const QUERY_CHARS: &str = r#"[^"\\\x00-\x1F{}=_`]"#;

/// `text` as a regular expression that matches it literally (its special characters
/// escaped).
fn pattern_literal(text: &str) -> String {
    text.chars().map(|c| if ".^$|?*+()[]{}".contains(c) { format!("\\{c}") } else { c.to_string() }).collect()
}

/// Most characters of a drafted L1/L2 query. ETOM's examples are at most 316 (an L4); the
/// demo's 1.5B writer looped ("Provide only the link to the document. Provide only …")
/// until the 1,000 of any answer string, 280 tokens a draft, and a bound a grammar keeps
/// ends such a loop sooner (the loop is refused either way: it copies the description).
pub const MAX_QUERY_CHARS: usize = 500;
/// Most characters before the platform's name under [`Mention::Must`].
const BEFORE_NAME: usize = 250;

/// The writer's answer: at most `n` queries, each plain text of at most [`MAX_QUERY_CHARS`]
/// under `mention`'s rule (see [`Mention::pattern`]).
pub fn drafts_schema(n: usize, mention: &Mention) -> Value {
    let mut schema = crate::llm::schema_with_max_items::<Drafts>("queries", n);
    schema["properties"]["queries"]["items"]["maxLength"] = json!(MAX_QUERY_CHARS);
    if let Some(p) = mention.pattern() {
        schema["properties"]["queries"]["items"]["pattern"] = json!(p);
    }
    schema
}

/// Draft `n` queries, then verify each one (in parallel); the mention rule is also
/// checked mechanically.
pub async fn write_and_verify(
    llm: &Item,
    writer: &str,
    judge: &str,
    (write_t, verify_t): (&str, &str),
    vars: &Value,
    (n, prune): (usize, bool),
    mention: &Mention,
) -> Result<Drafted, ItemError> {
    let mut wv = vars.clone();
    wv["n"] = json!(n);
    wv["rule"] = json!(mention.text());
    // At most `n` queries: a small model may repeat one query over and over.
    let schema = drafts_schema(n, mention);
    let prompt = Prompt::new(write_t, wv.clone());
    let drafts = llm.typed_schema::<Drafts>(writer, &prompt, Some("write"), ("Drafts", schema), |_| Ok(())).await?;
    let mut queries: Vec<String> = Vec::new();
    for q in drafts.value.queries {
        let q = super::one_line(&q);
        if !q.is_empty() && !queries.contains(&q) && queries.len() < n {
            queries.push(q);
        }
    }
    if queries.is_empty() {
        return Ok(Drafted { write_exchange: drafts.exchange, candidates: vec![] });
    }
    let checks = join_all(queries.iter().enumerate().map(|(i, q)| {
        let mut v = wv.clone();
        v["query"] = json!(q);
        let p = Prompt::new(verify_t, v);
        async move { llm.typed_as::<QueryCheck>(judge, &p, &format!("verify-{}", i + 1)).await }
    }))
    .await;
    let checks = batch::all(checks)?;
    let wording = super::wording_of(vars);
    let tools = tool_vars(vars);
    let platform = vars.get("platform").and_then(Value::as_str).unwrap_or_default();
    // Off with `levels.plan_check.prune_unrequested`, as the plan check's rule it mirrors.
    let words = prune.then_some((tools.as_slice(), platform));
    let mut candidates: Vec<Candidate> = queries
        .into_iter()
        .zip(checks)
        .map(|(query, c)| {
            let (verified, reason) = verdict(&query, &c.value, mention, (&wording, words));
            Candidate { query, verified, reason, exchange: c.exchange, asked_again: None }
        })
        .collect();
    if !candidates.iter().any(|c| c.verified) {
        let again = ask_again(llm, (writer, judge), verify_t, (&wv, prune), &candidates[0], mention).await?;
        candidates.push(again);
    }
    Ok(Drafted { write_exchange: drafts.exchange, candidates })
}

/// The item's tools as the templates show them (L1: `tool`, L2: `tools`).
fn tool_vars(vars: &Value) -> Vec<Value> {
    match (vars.get("tools").and_then(Value::as_array), vars.get("tool")) {
        (Some(ts), _) => ts.clone(),
        (None, Some(t)) => vec![t.clone()],
        (None, None) => vec![],
    }
}

/// A query's verdict: the verifier's four rules, then the mechanical ones (the platform
/// mention, no copied wording, a word in common with what a tool does).
fn verdict(
    query: &str,
    v: &QueryCheck,
    mention: &Mention,
    (wording, words): (&[super::Wording], Option<(&[Value], &str)>),
) -> (bool, String) {
    let failed: Vec<&str> = [
        (v.intent_matches, "intent does not match"),
        (v.platform_rule_obeyed, "platform rule broken"),
        (v.self_contained, "not self-contained"),
        (v.no_meta_language, "meta-language"),
    ]
    .iter()
    .filter(|(ok, _)| !ok)
    .map(|(_, w)| *w)
    .collect();
    let rule = mention
        .check(query)
        .or_else(|| super::copied_wording(query, wording))
        .or_else(|| words.and_then(|(tools, platform)| super::plan_check::unrelated(query, tools, platform)));
    match (failed.is_empty(), rule) {
        (true, None) => (true, super::one_line(&v.reason)),
        (true, Some(m)) => (false, m),
        (false, _) => (false, format!("{}: {}", failed.join(", "), super::one_line(&v.reason))),
    }
}

/// Ask the writer once more, with the first refused query and why it was refused, and
/// verify the new query the same way. A small model often writes a function call or
/// leaves out the platform; told so, it usually fixes just that. A writer that returns no
/// query gives a refused candidate with that reason (its exchange as both exchanges).
async fn ask_again(
    llm: &Item,
    (writer, judge): (&str, &str),
    verify_t: &str,
    (wv, prune): (&Value, bool),
    refused: &Candidate,
    mention: &Mention,
) -> Result<Candidate, ItemError> {
    let tools = tool_vars(wv);
    let platform = wv.get("platform").and_then(Value::as_str).unwrap_or_default();
    let av = json!({"rule": mention.text(), "tools": tools, "query": refused.query, "reason": refused.reason});
    let schema = drafts_schema(1, mention);
    let prompt = Prompt::new(AGAIN_TEMPLATE, av);
    let r = llm.typed_schema::<Drafts>(writer, &prompt, Some("write-again"), ("Drafts", schema), |_| Ok(())).await?;
    let Some(query) = r.value.queries.first().map(|q| super::one_line(q)).filter(|q| !q.is_empty()) else {
        // Recorded, so the funnel counts the item as asked again and its rejection says so.
        let reason = "the writer returned no query".to_string();
        let exchange = r.exchange.clone();
        return Ok(Candidate {
            query: String::new(),
            verified: false,
            reason,
            exchange,
            asked_again: Some(r.exchange),
        });
    };
    let mut v = wv.clone();
    v["query"] = json!(query);
    let c = llm.typed_as::<QueryCheck>(judge, &Prompt::new(verify_t, v), "verify-again").await?;
    let words = prune.then_some((tools.as_slice(), platform));
    let (verified, reason) = verdict(&query, &c.value, mention, (&super::wording_of(wv), words));
    Ok(Candidate { query, verified, reason, exchange: c.exchange, asked_again: Some(r.exchange) })
}

/// The writer's template for asking again, with example variables.
pub fn again_prompt() -> PromptRef {
    let tool = json!({"id": "s::t", "name": "t", "server": "s", "description": "d", "inputs": ["`x` (required): d (Type: string)"]});
    let vars = json!({"rule": "MUST mention the platform \"P\" explicitly", "tools": [tool], "query": "t(x=1)", "reason": "platform not named: `P` does not occur"});
    PromptRef::new("levels.query_rewrite", AGAIN_TEMPLATE, vars)
}

/// How many items were asked again, and how many of those were verified then (the
/// funnel's two lines after `verified`).
pub fn again_counts<'a>(drafted: impl Iterator<Item = &'a Drafted>) -> (usize, usize) {
    let again: Vec<&Candidate> =
        drafted.flat_map(|d| d.candidates.iter().filter(|c| c.asked_again.is_some())).collect();
    (again.len(), again.iter().filter(|c| c.verified).count())
}

/// The kept query of a drafted item (a seeded choice among the verified ones), or why none.
pub fn choose(d: &Drafted, seed: u64, key: &str) -> Result<(String, Vec<String>), String> {
    use rand::seq::IndexedRandom;
    let ok: Vec<&Candidate> = d.candidates.iter().filter(|c| c.verified).collect();
    if d.candidates.is_empty() {
        return Err("no draft: the writer returned no query".into());
    }
    match ok.choose(&mut super::rng(seed, key)) {
        Some(c) => {
            let exchanges = std::iter::once(&d.write_exchange).chain(&c.asked_again).chain([&c.exchange]);
            Ok((c.query.clone(), exchanges.cloned().collect()))
        }
        None => match d.candidates.iter().find(|c| c.asked_again.is_some()) {
            Some(again) => Err(format!("not verified: {}; asked again: {}", d.candidates[0].reason, again.reason)),
            None => Err(format!("not verified: {}", d.candidates[0].reason)),
        },
    }
}

pub struct L1Stage;

impl Stage for L1Stage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }
    fn help(&self) -> &'static str {
        "L1: explicit single-tool queries naming the platform, verified, one per tool.

         Reads `filter/catalog.json` and `levels-profiles/profiles.json`. Writes
         `artifacts/levels-l1/queries.json` (and `failed.json`)."
    }
    fn roles(&self, s: &Settings) -> Vec<ConfigRef> {
        super::roles(s)
    }
    fn estimate(&self, s: &Settings) -> Vec<crate::stage::Estimate> {
        use crate::stage::Estimate;
        let l = super::settings(s);
        let c = match super::estimate_catalog(s) {
            Ok(c) => c,
            Err(unknown) => return unknown,
        };
        let (items, basis) = super::tool_items(&c, l.l1.max_items);
        let n = l.l1.candidates as u64;
        super::estimates(
            s,
            vec![
                Estimate::typed(&l.writer_role, items * 2, format!("{basis} × (1 draft + ≤ 1 asked again)")),
                Estimate::typed(
                    &l.judge_role,
                    items * (n + 1),
                    format!("{basis} × ({n} candidates + ≤ 1 asked again) verified"),
                ),
            ]
            .into_iter()
            .chain(super::single_step_check_estimate(&l, items, &basis))
            .collect(),
        )
    }
    fn prompts(&self, _s: &Settings) -> Vec<PromptRef> {
        let vars = sample_vars();
        let mut v = vars.clone();
        v["query"] = json!("q");
        vec![
            PromptRef::new("levels.l1_write", WRITE_TEMPLATE, vars),
            PromptRef::new("levels.l1_verify", VERIFY_TEMPLATE, v),
            again_prompt(),
            super::plan_check::step_need_prompt(),
        ]
    }
    fn check(&self, s: &Settings, problems: &mut Vec<crate::error::Problem>) {
        let l = super::settings(s);
        crate::settings::check_positive(problems, "levels.l1.candidates", l.l1.candidates);
        // `[levels.plan_check]` serves L1–L4; checked here once, with the embedding model its
        // similarities need (said before any LLM work, not when the check first embeds).
        super::plan_check::check_settings(&l.plan_check, problems);
        let what = ("needs the `[embed]` model for its similarities", "run `make setup`");
        problems.extend(crate::embedding::missing_problem(s, "levels.plan_check", what));
    }
    fn plan(&self, s: &Settings) -> Result<Plan> {
        let l = super::settings(s);
        // The plan check embeds the query and the tool with the `[embed]` model and recipe.
        let embed = crate::embedding::embed_settings(s).hashed();
        Ok(Plan { inputs: vec![], config_hash: super::common_hash(s, &(&l.l1, &l.plan_check, embed))? })
    }

    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let s = ctx.settings;
        let l = super::settings(s);
        let seed = s.project.seed;
        let catalog = inputs.json(&crate::filter::CATALOG)?;
        let profiles: Profiles = inputs.json(&PROFILES)?;
        let mut funnel = Funnel::default();
        let mut eligible = Vec::new();
        for (srv, t) in catalog.tools() {
            let id = crate::model::tool_id(&srv.name, &t.name);
            match profiles.tools.get(&id) {
                None => {
                    funnel.reject(&id, "not profiled: beyond `levels.profiles.max_servers`, or its profile item failed")
                }
                Some(p) => match (&p.excluded, profiles.platform(&id)) {
                    (Some(e), _) => funnel.reject(&id, e.clone()),
                    (None, Some(platform)) => eligible.push((id, platform.to_string(), srv, t)),
                    (None, None) => funnel.reject(&id, "no platform"),
                },
            }
        }
        funnel.step("tools", catalog.tool_count());
        funnel.step("eligible", eligible.len());
        let chosen = super::seeded_subset(&eligible, l.l1.max_items, seed, "l1:items");
        for (id, ..) in eligible.iter().filter(|e| !chosen.iter().any(|c| c.0 == e.0)) {
            funnel.reject(id, "not sampled: beyond `levels.l1.max_items`");
        }
        funnel.step("asked", chosen.len());
        let items: Vec<(String, (Value, Mention))> = chosen
            .iter()
            .map(|(id, platform, srv, t)| {
                let vars = json!({"platform": platform, "tool": super::tool_vars(srv, t)});
                (format!("tool:{id}"), (vars, Mention::Must(platform.clone())))
            })
            .collect();
        let mut batch = Batch::new(ctx, super::batch_options(STAGE, "L1", "tools", s))?;
        let (writer, judge, n) = (l.writer_role.as_str(), l.judge_role.as_str(), l.l1.candidates);
        let prune = l.plan_check.prune_unrequested;
        batch.phase("queries");
        let done = batch.run(items, |(vars, mention): (Value, Mention), llm: Item| async move {
            write_and_verify(&llm, writer, judge, (WRITE_TEMPLATE, VERIFY_TEMPLATE), &vars, (n, prune), &mention).await
        })?;
        for f in &done.failed {
            funnel.reject(f.item.trim_start_matches("tool:"), format!("failed: {}", f.reason));
        }
        let look = super::Lookup::new(&catalog);
        let mut checks = super::plan_check::PlanChecks::default();
        let mut verified = Vec::new();
        for (key, d) in &done.values {
            let id = key.trim_start_matches("tool:");
            match choose(d, seed, key) {
                Ok((query, exchanges)) => {
                    let step = Step { tools: vec![id.to_string()], depends_on: vec![] };
                    verified.push(super::Verified { key: key.clone(), query, exchanges, step });
                }
                Err(r) => funnel.reject(id, r),
            }
        }
        funnel.step("verified", verified.len());
        // The plan check: the rules with the step's embedding similarity, the judge on an
        // open step, as in L3 and L4, so the verifier's yes is not the only guard (issue 38).
        let name = |key: &str| key.trim_start_matches("tool:").to_string();
        let queries =
            super::check_single_steps(&mut batch, (s, &look, 1), verified, (&mut checks, &mut funnel), &name)?;
        batch.finish(out)?;
        let (again, again_ok) = again_counts(done.values.values());
        funnel.step("asked again", again);
        funnel.step("verified after asking again", again_ok);
        checks.count(&mut funnel, queries.len());
        LevelOut { level: 1, queries, funnel, plan_checks: checks.records }.write(out)
    }
}

fn sample_vars() -> Value {
    json!({"platform": "P", "n": 2, "rule": "MUST mention", "tool": {"id": "s::t", "name": "t", "server": "s", "description": "d", "inputs": ["`x` (required): d (Type: string)"]}})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::answer::Answer;

    fn takes(mention: &Mention, query: &str) -> bool {
        Answer::<Drafts>::new("Drafts", drafts_schema(2, mention)).accepts(&json!({ "queries": [query] })).is_ok()
    }

    #[test]
    fn a_draft_in_function_call_form_or_without_its_platform_is_outside_the_schema() {
        let must = Mention::Must("FX Rates (beta)".into());
        assert!(takes(&must, "Convert 100 USD to JPY on FX Rates (beta), please."));
        assert!(!takes(&must, "convert_currency(100, 'USD', 'JPY') on FX Rates (beta)"));
        assert!(!takes(&must, "Convert 100 USD to JPY."), "the platform is missing");
        assert!(!takes(&must, "Convert amount=100 on FX Rates (beta)"));
        assert!(!takes(&must, "FX Rates (beta) has a tool `convertCurrency` for this"));
        assert!(!takes(&must, "Convert 100 USD\non FX Rates (beta)"), "one line");
        // Every query the schema takes passes the mechanical mention rule (never looser).
        assert_eq!(must.check("Convert 100 USD to JPY on FX Rates (beta), please."), None);
        // The platform as the subject: the rule alone refuses it.
        let profile = Mention::Must("Alpha Markets".into());
        assert!(profile.check("What is Alpha Markets' company profile?").unwrap().contains("the platform itself"));
        assert!(profile.check("What is Alpha Markets's CEO?").is_some());
        assert_eq!(profile.check("What is JPMorgan's company profile on Alpha Markets?"), None);
        // ... or what the request ends asking for.
        let why = profile.check("What is the company profile for Alpha Markets?").unwrap();
        assert!(why.contains("\"for Alpha Markets\" ends the request"), "{why}");
        assert!(profile.check("Tell me about alpha markets. I need JPM's sector.").is_some());
        assert!(profile.check("List the executives of Alpha Markets, please").is_some());
        assert_eq!(profile.check("Find JPM's company profile for me on Alpha Markets."), None);
        assert_eq!(profile.check("Check JPM's sector for Alpha Markets clients."), None, "not where the request ends");
        assert_eq!(profile.check("Get AAPL's profile from Alpha Markets."), None);
        assert_eq!(Mention::Must("Forex".into()).check("What is 10 USD in EUR? Check Forex."), None);
        assert!(Mention::Must("Forex".into()).check("What is 10 USD in EUR on the Forex? Ask of Forex.").is_some());
        let must_not = Mention::MustNot(vec!["FX Rates".into()]);
        assert!(takes(&must_not, "What is 100 dollars in yen today?"));
        assert!(!takes(&must_not, "get_latest_rates for USD"));
        assert!(!takes(&must_not, ""), "empty");
        // A platform no pattern can hold gets none (the rule alone decides).
        let quoted = Mention::Must("Alpha \"Pro\"".into());
        assert_eq!(quoted.pattern(), None);
        assert!(takes(&quoted, "Quote AAPL on Alpha \"Pro\"."));
    }

    /// A drafted query is at most `MAX_QUERY_CHARS` whatever the platform's name: the
    /// pattern's bounds before and after the name never add up to more than the items'
    /// `maxLength` (a grammar built from the pattern alone cannot write a query the check
    /// refuses), and a name too long for any query gets no pattern.
    #[test]
    fn a_drafted_query_is_at_most_500_characters_whatever_the_platform() {
        let bounds = |p: &str| -> (usize, usize) {
            let n: Vec<usize> = p.split("{0,").skip(1).map(|x| x.split('}').next().unwrap().parse().unwrap()).collect();
            (n[0], n[1])
        };
        for name in ["Alpha Markets".to_string(), "N".repeat(250), "N".repeat(300), "N".repeat(500)] {
            let (before, after) = bounds(&Mention::Must(name.clone()).pattern().unwrap());
            assert_eq!(before + name.len() + after, MAX_QUERY_CHARS, "{}", name.len());
            assert!(before <= BEFORE_NAME);
        }
        assert_eq!(Mention::Must("N".repeat(501)).pattern(), None);
        let must = Mention::Must("Alpha Markets".into());
        let longest = format!("{}Alpha Markets{}", "a".repeat(250), "b".repeat(237));
        assert_eq!(longest.len(), MAX_QUERY_CHARS);
        assert!(takes(&must, &longest));
        assert!(!takes(&must, &format!("{longest}b")), "501 characters");
        let late = format!("{}Alpha Markets.", "a".repeat(251));
        assert!(!takes(&must, &late), "the name after character 250");
        assert!(takes(&Mention::MustNot(vec![]), &"a".repeat(MAX_QUERY_CHARS)));
        assert!(!takes(&Mention::MustNot(vec![]), &"a".repeat(MAX_QUERY_CHARS + 1)));
    }
}
