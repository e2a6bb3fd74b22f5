//! Item analysis: is each released sample a good item? From the panel's results (agent ×
//! repeat × sample, solved or not), per sample: the solve rate, each agent's results, the
//! point-biserial discrimination, a Rasch (1PL) difficulty with its standard error when at
//! least three agents ran, and flags.
//!
//! Wire format of `items.jsonl` (one [`ItemRecord`] per tool space and released sample,
//! spaces in config order, then id order): `{id, tool_space, kind, difficulty, runs,
//! solve_rate, pass_k, flip_rate, band, results: {agent: {solved: [bool per repeat], score}},
//! discrimination, rasch?: {difficulty, se}, flags: [..], evidence?}`. Each tool space is
//! analysed on its own runs: an item's flags say what that space's runs showed.
//!
//! - `solve_rate`: share of the agent × repeat runs that solved it (a failed run counts as
//!   not solved, as its missing prediction scores); `pass_k`: share of agents that solved it
//!   in every repeat.
//! - `flip_rate`: share of agents whose repeats on it disagree (solved in some repeats, not
//!   in others); 0 with one repeat.
//! - `discrimination`: Pearson correlation between solving this item and the run's total on
//!   the other items, over the runs (the corrected point-biserial); null when either side
//!   does not vary.
//! - `rasch`: joint maximum likelihood over agents and items (binomial over repeats),
//!   items centred at 0, logits; null for items every run solved or none did (their
//!   estimate is infinite), and when fewer than three agents ran. With a small panel the
//!   estimates are coarse; the standard error says how coarse.
//! - `band`: `easy` (solve rate ≥ 2/3), `medium` (≥ 1/3) or `hard`, compared with the
//!   count-based `difficulty` label.
//!
//! Flags: `all-fail` (no run solved it: likely wrong ground truth; `evidence` lists what
//! each agent called instead, names a tool outside the reference that two or more agents
//! agree on and the plan (sequence of tools) two or more agents chose with it — on an L2
//! query the tool is proposed as a possible missing member of the sample's EFS set),
//! `all-pass` (every run of two or more agents solved it), `label-mismatch` (the band
//! differs from the label; only with at least [`Options::min_runs_for_band`] runs),
//! `unstable` (with repeats: the flip rate is above [`Options::unstable_flip_rate`], by
//! default any flip).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::ToolSpace;
use crate::model::{Difficulty, Kind};

/// The flags, in the order an item lists them.
pub const FLAGS: [&str; 4] = ["all-fail", "all-pass", "label-mismatch", "unstable"];

/// One run of one agent on one item.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    pub solved: bool,
    /// Call-level F1 (corrected).
    pub f1: f64,
    /// Distinct tools the agent called over the turns, in order of first call.
    pub tools: Vec<String>,
    /// Per turn of the run (the sample's turns, in order): the distinct tools it called in
    /// that turn and was offered (a name the model made up is not).
    pub offered_by_turn: Vec<Vec<String>>,
}

impl Outcome {
    /// The offered tools the run called in turn `t` (none past its last turn).
    fn in_turn(&self, t: usize) -> &[String] {
        self.offered_by_turn.get(t).map(Vec::as_slice).unwrap_or_default()
    }
}

/// One released sample and its runs.
#[derive(Debug, Clone)]
pub struct ItemInput {
    pub id: String,
    pub kind: Kind,
    pub difficulty: Difficulty,
    /// Every alternative of every reference call.
    pub reference: BTreeSet<String>,
    /// Per turn of the sample, the reference's calls, each as its alternatives (an L2 step:
    /// its EFS set).
    pub turn_steps: Vec<Vec<BTreeSet<String>>>,
    /// Tools outside the reference that are in the EFS set of a reference tool, each with
    /// that tool: an L1 or L3 step takes no EFS alternative, yet the tool does the same.
    pub efs_siblings: BTreeMap<String, String>,
    /// The alternatives of the reference's lookups: calls that take nothing from an earlier
    /// call and feed a later call of their turn.
    pub lookups: BTreeSet<String>,
    /// The entity `levels l3` invented for the request (see `source::Release::invented`):
    /// no agent can know its id, so a lookup of it the agents leave out is their lapse.
    pub invented: Option<String>,
    /// On an L5 (no tool can serve the request), each tool an agent called that shares no
    /// word with the request, with why: two weak agents calling it alike are no sign that
    /// some tool serves the request.
    pub unrelated: BTreeMap<String, String>,
    /// Per turn: every reference call of the turn is an action its request asks for by name
    /// ("Assign the incident to sre" → `assign_incident`; the gold rules' reading): an agent
    /// that answers such a turn without any call lapsed, whatever the reference.
    pub asked_actions: Vec<bool>,
    /// `[agent][repeat]`; `None`: the run failed.
    pub runs: Vec<Vec<Option<Outcome>>>,
}

/// The panel's results in one tool space.
#[derive(Debug, Clone)]
pub struct Matrix {
    pub tool_space: ToolSpace,
    pub agents: Vec<String>,
    pub repeats: usize,
    pub items: Vec<ItemInput>,
}

/// Thresholds of the flags.
#[derive(Debug, Clone)]
pub struct Options {
    /// `unstable` when the flip rate (share of agents whose repeats disagree) is above this.
    pub unstable_flip_rate: f64,
    /// `label-mismatch` needs at least this many runs (a band from fewer is too coarse).
    pub min_runs_for_band: usize,
    /// Rasch estimates need at least this many agents.
    pub min_agents_for_rasch: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self { unstable_flip_rate: 0.0, min_runs_for_band: 3, min_agents_for_rasch: 3 }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentResult {
    /// Per repeat.
    pub solved: Vec<bool>,
    /// Mean call-level F1 over the repeats.
    pub score: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Rasch {
    /// Logits; higher is harder; the items' mean is 0.
    pub difficulty: f64,
    pub se: f64,
}

/// What the agents did on an item none of them solved.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Evidence {
    /// Per agent: the distinct tools it called (over its repeats, in order of first call);
    /// empty: no tool.
    pub called: BTreeMap<String, Vec<String>>,
    /// A tool outside the reference that two or more agents called (the one most agents
    /// called; ties: the first by name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agreed_tool: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub agreed_by: Vec<String>,
    /// The plan two or more agents chose instead of the reference: the same tools (more than
    /// one, `agreed_tool` among them) in the same order of first call, each agent in one run
    /// (the most agents; ties: the first plan in order).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub agreed_plan: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub agreed_plan_by: Vec<String>,
    /// On an L2 item (its gold step has EFS alternatives): `agreed_tool`, proposed as a
    /// possible missing member of the sample's EFS set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proposed_efs_member: Option<String>,
    /// Off an L2 item: the reference tool whose EFS set holds `agreed_tool`. The agents chose
    /// an equivalent tool of another server, which says the request may not pin its server,
    /// not that the reference is wrong.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub efs_sibling_of: Option<String>,
    /// Without `agreed_tool`: the reference tools (sorted, at least one) that two or more
    /// agents not in `covered_by` each called in one run, and only those, leaving some
    /// reference call out altogether (not merely made in another turn) — a sign the
    /// reference has a call the request does not need (the most agents; ties: the first).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub agreed_short: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub agreed_short_by: Vec<String>,
    /// The agents with a run that called an offered tool for every call of the reference
    /// (one of its alternatives each) in that call's turn, making at least half of its calls
    /// as it does ([`COVER_F1`]), and still failed: the panel's support for the reference's
    /// plan.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub covered_by: Vec<String>,
    /// On a multi-turn item that no run covered ([`covering`]): per turn, the first agent (in
    /// panel order) with a run that called an offered tool for every reference call of that
    /// turn in it ([`turn_by_turn`]), or [`LAPSED`] for a turn that asks for the action its
    /// reference call does and in which no agent called anything; empty unless every turn has
    /// one and some agent made a turn. The panel made each turn's calls, or left out an action
    /// the request names without trying any (the demo's 0.5B once made the second turn's
    /// assignment of its incident dialogue, not the first turn's search; later both agents
    /// answered "assigned" to that turn without a call).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub turns_covered_by: Vec<String>,
    /// With `agreed_short`: the entity `levels l3` invented for the request, when every
    /// reference call the agents left out is a lookup a later call depends on. No agent can
    /// know that entity's id, so the agents lapsed: `release`'s rule keeps the item.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invented_entity: Option<String>,
    /// With `agreed_tool` on an L5 (no reference call), when every tool two or more agents
    /// agree on shares no word with the request: why. Their agreement is then no sign that a
    /// tool serves the request, but a word test cannot see a synonym, so `release`'s rule
    /// holds the item for a person instead of leaving it out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unrelated_to_request: Option<String>,
    pub note: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ItemRecord {
    pub id: String,
    /// The tool space whose runs this record analyses.
    pub tool_space: ToolSpace,
    pub kind: Kind,
    pub difficulty: Difficulty,
    pub runs: usize,
    pub solve_rate: f64,
    pub pass_k: f64,
    /// Share of agents whose repeats on this item disagree (some solved, some not).
    pub flip_rate: f64,
    pub band: Difficulty,
    pub results: BTreeMap<String, AgentResult>,
    pub discrimination: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rasch: Option<Rasch>,
    pub flags: Vec<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence: Option<Evidence>,
}

/// The records of the items flagged in some tool space, by id (in id order): one per space
/// that flagged the item, in the spaces' order.
fn flagged_records<'a>(spaces: &[&'a Analysis]) -> BTreeMap<&'a str, Vec<&'a ItemRecord>> {
    let mut out: BTreeMap<&str, Vec<&ItemRecord>> = BTreeMap::new();
    for &a in spaces {
        for r in a.items.iter().filter(|r| !r.flags.is_empty()) {
            out.entry(r.id.as_str()).or_default().push(r);
        }
    }
    out
}

/// The flags of an item's records, each once, in the order of [`FLAGS`].
fn all_flags(records: &[&ItemRecord]) -> Vec<&'static str> {
    FLAGS.into_iter().filter(|f| records.iter().any(|r| r.flags.contains(f))).collect()
}

/// The items flagged in some tool space, in id order: id → every flag any space gave it.
pub fn flagged<'a>(spaces: &[&'a Analysis]) -> BTreeMap<&'a str, Vec<&'static str>> {
    flagged_records(spaces).into_iter().map(|(id, records)| (id, all_flags(&records))).collect()
}

/// A record's evidence note (empty without evidence).
fn note_of(r: &ItemRecord) -> String {
    r.evidence.as_ref().map(|e| e.note.clone()).unwrap_or_default()
}

/// The review queue: one row per item flagged in some tool space, in id order, with its
/// evidence; `decision` and `note` blank for the adjudicator. With several spaces (one
/// [`Analysis`] each) `flags` holds every flag any space gave the item, `solve_rate` is the
/// lowest over the spaces that flagged it, and the evidence names each of those spaces:
/// ``in `standard`: all-fail: <evidence>; in `full`: all-fail: …``.
pub fn review_sheet(spaces: &[&Analysis]) -> anyhow::Result<Vec<u8>> {
    let mut w = crate::csvout::Writer::new();
    w.write_record(crate::release::eval_review::REVIEW_HEADER)?;
    for (id, records) in flagged_records(spaces) {
        let rate = records.iter().map(|r| r.solve_rate).fold(f64::INFINITY, f64::min);
        let evidence = if spaces.len() == 1 {
            note_of(records[0])
        } else {
            let each = records.iter().map(|r| {
                let note = note_of(r);
                let sep = if note.is_empty() { "" } else { ": " };
                format!("in `{}`: {}{sep}{note}", r.tool_space.as_str(), r.flags.join(" "))
            });
            each.collect::<Vec<String>>().join("; ")
        };
        w.write_record([id, &all_flags(&records).join(" "), &format!("{rate:.4}"), &evidence, "", ""])?;
    }
    w.into_bytes()
}

/// The analysis of every item.
#[derive(Debug, Clone, Default)]
pub struct Analysis {
    pub items: Vec<ItemRecord>,
    /// Flag → items carrying it.
    pub flag_counts: BTreeMap<&'static str, usize>,
    /// Items by solve rate in tenths (`[0, 0.1)`, …, `[0.9, 1]`).
    pub histogram: [usize; 10],
}

fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// The solve-rate band of a rate.
pub fn band(rate: f64) -> Difficulty {
    if rate >= 2.0 / 3.0 {
        Difficulty::Easy
    } else if rate >= 1.0 / 3.0 {
        Difficulty::Medium
    } else {
        Difficulty::Hard
    }
}

fn solved(o: &Option<Outcome>) -> bool {
    o.as_ref().is_some_and(|o| o.solved)
}

/// Each run's total (items solved), runs flattened agent-major.
fn run_totals(m: &Matrix) -> Vec<f64> {
    let runs = m.agents.len() * m.repeats;
    let mut totals = vec![0.0; runs];
    for it in &m.items {
        for (a, reps) in it.runs.iter().enumerate() {
            for (r, o) in reps.iter().enumerate() {
                if solved(o) {
                    totals[a * m.repeats + r] += 1.0;
                }
            }
        }
    }
    totals
}

/// Pearson correlation of the item's 0/1 column with the rest scores; `None` when either
/// does not vary.
fn point_biserial(m: &Matrix, it: &ItemInput, totals: &[f64]) -> Option<f64> {
    let n = totals.len();
    if n < 2 {
        return None;
    }
    let mut xs = Vec::with_capacity(n);
    let mut ys = Vec::with_capacity(n);
    for (a, reps) in it.runs.iter().enumerate() {
        for (r, o) in reps.iter().enumerate().take(m.repeats) {
            let x = if solved(o) { 1.0 } else { 0.0 };
            xs.push(x);
            ys.push(totals[a * m.repeats + r] - x);
        }
    }
    let mx = xs.iter().sum::<f64>() / n as f64;
    let my = ys.iter().sum::<f64>() / n as f64;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (x, y) in xs.iter().zip(&ys) {
        sxy += (x - mx) * (y - my);
        sxx += (x - mx) * (x - mx);
        syy += (y - my) * (y - my);
    }
    (sxx > 0.0 && syy > 1e-12).then(|| round4(sxy / (sxx * syy).sqrt()))
}

fn evidence(m: &Matrix, it: &ItemInput) -> Evidence {
    let mut called = BTreeMap::new();
    for (a, reps) in it.runs.iter().enumerate() {
        let mut tools: Vec<String> = Vec::new();
        for o in reps.iter().flatten() {
            for t in &o.tools {
                if !tools.contains(t) {
                    tools.push(t.clone());
                }
            }
        }
        called.insert(m.agents[a].clone(), tools);
    }
    let covered_by = covering(m, it);
    // An agreement counts offered tools only (a name two agents made up alike is no choice)
    // and agents whose calls did not cover the reference (a tool called besides it is not
    // one called instead of it).
    let mut by_tool: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (a, reps) in it.runs.iter().enumerate() {
        let agent = &m.agents[a];
        if covered_by.contains(agent) {
            continue;
        }
        let mut offered: BTreeSet<&str> = BTreeSet::new();
        for o in reps.iter().flatten() {
            offered.extend(o.offered_by_turn.iter().flatten().map(String::as_str));
        }
        for t in offered.into_iter().filter(|t| !it.reference.contains(*t)) {
            by_tool.entry(t).or_default().push(agent.clone());
        }
    }
    // The tool most agents agree on (ties: the first by name), one of no reference tool's EFS
    // set first: such an agreement is a sign against the reference, a sibling's is not, and
    // which of the two an item shows must not hang on the tools' names.
    let sibling = |t: &str| it.efs_siblings.contains_key(t);
    let best = by_tool
        .iter()
        .filter(|(_, by)| by.len() >= 2)
        .max_by(|a, b| (!sibling(a.0), a.1.len()).cmp(&(!sibling(b.0), b.1.len())).then(b.0.cmp(a.0)));
    let Some((tool, by)) = best.map(|(t, by)| (t.to_string(), by.clone())) else {
        return within_reference(m, it, called, covered_by);
    };
    let (plan, plan_by) = agreed_plan(m, it, &tool).unwrap_or_default();
    let chose = if plan.is_empty() {
        format!("{} called `{tool}`", quoted(&by, ", "))
    } else {
        format!("{} called the plan {}", quoted(&plan_by, ", "), quoted(&plan, " → "))
    };
    let instead = if it.reference.is_empty() {
        "instead of calling no tool (the reference has none)".to_string()
    } else {
        format!("instead of the reference tools ({})", quoted(&it.reference, ", "))
    };
    // On L2 the gold step is a set of equivalent tools (its EFS set): a tool the agents agree
    // on instead may be one the set lacks rather than a sign of wrong ground truth.
    let proposed_efs_member = (it.kind == Kind::L2).then(|| tool.clone());
    // Elsewhere, an agreed tool of a reference tool's EFS set is the same function on another
    // server: the request may not say which server, so this is no sign of a wrong reference.
    let efs_sibling_of = proposed_efs_member.is_none().then(|| it.efs_siblings.get(&tool).cloned()).flatten();
    // With no reference call (L5), tools that share nothing with the request are no sign that
    // a tool serves it: the demo's 0.5B and 1.5B both sent a Slack message for "Can I set up a
    // calendar event for the first of September?". Only when every tool two or more agents
    // agree on is such a tool, so that which one is named does not hang on the tools' names.
    let agreed = by_tool.iter().filter(|(_, by)| by.len() >= 2).map(|(t, _)| *t);
    let all_unrelated = agreed.clone().all(|t| it.unrelated.contains_key(t));
    let unrelated_to_request =
        (it.reference.is_empty() && all_unrelated).then(|| it.unrelated.get(&tool).cloned()).flatten();
    let note = match (&proposed_efs_member, &efs_sibling_of) {
        _ if let Some(why) = &unrelated_to_request => {
            format!(
                "{chose} {instead}: `{tool}` {why}, so the agreement is no sign that a tool serves it (a person decides)"
            )
        }
        (Some(t), _) => {
            format!("{chose} {instead}: `{t}` is proposed as a possible missing member of the sample's EFS set")
        }
        (None, Some(of)) => format!(
            "{chose} {instead}: `{tool}` is in the EFS set of the reference's `{of}`, which is not among that call's alternatives; the request may not say which server to use"
        ),
        (None, None) => format!("{chose} {instead}: the ground truth may be wrong"),
    };
    Evidence {
        called,
        agreed_tool: Some(tool),
        agreed_by: by,
        agreed_plan: plan,
        agreed_plan_by: plan_by,
        proposed_efs_member,
        efs_sibling_of,
        covered_by,
        unrelated_to_request,
        note,
        ..Default::default()
    }
}

/// The least call-level F1 of a run that [`covering`] takes as the panel's support: at
/// least half the reference's calls made as the reference makes them (tool and arguments).
pub const COVER_F1: f64 = 0.5;

/// The agents with a run that called an offered tool for every reference call (one of its
/// alternatives each) in that call's turn ([`covers_by_turn`]) with a call-level F1 of at
/// least [`COVER_F1`], and still failed: on extra calls, order or some arguments. In the
/// `oracle` space, where only the reference's tools are offered, calling them says little;
/// making its calls does.
fn covering(m: &Matrix, it: &ItemInput) -> Vec<String> {
    let runs = it.runs.iter().enumerate();
    let by = runs.filter(|(_, reps)| reps.iter().flatten().any(|o| o.f1 >= COVER_F1 && covers_by_turn(it, o)));
    by.filter(|_| it.turn_steps.iter().any(|t| !t.is_empty())).map(|(a, _)| m.agents[a].clone()).collect()
}

/// The evidence of an item on which no two agents agree on a tool outside the reference:
/// whether two or more called the same reference tools only (at least one) in one run each,
/// leaving a reference call out, and which agents covered it ([`covering`], passed in).
fn within_reference(
    m: &Matrix,
    it: &ItemInput,
    called: BTreeMap<String, Vec<String>>,
    covered_by: Vec<String>,
) -> Evidence {
    // Judged per run: the union of an agent's repeats may hold a set no run of it called.
    // Calling nothing is left out: it is how a weak agent most often fails (no call made,
    // or one written as text), so two agents doing it say little about the reference. A run
    // whose tools hold every reference call, in other turns than the reference's, left none
    // out; an agent that covered the reference in some run supports it rather than a part.
    // A run counts only with reference tools alone: a name two runs made up alike, or any
    // tool besides the reference's, is no part of the reference.
    let sets = per_run(m, it, |o| {
        let tools: BTreeSet<&String> = o.tools.iter().collect();
        let only_reference = tools.iter().all(|t| it.reference.contains(*t));
        (!tools.is_empty() && only_reference && !covers(it.turn_steps.iter().flatten(), &o.tools)).then_some(tools)
    });
    let sets: BTreeMap<&String, _> = sets.into_iter().filter(|&(agent, _)| !covered_by.contains(agent)).collect();
    let (short, short_by): (Vec<String>, Vec<String>) =
        most_shared(sets).map(|(set, by)| (set.into_iter().cloned().collect(), by)).unwrap_or_default();
    let left = left_sets(it, &short);
    // Two agents leaving the same calls out is a question for a person, whoever made a turn.
    let turns_covered_by = if covered_by.is_empty() && short_by.is_empty() { turn_by_turn(m, it) } else { Vec::new() };
    let invented_entity = invented_lookup(it, &left).filter(|_| !short_by.is_empty());
    let note = if let Some(entity) = &invented_entity {
        let left: Vec<String> = left.iter().filter_map(|alts| alts.first().cloned()).collect();
        format!(
            "{} called only {}, leaving out {}, which finds what a later reference call takes: the request is about `{entity}`, an entity `levels l3` invented, whose id no agent can know without it (the agents' lapse, not a call the request does not need)",
            quoted(&short_by, ", "),
            quoted(&short, ", "),
            quoted(&left, ", ")
        )
    } else if !short_by.is_empty() {
        format!(
            "{} called only {}, leaving reference calls out: the reference may have a call the request does not need",
            quoted(&short_by, ", "),
            quoted(&short, ", ")
        )
    } else if !covered_by.is_empty() {
        format!(
            "no two agents agree on a tool outside the reference; {} called a tool for every reference call, making at least half of its calls as it does",
            quoted(&covered_by, ", ")
        )
    } else if !turns_covered_by.is_empty() && turns_covered_by.iter().any(|a| a == LAPSED) {
        format!(
            "no two agents agree on a tool outside the reference; no run made every turn's calls, but each turn's were made in that turn by some agent or are an action its request names that the agents left out without trying any call ({}): the agents' lapse",
            turns_text(&turns_covered_by)
        )
    } else if !turns_covered_by.is_empty() {
        format!(
            "no two agents agree on a tool outside the reference; no run made every turn's calls, but each turn's were made in that turn by some agent ({})",
            turns_text(&turns_covered_by)
        )
    } else {
        "no two agents agree on a tool outside the reference".to_string()
    };
    Evidence {
        called,
        agreed_short: short,
        agreed_short_by: short_by,
        covered_by,
        turns_covered_by,
        invented_entity,
        note,
        ..Default::default()
    }
}

/// Per turn of a multi-turn item whose every turn has reference calls, the first agent with a
/// run that called an offered tool for each of that turn's reference calls in that turn and
/// made at least [`COVER_F1`] of the reference's calls right over the whole run (as
/// [`covering`] asks: calling an offered tool alone says little); empty when some turn has
/// none.
fn turn_by_turn(m: &Matrix, it: &ItemInput) -> Vec<String> {
    if it.turn_steps.len() < 2 || it.turn_steps.iter().any(Vec::is_empty) {
        return Vec::new();
    }
    let mut by = Vec::with_capacity(it.turn_steps.len());
    for (t, steps) in it.turn_steps.iter().enumerate() {
        let made = |o: &Outcome| o.f1 >= COVER_F1 && covers(steps.iter(), o.in_turn(t));
        // The request names the action and no run tried any tool in that turn (a run that
        // failed tried nothing either): nothing speaks against the reference's call.
        let lapsed = || {
            it.asked_actions.get(t).copied().unwrap_or(false)
                && it.runs.iter().flatten().flatten().all(|o| o.in_turn(t).is_empty())
        };
        match it.runs.iter().position(|reps| reps.iter().flatten().any(made)) {
            Some(a) => by.push(m.agents[a].clone()),
            None if lapsed() => by.push(LAPSED.to_string()),
            None => return Vec::new(),
        }
    }
    // Some agent must have made a turn: a panel that called nothing anywhere says nothing.
    if by.iter().all(|a| a == LAPSED) {
        return Vec::new();
    }
    by
}

/// In [`Evidence::turns_covered_by`]: a turn no agent made, whose request asks for the action
/// its reference call does, and in which no agent called anything.
pub use crate::model::{LAPSED_TURN as LAPSED, turns_text};

/// The reference calls none of `short`'s tools makes, each as its alternatives.
fn left_sets<'a>(it: &'a ItemInput, short: &[String]) -> Vec<&'a BTreeSet<String>> {
    it.turn_steps.iter().flatten().filter(|alts| !alts.iter().any(|t| short.contains(t))).collect()
}

/// The item's invented entity ([`ItemInput::invented`]) when every reference call left out
/// (`left`, one at least: [`left_sets`]) is a lookup ([`ItemInput::lookups`]): what it
/// finds, a later call takes, and of an entity nobody can know, so leaving it out is no
/// sign against the reference.
fn invented_lookup(it: &ItemInput, left: &[&BTreeSet<String>]) -> Option<String> {
    let lookups = !left.is_empty() && left.iter().all(|alts| alts.iter().any(|t| it.lookups.contains(t)));
    it.invented.clone().filter(|_| lookups)
}

/// Whether `tools` hold one alternative of each of `steps` (vacuously, with none).
fn covers<'a>(mut steps: impl Iterator<Item = &'a BTreeSet<String>>, tools: &[String]) -> bool {
    steps.all(|alts| tools.iter().any(|t| alts.contains(t)))
}

/// Whether a run covers the reference turn by turn: each turn's offered tools hold one
/// alternative of every reference call of that turn. Pooled over the turns, a run that made
/// turn 2's call in turn 1 would count.
fn covers_by_turn(it: &ItemInput, o: &Outcome) -> bool {
    it.turn_steps.iter().enumerate().all(|(i, steps)| covers(steps.iter(), o.in_turn(i)))
}

/// Per agent (by name), the distinct keys `key` gives its runs (`None`: the run counts for
/// nothing).
fn per_run<'a, K: Ord>(
    m: &'a Matrix,
    it: &'a ItemInput,
    key: impl Fn(&'a Outcome) -> Option<K>,
) -> BTreeMap<&'a String, BTreeSet<K>> {
    let runs = m.agents.iter().zip(&it.runs);
    runs.map(|(agent, reps)| (agent, reps.iter().flatten().filter_map(&key).collect::<BTreeSet<K>>())).collect()
}

/// The key most agents share, two or more (ties: the first key in order), with those agents
/// by name: an agent counts once for each key of [`per_run`].
fn most_shared<K: Ord>(per_agent: BTreeMap<&String, BTreeSet<K>>) -> Option<(K, Vec<String>)> {
    let mut by_key: BTreeMap<K, Vec<String>> = BTreeMap::new();
    for (agent, keys) in per_agent {
        for k in keys {
            by_key.entry(k).or_default().push(agent.clone());
        }
    }
    by_key.into_iter().filter(|(_, by)| by.len() >= 2).max_by(|a, b| a.1.len().cmp(&b.1.len()).then(b.0.cmp(&a.0)))
}

/// Names in backticks, joined by `sep`.
fn quoted<'a>(names: impl IntoIterator<Item = &'a String>, sep: &str) -> String {
    names.into_iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(sep)
}

/// The plan most agents share, two or more: a run's distinct tools in order of first call,
/// more than one and `tool` among them (ties: the first in order); with the agents. Judged
/// per run: the union of an agent's repeats may be a plan none of its runs chose.
fn agreed_plan(m: &Matrix, it: &ItemInput, tool: &str) -> Option<(Vec<String>, Vec<String>)> {
    let plans = per_run(m, it, |o| {
        let with_tool = o.tools.len() > 1 && o.tools.iter().any(|x| x == tool);
        with_tool.then_some(o.tools.as_slice())
    });
    most_shared(plans).map(|(plan, by)| (plan.to_vec(), by))
}

/// Joint maximum-likelihood Rasch estimates: items' difficulties with standard errors, by
/// item index; items every run solved or none did are left out (infinite estimates), and
/// agents whose totals over the remaining items are extreme too.
fn rasch(m: &Matrix, counts: &[Vec<u32>]) -> BTreeMap<usize, Rasch> {
    let k = m.repeats as f64;
    let agents = m.agents.len();
    let mut items: Vec<usize> = Vec::new();
    let mut persons: Vec<usize> = (0..agents).collect();
    // Drop extreme items and persons until none is left.
    loop {
        let kept_items: Vec<usize> = (0..counts.len())
            .filter(|&i| {
                let s: u32 = persons.iter().map(|&a| counts[i][a]).sum();
                s > 0 && f64::from(s) < k * persons.len() as f64
            })
            .collect();
        let kept_persons: Vec<usize> = persons
            .iter()
            .copied()
            .filter(|&a| {
                let s: u32 = kept_items.iter().map(|&i| counts[i][a]).sum();
                s > 0 && f64::from(s) < k * kept_items.len() as f64
            })
            .collect();
        let stable = kept_items == items && kept_persons == persons;
        items = kept_items;
        persons = kept_persons;
        if stable || items.is_empty() || persons.len() < 2 {
            break;
        }
    }
    if items.is_empty() || persons.len() < 2 {
        return BTreeMap::new();
    }
    let mut b = vec![0.0f64; items.len()];
    let mut theta = vec![0.0f64; persons.len()];
    let p = |t: f64, d: f64| 1.0 / (1.0 + (d - t).exp());
    for _ in 0..200 {
        let mut change = 0.0f64;
        for (j, &a) in persons.iter().enumerate() {
            let (mut g, mut h) = (0.0, 0.0);
            for (bi, &i) in b.iter().zip(&items) {
                let pr = p(theta[j], *bi);
                g += f64::from(counts[i][a]) - k * pr;
                h += k * pr * (1.0 - pr);
            }
            let step = (g / h.max(1e-9)).clamp(-1.0, 1.0);
            theta[j] += step;
            change = change.max(step.abs());
        }
        for (bi, &i) in b.iter_mut().zip(&items) {
            let (mut g, mut h) = (0.0, 0.0);
            for (j, &a) in persons.iter().enumerate() {
                let pr = p(theta[j], *bi);
                g += k * pr - f64::from(counts[i][a]);
                h += k * pr * (1.0 - pr);
            }
            let step = (g / h.max(1e-9)).clamp(-1.0, 1.0);
            *bi += step;
            change = change.max(step.abs());
        }
        let mean = b.iter().sum::<f64>() / b.len() as f64;
        b.iter_mut().for_each(|x| *x -= mean);
        theta.iter_mut().for_each(|x| *x -= mean);
        if change < 1e-6 {
            break;
        }
    }
    items
        .iter()
        .zip(&b)
        .map(|(&i, &d)| {
            let info: f64 = theta.iter().map(|&t| k * p(t, d) * (1.0 - p(t, d))).sum();
            (i, Rasch { difficulty: round4(d), se: round4(1.0 / info.max(1e-12).sqrt()) })
        })
        .collect()
}

fn flags(
    m: &Matrix,
    opts: &Options,
    it: &ItemInput,
    rate: f64,
    flip_rate: f64,
    runs: usize,
    solves: usize,
) -> Vec<&'static str> {
    let mut f = Vec::new();
    if runs > 0 && solves == 0 {
        f.push("all-fail");
    }
    if m.agents.len() >= 2 && runs > 0 && solves == runs {
        f.push("all-pass");
    }
    if runs >= opts.min_runs_for_band && band(rate) != it.difficulty {
        f.push("label-mismatch");
    }
    if m.repeats >= 2 && flip_rate > opts.unstable_flip_rate {
        f.push("unstable");
    }
    f
}

/// Analyse every item of the matrix (in its order).
pub fn analyse(m: &Matrix, opts: &Options) -> Analysis {
    let totals = run_totals(m);
    let counts: Vec<Vec<u32>> = m
        .items
        .iter()
        .map(|it| it.runs.iter().map(|reps| reps.iter().filter(|o| solved(o)).count() as u32).collect())
        .collect();
    let rasch = if m.agents.len() >= opts.min_agents_for_rasch { rasch(m, &counts) } else { BTreeMap::new() };
    let mut out = Analysis::default();
    for (idx, it) in m.items.iter().enumerate() {
        let runs = m.agents.len() * m.repeats;
        let solves: usize = counts[idx].iter().map(|&c| c as usize).sum();
        let rate = if runs == 0 { 0.0 } else { solves as f64 / runs as f64 };
        let all_k = counts[idx].iter().filter(|&&c| c as usize == m.repeats).count();
        let pass_k = if m.agents.is_empty() { 0.0 } else { all_k as f64 / m.agents.len() as f64 };
        // An agent flips when its repeats disagree: solved in some, not in all.
        let flips = counts[idx].iter().filter(|&&c| c > 0 && (c as usize) < m.repeats).count();
        let flip_rate = if m.agents.is_empty() { 0.0 } else { flips as f64 / m.agents.len() as f64 };
        let results = it
            .runs
            .iter()
            .enumerate()
            .map(|(a, reps)| {
                let solved_v: Vec<bool> = reps.iter().map(solved).collect();
                let score =
                    reps.iter().map(|o| o.as_ref().map_or(0.0, |o| o.f1)).sum::<f64>() / reps.len().max(1) as f64;
                (m.agents[a].clone(), AgentResult { solved: solved_v, score: round4(score) })
            })
            .collect();
        let flags = flags(m, opts, it, rate, flip_rate, runs, solves);
        let evidence = flags.contains(&"all-fail").then(|| evidence(m, it));
        for f in &flags {
            *out.flag_counts.entry(f).or_default() += 1;
        }
        out.histogram[((rate * 10.0).floor() as usize).min(9)] += 1;
        out.items.push(ItemRecord {
            id: it.id.clone(),
            tool_space: m.tool_space,
            kind: it.kind,
            difficulty: it.difficulty,
            runs,
            solve_rate: rate,
            pass_k,
            flip_rate,
            band: band(rate),
            results,
            discrimination: point_biserial(m, it, &totals),
            rasch: rasch.get(&idx).copied(),
            flags,
            evidence,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(solved: bool, tools: &[&str]) -> Option<Outcome> {
        Some(Outcome {
            solved,
            f1: if solved { 1.0 } else { 0.0 },
            tools: tools.iter().map(|t| t.to_string()).collect(),
            offered_by_turn: vec![tools.iter().map(|t| t.to_string()).collect()],
        })
    }

    /// The `oracle` space's results of `agents`, `repeats` runs each, on `items`.
    fn oracle(agents: &[&str], repeats: usize, items: Vec<ItemInput>) -> Matrix {
        Matrix { tool_space: ToolSpace::Oracle, agents: agents.iter().map(|a| a.to_string()).collect(), repeats, items }
    }

    fn item(id: &str, kind: Kind, reference: &[&str], runs: Vec<Vec<Option<Outcome>>>) -> ItemInput {
        ItemInput {
            id: id.into(),
            kind,
            difficulty: Difficulty::Easy,
            reference: reference.iter().map(|t| t.to_string()).collect(),
            turn_steps: vec![reference.iter().map(|t| BTreeSet::from([t.to_string()])).collect()],
            efs_siblings: BTreeMap::new(),
            lookups: BTreeSet::new(),
            invented: None,
            unrelated: BTreeMap::new(),
            asked_actions: vec![],
            runs,
        }
    }

    /// Without a tool outside the reference agreed on: two agents calling the same part of a
    /// two-call reference is a sign against it (two calling nothing is not: weak agents fail
    /// that way); an agent calling a tool for each reference call is named as support.
    #[test]
    fn all_fail_evidence_inside_the_reference_names_a_shared_part_and_who_covered_it() {
        let m = oracle(
            &["a", "b", "c"],
            1,
            vec![
                item(
                    "L3-1",
                    Kind::L3,
                    &["S::x", "S::y"],
                    vec![vec![outcome(false, &["S::y"])], vec![outcome(false, &["S::y"])], vec![outcome(false, &[])]],
                ),
                item(
                    "L3-2",
                    Kind::L3,
                    &["S::x", "S::y"],
                    vec![
                        vec![near(0.8, &["S::y", "S::x", "S::q"])],
                        vec![near(0.4, &["S::x", "S::y"])],
                        vec![outcome(false, &[])],
                    ],
                ),
                // Two agents name the same tool nobody offered: no agreement.
                item(
                    "L1-5",
                    Kind::L1,
                    &["S::x"],
                    vec![vec![made_up("U")], vec![made_up("U")], vec![outcome(false, &[])]],
                ),
            ],
        );
        let a = analyse(&m, &Options::default());
        let short = a.items[0].evidence.as_ref().unwrap();
        assert_eq!(
            (short.agreed_short.as_slice(), short.agreed_short_by.as_slice()),
            (&["S::y".to_string()][..], &["a".to_string(), "b".to_string()][..])
        );
        assert!(short.covered_by.is_empty() && short.note.contains("called only `S::y`"), "{}", short.note);
        let covered = a.items[1].evidence.as_ref().unwrap();
        assert!(covered.agreed_short_by.is_empty(), "two agents calling nothing is no agreement: {covered:?}");
        assert_eq!(covered.covered_by, ["a"], "`b` covered with F1 0.4: too few of the calls made right");
        assert!(covered.note.contains("`a` called a tool for every reference call"), "{}", covered.note);
        let made_up = a.items[2].evidence.as_ref().unwrap();
        assert!(made_up.agreed_tool.is_none() && made_up.called["a"] == ["U"], "{made_up:?}");
        assert!(made_up.agreed_short.is_empty(), "a made-up name is no part of the reference: {made_up:?}");
    }

    /// Two agents that call only the second step of an L3 chain about an entity `levels l3`
    /// invented leave out a lookup nobody can do without: the evidence names the entity (the
    /// release's rule keeps the item). Without the entity, or when the call left out is no
    /// lookup, it is the plain sign against the reference.
    #[test]
    fn a_left_out_lookup_of_an_invented_entity_is_the_agents_lapse() {
        let short = || vec![vec![outcome(false, &["S::price"])], vec![outcome(false, &["S::price"])]];
        let chain = |invented: Option<&str>, lookups: &[&str]| ItemInput {
            lookups: lookups.iter().map(|t| t.to_string()).collect(),
            invented: invented.map(str::to_string),
            ..item("L3-1", Kind::L3, &["S::search", "S::price"], short())
        };
        let evidence = |it: ItemInput| {
            analyse(&oracle(&["a", "b"], 1, vec![it]), &Options::default()).items[0].evidence.clone().unwrap()
        };
        let lapse = evidence(chain(Some("Morvira"), &["S::search"]));
        assert_eq!(lapse.invented_entity.as_deref(), Some("Morvira"), "{lapse:?}");
        assert_eq!(lapse.agreed_short, ["S::price"]);
        assert!(
            lapse.note.contains("leaving out `S::search`, which finds what a later reference call takes"),
            "{}",
            lapse.note
        );
        assert!(lapse.note.contains("`Morvira`, an entity `levels l3` invented"), "{}", lapse.note);
        for (invented, lookups) in [(None, &["S::search"][..]), (Some("Morvira"), &[][..])] {
            let plain = evidence(chain(invented, lookups));
            assert!(plain.invented_entity.is_none(), "{plain:?}");
            assert!(plain.note.contains("the reference may have a call the request does not need"), "{}", plain.note);
        }
    }

    /// Two agents that call one tool on an L5 item (no reference call) are a sign that some
    /// tool serves it, unless every tool they agree on shares nothing with the request: then
    /// the evidence says why (the release's rule holds the item for a person).
    #[test]
    fn an_l5_whose_agents_agree_only_on_unrelated_tools_is_named_so() {
        let both =
            || vec![vec![outcome(false, &["slack::send_message"])], vec![outcome(false, &["slack::send_message"])]];
        let evidence = |unrelated: &[&str]| {
            let it = ItemInput {
                unrelated: unrelated.iter().map(|t| (t.to_string(), "shares no word".to_string())).collect(),
                ..item("L5-1", Kind::L5, &[], both())
            };
            analyse(&oracle(&["a", "b"], 1, vec![it]), &Options::default()).items[0].evidence.clone().unwrap()
        };
        let e = evidence(&["slack::send_message"]);
        assert_eq!(e.agreed_tool.as_deref(), Some("slack::send_message"));
        assert_eq!(e.unrelated_to_request.as_deref(), Some("shares no word"));
        assert!(e.note.contains("`slack::send_message` shares no word, so the agreement is no sign"), "{}", e.note);
        // Two agents that also agree on a related tool: no longer named so, though the
        // unrelated one is the tool the evidence names (the first by name of a tie).
        let also = || {
            vec![
                vec![outcome(false, &["slack::send_message", "zcal::add_event"])],
                vec![outcome(false, &["slack::send_message", "zcal::add_event"])],
            ]
        };
        let it = ItemInput {
            unrelated: BTreeMap::from([("slack::send_message".to_string(), "shares no word".to_string())]),
            ..item("L5-1", Kind::L5, &[], also())
        };
        let mixed = analyse(&oracle(&["a", "b"], 1, vec![it]), &Options::default()).items[0].evidence.clone().unwrap();
        assert_eq!(mixed.agreed_tool.as_deref(), Some("slack::send_message"), "{mixed:?}");
        assert!(mixed.unrelated_to_request.is_none(), "{mixed:?}");
        let plain = evidence(&[]);
        assert!(plain.unrelated_to_request.is_none());
        assert!(plain.note.ends_with("the ground truth may be wrong"), "{}", plain.note);
    }

    /// A failed run with call-level F1 `f1` that called the offered `tools`.
    fn near(f1: f64, tools: &[&str]) -> Option<Outcome> {
        let tools: Vec<String> = tools.iter().map(|t| t.to_string()).collect();
        Some(Outcome { solved: false, f1, offered_by_turn: vec![tools.clone()], tools })
    }

    /// A failed run that called `name`, which it was not offered.
    fn made_up(name: &str) -> Option<Outcome> {
        Some(Outcome { solved: false, f1: 0.0, tools: vec![name.to_string()], offered_by_turn: vec![Vec::new()] })
    }

    /// A failed run with call-level F1 `f1` that called the offered tools `by_turn`, turn by
    /// turn.
    fn turned(f1: f64, by_turn: &[&[&str]]) -> Option<Outcome> {
        let offered_by_turn: Vec<Vec<String>> =
            by_turn.iter().map(|t| t.iter().map(|x| x.to_string()).collect()).collect();
        let mut tools: Vec<String> = Vec::new();
        for t in offered_by_turn.iter().flatten() {
            if !tools.contains(t) {
                tools.push(t.clone());
            }
        }
        Some(Outcome { solved: false, f1, tools, offered_by_turn })
    }

    /// A two-turn item's reference is covered only by a run that makes each turn's call in
    /// that turn: `a` called both tools, each in the other's turn, and is not named (pooled
    /// over the turns it would be); `b` called them in their turns and is. Nor does `a` count
    /// as calling only part of the reference: its calls left no reference call out.
    #[test]
    fn a_multi_turn_reference_is_covered_only_by_each_turns_calls_in_that_turn() {
        let runs = vec![
            vec![turned(0.5, &[&["S::y"], &["S::x"]])],
            vec![turned(0.5, &[&["S::x"], &["S::y"]])],
            vec![outcome(false, &[])],
        ];
        let mut it = item("D-1", Kind::MultiTurn, &["S::x", "S::y"], runs);
        it.turn_steps = vec![vec![BTreeSet::from(["S::x".to_string()])], vec![BTreeSet::from(["S::y".to_string()])]];
        let m = oracle(&["a", "b", "c"], 1, vec![it]);
        let ev = analyse(&m, &Options::default()).items[0].evidence.clone().unwrap();
        assert_eq!(ev.covered_by, ["b"], "{ev:?}");
        assert!(ev.agreed_short.is_empty() && ev.agreed_tool.is_none(), "{ev:?}");
        let support = "`b` called a tool for every reference call, making at least half of its calls as it does";
        assert!(ev.note.ends_with(support), "{}", ev.note);
        assert_eq!(ev.called["a"], ["S::y", "S::x"], "`called` still pools the turns");
    }

    /// A two-turn item no run covered, whose turns two agents made one each in its turn: `a`
    /// the first turn's call (and a wrong one in the second), `b` the second's; the evidence
    /// names them per turn. With the second turn's call made by nobody, it names none.
    #[test]
    fn a_multi_turn_reference_whose_turns_the_panel_made_one_each_names_them_per_turn() {
        let steps = vec![vec![BTreeSet::from(["S::x".to_string()])], vec![BTreeSet::from(["S::y".to_string()])]];
        let split = vec![vec![turned(1.0, &[&["S::x"], &[]])], vec![turned(0.5, &[&["S::y"], &["S::y"]])]];
        let mut it = item("D-1", Kind::MultiTurn, &["S::x", "S::y"], split);
        it.turn_steps = steps.clone();
        let m = oracle(&["a", "b"], 1, vec![it]);
        let ev = analyse(&m, &Options::default()).items[0].evidence.clone().unwrap();
        assert!(ev.covered_by.is_empty(), "{ev:?}");
        assert_eq!(ev.turns_covered_by, ["a", "b"], "{ev:?}");
        assert!(ev.note.ends_with("by some agent (turn 1: `a`, turn 2: `b`)"), "{}", ev.note);
        // Each turn's tool called, but hardly a call made right: no sign for the reference.
        let wrong = vec![vec![turned(0.4, &[&["S::x"], &[]])], vec![turned(0.0, &[&[], &["S::y"]])]];
        let mut it = item("D-3", Kind::MultiTurn, &["S::x", "S::y"], wrong);
        it.turn_steps = steps.clone();
        let m = oracle(&["a", "b"], 1, vec![it]);
        let ev = analyse(&m, &Options::default()).items[0].evidence.clone().unwrap();
        assert!(ev.turns_covered_by.is_empty(), "{ev:?}");
        let half = vec![vec![turned(1.0, &[&["S::x"], &[]])], vec![turned(0.0, &[&[], &[]])]];
        let mut it = item("D-2", Kind::MultiTurn, &["S::x", "S::y"], half);
        it.turn_steps = steps;
        let m = oracle(&["a", "b"], 1, vec![it]);
        let ev = analyse(&m, &Options::default()).items[0].evidence.clone().unwrap();
        assert!(ev.turns_covered_by.is_empty(), "{ev:?}");
    }

    /// The demo's incident dialogue: `a` made the first turn's search (and an assignment nobody
    /// asked for), and in the second, "Assign the incident to sre", neither agent called
    /// anything. A turn that asks for its reference's action and that nobody tried is the
    /// agents' lapse; one where an agent tried another tool, or that asks for no action, is not.
    #[test]
    fn a_requested_action_no_agent_tried_counts_as_the_agents_lapse_in_a_dialogue() {
        let steps =
            vec![vec![BTreeSet::from(["S::search".to_string()])], vec![BTreeSet::from(["S::assign".to_string()])]];
        let dialogue = |runs: Vec<Vec<Option<Outcome>>>, asked: Vec<bool>| {
            let mut it = item("D-1", Kind::MultiTurn, &["S::search", "S::assign"], runs);
            it.turn_steps = steps.clone();
            it.asked_actions = asked;
            let m = oracle(&["a", "b"], 1, vec![it]);
            analyse(&m, &Options::default()).items[0].evidence.clone().unwrap()
        };
        let silent_second =
            || vec![vec![turned(0.5, &[&["S::search", "S::assign"], &[]])], vec![turned(0.0, &[&["S::assign"], &[]])]];
        let ev = dialogue(silent_second(), vec![false, true]);
        assert_eq!(ev.turns_covered_by, ["a", LAPSED], "{ev:?}");
        assert!(
            ev.note.contains("turn 2: no agent called anything") && ev.note.ends_with("the agents' lapse"),
            "{}",
            ev.note
        );
        // The second turn asks for no action: nothing says the reference's call is needed.
        assert!(dialogue(silent_second(), vec![false, false]).turns_covered_by.is_empty());
        // An agent tried another tool in the second turn: a question for a person.
        let tried =
            vec![vec![turned(0.5, &[&["S::search"], &[]])], vec![turned(0.0, &[&["S::assign"], &["S::search"]])]];
        assert!(dialogue(tried, vec![false, true]).turns_covered_by.is_empty());
        // No agent made any turn: a panel that called nothing anywhere says nothing.
        let nothing = vec![vec![turned(0.0, &[&[], &[]])], vec![turned(0.0, &[&[], &[]])]];
        assert!(dialogue(nothing, vec![true, true]).turns_covered_by.is_empty());
    }

    /// Two agents agree on calling only part of the reference when one run of each called
    /// it, whatever their other repeats did; the union of an agent's repeats is no run. On
    /// `L3-1` `a` called `S::x` then `S::y` and `b` both at once: their unions agree, no two
    /// runs do. On `L3-2` `a`'s repeats together cover the reference, yet one of them called
    /// `S::x` alone, as both of `b`'s did. On `L3-3` the plan `S::w` → `S::x` is the union of
    /// `a`'s repeats and a run of `b`, so the agents agree on the tool but on no plan.
    #[test]
    fn agents_agree_on_part_of_the_reference_or_a_plan_in_single_runs_not_over_their_repeats() {
        let none = vec![outcome(false, &[]), outcome(false, &[])];
        let m = oracle(
            &["a", "b", "c"],
            2,
            vec![
                item(
                    "L3-1",
                    Kind::L3,
                    &["S::x", "S::y", "S::z"],
                    vec![
                        vec![outcome(false, &["S::x"]), outcome(false, &["S::y"])],
                        vec![outcome(false, &["S::x", "S::y"]), outcome(false, &[])],
                        none.clone(),
                    ],
                ),
                item(
                    "L3-2",
                    Kind::L3,
                    &["S::x", "S::y"],
                    vec![
                        vec![near(0.5, &["S::x"]), near(0.5, &["S::y"])],
                        vec![outcome(false, &["S::x"]), outcome(false, &["S::x"])],
                        none.clone(),
                    ],
                ),
                item(
                    "L3-3",
                    Kind::L3,
                    &["S::x"],
                    vec![
                        vec![outcome(false, &["S::w"]), outcome(false, &["S::x", "S::w"])],
                        vec![outcome(false, &["S::w", "S::x"]), outcome(false, &[])],
                        none,
                    ],
                ),
            ],
        );
        let a = analyse(&m, &Options::default());
        let apart = a.items[0].evidence.as_ref().unwrap();
        assert_eq!(apart.called["a"], ["S::x", "S::y"], "`called` still pools the repeats");
        assert_eq!(apart.called["b"], ["S::x", "S::y"]);
        assert!(apart.agreed_short_by.is_empty(), "{apart:?}");
        assert_eq!(apart.note, "no two agents agree on a tool outside the reference");
        let part = a.items[1].evidence.as_ref().unwrap();
        assert_eq!(part.agreed_short, ["S::x"], "{part:?}");
        assert_eq!(part.agreed_short_by, ["a", "b"]);
        assert!(part.covered_by.is_empty(), "no run of `a` covered the reference: {part:?}");
        let plan = a.items[2].evidence.as_ref().unwrap();
        assert_eq!(plan.agreed_tool.as_deref(), Some("S::w"));
        assert_eq!(plan.agreed_by, ["a", "b"]);
        assert!(plan.agreed_plan.is_empty() && plan.agreed_plan_by.is_empty(), "{plan:?}");
        assert!(plan.note.starts_with("`a`, `b` called `S::w` instead of"), "{}", plan.note);
    }

    #[test]
    fn flags_name_all_fail_with_the_tool_two_agents_agree_on() {
        let m = oracle(
            &["a", "b", "c"],
            1,
            vec![
                item(
                    "L2-1",
                    Kind::L2,
                    &["S::x"],
                    vec![
                        vec![outcome(false, &["S::z"])],
                        vec![outcome(false, &["S::z", "S::y"])],
                        vec![outcome(false, &[])],
                    ],
                ),
                item("L1-1", Kind::L1, &["S::x"], vec![vec![outcome(true, &["S::x"])]; 3]),
                item(
                    "L1-2",
                    Kind::L1,
                    &["S::x"],
                    vec![vec![outcome(true, &["S::x"])], vec![outcome(false, &["S::q"])], vec![None]],
                ),
                item(
                    "L1-3",
                    Kind::L1,
                    &["S::x"],
                    vec![vec![outcome(true, &["S::x"])], vec![outcome(true, &["S::x"])], vec![None]],
                ),
            ],
        );
        let a = analyse(&m, &Options::default());
        let fail = &a.items[0];
        assert_eq!(fail.flags, ["all-fail", "label-mismatch"]);
        let ev = fail.evidence.as_ref().unwrap();
        assert_eq!(ev.agreed_tool.as_deref(), Some("S::z"));
        assert_eq!(ev.agreed_by, ["a", "b"]);
        let proposal = "`S::z` is proposed as a possible missing member of the sample's EFS set";
        assert!(ev.note.contains(proposal), "{}", ev.note);
        assert_eq!(ev.proposed_efs_member.as_deref(), Some("S::z"));
        assert!(ev.agreed_plan.is_empty(), "only `b` called more than one tool");
        assert_eq!(ev.called["c"], Vec::<String>::new());
        assert_eq!(a.items[1].flags, ["all-pass"]);
        assert_eq!(a.items[2].solve_rate, 1.0 / 3.0);
        assert_eq!(a.items[2].flags, ["label-mismatch"], "a band of medium for an easy label");
        assert!(a.items[2].evidence.is_none());
        assert_eq!(a.flag_counts["all-fail"], 1);
        assert_eq!(a.histogram.iter().sum::<usize>(), 4);
        // Agent a solves 3, b 2, c 0: every item that separates them discriminates positively.
        assert!(a.items[2].discrimination.unwrap() > 0.0);
        assert_eq!(a.items[1].discrimination, None, "an item every run solved does not vary");
        assert!(a.items[0].rasch.is_none() && a.items[1].rasch.is_none(), "extreme items have no finite estimate");
    }

    /// Off L2, a tool two agents agree on that shares a reference tool's EFS set is named as
    /// its sibling, not as a sign of a wrong reference; a tool of no such set still is one.
    #[test]
    fn an_agreed_efs_sibling_of_a_reference_tool_is_named_as_such() {
        let mut it = item("L3-1", Kind::L3, &["S::x", "S::y"], vec![vec![outcome(false, &["T::x"])]; 2]);
        it.efs_siblings = BTreeMap::from([("T::x".to_string(), "S::x".to_string())]);
        let m = oracle(&["a", "b"], 1, vec![it]);
        let ev = analyse(&m, &Options::default()).items[0].evidence.clone().unwrap();
        assert_eq!((ev.agreed_tool.as_deref(), ev.efs_sibling_of.as_deref()), (Some("T::x"), Some("S::x")));
        assert_eq!(ev.proposed_efs_member, None);
        assert!(ev.note.ends_with("`T::x` is in the EFS set of the reference's `S::x`, which is not among that call's alternatives; the request may not say which server to use"), "{}", ev.note);
        // Agreed on both a sibling and a tool of no reference tool's set, as many agents each:
        // the one against the reference is named, whatever the names' order.
        let mut both = m.clone();
        both.items[0].runs = vec![vec![outcome(false, &["T::x", "Z::q"])]; 2];
        let ev = analyse(&both, &Options::default()).items[0].evidence.clone().unwrap();
        assert_eq!((ev.agreed_tool.as_deref(), ev.efs_sibling_of.as_deref()), (Some("Z::q"), None));
        let mut other = m.clone();
        other.items[0].efs_siblings.clear();
        let ev = analyse(&other, &Options::default()).items[0].evidence.clone().unwrap();
        assert_eq!(ev.efs_sibling_of, None);
        assert!(ev.note.ends_with("the ground truth may be wrong"), "{}", ev.note);
    }

    #[test]
    fn the_evidence_names_the_plan_two_agents_agree_on_and_the_queue_names_each_space_that_flagged() {
        let matrix = |tool_space, runs| Matrix {
            tool_space,
            agents: vec!["a".into(), "b".into(), "c".into()],
            repeats: 1,
            items: vec![item("L3-1", Kind::L3, &["S::x", "S::y"], runs)],
        };
        let wrong = vec![
            vec![outcome(false, &["S::x", "S::w"])],
            vec![outcome(false, &["S::x", "S::w"])],
            vec![outcome(false, &["S::w"])],
        ];
        let oracle = analyse(&matrix(ToolSpace::Oracle, wrong), &Options::default());
        assert_eq!(oracle.items[0].tool_space, ToolSpace::Oracle);
        let ev = oracle.items[0].evidence.as_ref().unwrap();
        assert_eq!(ev.agreed_tool.as_deref(), Some("S::w"));
        assert_eq!(ev.agreed_by, ["a", "b", "c"]);
        assert_eq!(ev.agreed_plan, ["S::x", "S::w"]);
        assert_eq!(ev.agreed_plan_by, ["a", "b"]);
        assert_eq!(ev.proposed_efs_member, None, "not an L2 item");
        let note = "`a`, `b` called the plan `S::x` → `S::w` instead of the reference tools (`S::x`, `S::y`): the ground truth may be wrong";
        assert_eq!(ev.note, note);

        // One space: the row's evidence is the note. Two: each space that flagged the item is
        // named, the flags are those of both, the solve rate the lowest; the release still
        // reads it as `all-fail`.
        let one = String::from_utf8(review_sheet(&[&oracle]).unwrap()).unwrap();
        assert_eq!(one.lines().nth(1), Some(format!("L3-1,all-fail label-mismatch,0.0000,\"{note}\",,").as_str()));
        let solved = vec![vec![outcome(true, &["S::x", "S::y"])]; 3];
        let full = analyse(&matrix(ToolSpace::Full, solved), &Options::default());
        assert_eq!(full.items[0].flags, ["all-pass"]);
        let two = review_sheet(&[&oracle, &full]).unwrap();
        let held = crate::release::eval_review::all_fail("review.csv", &two).unwrap();
        let evidence = format!("in `oracle`: all-fail label-mismatch: {note}; in `full`: all-pass");
        assert_eq!(held["L3-1"], format!("flagged `all-fail` by the eval panel (solve rate 0.0000; {evidence})"));
        let row = String::from_utf8(two).unwrap().lines().nth(1).unwrap().to_string();
        assert!(row.starts_with("L3-1,all-fail all-pass label-mismatch,0.0000,"), "{row}");
        assert_eq!(flagged(&[&oracle, &full])["L3-1"], ["all-fail", "all-pass", "label-mismatch"]);
    }

    #[test]
    fn rasch_difficulties_order_items_by_how_few_agents_solve_them() {
        let rows = [[1, 1, 1, 0], [1, 1, 0, 1], [1, 0, 1, 0], [0, 1, 0, 0]];
        let items = (0..4)
            .map(|i| {
                let runs = rows.iter().map(|r| vec![outcome(r[i] == 1, &[])]).collect();
                item(&format!("i{i}"), Kind::L1, &["S::x"], runs)
            })
            .collect();
        let agents = vec!["a".into(), "b".into(), "c".into(), "d".into()];
        let m = Matrix { tool_space: ToolSpace::Oracle, agents, repeats: 1, items };
        let a = analyse(&m, &Options::default());
        let d: Vec<Rasch> = a.items.iter().map(|i| i.rasch.unwrap()).collect();
        assert!(d[3].difficulty > d[2].difficulty && d[2].difficulty > d[0].difficulty, "{d:?}");
        assert!((d[0].difficulty - d[1].difficulty).abs() < 1e-3, "equal totals, equal difficulty: {d:?}");
        assert!(d.iter().map(|r| r.difficulty).sum::<f64>().abs() < 1e-3, "centred");
        assert!(d.iter().all(|r| r.se > 0.0 && r.se.is_finite()));
        let few = Matrix {
            tool_space: ToolSpace::Oracle,
            agents: m.agents[..2].to_vec(),
            repeats: 1,
            items: m.items.iter().map(|i| ItemInput { runs: i.runs[..2].to_vec(), ..i.clone() }).collect(),
        };
        assert!(analyse(&few, &Options::default()).items.iter().all(|i| i.rasch.is_none()), "two agents: none");
    }

    #[test]
    fn unstable_items_lose_their_solves_across_repeats() {
        let m = oracle(
            &["a", "b"],
            2,
            vec![
                item("x", Kind::L1, &["S::x"], vec![vec![outcome(true, &[]), outcome(false, &[])]; 2]),
                item(
                    "y",
                    Kind::L1,
                    &["S::x"],
                    vec![vec![outcome(true, &[]), outcome(true, &[])], vec![outcome(false, &[]), outcome(false, &[])]],
                ),
            ],
        );
        let a = analyse(&m, &Options::default());
        assert_eq!((a.items[0].solve_rate, a.items[0].pass_k), (0.5, 0.0));
        assert_eq!(a.items[0].flip_rate, 1.0, "both agents' repeats disagree");
        assert!(a.items[0].flags.contains(&"unstable"));
        assert_eq!((a.items[1].solve_rate, a.items[1].pass_k), (0.5, 0.5));
        assert_eq!(a.items[1].flip_rate, 0.0, "each agent agrees with itself");
        assert!(!a.items[1].flags.contains(&"unstable"));
        assert!(a.items.iter().all(|i| i.rasch.is_none()), "two agents: no Rasch");
    }
}
