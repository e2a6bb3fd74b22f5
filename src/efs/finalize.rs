//! `benchgen efs finalize`: the final equal function sets, with every decision
//! that shaped them, and the EFS report.
//!
//! Input: the candidate sets (`efs-build`), the top-down review items
//! (`efs-topdown`, when it has run) and imported human decisions (`efs-review`,
//! when a review was imported). Decisions apply in this order: `reject` drops a
//! set; `drop` removes a member; `add` moves a tool into a set (out of any other
//! set, so no tool is ever in two sets); `split` moves labelled members into new
//! sets; `merge` joins sets. Sets left with fewer than two members are dropped
//! and listed with the reason.
//!
//! Sets no reviewer touched are marked `unreviewed` and follow the automatic
//! policy `[efs.finalize] policy`: `keep` (default) keeps them as verified,
//! leaving top-down findings as open items; `drop-unselected` also removes members
//! the top-down judge never selected for any request of their set.
//!
//! Outputs in `artifacts/efs-finalize/`: `final.json` ([`Final`]),
//! `tool_equivalence_sets.json` (ETOM's shape: `[{set_id, size, tools: [{tool_id,
//! server_name, tool_name, description}]}]`) and `report.md`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::AutoPolicy;
use super::build::{CandidateSet, Evidence, Sets};
use super::review::Decision;
use super::topdown::ReviewItem;
use crate::formats::etom::{EfsFile, EfsSet, SetTool};
use crate::ledger::{Explanation, Ledger};
use crate::model::Catalog;
use crate::settings::{Settings, section_hash};
use crate::stage::{Artifact, Ctx, Inputs, Manifest, Output, Plan, Read, Stage, StageSpec};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Member {
    pub tool_id: String,
    pub server_name: String,
    pub tool_name: String,
    pub description: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FinalSet {
    pub id: String,
    pub status: SetStatus,
    /// Candidate sets this set came from.
    pub from: Vec<String>,
    pub members: Vec<Member>,
    pub servers: Vec<String>,
    pub evidence: Vec<Evidence>,
    pub decisions: Vec<Decision>,
    /// Top-down findings about this set that no decision settled.
    pub open_items: Vec<ReviewItem>,
}

/// Whether a human review decided about a final set (`reviewed`) or the automatic policy
/// kept it (`unreviewed`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SetStatus {
    Reviewed,
    Unreviewed,
}

impl SetStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SetStatus::Reviewed => "reviewed",
            SetStatus::Unreviewed => "unreviewed",
        }
    }
}

/// Compare with the serialised word (`set.status == "reviewed"`).
impl PartialEq<&str> for SetStatus {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DroppedSet {
    pub from: Vec<String>,
    pub members: Vec<String>,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Final {
    pub policy: AutoPolicy,
    pub reviewed: bool,
    pub sets: Vec<FinalSet>,
    pub dropped: Vec<DroppedSet>,
}

/// A set under construction.
struct Work {
    from: BTreeSet<String>,
    members: BTreeSet<String>,
    decisions: Vec<Decision>,
    reviewed: bool,
    rejected: Option<String>,
}

/// Apply decisions and the automatic policy to candidate sets.
pub fn finalize(
    sets: &[CandidateSet],
    items: &[ReviewItem],
    decisions: &[Decision],
    policy: AutoPolicy,
    catalog: &Catalog,
) -> Result<Final> {
    let tools: HashMap<&str, (&str, &str, &str)> = catalog
        .tools()
        .map(|(s, t)| (t.id.as_str(), (s.name.as_str(), t.name.as_str(), t.description.as_str())))
        .collect();
    let mut work: BTreeMap<String, Work> = sets
        .iter()
        .map(|s| {
            (
                s.id.clone(),
                Work {
                    from: BTreeSet::from([s.id.clone()]),
                    members: s.members.iter().cloned().collect(),
                    decisions: Vec::new(),
                    reviewed: false,
                    rejected: None,
                },
            )
        })
        .collect();
    for (id, w) in work.iter_mut() {
        w.decisions = decisions.iter().filter(|d| d.set_id == *id).cloned().collect();
        w.reviewed = !w.decisions.is_empty();
    }
    // reject, drop
    for d in decisions {
        let w = work.get_mut(&d.set_id).with_context(|| format!("decision for unknown set `{}`", d.set_id))?;
        match d.action.as_str() {
            "reject" => w.rejected = Some(format!("rejected by {} ({}): {}", d.reviewer, d.source, d.note)),
            "drop" => {
                w.members.remove(&d.tool_id);
            }
            _ => {}
        }
    }
    // add: a tool moves into the set it is added to
    for d in decisions.iter().filter(|d| d.action == "add") {
        for w in work.values_mut() {
            w.members.remove(&d.tool_id);
        }
        work.get_mut(&d.set_id).expect("checked above").members.insert(d.tool_id.clone());
    }
    // automatic policy for unreviewed sets
    if policy == AutoPolicy::DropUnselected {
        for it in items.iter().filter(|i| i.kind == "member-never-selected") {
            if let Some(w) = work.get_mut(&it.set_id)
                && !w.reviewed
            {
                w.members.remove(&it.tool_id);
            }
        }
    }
    let split_sets = split_off(&mut work, decisions);
    let merged = merge_sets(work, decisions);
    let evidence: Vec<&Evidence> = sets.iter().flat_map(|s| s.evidence.iter()).collect();
    let mut out = Final { policy, reviewed: !decisions.is_empty(), sets: Vec::new(), dropped: Vec::new() };
    for w in merged.into_values().chain(split_sets) {
        settle_set(w, &evidence, &tools, items, &mut out)?;
    }
    out.sets.sort_by(|a, b| a.members[0].tool_id.cmp(&b.members[0].tool_id));
    out.dropped.sort_by(|a, b| a.from.cmp(&b.from));
    Ok(out)
}

/// The `split` decisions: labelled members leave their set, one new set per label.
fn split_off(work: &mut BTreeMap<String, Work>, decisions: &[Decision]) -> Vec<Work> {
    let mut split_sets: Vec<Work> = Vec::new();
    for (id, w) in work.iter_mut() {
        let mut labels: BTreeMap<String, Vec<&Decision>> = BTreeMap::new();
        for d in decisions.iter().filter(|d| d.set_id == *id && d.action == "split") {
            labels.entry(d.target.clone()).or_default().push(d);
        }
        for (_, ds) in labels {
            let members: BTreeSet<String> =
                ds.iter().map(|d| d.tool_id.clone()).filter(|t| w.members.contains(t)).collect();
            w.members.retain(|m| !members.contains(m));
            split_sets.push(Work {
                from: BTreeSet::from([id.clone()]),
                members,
                decisions: ds.into_iter().cloned().collect(),
                reviewed: true,
                rejected: None,
            });
        }
    }
    split_sets
}

/// The `merge` decisions: sets joined (transitively), keyed by the first set of each union.
fn merge_sets(work: BTreeMap<String, Work>, decisions: &[Decision]) -> BTreeMap<usize, Work> {
    let ids: Vec<String> = work.keys().cloned().collect();
    let index: HashMap<&str, usize> = ids.iter().enumerate().map(|(i, s)| (s.as_str(), i)).collect();
    let mut uf = petgraph::unionfind::UnionFind::<usize>::new(ids.len());
    for d in decisions.iter().filter(|d| d.action == "merge") {
        uf.union(index[d.set_id.as_str()], index[d.target.as_str()]);
    }
    let mut merged: BTreeMap<usize, Work> = BTreeMap::new();
    for (i, (_, w)) in work.into_iter().enumerate() {
        let root = uf.find(i);
        match merged.get_mut(&root) {
            None => {
                merged.insert(root, w);
            }
            Some(m) => {
                m.from.extend(w.from);
                m.members.extend(w.members);
                m.decisions.extend(w.decisions);
                m.reviewed |= w.reviewed;
                if m.rejected.is_none() {
                    m.rejected = w.rejected;
                }
            }
        }
    }
    merged
}

/// One set after the decisions into `out`: a final set with its members, evidence and open
/// items, or a dropped set with the reason (rejected, or fewer than two members).
fn settle_set(
    w: Work,
    evidence: &[&Evidence],
    tools: &HashMap<&str, (&str, &str, &str)>,
    items: &[ReviewItem],
    out: &mut Final,
) -> Result<()> {
    let from: Vec<String> = w.from.into_iter().collect();
    let members: Vec<String> = w.members.into_iter().collect();
    if let Some(reason) = w.rejected {
        out.dropped.push(DroppedSet { from, members, reason });
        return Ok(());
    }
    if members.len() < 2 {
        out.dropped.push(DroppedSet {
            from,
            members,
            reason: "fewer than two members left after review decisions and policy".into(),
        });
        return Ok(());
    }
    let inside: BTreeSet<&str> = members.iter().map(String::as_str).collect();
    let mut ev: Vec<Evidence> = evidence
        .iter()
        .filter(|e| inside.contains(e.a.as_str()) && inside.contains(e.b.as_str()))
        .map(|e| (*e).clone())
        .collect();
    ev.sort_by(|x, y| (&x.a, &x.b).cmp(&(&y.a, &y.b)));
    let mut ms = Vec::new();
    for m in &members {
        let (server, name, desc) =
            tools.get(m.as_str()).copied().with_context(|| format!("`{m}` is not in the catalog"))?;
        ms.push(Member {
            tool_id: m.clone(),
            server_name: server.into(),
            tool_name: name.into(),
            description: desc.into(),
        });
    }
    let servers: BTreeSet<String> = ms.iter().map(|m| m.server_name.clone()).collect();
    let settled: BTreeSet<&str> = w.decisions.iter().map(|d| d.tool_id.as_str()).collect();
    let open_items: Vec<ReviewItem> = items
        .iter()
        .filter(|i| from.contains(&i.set_id) && !w.reviewed && !settled.contains(i.tool_id.as_str()))
        .cloned()
        .collect();
    let mut decisions = w.decisions;
    decisions.sort_by(|a, b| a.source.cmp(&b.source));
    out.sets.push(FinalSet {
        id: super::set_id(&members),
        status: if w.reviewed { SetStatus::Reviewed } else { SetStatus::Unreviewed },
        from,
        members: ms,
        servers: servers.into_iter().collect(),
        evidence: ev,
        decisions,
        open_items,
    });
    Ok(())
}

/// ETOM's `tool_equivalence_sets.json` shape.
pub fn etom_shape(f: &Final) -> EfsFile {
    f.sets
        .iter()
        .zip(1..)
        .map(|(s, set_id)| EfsSet {
            set_id,
            size: s.members.len(),
            tools: s
                .members
                .iter()
                .map(|m| SetTool {
                    tool_id: m.tool_id.clone(),
                    server_name: m.server_name.clone(),
                    tool_name: m.tool_name.clone(),
                    description: m.description.clone(),
                })
                .collect(),
        })
        .collect()
}

fn histogram(values: impl Iterator<Item = usize>) -> BTreeMap<usize, usize> {
    let mut h = BTreeMap::new();
    for v in values {
        *h.entry(v).or_default() += 1;
    }
    h
}

/// Cost and time of one step, from its manifest and ledger run.
#[derive(Debug, Default, Serialize)]
pub struct StepCost {
    pub stage: String,
    pub duration_ms: Option<u64>,
    /// LLM exchanges, live or answered from the ledger.
    pub llm_exchanges: usize,
    pub llm_failures: usize,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

fn step_cost(settings: &Settings, stage: &str) -> StepCost {
    let mut c = StepCost { stage: stage.into(), ..Default::default() };
    let Ok(Some(m)) = Manifest::load(&settings.artifacts, stage) else {
        return c;
    };
    // LLM stages put their counts into the manifest (`llm::batch::Batch::finish`):
    // exchanges (live or from the ledger) and tokens summed over the checkpointed
    // items, so reruns and resumed runs report what an uninterrupted run does.
    let n = |k: &str| m.counts.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
    c.duration_ms = Some(m.duration_ms);
    c.llm_exchanges = n("llm_exchanges") as usize;
    c.llm_failures = n("llm_failures") as usize;
    c.prompt_tokens = n("llm_prompt_tokens");
    c.completion_tokens = n("llm_completion_tokens");
    c
}

/// The counts that `report.md` shows.
#[derive(Debug, Default, Serialize)]
pub struct Funnel {
    pub tools: usize,
    pub candidate_pairs: usize,
    pub judged_pairs: usize,
    pub verified_pairs: usize,
    pub candidate_sets: usize,
    pub tools_in_candidate_sets: usize,
    pub final_sets: usize,
    pub tools_in_final_sets: usize,
    /// Findings of the top-down check (a set outside its sample is not one).
    pub review_items: usize,
    /// Sets outside the top-down check's sample (`[efs.topdown] max_sets`).
    #[serde(skip_serializing_if = "is_zero")]
    pub sets_not_cross_checked: usize,
    /// Sets whose top-down check failed (`[efs.topdown] max_failed_share` let it).
    #[serde(skip_serializing_if = "is_zero")]
    pub sets_check_failed: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

pub fn report(f: &Final, funnel: &Funnel, sets: &[CandidateSet], costs: &[StepCost]) -> String {
    let mut md = String::from("# Equal function sets: report\n\n## Funnel\n\n| step | count |\n|---|---:|\n");
    for (k, v) in [
        ("tools embedded", funnel.tools),
        ("candidate pairs (`efs pairs`)", funnel.candidate_pairs),
        ("pairs judged (`efs verify`)", funnel.judged_pairs),
        ("pairs verified equivalent", funnel.verified_pairs),
        ("candidate sets (`efs build`)", funnel.candidate_sets),
        ("tools in candidate sets", funnel.tools_in_candidate_sets),
        ("top-down review items (`efs topdown`)", funnel.review_items),
        ("final sets", funnel.final_sets),
        ("tools in final sets", funnel.tools_in_final_sets),
    ] {
        md.push_str(&format!("| {k} | {v} |\n"));
    }
    if funnel.sets_not_cross_checked > 0 {
        let n = funnel.sets_not_cross_checked;
        md.push_str(&format!("| sets not cross-checked (`efs.topdown.max_sets`) | {n} |\n"));
    }
    if funnel.sets_check_failed > 0 {
        let n = funnel.sets_check_failed;
        md.push_str(&format!("| sets whose cross-check failed (`efs.topdown.max_failed_share`) | {n} |\n"));
    }
    let reviewed = f.sets.iter().filter(|s| s.status == SetStatus::Reviewed).count();
    md.push_str(&format!(
        "\nFinal sets: {reviewed} reviewed, {} unreviewed (policy `{}`); {} sets dropped.\n",
        f.sets.len() - reviewed,
        serde_json::to_value(f.policy).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default(),
        f.dropped.len()
    ));
    let table = |md: &mut String, title: &str, cand: BTreeMap<usize, usize>, fin: BTreeMap<usize, usize>| {
        md.push_str(&format!("\n## {title}\n\n| value | candidate sets | final sets |\n|---:|---:|---:|\n"));
        let keys: BTreeSet<usize> = cand.keys().chain(fin.keys()).copied().collect();
        for k in keys {
            md.push_str(&format!(
                "| {k} | {} | {} |\n",
                cand.get(&k).copied().unwrap_or(0),
                fin.get(&k).copied().unwrap_or(0)
            ));
        }
    };
    table(
        &mut md,
        "Set size",
        histogram(sets.iter().map(|s| s.members.len())),
        histogram(f.sets.iter().map(|s| s.members.len())),
    );
    table(
        &mut md,
        "Servers per set",
        histogram(sets.iter().map(|s| s.servers.len())),
        histogram(f.sets.iter().map(|s| s.servers.len())),
    );
    // Wall times vary from run to run, so they stay in the manifests (and the
    // command's printed summary): the report itself must be byte-identical on rerun.
    md.push_str("\n## Cost per step\n\nWall time per step is in each stage's `manifest.json` (`duration_ms`) and is printed by `benchgen efs finalize`.\n\n| stage | run | LLM exchanges | failures | prompt tokens | completion tokens |\n|---|---|---:|---:|---:|---:|\n");
    for c in costs {
        let ran = if c.duration_ms.is_some() { "yes" } else { "not run" };
        md.push_str(&format!(
            "| {} | {ran} | {} | {} | {} | {} |\n",
            c.stage, c.llm_exchanges, c.llm_failures, c.prompt_tokens, c.completion_tokens
        ));
    }
    md
}

/// Wall time per step, for the printed summary (never for an artifact).
fn time_line(costs: &[StepCost]) -> String {
    let parts: Vec<String> = costs
        .iter()
        .filter_map(|c| c.duration_ms.map(|ms| format!("{} {:.1} s", c.stage, ms as f64 / 1000.0)))
        .collect();
    format!(
        "wall time per step (from the manifests): {}",
        if parts.is_empty() { "none".into() } else { parts.join(", ") }
    )
}

pub struct FinalizeStage;

/// The final equal function sets, with status and evidence.
pub const FINAL: Artifact<Final> = Artifact::new("efs-finalize", "final.json");
/// The same sets in ETOM's `tool_equivalence_sets.json` shape.
pub const ETOM_SETS: Artifact = Artifact::new("efs-finalize", "tool_equivalence_sets.json");

/// Stages whose cost (LLM exchanges, tokens, wall time) the report lists.
const COSTED: [&str; 6] = ["embed", "efs-pairs", "efs-verify", "efs-build", "efs-topdown", "efs-review-import"];

pub static SPEC: StageSpec = StageSpec {
    name: "efs-finalize",
    command: "efs finalize",
    // 3: report.md counts the sets outside the top-down sample apart from its findings.
    // 4: and the sets whose top-down check failed.
    version: 4,
    about: "apply review decisions (or the automatic policy): final sets and a report",
    reads: &[
        crate::filter::CATALOG.read(),
        super::build::SETS.read(),
        super::pairs::PAIRS.read(),
        super::verify::VERDICTS.read(),
        super::topdown::ITEMS.optional(),
        super::review::DECISIONS.optional(),
        Read::manifest(COSTED[0]),
        Read::manifest(COSTED[1]),
        Read::manifest(COSTED[2]),
        Read::manifest(COSTED[3]),
        Read::manifest(COSTED[4]),
        Read::manifest(COSTED[5]),
    ],
    writes: &["final.json", "tool_equivalence_sets.json", "report.md"],
    section: Some("efs"),
};

impl Stage for FinalizeStage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }
    fn help(&self) -> &'static str {
        "The final sets, with decisions and evidence, and the EFS report.

         Reads `artifacts/filter/catalog.json`, `artifacts/efs-build/sets.json`,
         `artifacts/efs-pairs/pairs.csv`, `artifacts/efs-verify/verdicts.json`, the manifests
         of the EFS stages (for the cost table) and, when present,
         `artifacts/efs-topdown/items.json` and `artifacts/efs-review-import/decisions.json`.
         Writes `artifacts/efs-finalize/final.json`, `tool_equivalence_sets.json` (ETOM shape)
         and `report.md`. Sets without a human decision follow `[efs.finalize] policy`
         and are marked `unreviewed`. Skipped when up to date."
    }

    /// The EFS family's ids: a set (`efs:<set id>`), final or a candidate.
    fn explain_subject(&self, ledger: &Ledger, runs: &[i64], id: &str) -> Result<Option<Explanation>> {
        if !id.starts_with("efs:") {
            return Ok(None);
        }
        explain_set(ledger, runs, id).map(Some)
    }

    fn plan(&self, settings: &Settings) -> Result<Plan> {
        Ok(Plan { inputs: vec![], config_hash: section_hash(&super::efs_settings(settings).finalize)? })
    }

    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let s = ctx.settings;
        let catalog: Catalog = inputs.json(&crate::filter::CATALOG)?;
        let sets: Sets = inputs.json(&super::build::SETS)?;
        let items: Vec<ReviewItem> = match inputs.has(&super::topdown::ITEMS) {
            true => inputs.json(&super::topdown::ITEMS)?,
            false => Vec::new(),
        };
        let decisions: Vec<Decision> = match inputs.has(&super::review::DECISIONS) {
            true => inputs.json(&super::review::DECISIONS)?,
            false => Vec::new(),
        };
        let fin = finalize(&sets.sets, &items, &decisions, super::efs_settings(s).finalize.policy, &catalog)?;
        let pairs = super::pairs::read_pairs(inputs)?;
        let verdicts = inputs.json(&super::verify::VERDICTS)?;
        let funnel = Funnel {
            tools: catalog.tool_count(),
            candidate_pairs: pairs.len(),
            judged_pairs: verdicts.len(),
            verified_pairs: verdicts.iter().filter(|v| v.equivalent).count(),
            candidate_sets: sets.sets.len(),
            tools_in_candidate_sets: sets.sets.iter().map(|x| x.members.len()).sum(),
            final_sets: fin.sets.len(),
            tools_in_final_sets: fin.sets.iter().map(|x| x.members.len()).sum(),
            review_items: items.iter().filter(|i| super::topdown::is_finding(&i.kind)).count(),
            sets_not_cross_checked: items.iter().filter(|i| i.kind == super::topdown::NOT_CHECKED).count(),
            sets_check_failed: items.iter().filter(|i| i.kind == super::topdown::CHECK_FAILED).count(),
        };
        let costs: Vec<StepCost> = COSTED.iter().map(|st| step_cost(s, st)).collect();
        out.json(FINAL.file, &fin)?;
        out.json(ETOM_SETS.file, &etom_shape(&fin))?;
        out.file("report.md", report(&fin, &funnel, &sets.sets, &costs).into_bytes());
        out.count("final_sets", fin.sets.len());
        out.count("tools_in_final_sets", funnel.tools_in_final_sets);
        out.count("dropped_sets", fin.dropped.len());
        let unreviewed = fin.sets.iter().filter(|x| x.status == SetStatus::Unreviewed).count();
        out.notes.push(format!(
            "{} final sets over {} tools ({unreviewed} unreviewed), {} dropped; report in artifacts/efs-finalize/report.md",
            fin.sets.len(),
            funnel.tools_in_final_sets,
            fin.dropped.len()
        ));
        out.notes.push(time_line(&costs));
        for ev in set_events(ctx, &fin)? {
            out.event(ev);
        }
        Ok(())
    }
}

/// Ledger kind of a final set (subject `efs:<set id>`), what a level sample's alternatives
/// link to.
pub const SET_EVENT: &str = "efs.set";

/// `benchgen explain efs:<set id>`: the final set, else the last event that decided about it.
fn explain_set(ledger: &Ledger, runs: &[i64], id: &str) -> Result<Explanation> {
    let direct = ledger.events_for(id, runs)?;
    let Some(last) = direct.last() else {
        return Err(crate::error::hinted(
            format!("no EFS set `{id}` in the current artifacts"),
            "set ids are in `artifacts/efs-finalize/final.json`, edges in `artifacts/graph-build/graph.json`",
        ));
    };
    let lineage = ledger.lineage(&direct.iter().map(|e| e.id).collect::<Vec<_>>())?;
    let p = &last.payload;
    let status = if last.kind == SET_EVENT {
        format!(
            "final set ({}) of {} member(s): {}",
            p["status"].as_str().unwrap_or("?"),
            p["members"].as_array().map_or(0, Vec::len),
            p["members"].as_array().into_iter().flatten().filter_map(|m| m.as_str()).collect::<Vec<_>>().join(", ")
        )
    } else {
        format!("{} of stage `{}`", last.kind, last.stage)
    };
    Ok(Explanation { id: id.into(), item: "EFS set", status, record: None, lineage })
}

/// One `efs.set` event per final set, its parents the decisions behind it: the verdicts of
/// its evidence pairs (`efs-verify`), the top-down findings and the review decisions about
/// the candidate sets it came from (`efs-topdown`, `efs-review-import`).
fn set_events(ctx: &Ctx, fin: &Final) -> Result<Vec<crate::ledger::NewEvent>> {
    use crate::ledger::{NewEvent, Parent, kind};
    let runs = |st: &str| ctx.manifest_of(st).map(|m| vec![m.run_id]).unwrap_or_default();
    let (verdicts, found, reviews) = match Ledger::open_read_only(&ctx.settings.artifacts)? {
        Some(l) => (
            l.ids_by_subject(kind::VERDICT, &runs("efs-verify"))?,
            l.ids_by_subject(kind::VERDICT, &runs("efs-topdown"))?,
            l.ids_by_subject(kind::REVIEW, &runs("efs-review-import"))?,
        ),
        None => Default::default(),
    };
    let mut events = Vec::new();
    for set in &fin.sets {
        let mut parents: BTreeSet<i64> = BTreeSet::new();
        for e in &set.evidence {
            parents.extend(verdicts.get(&super::pairs::pair_key(&e.a, &e.b)).into_iter().flatten());
        }
        for from in &set.from {
            let subject = format!("efs:{from}");
            parents.extend(found.get(&subject).into_iter().flatten());
            parents.extend(reviews.get(&subject).into_iter().flatten());
        }
        let mut ev = NewEvent::new(
            SET_EVENT,
            Some(&format!("efs:{}", set.id)),
            serde_json::json!({"set_id": set.id, "status": set.status, "from": set.from,
                               "members": set.members.iter().map(|m| &m.tool_id).collect::<Vec<_>>(),
                               "evidence_pairs": set.evidence.len(), "decisions": set.decisions.len(),
                               "open_items": set.open_items.len()}),
        );
        for p in parents {
            ev = ev.with_parent(Parent::Id(p));
        }
        events.push(ev);
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Server, Tool};

    fn catalog(ids: &[&str]) -> Catalog {
        let mut servers: BTreeMap<String, Vec<Tool>> = BTreeMap::new();
        for id in ids {
            let (s, t) = id.split_once("::").unwrap();
            servers.entry(s.into()).or_default().push(Tool {
                id: id.to_string(),
                name: t.into(),
                description: format!("does {t}"),
                input_schema: serde_json::json!({"type": "object"}),
                output_schema: None,
            });
        }
        Catalog {
            servers: servers
                .into_iter()
                .map(|(name, tools)| Server {
                    name,
                    description: String::new(),
                    summary: String::new(),
                    url: String::new(),
                    categories: vec![],
                    license: None,
                    tools,
                    registry: None,
                })
                .collect(),
        }
    }

    fn set(members: &[&str]) -> CandidateSet {
        let m: Vec<String> = members.iter().map(|s| s.to_string()).collect();
        CandidateSet { id: super::super::set_id(&m), servers: vec![], members: m, evidence: vec![] }
    }

    fn dec(set_id: &str, action: &str, tool: &str, target: &str) -> Decision {
        Decision {
            set_id: set_id.into(),
            action: action.into(),
            tool_id: tool.into(),
            target: target.into(),
            reviewer: "ana".into(),
            note: String::new(),
            source: format!("sheet.csv:{action}{tool}"),
        }
    }

    #[test]
    fn without_review_every_set_is_kept_and_unreviewed() {
        let c = catalog(&["a::x", "b::x", "c::y", "d::y"]);
        let sets = [set(&["a::x", "b::x"]), set(&["c::y", "d::y"])];
        let items = vec![ReviewItem {
            set_id: sets[0].id.clone(),
            kind: "member-never-selected".into(),
            tool_id: "b::x".into(),
            detail: String::new(),
        }];
        let f = finalize(&sets, &items, &[], AutoPolicy::Keep, &c).unwrap();
        assert_eq!(f.sets.len(), 2);
        assert!(f.sets.iter().all(|s| s.status == "unreviewed"));
        assert_eq!(f.sets[0].open_items.len(), 1);
        let f = finalize(&sets, &items, &[], AutoPolicy::DropUnselected, &c).unwrap();
        assert_eq!(f.sets.len(), 1, "the set left with one member is dropped");
        assert_eq!(f.dropped.len(), 1);
    }

    #[test]
    fn decisions_drop_add_split_merge_and_reject() {
        let c = catalog(&["a::x", "b::x", "c::x", "d::y", "e::y", "f::z", "g::z", "h::w", "i::w"]);
        let sets =
            [set(&["a::x", "b::x", "c::x"]), set(&["d::y", "e::y"]), set(&["f::z", "g::z"]), set(&["h::w", "i::w"])];
        let (s0, s1, s2, s3) = (&sets[0].id, &sets[1].id, &sets[2].id, &sets[3].id);
        let decisions = vec![
            dec(s0, "drop", "c::x", ""),
            dec(s1, "add", "c::x", ""),
            dec(s1, "merge", "", s2),
            dec(s3, "reject", "", ""),
        ];
        let f = finalize(&sets, &[], &decisions, AutoPolicy::Keep, &c).unwrap();
        let members: Vec<Vec<&str>> =
            f.sets.iter().map(|s| s.members.iter().map(|m| m.tool_id.as_str()).collect()).collect();
        assert_eq!(members, vec![vec!["a::x", "b::x"], vec!["c::x", "d::y", "e::y", "f::z", "g::z"]]);
        assert!(f.sets.iter().all(|s| s.status == "reviewed"));
        assert_eq!(f.dropped.len(), 1);
        assert!(f.dropped[0].reason.contains("rejected by ana"));

        let split = vec![dec(s0, "split", "b::x", "B"), dec(s0, "split", "c::x", "B")];
        let f = finalize(&sets[..1], &[], &split, AutoPolicy::Keep, &c).unwrap();
        // `a::x` alone is dropped; b and c form the split set.
        assert_eq!(f.sets.len(), 1);
        assert_eq!(f.sets[0].members.len(), 2);
        assert_eq!(f.dropped[0].members, ["a::x"]);
    }

    #[test]
    fn set_status_serialises_as_before() {
        for (s, word) in [(SetStatus::Reviewed, "reviewed"), (SetStatus::Unreviewed, "unreviewed")] {
            assert_eq!(serde_json::to_value(s).unwrap(), serde_json::json!(word));
            assert_eq!(serde_json::from_value::<SetStatus>(serde_json::json!(word)).unwrap(), s);
        }
    }

    #[test]
    fn the_etom_file_keeps_its_bytes() {
        let c = catalog(&["a::x", "b::x", "c::y", "d::y"]);
        let f = finalize(&[set(&["a::x", "b::x"]), set(&["c::y", "d::y"])], &[], &[], AutoPolicy::Keep, &c).unwrap();
        // What the `json!` builder wrote before the wire types: same keys, same order.
        let before = serde_json::Value::Array(
            f.sets
                .iter()
                .enumerate()
                .map(|(i, s)| serde_json::json!({"set_id": i + 1, "size": s.members.len(), "tools": s.members}))
                .collect(),
        );
        assert_eq!(serde_json::to_vec_pretty(&etom_shape(&f)).unwrap(), serde_json::to_vec_pretty(&before).unwrap());
        let back: crate::formats::etom::EfsFile = serde_json::from_value(before).unwrap();
        assert_eq!(back, etom_shape(&f));
    }
}
