//! The `registry scrape | merge | tools` commands: resolve settings and paths, call the
//! plain functions of `scrape`, `import`, `merge`, `categories` and `tools`, and write
//! their outputs.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;

use super::categories::{self, CategoryReport};
use super::merge::{self, Merged, SourceCatalog};
use super::pages::SourceKind;
use super::scrape::{self, ScrapeOptions, State};
use crate::model::Catalog;
use crate::printer::Printer;
use crate::settings::{Settings, normalize};
use crate::store::{to_json_bytes, write_atomic};

#[derive(Debug, Args)]
pub struct ScrapeArgs {
    /// The `[registry.sources.NAME]` section to scrape.
    #[arg(long)]
    pub source: String,
    /// Snapshot id (folder name); default: resume the latest unfinished one, else a new
    /// id from the UTC time.
    #[arg(long)]
    pub snapshot: Option<String>,
    /// Start a new snapshot even when an unfinished one exists.
    #[arg(long = "new", conflicts_with = "snapshot")]
    pub fresh: bool,
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Snapshot folders in priority order.
    pub snapshots: Vec<PathBuf>,
    /// Output folder (default `artifacts/registry-merge/`).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ToolsArgs {
    /// Catalog to complete.
    #[arg(long)]
    pub catalog: PathBuf,
    /// Output folder (`catalog.json`, `live.json`, `logs/`).
    #[arg(long)]
    pub out: PathBuf,
    /// Only these servers (default: every server without tools).
    #[arg(long = "server")]
    pub servers: Vec<String>,
}

pub fn scrape(settings: &Settings, printer: &Printer, a: &ScrapeArgs) -> Result<()> {
    let reg = &settings.section::<super::RegistrySettings>();
    let Some(cfg) = reg.sources.get(&a.source) else {
        let known: Vec<&str> = reg.sources.keys().map(String::as_str).collect();
        return Err(crate::error::hinted(
            format!("no `[registry.sources.{}]` in `{}`", a.source, settings.config_path.display()),
            if known.is_empty() {
                "add a section with `kind`, `base_url` (see docs/registry.md)".to_string()
            } else {
                format!("configured sources: {}", known.join(", "))
            },
        ));
    };
    let raw = settings.resolve(&cfg.folder);
    let report = scrape::scrape(ScrapeOptions {
        name: &a.source,
        cfg,
        raw,
        snapshot: a.snapshot.clone(),
        fresh: a.fresh,
        progress: printer.progress(0, "scrape"),
        seed: settings.project.seed,
    })
    .with_context(|| format!("scrape of `{}` stopped (rerun to resume from the last saved page)", a.source))?;
    let human = format!(
        "scraped `{}` into `{}`: {} pages ({} fetched, {} adopted from an earlier run, {} not modified), {} servers{}, {} requests, {} retries, {:.1} s\n",
        report.source,
        settings.display_path(Path::new(&report.folder)),
        report.pages_total,
        report.pages_fetched,
        report.pages_adopted,
        report.not_modified,
        report.servers,
        if report.details_fetched > 0 { format!(" ({} details)", report.details_fetched) } else { String::new() },
        report.requests,
        report.retries,
        report.elapsed_s
    );
    printer.summary(&human, &report);
    Ok(())
}

/// The kind and source name of a snapshot folder, from its `state.json`.
pub fn snapshot_state(dir: &Path) -> Result<State> {
    let p = dir.join("state.json");
    let b =
        std::fs::read(&p).with_context(|| format!("`{}` is not a snapshot folder (no state.json)", dir.display()))?;
    serde_json::from_slice(&b).with_context(|| format!("`{}` is not a scrape state file", p.display()))
}

/// The snapshots to merge: as given, else `registry.snapshots`, else the latest complete
/// snapshot of every configured source.
fn merge_inputs(settings: &Settings, given: &[PathBuf]) -> Result<Vec<PathBuf>> {
    if !given.is_empty() {
        return Ok(given.iter().map(|p| normalize(p)).collect());
    }
    let reg = &settings.section::<super::RegistrySettings>();
    if !reg.snapshots.is_empty() {
        return Ok(reg.snapshots.iter().map(|p| settings.resolve(p)).collect());
    }
    let mut out = Vec::new();
    for (name, cfg) in &reg.sources {
        let dir = settings.resolve(&cfg.folder).join(name);
        match scrape::snapshots(&dir).into_iter().rev().find(|(_, s)| s.as_ref().is_some_and(|s| s.complete)) {
            Some((id, _)) => out.push(dir.join(id)),
            None => {
                return Err(crate::error::hinted(
                    format!("source `{name}` has no complete snapshot under `{}`", settings.display_path(&dir)),
                    format!("run `benchgen registry scrape --source {name}`"),
                ));
            }
        }
    }
    if out.is_empty() {
        return Err(crate::error::hinted(
            "nothing to merge",
            "name snapshot folders, or configure `[registry.sources.NAME]` or `registry.snapshots`",
        ));
    }
    Ok(out)
}

/// Reads a file of a snapshot by its path relative to the snapshot folder.
pub type Reader<'a> = Box<dyn Fn(&str) -> Result<Vec<u8>> + 'a>;

/// Import each snapshot (label, kind, reader), merge them in order, map categories.
pub fn build_catalog(
    snapshots: &[(String, SourceKind, Reader<'_>)],
    cats: &categories::CategorySettings,
) -> Result<(Merged, CategoryReport, Vec<super::Note>)> {
    let mut inputs = Vec::new();
    let mut notes = Vec::new();
    for (label, kind, read) in snapshots {
        let imported = super::import::import(*kind, label, read.as_ref())?;
        let source = imported
            .catalog
            .servers
            .iter()
            .find_map(|s| s.registry.as_ref().and_then(|r| r.sources.keys().next().cloned()))
            .unwrap_or_else(|| kind.as_str().to_string());
        if inputs.iter().any(|i: &SourceCatalog| i.source == source) {
            anyhow::bail!("two snapshots of source `{source}` given; merge one snapshot per source");
        }
        notes.extend(imported.notes.into_iter().map(|mut n| {
            n.location = format!("{label}: {}", n.location);
            n
        }));
        inputs.push(SourceCatalog { source, catalog: imported.catalog });
    }
    let mut merged = merge::merge(&inputs);
    let report = categories::assign(&mut merged.catalog.servers, cats)?;
    Ok((merged, report, notes))
}

fn csv_bytes<T: serde::Serialize>(rows: &[T], header: &[&str]) -> Result<Vec<u8>> {
    crate::csvout::table(header, rows)
}

/// Every file the merge writes, by name.
pub fn merge_files(merged: &Merged, cats: &CategoryReport) -> Result<Vec<(&'static str, Vec<u8>)>> {
    let mut cat_rows = Vec::new();
    for s in &merged.catalog.servers {
        if let Some(r) = &s.registry {
            for c in &r.category_reasons {
                cat_rows.push((s.name.clone(), c.category.clone(), c.by.clone(), c.reason.clone()));
            }
        }
    }
    let mut md = String::from("# Registry merge\n\n");
    md.push_str("| source | servers |\n|---|---:|\n");
    for (k, v) in &merged.summary.inputs {
        md.push_str(&format!("| {k} | {v} |\n"));
    }
    md.push_str(&format!(
        "\nMerged catalog: {} servers, {} tools.\n\nJoined by rule: {}.\n\n",
        merged.summary.servers,
        merged.summary.tools,
        if merged.summary.merged_by.is_empty() {
            "none".to_string()
        } else {
            merged.summary.merged_by.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ")
        }
    ));
    md.push_str(&format!(
        "{} conflicting field values (`conflicts.csv`), {} doubtful matches to review (`review.csv`).\n\n",
        merged.summary.conflicts, merged.summary.review
    ));
    md.push_str(&format!(
        "Categories: {} servers placed ({} by source category, {} by rule); {} unassigned{}.\n\n",
        cats.assigned,
        cats.by_source,
        cats.by_rule,
        cats.unassigned.len(),
        if cats.unassigned.is_empty() { String::new() } else { " (see `categories.csv`)".into() }
    ));
    md.push_str(
        "Rules: (1) same package `type:identifier`; (2) same normalised repository, unique per source \
         (in a monorepo the names must agree too); (3) same normalised name, doubtful, kept apart when the \
         repositories differ. Never two servers of one source. Field values: first source in priority order; \
         tools: union, most recent source wins.\n",
    );
    let mut unassigned_rows: Vec<(String, String, String, String)> =
        cats.unassigned.iter().map(|n| (n.clone(), String::new(), "none".into(), "no rule matched".into())).collect();
    cat_rows.append(&mut unassigned_rows);
    Ok(vec![
        ("catalog.json", to_json_bytes(&merged.catalog)?),
        ("conflicts.csv", csv_bytes(&merged.conflicts, &["server", "field", "source", "value", "chosen"])?),
        ("review.csv", csv_bytes(&merged.review, &["decision", "rule", "a", "b", "reason"])?),
        ("categories.csv", {
            let mut w = crate::csvout::Writer::new();
            w.write_record(["server", "category", "by", "reason"])?;
            for r in &cat_rows {
                w.write_record([&r.0, &r.1, &r.2, &r.3])?;
            }
            w.into_bytes()?
        }),
        ("merge.md", md.into_bytes()),
        ("merge_summary.json", to_json_bytes(&merged.summary)?),
    ])
}

pub fn merge(settings: &Settings, printer: &Printer, a: &MergeArgs) -> Result<()> {
    let dirs = merge_inputs(settings, &a.snapshots)?;
    let mut snaps: Vec<(String, SourceKind, Reader)> = Vec::new();
    for d in &dirs {
        let st = snapshot_state(d)?;
        let dir = d.clone();
        let label = settings.display_path(d);
        snaps.push((
            label,
            st.kind,
            Box::new(move |rel: &str| {
                std::fs::read(dir.join(rel)).with_context(|| format!("cannot read `{}`", dir.join(rel).display()))
            }),
        ));
    }
    let (merged, cats, notes) = build_catalog(&snaps, &settings.section::<super::RegistrySettings>().categories)?;
    if settings.section::<super::RegistrySettings>().categories.classifier_role.is_some() && !cats.unassigned.is_empty()
    {
        printer.warn(&format!(
            "{} servers have no category; the LLM classifier runs in the pipeline's `registry import` (with `registry.snapshots`), not here",
            cats.unassigned.len()
        ));
    }
    for n in &notes {
        if printer.verbose > 0 {
            printer.warn(&format!("{}: {}", n.location, n.message));
        }
    }
    let out = a.out.as_ref().map(|p| normalize(p)).unwrap_or_else(|| settings.artifacts.join("registry-merge"));
    for (name, bytes) in merge_files(&merged, &cats)? {
        write_atomic(&out.join(name), &bytes)?;
    }
    let human = format!(
        "merged {} snapshots into {} servers and {} tools ({} conflicts, {} to review) in `{}`\n",
        dirs.len(),
        merged.summary.servers,
        merged.summary.tools,
        merged.summary.conflicts,
        merged.summary.review,
        settings.display_path(&out)
    );
    printer.summary(&human, &merged.summary);
    Ok(())
}

pub fn tools(settings: &Settings, printer: &Printer, a: &ToolsArgs) -> Result<()> {
    let path = normalize(&a.catalog);
    let mut catalog = Catalog::load(&path)?;
    let out = normalize(&a.out);
    let opts = super::tools::ToolsOptions {
        cfg: &settings.section::<super::RegistrySettings>().tools,
        only: a.servers.clone(),
        out: out.clone(),
        progress: printer.progress(0, "tools"),
    };
    let (report, live) = super::tools::run(&mut catalog, &opts)?;
    write_atomic(&out.join("catalog.json"), &to_json_bytes(&catalog)?)?;
    for (name, r) in &live {
        if r.status != "listed" && r.status != "skipped" {
            printer.warn(&format!("`{name}`: {} ({})", r.status, r.reason));
        }
    }
    let human = format!(
        "listed {} tools of {} servers live; {} refused, {} failed, {} timed out, {} with nothing to run; catalog in `{}`\n",
        report.tools,
        report.listed,
        report.refused,
        report.failed,
        report.timed_out,
        report.skipped,
        settings.display_path(&out.join("catalog.json"))
    );
    printer.summary(&human, &report);
    Ok(())
}
