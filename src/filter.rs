//! `benchgen filter`: drop what a tool-use benchmark must not contain, and say
//! why for every single drop.
//!
//! Order of decisions: servers without tools; server rules (a dropped server
//! takes its tools with it, each recorded); tool rules (first matching rule in
//! config order wins); servers whose every tool was dropped. A rule with
//! `action = "ask"` hands its matches to a [`Classifier`]. With
//! `[filter] classifier_role = "<role>"` that is the LLM (prompt
//! `pipeline/prompts/filter-classify.md`, typed verdict keep/drop plus a one-line
//! reason; each decision's ledger event has the `llm.exchange` as a parent); without
//! one, [`Unclassified`] keeps the matches and lists them in `undecided.csv`, so
//! nothing is dropped on a guess. An answer that stays invalid after re-asks is also
//! kept as undecided, with the error as its reason. The questions go through
//! [`crate::llm::batch`]: answers are checkpointed per item, so a killed run asks
//! nothing twice and its manifest counts equal an uninterrupted run's.
//!
//! Outputs in `artifacts/filter/`: `catalog.json` (what remains), `dropped.csv`
//! and `undecided.csv` (`kind,id,rule,class,reason,evidence`), `summary.json` (counts per
//! rule and class, and `drops`: `[{count, intentional, reason}]`, see [`crate::model::Drops`]).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};

use anyhow::Result;
use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::config_doc::Key;
use crate::error::Problem;
use crate::ledger::{Explanation, Ledger, NewEvent, Parent, kind};
use crate::llm::Prompt;
use crate::llm::batch::{Batch, BatchOptions, Item, ItemError};
use crate::model::{Catalog, Drops, Server, TOOL_ID_SEP, Tool, norm_tool_id};
use crate::settings::{Settings, section_hash};
use crate::stage::{Artifact, ConfigRef, Ctx, Inputs, Output, Plan, PromptRef, Read, Stage, StageSpec};

/// What a classifier sees of an undecided item.
pub struct Candidate<'a> {
    pub id: &'a str,
    pub target: RuleTarget,
    pub name: &'a str,
    pub description: &'a str,
    pub server: &'a Server,
    pub rule: &'a FilterRule,
}

/// A classifier's answer for one undecided item.
#[derive(Debug, Clone, PartialEq)]
pub enum Classification {
    Keep { reason: String },
    Drop { reason: String },
    Undecided { reason: String },
}

/// Decides the items that rules flag with `action = "ask"`.
pub trait Classifier {
    fn classify(&self, c: &Candidate) -> Result<Classification>;
}

/// The classifier used when none is configured: decides nothing.
pub struct Unclassified;

impl Classifier for Unclassified {
    fn classify(&self, _c: &Candidate) -> Result<Classification> {
        Ok(Classification::Undecided { reason: "no classifier configured; kept for a human or LLM decision".into() })
    }
}

/// A compiled rule.
struct Compiled<'a> {
    rule: &'a FilterRule,
    name: Vec<Regex>,
    description: Vec<Regex>,
    server: Vec<Regex>,
}

impl<'a> Compiled<'a> {
    fn new(rule: &'a FilterRule) -> Result<Self> {
        let c = |pats: &[String]| pats.iter().map(|p| Regex::new(p)).collect::<Result<Vec<_>, _>>();
        Ok(Self { rule, name: c(&rule.name)?, description: c(&rule.description)?, server: c(&rule.server)? })
    }

    /// `Some(evidence)` when the rule matches; `schema` is the tool's input schema.
    fn matches(
        &self,
        name: &str,
        description: &str,
        server: &str,
        schema: Option<&serde_json::Value>,
    ) -> Option<String> {
        if !self.server.is_empty() && !self.server.iter().any(|r| r.is_match(server)) {
            return None;
        }
        let field = |regs: &[Regex], text: &str, what: &str| -> Option<Option<String>> {
            if regs.is_empty() {
                return None; // field not used by this rule
            }
            Some(regs.iter().find(|r| r.is_match(text)).map(|r| format!("{what} matches /{}/", r.as_str())))
        };
        let invalid_schema = (self.rule.invalid_input_schema).then(|| {
            schema
                .and_then(crate::registry::schema::input_schema_problem)
                .map(|why| format!("the input schema is not valid JSON Schema: {why}"))
        });
        let checks: Vec<Option<String>> =
            [field(&self.name, name, "name"), field(&self.description, description, "description"), invalid_schema]
                .into_iter()
                .flatten()
                .collect();
        let hit = match self.rule.mode {
            MatchMode::Any => checks.iter().any(Option::is_some),
            MatchMode::All => checks.iter().all(Option::is_some),
        };
        hit.then(|| checks.into_iter().flatten().collect::<Vec<_>>().join("; "))
    }
}

/// What the filter decided about a server or tool.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Keep,
    Drop,
    /// The classifier gave no valid verdict: kept, and listed for review.
    Undecided,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Keep => "keep",
            Verdict::Drop => "drop",
            Verdict::Undecided => "undecided",
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Compare with the serialised word (`decision.verdict == "drop"`).
impl PartialEq<&str> for Verdict {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// One decision about a server or tool.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Decision {
    pub kind: &'static str,
    pub id: String,
    pub verdict: Verdict,
    pub rule: String,
    pub class: String,
    pub reason: String,
    pub evidence: String,
}

/// The result of filtering a catalog.
pub struct Filtered {
    pub catalog: Catalog,
    /// Every server and tool of the input, in catalog order.
    pub decisions: Vec<Decision>,
}

fn decision(
    kind: &'static str,
    id: &str,
    verdict: Verdict,
    rule: &str,
    class: &str,
    reason: &str,
    evidence: &str,
) -> Decision {
    Decision {
        kind,
        id: id.into(),
        verdict,
        rule: rule.into(),
        class: class.into(),
        reason: reason.into(),
        evidence: evidence.into(),
    }
}

/// Apply the filter settings to a catalog.
pub fn apply(catalog: &Catalog, settings: &FilterSettings, classifier: &dyn Classifier) -> Result<Filtered> {
    let rules: Vec<Compiled> = settings.rules.iter().map(Compiled::new).collect::<Result<_>>()?;
    let mut kept = Catalog::default();
    let mut decisions = Vec::new();

    for server in &catalog.servers {
        let mut server_drop: Option<(String, String, String, String)> = None;
        let mut server_ask: Option<Decision> = None;
        if server.tools.is_empty() && settings.drop_servers_without_tools {
            server_drop = Some((
                "no-tools".into(),
                RuleClass::NoTools.as_str().into(),
                "the server exposes no tools".into(),
                "tools: []".into(),
            ));
        }
        if server_drop.is_none() {
            for c in rules.iter().filter(|c| c.rule.target == RuleTarget::Server) {
                let Some(evidence) = c.matches(&server.name, &server.description, &server.name, None) else {
                    continue;
                };
                match resolve(
                    c.rule,
                    classifier,
                    Candidate {
                        id: &server.name,
                        target: RuleTarget::Server,
                        name: &server.name,
                        description: &server.description,
                        server,
                        rule: c.rule,
                    },
                )? {
                    Resolution::Drop(reason) => {
                        server_drop = Some((c.rule.id.clone(), c.rule.class.as_str().into(), reason, evidence))
                    }
                    kept => {
                        let (verdict, reason) = kept.word_and_reason();
                        server_ask = Some(decision(
                            "server",
                            &server.name,
                            verdict,
                            &c.rule.id,
                            c.rule.class.as_str(),
                            &reason,
                            &evidence,
                        ))
                    }
                }
                break;
            }
        }
        if let Some((rule, class, reason, evidence)) = server_drop {
            decisions.push(decision("server", &server.name, Verdict::Drop, &rule, &class, &reason, &evidence));
            for t in &server.tools {
                decisions.push(decision(
                    "tool",
                    &t.id,
                    Verdict::Drop,
                    &rule,
                    &class,
                    &format!("its server `{}` was dropped: {reason}", server.name),
                    "",
                ));
            }
            continue;
        }

        let mut tools: Vec<Tool> = Vec::new();
        let mut tool_decisions = Vec::new();
        for t in &server.tools {
            let mut d = decision("tool", &t.id, Verdict::Keep, "", "", "no rule matched", "");
            for c in rules.iter().filter(|c| c.rule.target == RuleTarget::Tool) {
                let Some(evidence) = c.matches(&t.name, &t.description, &server.name, Some(&t.input_schema)) else {
                    continue;
                };
                let class = c.rule.class.as_str();
                let (verdict, reason) = resolve(
                    c.rule,
                    classifier,
                    Candidate {
                        id: &t.id,
                        target: RuleTarget::Tool,
                        name: &t.name,
                        description: &t.description,
                        server,
                        rule: c.rule,
                    },
                )?
                .word_and_reason();
                d = decision("tool", &t.id, verdict, &c.rule.id, class, &reason, &evidence);
                break;
            }
            if d.verdict != Verdict::Drop {
                tools.push(t.clone());
            }
            tool_decisions.push(d);
        }
        if tools.is_empty() && settings.drop_servers_without_tools {
            let n = server.tools.len();
            decisions.push(decision(
                "server",
                &server.name,
                Verdict::Drop,
                "no-tools-left",
                RuleClass::NoTools.as_str(),
                &format!("all {n} of its tools were dropped by rules"),
                "",
            ));
        } else {
            decisions.push(
                server_ask
                    .unwrap_or_else(|| decision("server", &server.name, Verdict::Keep, "", "", "no rule matched", "")),
            );
            kept.servers.push(Server { tools, ..server.clone() });
        }
        decisions.extend(tool_decisions);
    }
    Ok(Filtered { catalog: kept, decisions })
}

/// How many items of `catalog` an `ask` rule matches first (what the classifier is asked,
/// at most); `None` when a rule does not compile (`check` names it).
fn count_asks(catalog: &Catalog, settings: &FilterSettings) -> Option<u64> {
    struct CountAsks(std::cell::Cell<u64>);
    impl Classifier for CountAsks {
        fn classify(&self, _c: &Candidate) -> Result<Classification> {
            self.0.set(self.0.get() + 1);
            Ok(Classification::Keep { reason: String::new() })
        }
    }
    let counter = CountAsks(std::cell::Cell::new(0));
    apply(catalog, settings, &counter).ok()?;
    Some(counter.0.get())
}

/// A rule's outcome for one item, with its reason.
enum Resolution {
    Drop(String),
    Keep(String),
    Undecided(String),
}

impl Resolution {
    fn word_and_reason(self) -> (Verdict, String) {
        match self {
            Resolution::Drop(r) => (Verdict::Drop, r),
            Resolution::Keep(r) => (Verdict::Keep, r),
            Resolution::Undecided(r) => (Verdict::Undecided, r),
        }
    }
}

fn resolve(rule: &FilterRule, classifier: &dyn Classifier, c: Candidate) -> Result<Resolution> {
    Ok(match rule.action {
        RuleAction::Drop => Resolution::Drop(rule.reason.clone()),
        RuleAction::Ask => match classifier.classify(&c)? {
            Classification::Drop { reason } => Resolution::Drop(reason),
            Classification::Keep { reason } => Resolution::Keep(reason),
            Classification::Undecided { reason } => Resolution::Undecided(reason),
        },
    })
}

/// Write decisions as CSV (`kind,id,rule,class,reason,evidence`).
fn to_csv<'a>(rows: impl Iterator<Item = &'a Decision>) -> Result<Vec<u8>> {
    let mut w = crate::csvout::Writer::new();
    w.write_record(["kind", "id", "rule", "class", "reason", "evidence"])?;
    for d in rows {
        w.write_record([d.kind, &d.id, &d.rule, &d.class, &d.reason, &d.evidence])?;
    }
    w.into_bytes()
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RuleTarget {
    Server,
    Tool,
}

/// Why a rule drops something; the four classes the benchmark must not contain.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum RuleClass {
    /// Servers that expose no tools.
    NoTools,
    /// Tools a plain LLM covers without a tool (calculators).
    Trivial,
    /// Tools that only extend the agent itself (memory, thinking).
    Meta,
    /// Template or example servers.
    Template,
    /// Anything else a maintainer wants out, with their own reason.
    Custom,
}

impl RuleClass {
    pub fn as_str(self) -> &'static str {
        match self {
            RuleClass::NoTools => "no-tools",
            RuleClass::Trivial => "trivial",
            RuleClass::Meta => "meta",
            RuleClass::Template => "template",
            RuleClass::Custom => "custom",
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum RuleAction {
    /// Drop what the rule matches.
    #[default]
    Drop,
    /// Undecided: hand the match to the classifier (kept and listed until one is configured).
    Ask,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum MatchMode {
    /// Any listed field matching is enough.
    #[default]
    Any,
    /// Every listed field must match.
    All,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FilterRule {
    pub id: String,
    pub target: RuleTarget,
    pub class: RuleClass,
    /// Human reason recorded with every drop.
    pub reason: String,
    /// Regexes over the tool's (or server's) trimmed name.
    #[serde(default)]
    pub name: Vec<String>,
    /// Regexes over the description.
    #[serde(default)]
    pub description: Vec<String>,
    /// Tool rules only: regexes over the owning server's name; the rule applies
    /// only inside matching servers.
    #[serde(default)]
    pub server: Vec<String>,
    /// Tool rules only: match tools whose input schema is not valid JSON Schema (the
    /// sandbox would refuse every call; registry import lists them).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub invalid_input_schema: bool,
    #[serde(default, rename = "match")]
    pub mode: MatchMode,
    #[serde(default)]
    pub action: RuleAction,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FilterSettings {
    /// Drop servers that list no tools (before rules) and servers all of whose
    /// tools the rules dropped (after).
    #[serde(default = "yes")]
    pub drop_servers_without_tools: bool,
    #[serde(default)]
    pub rules: Vec<FilterRule>,
    /// LLM role (`[llm.roles.<role>]`) that decides `action = "ask"` matches; absent:
    /// they are kept and listed in `undecided.csv`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classifier_role: Option<String>,
}

/// `[filter]`; absent: its defaults.
impl crate::settings::Section for FilterSettings {
    const NAME: &'static str = "filter";
    type Value = crate::settings::Always<Self>;
    const KEYS: &'static [Key] = &[
        Key::new(
            "drop_servers_without_tools",
            "bool",
            "true",
            "Drop servers that list no tools, and servers whose tools the rules all dropped.",
        ),
        Key::unset(
            "classifier_role",
            "string",
            r#"LLM role deciding `action = "ask"` matches; unset: they are kept and listed in `undecided.csv`."#,
        ),
        Key::tables("rules", "A rule: what it matches is dropped (or asked about), with its class and reason."),
        Key::required("rules.id", "string", "Unique id, recorded with every decision."),
        Key::required("rules.target", r#""server" | "tool""#, "What it matches."),
        Key::required(
            "rules.class",
            r#""no-tools" | "trivial" | "meta" | "template" | "custom""#,
            "Why it drops (`no-tools` is built in: `drop_servers_without_tools`).",
        ),
        Key::required("rules.reason", "string", "Human reason recorded with every drop."),
        Key::new("rules.name", "list of strings", "[]", "Regexes over the trimmed name."),
        Key::new("rules.description", "list of strings", "[]", "Regexes over the description."),
        Key::new(
            "rules.server",
            "list of strings",
            "[]",
            "Tool rules: regexes over the server's name; the rule applies only inside matching servers.",
        ),
        Key::new(
            "rules.invalid_input_schema",
            "bool",
            "false",
            "Tool rules: match tools whose input schema is not valid JSON Schema.",
        ),
        Key::new(
            "rules.match",
            r#""any" | "all""#,
            r#""any""#,
            "Whether one listed field matching is enough, or all must match.",
        ),
        Key::new(
            "rules.action",
            r#""drop" | "ask""#,
            r#""drop""#,
            "Drop what matches, or ask `classifier_role` (kept and listed until one is configured).",
        ),
    ];
    const EXAMPLE: &'static str = r#"
[[filter.rules]]
id = "calculators"
target = "tool"
class = "trivial"
reason = "a plain LLM calculates"
"#;
    fn check(f: &Self::Value, settings: &Settings, problems: &mut Vec<Problem>) {
        check_rules(f, problems);
        if let Some(role) = &f.classifier_role
            && !settings.section::<crate::llm::LlmSettings>().roles.contains_key(role)
        {
            problems.push(Problem::new("filter.classifier_role", format!("no `[llm.roles.{role}]` is configured")));
        }
    }
}

impl Default for FilterSettings {
    fn default() -> Self {
        Self { drop_servers_without_tools: true, rules: Vec::new(), classifier_role: None }
    }
}

fn yes() -> bool {
    true
}

/// Check the rules of `[filter]` (run when the config is loaded): every problem at once.
pub fn check_rules(settings: &FilterSettings, problems: &mut Vec<Problem>) {
    let mut ids = std::collections::BTreeSet::new();
    for (i, rule) in settings.rules.iter().enumerate() {
        let loc = format!("filter.rules[{i}] (`{}`)", rule.id);
        if !ids.insert(rule.id.as_str()) {
            problems.push(Problem::new(&loc, "duplicate rule id"));
        }
        if rule.name.is_empty() && rule.description.is_empty() && !rule.invalid_input_schema {
            problems.push(Problem::new(
                &loc,
                "a rule needs at least one `name` or `description` pattern (or `invalid_input_schema = true`)",
            ));
        }
        if rule.target == RuleTarget::Server && !rule.server.is_empty() {
            problems.push(Problem::new(&loc, "`server` guards apply to tool rules only"));
        }
        if rule.target == RuleTarget::Server && rule.invalid_input_schema {
            problems.push(Problem::new(&loc, "`invalid_input_schema` applies to tool rules only"));
        }
        if rule.class == RuleClass::NoTools {
            problems.push(Problem::new(
                &loc,
                "class `no-tools` is built in (`drop_servers_without_tools`); pick trivial, meta, template or custom",
            ));
        }
        for (field, pats) in [("name", &rule.name), ("description", &rule.description), ("server", &rule.server)] {
            for (j, p) in pats.iter().enumerate() {
                if let Err(e) = regex::Regex::new(p) {
                    problems.push(Problem::new(format!("{loc}.{field}[{j}]"), format!("invalid regex: {e}")));
                }
            }
        }
    }
}

/// What the filter keeps: the catalog every later stage works on.
pub const CATALOG: Artifact<Catalog> = Artifact::new("filter", "catalog.json");

pub static SPEC: StageSpec = StageSpec {
    name: "filter",
    command: "filter",
    // 2: the answer's schema says what is asked, not "the X's typed answer" (developer
    //     wording the model read).
    version: 2,
    about: "drop servers and tools a benchmark must not contain, with reasons",
    // The manifest leads to the import run's ledger events, each decision's parent.
    reads: &[crate::registry::CATALOG.read(), Read::manifest("registry-import")],
    writes: &["catalog.json", "dropped.csv", "undecided.csv", "summary.json"],
    section: Some("filter"),
};

pub struct FilterStage;

#[derive(Serialize)]
struct Summary {
    servers_in: usize,
    tools_in: usize,
    servers_kept: usize,
    tools_kept: usize,
    servers_dropped: usize,
    tools_dropped: usize,
    undecided: usize,
    /// Drops per rule: `{rule: {servers, tools}}`.
    by_rule: BTreeMap<String, BTreeMap<&'static str, usize>>,
    /// Drops per class (no-tools, trivial, meta, template, custom).
    by_class: BTreeMap<String, BTreeMap<&'static str, usize>>,
    /// Every drop counted with its reason (the shape all stages share): one entry per
    /// servers-or-tools and rule, sorted by reason. All filter drops are intentional.
    drops: Vec<Drops>,
}

impl Stage for FilterStage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }
    fn help(&self) -> &'static str {
        r#"Drop servers and tools a benchmark must not contain, recording why.

         Reads `artifacts/registry-import/catalog.json` and the `[filter]` section of the
         config. Writes `artifacts/filter/`: `catalog.json` (what remains),
         `dropped.csv` and `undecided.csv` (one row per server or tool with rule,
         class, reason and evidence) and `summary.json`; one `filter.decision` event
         per server and tool goes to the ledger. With `[filter] classifier_role`, matches
         of `action = "ask"` rules are decided by that LLM role (answers cached in the
         ledger; see `--llm-mode`). Skipped when up to date."#
    }

    /// The catalog's items, a tool (`server::tool`) or a server, and their decisions
    /// (`filter:<tool or server>`). Asked after every other family (`explain` asks the stage
    /// list from its end), so an id of no family's shape comes here.
    fn explain_subject(&self, ledger: &Ledger, runs: &[i64], id: &str) -> Result<Option<Explanation>> {
        explain_item(ledger, runs, id)
    }

    fn enabled(&self, settings: &Settings) -> bool {
        crate::registry::in_pipeline(settings)
    }

    fn roles(&self, settings: &Settings) -> Vec<ConfigRef> {
        let role = settings.section::<FilterSettings>().classifier_role.as_ref();
        role.map(|r| ConfigRef::new("filter.classifier_role", r)).into_iter().collect()
    }

    fn estimate(&self, settings: &Settings) -> Vec<crate::stage::Estimate> {
        let f = settings.section::<FilterSettings>();
        let Some(role) = f.classifier_role.as_ref() else { return Vec::new() };
        // Once the registry is imported (as `run` reaches this stage), its `ask` matches are
        // counted: the rules run with every asked item kept, so a server an answer would
        // drop still counts its tools' matches.
        if let Some(asks) = crate::registry::CATALOG.on_disk(settings).and_then(|c| count_asks(&c, f)) {
            let basis = format!("≤ {asks} `ask` rule matches in the imported catalog");
            return vec![crate::stage::Estimate::typed(role, asks, basis).in_flight(0)];
        }
        // Before it: only matches of `ask` rules are asked about, at most every server and
        // tool once.
        let e = match crate::registry::catalog_size(settings, &[]) {
            Some(c) => crate::stage::Estimate::typed(
                role,
                c.servers + c.tools,
                format!("≤ {} servers + {} tools in {}", c.servers, c.tools, c.from),
            ),
            None => crate::stage::Estimate::unknown(role, crate::stage::UNTIL_REGISTRY),
        };
        vec![e.in_flight(0)]
    }

    fn prompts(&self, settings: &Settings) -> Vec<PromptRef> {
        if settings.section::<FilterSettings>().classifier_role.is_none() {
            return Vec::new();
        }
        let vars = serde_json::json!({
            "target": "tool", "name": "t", "description": "d", "server_name": "s",
            "server_description": "d", "server_tools": ["t"], "rule_reason": "r",
        });
        vec![PromptRef::new("filter.classifier_role", CLASSIFY_PROMPT, vars)]
    }

    fn plan(&self, settings: &Settings) -> Result<Plan> {
        Ok(Plan { inputs: vec![], config_hash: section_hash(&settings.section::<FilterSettings>())? })
    }

    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let catalog = inputs.json(&crate::registry::CATALOG)?;
        let (filtered, llm_parents) = match &ctx.settings.section::<FilterSettings>().classifier_role {
            None => {
                let pb = ctx.printer.progress(catalog.servers.len() as u64, "filter");
                let f = apply(&catalog, ctx.settings.section::<FilterSettings>(), &Unclassified)?;
                pb.finish_and_clear();
                (f, HashMap::new())
            }
            Some(role) => classify_with_llm(ctx, &catalog, role, out)?,
        };

        // Link each decision to the catalog record it is about.
        let mut parents: HashMap<String, i64> = HashMap::new();
        if let (Some(m), Some(ledger)) =
            (ctx.manifest_of(crate::registry::SPEC.name), Ledger::open_existing(&ctx.settings.artifacts)?)
        {
            for k in [kind::CATALOG_SERVER, kind::CATALOG_TOOL] {
                for ev in ledger.events_of_kind(m.run_id, k)? {
                    if let Some(s) = ev.subject {
                        parents.insert(
                            format!("{}:{s}", if k == kind::CATALOG_SERVER { "server" } else { "tool" }),
                            ev.id,
                        );
                    }
                }
            }
        }
        for d in &filtered.decisions {
            let mut ev = NewEvent::new(kind::FILTER_DECISION, Some(&d.id), serde_json::to_value(d)?);
            if let Some(&p) = parents.get(&format!("{}:{}", d.kind, d.id)) {
                ev = ev.with_parent(Parent::Id(p));
            }
            if let Some(&p) = llm_parents.get(&format!("{}:{}", d.kind, d.id)) {
                ev = ev.with_parent(Parent::Id(p));
            }
            out.event(ev);
        }

        let mut summary = Summary {
            servers_in: catalog.servers.len(),
            tools_in: catalog.tool_count(),
            servers_kept: filtered.catalog.servers.len(),
            tools_kept: filtered.catalog.tool_count(),
            servers_dropped: 0,
            tools_dropped: 0,
            undecided: 0,
            by_rule: BTreeMap::new(),
            by_class: BTreeMap::new(),
            drops: Vec::new(),
        };
        for d in &filtered.decisions {
            match d.verdict {
                Verdict::Drop => {
                    let plural = if d.kind == "server" { "servers" } else { "tools" };
                    if d.kind == "server" {
                        summary.servers_dropped += 1;
                    } else {
                        summary.tools_dropped += 1;
                    }
                    *summary.by_rule.entry(d.rule.clone()).or_default().entry(plural).or_default() += 1;
                    *summary.by_class.entry(d.class.clone()).or_default().entry(plural).or_default() += 1;
                }
                Verdict::Undecided => summary.undecided += 1,
                Verdict::Keep => {}
            }
        }
        let mut drops: BTreeMap<String, usize> = BTreeMap::new();
        for d in filtered.decisions.iter().filter(|d| d.verdict == Verdict::Drop) {
            let plural = if d.kind == "server" { "servers" } else { "tools" };
            *drops.entry(format!("{plural} dropped by rule `{}` (class {})", d.rule, d.class)).or_default() += 1;
        }
        summary.drops = drops.into_iter().map(|(reason, count)| Drops { count, intentional: true, reason }).collect();
        let mut dropped: Vec<&Decision> = filtered.decisions.iter().filter(|d| d.verdict == Verdict::Drop).collect();
        dropped.sort_by(|a, b| (a.kind, &a.id).cmp(&(b.kind, &b.id)));
        let mut undecided: Vec<&Decision> =
            filtered.decisions.iter().filter(|d| d.verdict == Verdict::Undecided).collect();
        undecided.sort_by(|a, b| (a.kind, &a.id).cmp(&(b.kind, &b.id)));

        out.json("catalog.json", &filtered.catalog)?;
        out.file("dropped.csv", to_csv(dropped.into_iter())?);
        out.file("undecided.csv", to_csv(undecided.into_iter())?);
        out.json("summary.json", &summary)?;
        out.count("servers_kept", summary.servers_kept);
        out.count("tools_kept", summary.tools_kept);
        out.count("servers_dropped", summary.servers_dropped);
        out.count("tools_dropped", summary.tools_dropped);
        out.count("undecided", summary.undecided);
        out.notes.push(format!(
            "kept {} of {} servers and {} of {} tools; dropped {} servers and {} tools ({} undecided kept for review)",
            summary.servers_kept,
            summary.servers_in,
            summary.tools_kept,
            summary.tools_in,
            summary.servers_dropped,
            summary.tools_dropped,
            summary.undecided
        ));
        for (class, n) in &summary.by_class {
            out.notes.push(format!(
                "  {class}: {} servers, {} tools",
                n.get("servers").copied().unwrap_or(0),
                n.get("tools").copied().unwrap_or(0)
            ));
        }
        Ok(())
    }
}

/// `benchgen explain` of a tool or a server (or any other subject an event of `runs` is
/// about), or of its decision (`filter:<tool or server>`): the decision of the current
/// `filter` run, the lineage, and its record in the imported catalog. `None`: no event of the
/// current runs is about it (`explain` says so); an item without a decision, when its decision
/// was asked for, is an error.
fn explain_item(ledger: &Ledger, runs: &[i64], id: &str) -> Result<Option<Explanation>> {
    let (subject, only_filter) = match id.strip_prefix("filter:") {
        Some(rest) => (norm_tool_id(rest), true),
        None => (norm_tool_id(id), false),
    };
    let direct = ledger.events_for(&subject, runs)?;
    let roots: Vec<i64> =
        direct.iter().filter(|e| !only_filter || e.kind == kind::FILTER_DECISION).map(|e| e.id).collect();
    if roots.is_empty() {
        if !only_filter {
            return Ok(None);
        }
        return Err(crate::error::hinted(
            format!("no filter decision for `{subject}` in the current artifacts"),
            crate::ledger::EXPLAIN_IDS,
        ));
    }
    let lineage = ledger.lineage(&roots)?;
    let decision = direct.iter().rev().find(|e| e.kind == kind::FILTER_DECISION);
    let status = match decision {
        Some(d) => {
            let p = &d.payload;
            let verdict = p["verdict"].as_str().unwrap_or("?");
            let word = match verdict {
                "drop" => "dropped",
                "keep" => "kept",
                _ => "undecided",
            };
            let rule =
                p["rule"].as_str().filter(|r| !r.is_empty()).map(|r| format!(" (rule `{r}`)")).unwrap_or_default();
            format!("{word} by `filter`{rule}: {}", p["reason"].as_str().unwrap_or(""))
        }
        None => "imported; `filter` has not run".into(),
    };
    let record = catalog_record(ledger.artifacts(), &subject)?;
    let item = match (only_filter, subject.contains(TOOL_ID_SEP)) {
        (true, _) => "filter decision",
        (false, true) => "tool",
        (false, false) => "server",
    };
    Ok(Some(Explanation { id: subject, item, status, record, lineage }))
}

/// What `explain` shows of a server or a tool from the imported catalog (the registry's, not
/// the filtered one: a dropped item has its record too); `None` without one.
fn catalog_record(artifacts: &std::path::Path, subject: &str) -> Result<Option<serde_json::Value>> {
    let path = artifacts.join(crate::registry::CATALOG.stage).join(crate::registry::CATALOG.file);
    if !path.exists() {
        return Ok(None);
    }
    let cat = Catalog::load(&path)?;
    for s in &cat.servers {
        if s.name == subject {
            return Ok(Some(serde_json::json!({
                "description": s.description, "categories": s.categories, "tools": s.tools.len(), "url": s.url,
            })));
        }
        if let Some(t) = s.tools.iter().find(|t| t.id == subject) {
            let params: Vec<&String> = t
                .input_schema
                .get("properties")
                .and_then(serde_json::Value::as_object)
                .map(|p| p.keys().collect())
                .unwrap_or_default();
            return Ok(Some(serde_json::json!({"description": t.description, "parameters": params})));
        }
    }
    Ok(None)
}

/// Prompt template (under `pipeline/prompts/`) of the LLM classifier.
pub const CLASSIFY_PROMPT: &str = "filter-classify";

#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize, schemars::JsonSchema, PartialEq)]
#[serde(rename_all = "lowercase")]
enum KeepOrDrop {
    Keep,
    Drop,
}

/// Does this item belong in a tool-use benchmark?
#[derive(Debug, Clone, serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct LlmVerdict {
    // Asked before the verdict so that the verdict follows the reasoning.
    /// One line saying why.
    reason: String,
    /// `keep` when the item belongs in a tool-use benchmark, `drop` when it does not.
    verdict: KeepOrDrop,
}

/// What the LLM is asked about one undecided item.
#[derive(Debug, Clone)]
struct Question {
    key: String,
    id: String,
    vars: serde_json::Value,
}

/// The classifier's answer about one item, as checkpointed: a verdict, or none when the
/// answer stayed invalid (the item stays undecided, with the error as its reason).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Answer {
    verdict: Option<KeepOrDrop>,
    reason: String,
    /// Request hash of the exchange behind a verdict.
    exchange: Option<String>,
    /// The `llm.failure` event behind a missing verdict.
    failure_event: Option<i64>,
}

impl Answer {
    fn classification(&self) -> Classification {
        let reason = self.reason.clone();
        match self.verdict {
            Some(KeepOrDrop::Keep) => Classification::Keep { reason },
            Some(KeepOrDrop::Drop) => Classification::Drop { reason },
            None => Classification::Undecided { reason },
        }
    }
}

/// Answers known so far; unknown items are collected and left undecided for this pass.
struct Collect<'a> {
    answers: &'a HashMap<String, Answer>,
    missing: RefCell<Vec<Question>>,
}

fn target_str(t: RuleTarget) -> &'static str {
    match t {
        RuleTarget::Server => "server",
        RuleTarget::Tool => "tool",
    }
}

impl Classifier for Collect<'_> {
    fn classify(&self, c: &Candidate) -> Result<Classification> {
        let key = format!("{}:{}", target_str(c.target), c.id);
        if let Some(answer) = self.answers.get(&key) {
            return Ok(answer.classification());
        }
        let tools: Vec<&str> = c.server.tools.iter().map(|t| t.name.as_str()).collect();
        self.missing.borrow_mut().push(Question {
            key,
            id: c.id.to_string(),
            vars: serde_json::json!({
                "target": target_str(c.target),
                "name": c.name,
                "description": c.description,
                "server_name": c.server.name,
                "server_description": c.server.description,
                "server_tools": tools,
                "rule_id": c.rule.id,
                "rule_class": c.rule.class.as_str(),
                "rule_reason": c.rule.reason,
            }),
        });
        Ok(Classification::Undecided { reason: "pending".into() })
    }
}

/// Filter with the LLM deciding `ask` matches. Passes repeat until every candidate that
/// the final decisions depend on has an answer: servers are asked before tools, so the
/// tools of a server the LLM drops are never asked about. Returns the decisions and, per
/// `kind:id`, the ledger event (exchange or failure) behind each LLM verdict.
fn classify_with_llm(
    ctx: &Ctx,
    catalog: &Catalog,
    role: &str,
    out: &mut Output,
) -> Result<(Filtered, HashMap<String, i64>)> {
    // No bound of the stage's own: the role's `max_concurrency` governs. No item fails
    // the stage either: an answer that stays invalid leaves its item undecided.
    let opts = BatchOptions::new("filter", "classify", "items").fail_point("filter_classify_item");
    let mut batch = Batch::new(ctx, opts)?;
    let mut answers: HashMap<String, Answer> = HashMap::new();
    let filtered = loop {
        let collect = Collect { answers: &answers, missing: RefCell::new(Vec::new()) };
        let f = apply(catalog, ctx.settings.section::<FilterSettings>(), &collect)?;
        let missing = collect.missing.into_inner();
        if missing.is_empty() {
            break f;
        }
        let servers: Vec<Question> = missing.iter().filter(|q| q.key.starts_with("server:")).cloned().collect();
        let pass = if servers.is_empty() { missing } else { servers };
        let items = pass.into_iter().map(|q| (q.key, (q.id, q.vars))).collect();
        let done = batch.run(items, |(id, vars): (String, serde_json::Value), llm: Item| async move {
            match llm.typed_for::<LlmVerdict>(role, &Prompt::new(CLASSIFY_PROMPT, vars), &id).await {
                Ok(reply) => Ok(Answer {
                    verdict: Some(reply.value.verdict),
                    reason: format!("LLM classifier: {}", reply.value.reason.trim()),
                    exchange: Some(reply.exchange),
                    failure_event: None,
                }),
                Err(e) if e.is_item_level() => Ok(Answer {
                    verdict: None,
                    reason: format!("LLM classifier gave no valid verdict: {e}"),
                    exchange: None,
                    failure_event: e.event_id(),
                }),
                Err(e) => Err(ItemError::Fatal(anyhow::Error::new(e).context("the filter's LLM classifier failed"))),
            }
        })?;
        answers.extend(done.values);
    };
    let mut parents = HashMap::new();
    for (k, a) in answers {
        let event = match &a.exchange {
            Some(hash) => batch.exchange_event(hash)?,
            None => a.failure_event,
        };
        if let Some(e) = event {
            parents.insert(k, e);
        }
    }
    batch.finish(out)?;
    Ok((filtered, parents))
}

#[cfg(test)]
mod tests {
    #[test]
    fn verdicts_serialise_as_before() {
        let words: Vec<String> = [Verdict::Keep, Verdict::Drop, Verdict::Undecided]
            .iter()
            .map(|v| serde_json::to_string(v).unwrap())
            .collect();
        assert_eq!(words, ["\"keep\"", "\"drop\"", "\"undecided\""]);
        assert!(Verdict::Drop == "drop");
        assert_eq!(format!("{} {}", Verdict::Keep, Verdict::Undecided), "keep undecided");
    }

    use super::*;
    use serde_json::json;

    fn tool(server: &str, name: &str, desc: &str) -> Tool {
        Tool {
            id: crate::model::tool_id(server, name),
            name: name.into(),
            description: desc.into(),
            input_schema: json!({"type": "object"}),
            output_schema: None,
        }
    }

    fn server(name: &str, desc: &str, tools: Vec<Tool>) -> Server {
        Server {
            name: name.into(),
            description: desc.into(),
            summary: String::new(),
            url: String::new(),
            categories: vec!["x".into()],
            license: None,
            tools,
            registry: None,
        }
    }

    fn rule(
        id: &str,
        target: RuleTarget,
        class: RuleClass,
        name: &[&str],
        desc: &[&str],
        mode: MatchMode,
        action: RuleAction,
    ) -> FilterRule {
        FilterRule {
            id: id.into(),
            target,
            class,
            reason: format!("reason {id}"),
            name: name.iter().map(|s| s.to_string()).collect(),
            description: desc.iter().map(|s| s.to_string()).collect(),
            server: vec![],
            invalid_input_schema: false,
            mode,
            action,
        }
    }

    #[test]
    fn every_server_and_tool_gets_exactly_one_decision() {
        let cat = Catalog {
            servers: vec![
                server(
                    "calc",
                    "arithmetic",
                    vec![tool("calc", "add", "sum of numbers"), tool("calc", "divide", "divide numbers")],
                ),
                server("db", "a database", vec![tool("db", "add", "insert a row"), tool("db", "query", "run SQL")]),
                server("empty", "", vec![]),
                server("my-template", "a template to copy", vec![tool("my-template", "echo", "echo")]),
            ],
        };
        let settings = FilterSettings {
            drop_servers_without_tools: true,
            classifier_role: None,
            rules: vec![
                rule(
                    "tmpl",
                    RuleTarget::Server,
                    RuleClass::Template,
                    &["template"],
                    &["template"],
                    MatchMode::All,
                    RuleAction::Drop,
                ),
                rule(
                    "arith",
                    RuleTarget::Tool,
                    RuleClass::Trivial,
                    &["^(add|divide)$"],
                    &["(?i)sum|divide"],
                    MatchMode::All,
                    RuleAction::Drop,
                ),
                rule("q", RuleTarget::Tool, RuleClass::Custom, &["^query$"], &[], MatchMode::Any, RuleAction::Ask),
            ],
        };
        let f = apply(&cat, &settings, &Unclassified).unwrap();
        let got: Vec<String> =
            f.decisions.iter().map(|d| format!("{} {} {} {}", d.kind, d.id, d.verdict, d.rule)).collect();
        assert_eq!(
            got,
            [
                "server calc drop no-tools-left",
                "tool calc::add drop arith",
                "tool calc::divide drop arith",
                "server db keep ",
                "tool db::add keep ",
                "tool db::query undecided q",
                "server empty drop no-tools",
                "server my-template drop tmpl",
                "tool my-template::echo drop tmpl",
            ]
        );
        assert_eq!(f.catalog.servers.len(), 1);
        assert_eq!(f.catalog.tool_count(), 2, "undecided tools stay");
        assert_eq!(f.decisions.len(), 4 + cat.tool_count());
    }

    #[test]
    fn classifier_verdicts_are_applied() {
        struct DropAll;
        impl Classifier for DropAll {
            fn classify(&self, c: &Candidate) -> Result<Classification> {
                Ok(Classification::Drop { reason: format!("classifier dropped {}", c.id) })
            }
        }
        let cat = Catalog { servers: vec![server("s", "", vec![tool("s", "a", ""), tool("s", "b", "")])] };
        let settings = FilterSettings {
            drop_servers_without_tools: false,
            classifier_role: None,
            rules: vec![rule("ask", RuleTarget::Tool, RuleClass::Meta, &["^a$"], &[], MatchMode::Any, RuleAction::Ask)],
        };
        let f = apply(&cat, &settings, &DropAll).unwrap();
        assert_eq!(f.decisions[1].verdict, "drop");
        assert_eq!(f.decisions[1].reason, "classifier dropped s::a");
        assert_eq!(f.catalog.tool_count(), 1);
    }

    #[test]
    fn the_estimate_counts_the_items_an_ask_rule_matches_first() {
        let cat = Catalog {
            servers: vec![
                server("s", "an example server", vec![tool("s", "a", ""), tool("s", "b", ""), tool("s", "c", "")]),
                server("t", "", vec![tool("t", "a", "")]),
            ],
        };
        let ask = |id: &str, target, name: &[&str], desc: &[&str]| {
            rule(id, target, RuleClass::Meta, name, desc, MatchMode::Any, RuleAction::Ask)
        };
        let settings = FilterSettings {
            drop_servers_without_tools: true,
            classifier_role: Some("c".into()),
            rules: vec![
                // Asked about server `s`; were it dropped, its tools would not be asked, but
                // the bound counts them.
                ask("srv", RuleTarget::Server, &[], &["example"]),
                // `b` is dropped by rule before the ask below can match it.
                rule("drop-b", RuleTarget::Tool, RuleClass::Trivial, &["^b$"], &[], MatchMode::Any, RuleAction::Drop),
                ask("ab", RuleTarget::Tool, &["^(a|b)$"], &[]),
            ],
        };
        // The server `s`, then `s::a` and `t::a`.
        assert_eq!(count_asks(&cat, &settings), Some(3));
    }
}
