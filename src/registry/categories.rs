//! Sources categorise differently (Glama: category slugs and `attributes` such as
//! `hosting:remote-capable`; the official registry and Smithery: none). This maps
//! whatever a server carries onto one taxonomy — ETOM's 30 categories by default — and
//! records a reason for every assignment.
//!
//! Order: (1) a source category that *is* a taxonomy name (after normalising case and
//! separators); (2) `source_category` rules (regex over the source's category); (3) only
//! when nothing matched yet, `text` rules (regex over name and description). What is
//! still unassigned can go to an LLM classifier (`classifier_role`), whose answers carry
//! the model's reason; otherwise it stays empty and is listed.

use std::collections::BTreeSet;

use anyhow::Result;
use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::llm::batch::{Batch, BatchOptions, Item, ItemError};
use crate::model::{CategoryReason, Server};

/// ETOM's 30 categories (Glama's category slugs, spelling as in ETOM's snapshot).
pub const ETOM_TAXONOMY: &[&str] = &[
    "agent-orchestration",
    "api-testing",
    "app-automation",
    "autonomous-agents",
    "blockchain",
    "browser-automation",
    "claimed",
    "cloud-platform",
    "code-analysis",
    "code-execution",
    "communication",
    "content-managemant-systems",
    "database",
    "developer-tools",
    "documentation-access",
    "file-system",
    "finance",
    "hybrid",
    "image-and-video-processing",
    "knowledge-and-memory",
    "local",
    "official",
    "project-management",
    "python",
    "rag-system",
    "remote",
    "search",
    "security",
    "typescripts",
    "web-scraping",
];

/// `[registry.categories]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CategorySettings {
    /// The target taxonomy; default ETOM's 30 categories.
    #[serde(default)]
    pub taxonomy: Option<Vec<String>>,
    /// Rules tried before the built-in table.
    #[serde(default)]
    pub rules: Vec<CategoryRule>,
    /// Append the built-in table (Glama attributes and keywords → ETOM categories).
    #[serde(default = "yes")]
    pub builtin_rules: bool,
    /// At most this many categories per server (the first is the main one).
    #[serde(default = "default_max")]
    pub max_categories: usize,
    /// An `[llm.roles]` role that classifies servers no rule placed.
    #[serde(default)]
    pub classifier_role: Option<String>,
}

fn yes() -> bool {
    true
}
fn default_max() -> usize {
    3
}

impl Default for CategorySettings {
    fn default() -> Self {
        Self {
            taxonomy: None,
            rules: vec![],
            builtin_rules: true,
            max_categories: default_max(),
            classifier_role: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CategoryRule {
    /// Only for servers from this source (any when absent).
    #[serde(default)]
    pub source: Option<String>,
    /// Regex over a source category (case-insensitive).
    #[serde(default)]
    pub source_category: Option<String>,
    /// Regex over `name + " " + description` (case-insensitive).
    #[serde(default)]
    pub text: Option<String>,
    pub category: String,
}

/// What to write next to the catalog: one row per assignment, and who is left.
#[derive(Debug, Default, Serialize)]
pub struct CategoryReport {
    pub assigned: usize,
    pub by_rule: usize,
    pub by_source: usize,
    pub unassigned: Vec<String>,
}

struct Compiled {
    source: Option<String>,
    source_category: Option<Regex>,
    text: Option<Regex>,
    category: String,
    label: String,
}

fn builtin() -> Vec<CategoryRule> {
    let sc = |p: &str, c: &str| CategoryRule {
        source: None,
        source_category: Some(p.to_string()),
        text: None,
        category: c.to_string(),
    };
    let tx = |p: &str, c: &str| CategoryRule {
        source: None,
        source_category: None,
        text: Some(p.to_string()),
        category: c.to_string(),
    };
    vec![
        sc(r"^hosting:remote", "remote"),
        sc(r"^hosting:local", "local"),
        sc(r"^hosting:hybrid", "hybrid"),
        sc(r"^author:official$|^official$", "official"),
        sc(r"claimed", "claimed"),
        sc(r"^(language:)?python$", "python"),
        sc(r"^(language:)?typescript$", "typescripts"),
        sc(r"^databases?$", "database"),
        tx(r"\b(postgres|mysql|sqlite|mongodb|redis|database|sql)\b", "database"),
        tx(r"\b(blockchain|ethereum|solana|crypto|web3|nft)\b", "blockchain"),
        tx(r"\b(stock|finance|financial|trading|invoice|payment|bank)", "finance"),
        tx(r"\b(browser|playwright|puppeteer|selenium)\b", "browser-automation"),
        tx(r"\b(scrap(e|er|ing)|crawl)", "web-scraping"),
        tx(r"\b(search engine|web search|search)\b", "search"),
        tx(r"\b(file ?system|files|directory|directories)\b", "file-system"),
        tx(r"\b(slack|email|e-mail|discord|telegram|chat|sms)\b", "communication"),
        tx(r"\b(security|vulnerabilit|pentest|malware|auth)", "security"),
        tx(r"\b(image|video|photo|ffmpeg)\b", "image-and-video-processing"),
        tx(r"\b(memory|knowledge graph|notes?)\b", "knowledge-and-memory"),
        tx(r"\b(jira|linear|asana|trello|task|project management)\b", "project-management"),
        tx(r"\b(aws|azure|gcp|cloud|kubernetes|docker|heroku)\b", "cloud-platform"),
        tx(r"\b(git|gitlab|lint|linter|code review|static analysis)\b", "code-analysis"),
        tx(r"\b(execute code|sandbox|run code|interpreter)\b", "code-execution"),
        tx(r"\b(docs|documentation)\b", "documentation-access"),
        tx(r"\b(cms|wordpress|contentful|strapi)\b", "content-managemant-systems"),
        tx(r"\b(rag|retrieval|vector|embedding)", "rag-system"),
        tx(r"\b(api test|postman|http request|openapi)\b", "api-testing"),
        tx(r"\b(agents?|orchestrat)", "agent-orchestration"),
        tx(r"\b(automat)", "app-automation"),
        tx(r"\b(developer|dev tools?|sdk|cli)\b", "developer-tools"),
    ]
}

fn normal(s: &str) -> String {
    s.trim().to_lowercase().replace([' ', '_'], "-")
}

/// The configured rules (and the built-in ones for categories of the taxonomy), compiled;
/// a rule naming a category outside the taxonomy, or with a bad regex, is an error.
fn compile_rules(cfg: &CategorySettings, known: &BTreeSet<String>) -> Result<Vec<Compiled>> {
    let mut rules = cfg.rules.clone();
    if cfg.builtin_rules {
        rules.extend(builtin().into_iter().filter(|r| known.contains(&normal(&r.category))));
    }
    let mut compiled = Vec::new();
    for (i, r) in rules.iter().enumerate() {
        let re = |p: &Option<String>, what: &str| -> Result<Option<Regex>> {
            p.as_deref()
                .map(|p| {
                    Regex::new(&format!("(?i){p}")).map_err(|e| {
                        anyhow::anyhow!("`registry.categories.rules[{i}].{what}` is not a valid regex: {e}")
                    })
                })
                .transpose()
        };
        if !known.contains(&normal(&r.category)) {
            anyhow::bail!("`registry.categories.rules[{i}].category` = `{}` is not in the taxonomy", r.category);
        }
        let label = match (&r.source_category, &r.text) {
            (Some(p), _) => format!("source category matches /{p}/"),
            (None, Some(p)) => format!("name or description matches /{p}/"),
            (None, None) => anyhow::bail!("`registry.categories.rules[{i}]` needs `source_category` or `text`"),
        };
        compiled.push(Compiled {
            source: r.source.clone(),
            source_category: re(&r.source_category, "source_category")?,
            text: re(&r.text, "text")?,
            category: r.category.clone(),
            label,
        });
    }
    Ok(compiled)
}

/// Assign categories to every server that came from a registry (ETOM-imported servers,
/// which carry their own, are left alone).
pub fn assign(servers: &mut [Server], cfg: &CategorySettings) -> Result<CategoryReport> {
    let taxonomy: Vec<String> = match &cfg.taxonomy {
        Some(t) => t.clone(),
        None => ETOM_TAXONOMY.iter().map(|s| s.to_string()).collect(),
    };
    let known: BTreeSet<String> = taxonomy.iter().map(|t| normal(t)).collect();
    let compiled = compile_rules(cfg, &known)?;
    // One pass over each server's text finds every text rule that matches; only those run
    // again to quote the match.
    let text_rules: Vec<&Compiled> = compiled.iter().filter(|r| r.text.is_some()).collect();
    let text_set = regex::RegexSet::new(text_rules.iter().map(|r| r.text.as_ref().map(Regex::as_str).unwrap_or("")))?;
    let cat_rules: Vec<&Compiled> = compiled.iter().filter(|r| r.source_category.is_some()).collect();
    let cat_set =
        regex::RegexSet::new(cat_rules.iter().map(|r| r.source_category.as_ref().map(Regex::as_str).unwrap_or("")))?;
    let mut report = CategoryReport::default();
    for s in servers.iter_mut() {
        let Some(info) = s.registry.as_mut() else { continue };
        let mut cats: Vec<String> = Vec::new();
        let mut reasons: Vec<CategoryReason> = Vec::new();
        let sources: Vec<String> = info.sources.keys().cloned().collect();
        // Source categories may be tagged `source:category` in a merged catalog.
        let tagged: Vec<(Option<String>, String)> = info
            .source_categories
            .iter()
            .map(|c| match c.split_once(':') {
                Some((src, rest)) if sources.iter().any(|x| x == src) => (Some(src.to_string()), rest.to_string()),
                _ => (sources.first().cloned(), c.clone()),
            })
            .collect();
        let mut add = |cat: &str, by: &str, reason: String, cats: &mut Vec<String>| {
            if cats.len() < cfg.max_categories && !cats.iter().any(|c| c == cat) {
                cats.push(cat.to_string());
                reasons.push(CategoryReason { category: cat.to_string(), by: by.into(), reason });
            }
        };
        for (src, c) in &tagged {
            if let Some(t) = taxonomy.iter().find(|t| normal(t) == normal(c)) {
                add(t, "source", format!("{} lists category `{c}`", src.as_deref().unwrap_or("source")), &mut cats);
                report.by_source += 1;
            }
        }
        // Rule order first, then the server's category order (as before), with one set
        // match per source category.
        let hits: Vec<regex::SetMatches> = tagged.iter().map(|(_, c)| cat_set.matches(c)).collect();
        for (k, r) in cat_rules.iter().enumerate() {
            for ((src, c), m) in tagged.iter().zip(&hits) {
                if !m.matched(k) || r.source.as_ref().is_some_and(|want| Some(want) != src.as_ref()) {
                    continue;
                }
                add(&r.category, "rule", format!("{} (`{c}`)", r.label), &mut cats);
                report.by_rule += 1;
            }
        }
        if cats.is_empty() {
            // The last path segment of the name only: namespaces such as `io.github.owner/`
            // say where a server is published, not what it does.
            let short = s.name.rsplit('/').next().unwrap_or(&s.name).replace(['-', '_'], " ");
            let text = format!("{short} {}", s.description);
            for k in text_set.matches(&text).iter() {
                let r = text_rules[k];
                let Some(re) = &r.text else { continue };
                if r.source.as_ref().is_some_and(|want| !sources.contains(want)) {
                    continue;
                }
                if let Some(m) = re.find(&text) {
                    add(&r.category, "rule", format!("{} (`{}`)", r.label, m.as_str()), &mut cats);
                    report.by_rule += 1;
                }
            }
        }
        if cats.is_empty() {
            report.unassigned.push(s.name.clone());
        } else {
            report.assigned += 1;
        }
        info.category_reasons = reasons;
        s.categories = cats;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::RegistryInfo;

    fn srv(name: &str, desc: &str, cats: &[&str]) -> Server {
        Server {
            name: name.into(),
            description: desc.into(),
            summary: String::new(),
            url: String::new(),
            categories: vec![],
            license: None,
            tools: vec![],
            registry: Some(Box::new(RegistryInfo {
                sources: [("glama".to_string(), Default::default())].into(),
                source_categories: cats.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            })),
        }
    }

    #[test]
    fn source_then_rules_then_text_each_with_a_reason() {
        let mut s = vec![
            srv("a", "", &["Finance", "hosting:remote-capable"]),
            srv("b", "Query a Postgres database", &[]),
            srv("c", "Nothing to see", &[]),
        ];
        let r = assign(&mut s, &CategorySettings::default()).unwrap();
        assert_eq!(s[0].categories, ["finance", "remote"]);
        assert_eq!(s[1].categories, ["database"]);
        assert!(s[1].registry.as_ref().unwrap().category_reasons[0].reason.contains("Postgres"));
        assert_eq!(r.unassigned, ["c"]);
    }

    #[test]
    fn a_rule_outside_the_taxonomy_is_an_error() {
        let cfg = CategorySettings {
            rules: vec![CategoryRule {
                source: None,
                source_category: Some("x".into()),
                text: None,
                category: "nope".into(),
            }],
            ..Default::default()
        };
        assert!(assign(&mut [], &cfg).unwrap_err().to_string().contains("rules[0].category"));
    }
}

/// Prompt template (under the prompts folder) of the category classifier.
pub const CLASSIFY_PROMPT: &str = "registry-categories";

/// One server's classification, as checkpointed by the batch.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Answer {
    /// The model's category (not yet matched against the taxonomy), or none when its
    /// answer stayed invalid.
    category: Option<String>,
    reason: String,
    /// Request hash of the exchange (stable across reruns).
    exchange: String,
}

/// The category this server belongs to.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
pub(crate) struct LlmCategory {
    // Asked first so that the category follows the reasoning.
    /// One short sentence saying why.
    reason: String,
    /// One category name from the list, or `none`.
    category: String,
}

/// The classifier's answer: one category of `taxonomy` or `none` (`enum`; any other name
/// is re-asked, where it used to leave the server unassigned after the call).
pub(crate) fn category_answer(taxonomy: &[String]) -> crate::llm::Answer<LlmCategory> {
    let mut names: Vec<String> = taxonomy.to_vec();
    names.push("none".into());
    let mut a = crate::llm::Answer::<LlmCategory>::of();
    std::sync::Arc::make_mut(&mut a.schema)["properties"]["category"]["enum"] = serde_json::json!(names);
    a.check(move |c| {
        if names.iter().any(|t| normal(t) == normal(&c.category)) {
            Ok(())
        } else {
            Err(format!("`category` \"{}\" is not in the list; answer one of: {}", c.category, names.join(", ")))
        }
    })
}

/// Ask the LLM role for every server no rule placed; each answer becomes a category with
/// the model's reason (`by = "llm"`), or stays unassigned with the reason it was refused.
/// Answers are cached in the ledger, so a rerun asks nothing again.
pub fn classify_with_llm(
    ctx: &crate::stage::Ctx,
    servers: &mut [Server],
    cfg: &CategorySettings,
    report: &mut CategoryReport,
    out: &mut crate::stage::Output,
) -> Result<()> {
    let Some(role) = cfg.classifier_role.as_deref() else { return Ok(()) };
    if report.unassigned.is_empty() {
        return Ok(());
    }
    let taxonomy: Vec<String> = match &cfg.taxonomy {
        Some(t) => t.clone(),
        None => ETOM_TAXONOMY.iter().map(|s| s.to_string()).collect(),
    };
    let wanted: BTreeSet<String> = report.unassigned.iter().cloned().collect();
    let idx: Vec<usize> =
        servers.iter().enumerate().filter(|(_, s)| wanted.contains(&s.name)).map(|(i, _)| i).collect();
    let items: Vec<(String, serde_json::Value)> = idx
        .iter()
        .map(|&i| {
            let s = &servers[i];
            let vars = serde_json::json!({
                "name": s.name,
                "description": s.description,
                "tools": s.tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
                "source_categories": s.registry.as_ref().map(|r| r.source_categories.clone()).unwrap_or_default(),
                "taxonomy": taxonomy,
            });
            (format!("category:{}", s.name), vars)
        })
        .collect();
    let opts = BatchOptions::new(crate::registry::SPEC.name, "categories", "servers");
    let mut batch = Batch::new(ctx, opts)?;
    let answer = category_answer(&taxonomy);
    let answer = &answer;
    let done = batch.run(items, |vars, llm: Item| async move {
        // An answer that stays invalid leaves the server unassigned, with the reason.
        match llm.ask(role, &crate::llm::Prompt::new(CLASSIFY_PROMPT, vars), None, answer).await {
            Ok(reply) => Ok(Answer {
                category: Some(reply.value.category.trim().to_string()),
                reason: reply.value.reason.trim().to_string(),
                exchange: reply.exchange,
            }),
            Err(e) if e.is_item_level() => {
                Ok(Answer { category: None, reason: e.to_string(), exchange: String::new() })
            }
            Err(e) => Err(ItemError::from(e)),
        }
    })?;
    batch.finish(out)?;
    let mut still = Vec::new();
    for &i in &idx {
        let s = &mut servers[i];
        let answer = done.values.get(&format!("category:{}", s.name));
        let known =
            answer.and_then(|a| a.category.as_ref().and_then(|c| taxonomy.iter().find(|t| normal(t) == normal(c))));
        match (answer, known) {
            (Some(a), Some(t)) => {
                s.categories = vec![t.clone()];
                if let Some(info) = s.registry.as_mut() {
                    info.category_reasons = vec![CategoryReason {
                        category: t.clone(),
                        by: "llm".into(),
                        reason: format!("{role} (exchange {}): {}", a.exchange, a.reason),
                    }];
                }
                report.assigned += 1;
            }
            _ => still.push(s.name.clone()),
        }
    }
    report.unassigned = still;
    Ok(())
}
