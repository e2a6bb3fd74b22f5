//! `benchgen registry …`: get a catalog of MCP servers and tools into
//! `artifacts/catalog/`.
//!
//! `registry import` reads a snapshot file (ETOM's `mcp_registry.json` format) or one or
//! more scraped snapshot folders (merged); `registry scrape` fetches those folders from
//! the Glama, official and Smithery APIs; `registry tools` lists tools live over MCP.
//! See `docs/registry.md`.

pub mod categories;
pub mod commands;
pub mod etom;
pub mod import;
pub mod merge;
pub mod pages;
pub mod scrape;
pub mod tools;

use std::path::PathBuf;

use anyhow::Result;
use serde::Serialize;

use crate::error::{InputError, Problem};
use crate::ledger::{NewEvent, Parent, kind};
use crate::model::Catalog;
use crate::settings::{RegistryFormat, Settings, section_hash};
use crate::stage::{Ctx, Inputs, Output, Plan, Stage};

/// A remark about the input that did not stop the import (a trimmed name, an
/// ignored field, a header count that disagrees with the file).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Note {
    pub location: String,
    pub kind: &'static str,
    pub message: String,
}

/// A record left out in lenient mode, with its reason.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Rejected {
    pub location: String,
    pub id: String,
    pub reason: String,
}

/// Where each imported record came from (for the ledger).
#[derive(Debug, Clone)]
pub struct Origin {
    pub id: String,
    pub is_server: bool,
    pub location: String,
    pub original_name: Option<String>,
}

/// The result of parsing a snapshot.
#[derive(Debug, Default)]
pub struct Imported {
    pub catalog: Catalog,
    pub notes: Vec<Note>,
    pub problems: Vec<Problem>,
    pub rejected: Vec<Rejected>,
    pub origins: Vec<Origin>,
}

/// The `catalog` stage, run by `registry import`.
pub struct CatalogStage {
    pub source: PathBuf,
    pub format: RegistryFormat,
    pub lenient: bool,
    /// Scraped snapshot folders to import and merge (priority order) instead of `source`.
    pub snapshots: Vec<PathBuf>,
    pub categories: categories::CategorySettings,
}

impl CatalogStage {
    /// The stage as the pipeline config describes it, with optional command-line overrides.
    pub fn from_settings(
        settings: &Settings,
        file: Option<PathBuf>,
        format: Option<RegistryFormat>,
        lenient: bool,
    ) -> Result<Self> {
        let reg = &settings.config.registry;
        let format = format.unwrap_or(reg.format);
        let categories = reg.categories.clone();
        if format != RegistryFormat::Etom || (file.is_none() && !reg.snapshots.is_empty()) {
            let snapshots: Vec<PathBuf> = match &file {
                Some(f) => vec![crate::settings::normalize(f)],
                None => reg.snapshots.iter().map(|p| settings.resolve(p)).collect(),
            };
            if snapshots.is_empty() {
                return Err(crate::error::hinted(
                    "no snapshot folder to import",
                    "pass one (`benchgen registry import --format glama raw/registry/glama/ID`) or set `registry.snapshots`",
                ));
            }
            let source = snapshots[0].clone();
            return Ok(Self { source, format, lenient: lenient || reg.lenient, snapshots, categories });
        }
        let source = match file {
            Some(f) => crate::settings::normalize(&f),
            None => match &reg.source {
                Some(s) => settings.resolve(s),
                None => {
                    return Err(crate::error::hinted(
                        format!(
                            "no registry snapshot to import: `{}` has no `registry.source`",
                            settings.config_path.display()
                        ),
                        "pass a file (`benchgen registry import FILE`) or set `[registry] source = \"raw/…\"`",
                    ));
                }
            },
        };
        Ok(Self { source, format, lenient: lenient || reg.lenient, snapshots: vec![], categories })
    }
}

#[derive(Serialize)]
struct ImportSettings {
    format: RegistryFormat,
    lenient: bool,
}

#[derive(Serialize)]
struct ImportReport<'a> {
    source: String,
    format: RegistryFormat,
    servers: usize,
    tools: usize,
    categories: usize,
    notes: &'a [Note],
    rejected: &'a [Rejected],
}

impl Stage for CatalogStage {
    fn name(&self) -> &'static str {
        "catalog"
    }
    fn command(&self) -> &'static str {
        "registry import"
    }
    fn version(&self) -> u32 {
        1
    }
    fn upstream(&self) -> &'static [&'static str] {
        &[]
    }

    fn plan(&self, _settings: &Settings) -> Result<Plan> {
        if !self.snapshots.is_empty() {
            let (prompts, role) = match &self.categories.classifier_role {
                Some(r) => (
                    vec![crate::llm::prompt_path(_settings, categories::CLASSIFY_PROMPT)],
                    Some(crate::llm::role_hash(_settings, r)?),
                ),
                None => (vec![], None),
            };
            return Ok(Plan {
                inputs: self.snapshots.iter().map(|d| snapshot_files(d)).collect::<Result<Vec<_>>>()?.concat(),
                prompts,
                config_hash: section_hash(&(
                    ImportSettings { format: self.format, lenient: self.lenient },
                    &self.categories,
                    role,
                ))?,
            });
        }
        Ok(Plan {
            inputs: vec![self.source.clone()],
            prompts: vec![],
            config_hash: section_hash(&ImportSettings { format: self.format, lenient: self.lenient })?,
        })
    }

    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        if !self.snapshots.is_empty() {
            return self.run_snapshots(ctx, inputs, out);
        }
        let bytes = inputs.bytes(&self.source)?;
        let shown = ctx.settings.display_path(&self.source);
        let imported = match self.format {
            RegistryFormat::Etom => etom::parse(bytes, self.lenient),
            _ => unreachable!("scraped formats are imported as snapshot folders"),
        }
        .map_err(|problems| InputError { file: shown.clone(), problems })?;
        if !imported.problems.is_empty() {
            return Err(InputError { file: shown, problems: imported.problems }.into());
        }
        for n in &imported.notes {
            if ctx.printer.verbose > 0 {
                ctx.printer.warn(&format!("{shown}: {}: {}", n.location, n.message));
            }
        }
        for r in &imported.rejected {
            ctx.printer.warn(&format!("{shown}: {}: left out `{}`: {}", r.location, r.id, r.reason));
        }

        let catalog = &imported.catalog;
        let categories: std::collections::BTreeSet<&str> =
            catalog.servers.iter().flat_map(|s| s.categories.iter().map(String::as_str)).collect();

        let input_ev = out.event(NewEvent::new(
            kind::INPUT_READ,
            Some(&shown),
            serde_json::json!({
                "path": shown,
                "sha256": crate::store::sha256_hex(bytes),
                "format": self.format,
                "bytes": bytes.len(),
            }),
        ));
        let mut server_ev = std::collections::HashMap::new();
        for o in &imported.origins {
            let server_name = o.id.split(crate::model::TOOL_ID_SEP).next().unwrap_or(&o.id);
            let mut ev = NewEvent::new(
                if o.is_server { kind::CATALOG_SERVER } else { kind::CATALOG_TOOL },
                Some(&o.id),
                serde_json::json!({
                    "source": shown,
                    "location": o.location,
                    "original_name": o.original_name,
                }),
            )
            .with_parent(Parent::Batch(input_ev));
            if !o.is_server
                && let Some(&p) = server_ev.get(server_name)
            {
                ev = ev.with_parent(Parent::Batch(p));
            }
            let idx = out.event(ev);
            if o.is_server {
                server_ev.insert(server_name.to_string(), idx);
            }
        }
        for r in &imported.rejected {
            out.event(
                NewEvent::new(
                    kind::CATALOG_REJECT,
                    Some(&r.id),
                    serde_json::json!({"source": shown, "location": r.location, "reason": r.reason}),
                )
                .with_parent(Parent::Batch(input_ev)),
            );
        }

        out.json("catalog.json", catalog)?;
        out.json(
            "import_report.json",
            &ImportReport {
                source: shown.clone(),
                format: self.format,
                servers: catalog.servers.len(),
                tools: catalog.tool_count(),
                categories: categories.len(),
                notes: &imported.notes,
                rejected: &imported.rejected,
            },
        )?;
        out.count("servers", catalog.servers.len());
        out.count("tools", catalog.tool_count());
        out.count("categories", categories.len());
        out.count("notes", imported.notes.len());
        out.count("rejected", imported.rejected.len());
        out.notes.push(format!(
            "imported {} servers and {} tools in {} categories from `{shown}`",
            catalog.servers.len(),
            catalog.tool_count(),
            categories.len()
        ));
        if !imported.rejected.is_empty() {
            out.notes.push(format!("{} records left out (see import_report.json)", imported.rejected.len()));
        }
        Ok(())
    }
}

/// Every file of a snapshot that an import reads: `state.json`, its pages and details.
fn snapshot_files(dir: &std::path::Path) -> Result<Vec<PathBuf>> {
    let st = commands::snapshot_state(dir)?;
    let mut files = vec![dir.join("state.json")];
    files.extend(st.pages.iter().map(|p| dir.join(&p.file)));
    files.extend(st.details.values().map(|d| dir.join(&d.file)));
    Ok(files)
}

impl CatalogStage {
    /// Import and merge scraped snapshots (one is a merge of one).
    fn run_snapshots(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let mut snaps: Vec<(String, pages::SourceKind, commands::Reader)> = Vec::new();
        for d in &self.snapshots {
            let st = commands::snapshot_state(d)?;
            if self.snapshots.len() == 1 && self.format != RegistryFormat::Etom {
                let want = match self.format {
                    RegistryFormat::Glama => pages::SourceKind::Glama,
                    RegistryFormat::Official => pages::SourceKind::Official,
                    _ => pages::SourceKind::Smithery,
                };
                if want != st.kind {
                    return Err(crate::error::hinted(
                        format!(
                            "`{}` is a {} snapshot, not {}",
                            ctx.settings.display_path(d),
                            st.kind.as_str(),
                            want.as_str()
                        ),
                        format!("use `--format {}`", st.kind.as_str()),
                    ));
                }
            }
            let dir = d.clone();
            snaps.push((
                ctx.settings.display_path(d),
                st.kind,
                Box::new(move |rel: &str| Ok(inputs.bytes(&dir.join(rel))?.to_vec())),
            ));
        }
        let (mut merged, mut cats, notes) = commands::build_catalog(&snaps, &self.categories)?;
        categories::classify_with_llm(ctx, &mut merged.catalog.servers, &self.categories, &mut cats, out)?;
        for n in &notes {
            if ctx.printer.verbose > 0 {
                ctx.printer.warn(&format!("{}: {}", n.location, n.message));
            }
        }
        for (name, bytes) in commands::merge_files(&merged, &cats)? {
            out.file(name, bytes);
        }
        let catalog = &merged.catalog;
        let categories: std::collections::BTreeSet<&str> =
            catalog.servers.iter().flat_map(|s| s.categories.iter().map(String::as_str)).collect();
        out.json(
            "import_report.json",
            &ImportReport {
                source: snaps.iter().map(|s| s.0.clone()).collect::<Vec<_>>().join(", "),
                format: self.format,
                servers: catalog.servers.len(),
                tools: catalog.tool_count(),
                categories: categories.len(),
                notes: &notes,
                rejected: &[],
            },
        )?;
        out.count("servers", catalog.servers.len());
        out.count("tools", catalog.tool_count());
        out.count("categories", categories.len());
        out.count("notes", notes.len());
        out.count("conflicts", merged.conflicts.len());
        out.notes.push(format!(
            "imported {} servers and {} tools in {} categories from {} snapshot(s)",
            catalog.servers.len(),
            catalog.tool_count(),
            categories.len(),
            snaps.len()
        ));
        Ok(())
    }
}
