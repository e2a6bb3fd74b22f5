//! `benchgen levels profiles` (stage `levels-profiles`): what L1 and L2 may use.
//!
//! Per server the user-facing platform (ETOM A.6 step 1: a proper noun, never a generic
//! word or the protocol; `none` when there is none), which L3's queries name too (issue
//! 38). Per tool one typed answer: final goal or middleware, user- or system-facing,
//! tightly coupled to the platform or a generic concept, each with its reason. Middleware,
//! system-facing and platform-less tools are excluded from L1/L2; `profiles.json` records
//! the reason for every exclusion.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::llm::Prompt;
use crate::llm::batch::{Batch, Item};
use crate::settings::Settings;
use crate::stage::{Artifact, ConfigRef, Ctx, Inputs, Output, Plan, PromptRef, Stage, StageSpec};

pub const STAGE: &str = "levels-profiles";
pub const PROFILES: Artifact<Profiles> = Artifact::new(STAGE, "profiles.json");

pub static SPEC: StageSpec = StageSpec {
    name: STAGE,
    command: "levels profiles",
    version: 1,
    about: "ETOM tool profiles: each server's platform; each tool final-goal/middleware, user/system-facing, coupling",
    reads: &[crate::filter::CATALOG.read()],
    writes: &["profiles.json", "report.md", crate::llm::batch::FAILED_FILE],
    section: Some("levels"),
};

pub const PLATFORM_TEMPLATE: &str = "levels_platform";
pub const TOOL_TEMPLATE: &str = "levels_tool_profile";

/// Words that never count as a platform (ETOM's prompt rules them out; we also check).
const GENERIC: &[&str] = &["api", "server", "platform", "service", "mcp", "model context protocol", "n/a", "none", ""];

#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
pub struct PlatformAnswer {
    /// The platform, brand or product proper noun, or "N/A" when there is none.
    pub platform: String,
    pub reason: String,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, schemars::JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum TaskType {
    FinalGoal,
    Middleware,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, schemars::JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Facing {
    UserFacing,
    SystemFacing,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, schemars::JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Coupling {
    TightlyCoupled,
    GenericConcept,
}

#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
pub struct ProfileAnswer {
    pub task_type: TaskType,
    pub task_type_reason: String,
    pub facing: Facing,
    pub facing_reason: String,
    pub coupling: Coupling,
    pub coupling_reason: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServerProfile {
    pub platform: Option<String>,
    pub reason: String,
    pub exchange: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ToolProfile {
    pub task_type: TaskType,
    pub facing: Facing,
    pub coupling: Coupling,
    pub reasons: BTreeMap<String, String>,
    pub exchange: String,
    /// Why the tool is not used for L1/L2 (absent: eligible).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excluded: Option<String>,
}

/// `profiles.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Profiles {
    pub servers: BTreeMap<String, ServerProfile>,
    pub tools: BTreeMap<String, ToolProfile>,
}

impl Profiles {
    /// The platform of a tool's server.
    pub fn platform(&self, tool_id: &str) -> Option<&str> {
        let (server, _) = crate::model::split_tool_id(tool_id)?;
        self.servers.get(server)?.platform.as_deref()
    }
    pub fn eligible(&self, tool_id: &str) -> bool {
        self.tools.get(tool_id).is_some_and(|t| t.excluded.is_none())
    }
}

/// The platform an answer names, or `None` for N/A and generic words.
pub fn platform_of(answer: &str) -> Option<String> {
    let p = crate::levels::one_line(answer);
    let p = p.trim_matches(|c: char| c == '"' || c == '\'' || c == '.').trim().to_string();
    if GENERIC.contains(&p.to_lowercase().as_str()) { None } else { Some(p) }
}

/// Why a profiled tool may not serve L1/L2 (ETOM's three gates, in its order).
pub fn exclusion(platform: Option<&str>, p: &ProfileAnswer) -> Option<String> {
    if p.task_type == TaskType::Middleware {
        Some(format!("middleware: {}", crate::levels::one_line(&p.task_type_reason)))
    } else if p.facing == Facing::SystemFacing {
        Some(format!("system-facing: {}", crate::levels::one_line(&p.facing_reason)))
    } else if platform.is_none() {
        Some("no platform: the server names no user-facing platform".into())
    } else {
        None
    }
}

pub struct ProfilesStage;

impl Stage for ProfilesStage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }
    fn help(&self) -> &'static str {
        "Per server its platform; per tool final-goal/middleware, user/system-facing and
         coupling (`[levels]`, judge role). Resumable per item.

         Reads `filter/catalog.json`. Writes `artifacts/levels-profiles/profiles.json`
         (with every L1/L2 exclusion and its reason) and `report.md`; `failed.json` lists items
         left out when `[levels] max_failed_share` lets some fail (as for every level stage)."
    }
    fn roles(&self, s: &Settings) -> Vec<ConfigRef> {
        vec![ConfigRef::new("levels.judge_role", &super::settings(s).judge_role)]
    }
    fn estimate(&self, s: &Settings) -> Vec<crate::stage::Estimate> {
        let l = super::settings(s);
        let c = match super::estimate_catalog(s) {
            Ok(c) => c,
            Err(unknown) => return unknown,
        };
        // A platform per sampled server, then a profile per tool of those servers.
        let servers = crate::stage::capped(c.servers, l.profiles.max_servers);
        let tools = c.tools_of_largest(l.profiles.max_servers);
        let basis = format!("≤ {servers} servers + {tools} tools in {}", c.from);
        super::estimates(s, vec![crate::stage::Estimate::typed(&l.judge_role, servers + tools, basis)])
    }
    fn prompts(&self, _s: &Settings) -> Vec<PromptRef> {
        let server = json!({"name": "s", "description": "d", "summary": "x"});
        let tool = json!({"id": "s::t", "name": "t", "server": "s", "description": "d", "inputs": ["`x` (required):  (Type: string)"]});
        vec![
            PromptRef::new("levels.platform", PLATFORM_TEMPLATE, json!({"server": server})),
            PromptRef::new("levels.tool_profile", TOOL_TEMPLATE, json!({"platform": "P", "tool": tool})),
        ]
    }
    fn check(&self, s: &Settings, problems: &mut Vec<crate::error::Problem>) {
        crate::settings::check_positive(problems, "levels.concurrency", super::settings(s).concurrency);
    }
    fn plan(&self, s: &Settings) -> Result<Plan> {
        Ok(Plan { inputs: vec![], config_hash: super::common_hash(s, &super::settings(s).profiles)? })
    }

    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let l = super::settings(ctx.settings);
        let catalog = inputs.json(&crate::filter::CATALOG)?;
        let mut batch = Batch::new(ctx, super::batch_options(STAGE, "profiles", "servers and tools", ctx.settings))?;
        let role = l.judge_role.as_str();

        let names: Vec<String> = catalog.servers.iter().map(|s| s.name.trim().to_string()).collect();
        let sampled: BTreeSet<String> =
            super::seeded_subset(&names, l.profiles.max_servers, ctx.settings.project.seed, "profiles:servers")
                .into_iter()
                .collect();
        let items: Vec<(String, Prompt)> = catalog
            .servers
            .iter()
            .filter(|s| sampled.contains(s.name.trim()))
            .map(|s| {
                let vars =
                    json!({"server": {"name": s.name.trim(), "description": s.description, "summary": s.summary}});
                (format!("server:{}", s.name.trim()), Prompt::new(PLATFORM_TEMPLATE, vars))
            })
            .collect();
        let servers = batch.phase("servers").run(items, |p: Prompt, llm: Item| async move {
            let r = llm.typed::<PlatformAnswer>(role, &p).await?;
            Ok(ServerProfile {
                platform: platform_of(&r.value.platform),
                reason: super::one_line(&r.value.reason),
                exchange: r.exchange,
            })
        })?;
        let mut doc = Profiles::default();
        for (k, v) in servers.values {
            doc.servers.insert(k.trim_start_matches("server:").to_string(), v);
        }

        let items: Vec<(String, Prompt)> = catalog
            .tools()
            .filter(|(s, _)| sampled.contains(s.name.trim()))
            .map(|(s, t)| {
                let platform = doc.servers.get(s.name.trim()).and_then(|p| p.platform.clone());
                let vars =
                    json!({"platform": platform.unwrap_or_else(|| "N/A".into()), "tool": super::tool_vars(s, t)});
                (format!("tool:{}", crate::model::tool_id(&s.name, &t.name)), Prompt::new(TOOL_TEMPLATE, vars))
            })
            .collect();
        let tools = batch.phase("tools").run(items, |p: Prompt, llm: Item| async move {
            let r = llm.typed::<ProfileAnswer>(role, &p).await?;
            Ok((r.value, r.exchange))
        })?;
        for (k, (a, exchange)) in tools.values {
            let id = k.trim_start_matches("tool:").to_string();
            let platform = doc.platform(&id).map(str::to_string);
            let excluded = exclusion(platform.as_deref(), &a);
            let reasons = BTreeMap::from([
                ("task_type".to_string(), super::one_line(&a.task_type_reason)),
                ("facing".to_string(), super::one_line(&a.facing_reason)),
                ("coupling".to_string(), super::one_line(&a.coupling_reason)),
            ]);
            doc.tools.insert(
                id,
                ToolProfile {
                    task_type: a.task_type,
                    facing: a.facing,
                    coupling: a.coupling,
                    reasons,
                    exchange,
                    excluded,
                },
            );
        }
        batch.finish(out)?;

        let not_sampled = catalog.tools().filter(|(s, _)| !sampled.contains(s.name.trim())).count();
        if not_sampled > 0 {
            out.count("not_profiled", not_sampled);
            out.notes.push(format!("{not_sampled} tools not profiled (`levels.profiles.max_servers`)"));
        }
        let eligible = doc.tools.values().filter(|t| t.excluded.is_none()).count();
        let mut why: BTreeMap<String, usize> = BTreeMap::new();
        for t in doc.tools.values() {
            if let Some(e) = &t.excluded {
                *why.entry(e.split(':').next().unwrap_or(e).to_string()).or_default() += 1;
            }
        }
        let mut md = String::from("# Tool profiles (ETOM L1/L2 eligibility)\n\n| | count |\n|---|---|\n");
        md.push_str(&format!(
            "| servers | {} |\n| servers with a platform | {} |\n| tools profiled | {} |\n| eligible for L1/L2 | {eligible} |\n",
            doc.servers.len(),
            doc.servers.values().filter(|s| s.platform.is_some()).count(),
            doc.tools.len()
        ));
        for (k, v) in &why {
            md.push_str(&format!("| excluded: {k} | {v} |\n"));
        }
        out.file("report.md", md.into_bytes());
        out.count("servers", doc.servers.len());
        out.count("tools", doc.tools.len());
        out.count("eligible", eligible);
        out.notes.push(format!("{eligible} of {} tools eligible for L1/L2", doc.tools.len()));
        out.json("profiles.json", &doc)
    }
}
