//! `benchgen levels l2` (stage `levels-l2`): implicit queries (ETOM A.6 plus the EFS merge).
//!
//! Eligible tools in no final EFS set get one item each: queries that obey the coupling
//! rule (name the platform only when the function is tightly coupled to it). Tools in a
//! final EFS set (`efs/final.json`) are written for **the set**: the query must be
//! servable by any member, names no platform, and its ground truth lists every member —
//! the merge ETOM's code lacks (its L2 ground truth is always the one tool it wrote for).
//! Rows are symmetric: row *i* is member *i* followed by all the others.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use serde_json::{Value, json};

use super::l1::{Mention, choose, write_and_verify};
use super::profiles::{Coupling, PROFILES, Profiles};
use super::{Funnel, LevelOut, Step};
use crate::efs::finalize::{FINAL, Final};
use crate::llm::batch::{Batch, Item};
use crate::settings::Settings;
use crate::stage::{Artifact, ConfigRef, Ctx, Inputs, Output, Plan, PromptRef, Stage, StageSpec};

pub const STAGE: &str = "levels-l2";
pub const QUERIES: Artifact<LevelOut> = Artifact::new(STAGE, "queries.json");
pub const WRITE_TEMPLATE: &str = "levels_l2_write";
pub const VERIFY_TEMPLATE: &str = "levels_l2_verify";

pub static SPEC: StageSpec = StageSpec {
    name: STAGE,
    command: "levels l2",
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
    about: "ETOM L2: implicit queries under the coupling rule; EFS members share one query whose ground truth lists the whole set",
    reads: &[crate::filter::CATALOG.read(), PROFILES.read(), FINAL.optional()],
    writes: &["queries.json", crate::llm::batch::FAILED_FILE],
    section: Some("levels"),
};

/// The members of every final set (sorted), keyed by set id.
pub fn final_sets(f: &Final) -> BTreeMap<String, Vec<String>> {
    f.sets
        .iter()
        .map(|s| {
            let mut m: Vec<String> = s.members.iter().map(|m| crate::model::norm_tool_id(&m.tool_id)).collect();
            m.sort();
            m.dedup();
            (s.id.clone(), m)
        })
        .collect()
}

/// ETOM-shaped L2 ground truth for one query: one row per member, member *i* first and
/// then every other member (symmetric); a singleton is `[[tool]]`.
pub fn ground_truth_rows(members: &[String]) -> Vec<Vec<String>> {
    members
        .iter()
        .map(|m| std::iter::once(m.clone()).chain(members.iter().filter(|o| *o != m).cloned()).collect())
        .collect()
}

/// One L2 work item.
#[derive(Debug, Clone)]
pub struct L2Item {
    pub key: String,
    pub members: Vec<String>,
    pub vars: Value,
    pub mention: Mention,
}

/// The L2 work items: EFS sets (when any member is eligible) and eligible singletons.
pub fn plan_items(
    catalog: &crate::model::Catalog,
    profiles: &Profiles,
    sets: &BTreeMap<String, Vec<String>>,
    funnel: &mut Funnel,
) -> Vec<L2Item> {
    let look = super::Lookup::new(catalog);
    let in_set: BTreeSet<&str> = sets.values().flatten().map(String::as_str).collect();
    let mut items = Vec::new();
    for (set_id, members) in sets {
        let present: Vec<&String> = members.iter().filter(|m| look.get(m).is_some()).collect();
        if present.len() < members.len() {
            funnel
                .reject(&format!("set:{set_id}"), "set not in catalog: a member is missing from the filtered catalog");
            continue;
        }
        if !members.iter().any(|m| profiles.eligible(m)) {
            funnel.reject(
                &format!("set:{set_id}"),
                "no eligible member: every member is middleware, system-facing or platform-less",
            );
            continue;
        }
        let tools: Vec<Value> =
            members.iter().filter_map(|m| look.get(m)).map(|(s, t)| super::tool_vars(s, t)).collect();
        let platforms: Vec<String> = members
            .iter()
            .filter_map(|m| profiles.platform(m))
            .map(str::to_string)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        items.push(L2Item {
            key: format!("set:{set_id}"),
            members: members.clone(),
            vars: json!({"tools": tools, "platform": platforms.join(", ")}),
            mention: Mention::MustNot(platforms),
        });
    }
    for (srv, t) in catalog.tools() {
        let id = crate::model::tool_id(&srv.name, &t.name);
        if in_set.contains(id.as_str()) {
            continue;
        }
        match profiles.tools.get(&id) {
            None => {
                funnel.reject(&id, "not profiled: beyond `levels.profiles.max_servers`, or its profile item failed")
            }
            Some(p) if p.excluded.is_some() => funnel.reject(&id, p.excluded.clone().unwrap_or_default()),
            Some(p) => {
                let platform = profiles.platform(&id).unwrap_or_default().to_string();
                let mention = if p.coupling == Coupling::TightlyCoupled {
                    Mention::Must(platform.clone())
                } else {
                    Mention::MustNot(vec![platform.clone()])
                };
                items.push(L2Item {
                    key: format!("tool:{id}"),
                    members: vec![id],
                    vars: json!({"tools": [super::tool_vars(srv, t)], "platform": platform}),
                    mention,
                });
            }
        }
    }
    items
}

pub struct L2Stage;

impl Stage for L2Stage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }
    fn help(&self) -> &'static str {
        "L2: implicit queries; EFS members share one query whose ground truth is the set.

         Reads `filter/catalog.json`, `levels-profiles/profiles.json` and (optional)
         `efs-finalize/final.json`. Writes `artifacts/levels-l2/queries.json` (and `failed.json`)."
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
        let (items, basis) = super::tool_items(&c, l.l2.max_items);
        let n = l.l2.candidates as u64;
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
        let tool = json!({"id": "s::t", "name": "t", "server": "s", "description": "d", "inputs": ["`x` (required): d (Type: string)"]});
        let vars = json!({"tools": [tool], "platform": "P", "n": 2, "rule": "MUST NOT"});
        let mut v = vars.clone();
        v["query"] = json!("q");
        vec![
            PromptRef::new("levels.l2_write", WRITE_TEMPLATE, vars),
            PromptRef::new("levels.l2_verify", VERIFY_TEMPLATE, v),
            super::l1::again_prompt(),
            super::plan_check::step_need_prompt(),
        ]
    }
    fn check(&self, s: &Settings, problems: &mut Vec<crate::error::Problem>) {
        crate::settings::check_positive(problems, "levels.l2.candidates", super::settings(s).l2.candidates);
    }
    fn plan(&self, s: &Settings) -> Result<Plan> {
        let l = super::settings(s);
        // The plan check embeds the query and the tool with the `[embed]` model and recipe.
        let embed = crate::embedding::embed_settings(s).hashed();
        Ok(Plan { inputs: vec![], config_hash: super::common_hash(s, &(&l.l2, &l.plan_check, embed))? })
    }

    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let s = ctx.settings;
        let l = super::settings(s);
        let seed = s.project.seed;
        let catalog = inputs.json(&crate::filter::CATALOG)?;
        let profiles: Profiles = inputs.json(&PROFILES)?;
        let sets = if inputs.has(&FINAL) { final_sets(&inputs.json(&FINAL)?) } else { BTreeMap::new() };
        let mut funnel = Funnel::default();
        let all = plan_items(&catalog, &profiles, &sets, &mut funnel);
        funnel.step("EFS sets", sets.len());
        funnel.step("items (sets + singleton tools)", all.len());
        // Sets first: a small sample still exercises the merge.
        let (set_items, tool_items): (Vec<L2Item>, Vec<L2Item>) =
            all.into_iter().partition(|i| i.key.starts_with("set:"));
        let cap = l.l2.max_items;
        let sets_kept = super::seeded_subset(&set_items, cap, seed, "l2:sets");
        let room = cap.saturating_sub(sets_kept.len());
        let tools_kept = match (cap, room) {
            (0, _) => tool_items.clone(),
            (_, 0) => vec![],
            _ => super::seeded_subset(&tool_items, room, seed, "l2:tools"),
        };
        for i in set_items.iter().chain(&tool_items) {
            if !sets_kept.iter().chain(&tools_kept).any(|k| k.key == i.key) {
                funnel.reject(&i.key, "not sampled: beyond `levels.l2.max_items`");
            }
        }
        let chosen: Vec<L2Item> = sets_kept.into_iter().chain(tools_kept).collect();
        funnel.step("asked", chosen.len());
        let members: BTreeMap<String, Vec<String>> =
            chosen.iter().map(|i| (i.key.clone(), i.members.clone())).collect();
        let items: Vec<(String, (Value, Mention))> = chosen.into_iter().map(|i| (i.key, (i.vars, i.mention))).collect();
        let mut batch = Batch::new(ctx, super::batch_options(STAGE, "L2", "tools and sets", s))?;
        let (writer, judge, n) = (l.writer_role.as_str(), l.judge_role.as_str(), l.l2.candidates);
        let prune = l.plan_check.prune_unrequested;
        batch.phase("queries");
        let done = batch.run(items, |(vars, mention): (Value, Mention), llm: Item| async move {
            write_and_verify(&llm, writer, judge, (WRITE_TEMPLATE, VERIFY_TEMPLATE), &vars, (n, prune), &mention).await
        })?;
        for f in &done.failed {
            funnel.reject(&f.item, format!("failed: {}", f.reason));
        }
        let look = super::Lookup::new(&catalog);
        let mut checks = super::plan_check::PlanChecks::default();
        let mut verified = Vec::new();
        for (key, d) in &done.values {
            match choose(d, seed, key) {
                Ok((query, exchanges)) => {
                    let step = Step { tools: members[key].clone(), depends_on: vec![] };
                    verified.push(super::Verified { key: key.clone(), query, exchanges, step });
                }
                Err(r) => funnel.reject(key, r),
            }
        }
        funnel.step("verified", verified.len());
        // The plan check: the rules with the step's embedding similarity, the judge on an
        // open step, as in L3 and L4, so the verifier's yes is not the only guard (issue 38).
        let name = |key: &str| key.to_string();
        let queries =
            super::check_single_steps(&mut batch, (s, &look, 2), verified, (&mut checks, &mut funnel), &name)?;
        batch.finish(out)?;
        let (again, again_ok) = super::l1::again_counts(done.values.values());
        funnel.step("asked again", again);
        funnel.step("verified after asking again", again_ok);
        checks.count(&mut funnel, queries.len());
        out.count("efs_queries", queries.iter().filter(|q| q.key.starts_with("set:")).count());
        LevelOut { level: 2, queries, funnel, plan_checks: checks.records }.write(out)
    }
}
