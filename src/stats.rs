//! `benchgen stats`: corpus statistics of the imported catalog and, when the
//! filter has run, of the filtered one (the ETOM paper's Table/Figure 2 view).
//!
//! Outputs in `artifacts/stats/`: `catalog.json` (`{imported, filtered|null}`,
//! each a [`CatalogStats`]), `catalog.md` (Markdown tables) and
//! `servers_per_category.svg` (bar chart, imported catalog).

use std::collections::BTreeMap;

use anyhow::Result;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config_doc::Key;
use crate::model::Catalog;
use crate::settings::{Settings, section_hash};
use crate::stage::{Ctx, Inputs, Output, Plan, Stage, StageSpec};

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Distribution {
    pub min: usize,
    pub max: usize,
    pub mean: f64,
    pub median: f64,
    /// value → how many
    pub histogram: BTreeMap<usize, usize>,
}

impl Distribution {
    fn of(values: &[usize]) -> Self {
        if values.is_empty() {
            return Self { min: 0, max: 0, mean: 0.0, median: 0.0, histogram: BTreeMap::new() };
        }
        let mut v = values.to_vec();
        v.sort_unstable();
        let n = v.len();
        let median = if n % 2 == 1 { v[n / 2] as f64 } else { (v[n / 2 - 1] + v[n / 2]) as f64 / 2.0 };
        let mut histogram = BTreeMap::new();
        for x in &v {
            *histogram.entry(*x).or_default() += 1;
        }
        Self { min: v[0], max: v[n - 1], mean: round(v.iter().sum::<usize>() as f64 / n as f64), median, histogram }
    }
}

/// Rounded to 3 decimals so the JSON is stable and readable.
fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SchemaCoverage {
    /// Tools whose input schema has a `properties` object.
    pub with_properties_key: usize,
    /// Tools with at least one parameter.
    pub with_parameters: usize,
    /// Tools with a non-empty `required` list.
    pub with_required: usize,
    /// Tools whose every parameter has a description.
    pub all_parameters_described: usize,
    pub with_output_schema: usize,
    pub parameters_per_tool: Distribution,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CatalogStats {
    pub servers: usize,
    pub tools: usize,
    pub categories: usize,
    /// Servers per category, counting every category a server lists.
    pub servers_per_category: BTreeMap<String, usize>,
    /// Servers per main (first-listed) category.
    pub servers_per_main_category: BTreeMap<String, usize>,
    pub categories_per_server: Distribution,
    pub tools_per_server: Distribution,
    pub tool_description_chars: Distribution,
    pub servers_without_description: usize,
    pub schema: SchemaCoverage,
}

pub fn compute(c: &Catalog) -> CatalogStats {
    let mut per_cat = BTreeMap::new();
    let mut per_main = BTreeMap::new();
    for s in &c.servers {
        for cat in &s.categories {
            *per_cat.entry(cat.clone()).or_default() += 1;
        }
        if let Some(first) = s.categories.first() {
            *per_main.entry(first.clone()).or_default() += 1;
        }
    }
    let mut params = Vec::new();
    let (mut with_props, mut with_params, mut with_req, mut described, mut with_out) = (0, 0, 0, 0, 0);
    for (_, t) in c.tools() {
        let props = t.input_schema.get("properties").and_then(Value::as_object);
        with_props += usize::from(props.is_some());
        let n = props.map_or(0, |p| p.len());
        params.push(n);
        with_params += usize::from(n > 0);
        with_req +=
            usize::from(t.input_schema.get("required").and_then(Value::as_array).is_some_and(|r| !r.is_empty()));
        described += usize::from(props.is_some_and(|p| {
            !p.is_empty()
                && p.values()
                    .all(|v| v.get("description").and_then(Value::as_str).is_some_and(|d| !d.trim().is_empty()))
        }));
        with_out += usize::from(t.output_schema.is_some());
    }
    CatalogStats {
        servers: c.servers.len(),
        tools: c.tool_count(),
        categories: per_cat.len(),
        servers_per_category: per_cat,
        servers_per_main_category: per_main,
        categories_per_server: Distribution::of(&c.servers.iter().map(|s| s.categories.len()).collect::<Vec<_>>()),
        tools_per_server: Distribution::of(&c.servers.iter().map(|s| s.tools.len()).collect::<Vec<_>>()),
        tool_description_chars: Distribution::of(
            &c.tools().map(|(_, t)| t.description.chars().count()).collect::<Vec<_>>(),
        ),
        servers_without_description: c.servers.iter().filter(|s| s.description.trim().is_empty()).count(),
        schema: SchemaCoverage {
            with_properties_key: with_props,
            with_parameters: with_params,
            with_required: with_req,
            all_parameters_described: described,
            with_output_schema: with_out,
            parameters_per_tool: Distribution::of(&params),
        },
    }
}

/// Categories sorted by count (descending), then name.
fn ranked(m: &BTreeMap<String, usize>) -> Vec<(&str, usize)> {
    let mut v: Vec<(&str, usize)> = m.iter().map(|(k, n)| (k.as_str(), *n)).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    v
}

fn pct(n: usize, of: usize) -> String {
    if of == 0 { "–".into() } else { format!("{:.1} %", 100.0 * n as f64 / of as f64) }
}

pub fn markdown(imported: &CatalogStats, filtered: Option<&CatalogStats>) -> String {
    let mut md = String::from("# Catalog statistics\n\n| | imported |");
    if filtered.is_some() {
        md.push_str(" filtered |");
    }
    md.push_str(if filtered.is_some() { "\n|---|---:|---:|\n" } else { "\n|---|---:|\n" });
    let row = |md: &mut String, label: &str, f: &dyn Fn(&CatalogStats) -> String| {
        md.push_str(&format!("| {label} | {} |", f(imported)));
        if let Some(fs) = filtered {
            md.push_str(&format!(" {} |", f(fs)));
        }
        md.push('\n');
    };
    row(&mut md, "servers", &|s| s.servers.to_string());
    row(&mut md, "tools", &|s| s.tools.to_string());
    row(&mut md, "categories", &|s| s.categories.to_string());
    row(&mut md, "tools per server (min / median / mean / max)", &|s| {
        let d = &s.tools_per_server;
        format!("{} / {} / {:.2} / {}", d.min, d.median, d.mean, d.max)
    });
    row(&mut md, "parameters per tool (median / mean / max)", &|s| {
        let d = &s.schema.parameters_per_tool;
        format!("{} / {:.2} / {}", d.median, d.mean, d.max)
    });
    row(&mut md, "tools with ≥ 1 parameter", &|s| {
        format!("{} ({})", s.schema.with_parameters, pct(s.schema.with_parameters, s.tools))
    });
    row(&mut md, "tools with required parameters", &|s| {
        format!("{} ({})", s.schema.with_required, pct(s.schema.with_required, s.tools))
    });
    row(&mut md, "tools with every parameter described", &|s| {
        format!("{} ({})", s.schema.all_parameters_described, pct(s.schema.all_parameters_described, s.tools))
    });
    row(&mut md, "tools with an output schema", &|s| {
        format!("{} ({})", s.schema.with_output_schema, pct(s.schema.with_output_schema, s.tools))
    });
    row(&mut md, "tool description length (chars, min–max, mean)", &|s| {
        let d = &s.tool_description_chars;
        format!("{}–{}, {:.0}", d.min, d.max, d.mean)
    });
    row(&mut md, "servers without a description", &|s| s.servers_without_description.to_string());

    md.push_str("\n## Tools per server\n\n| tools | servers |\n|---:|---:|\n");
    for (k, n) in &imported.tools_per_server.histogram {
        md.push_str(&format!("| {k} | {n} |\n"));
    }
    md.push_str(
        "\n## Servers per category (imported)\n\n| category | servers (any) | servers (main) |\n|---|---:|---:|\n",
    );
    for (cat, n) in ranked(&imported.servers_per_category) {
        let main = imported.servers_per_main_category.get(cat).copied().unwrap_or(0);
        md.push_str(&format!("| {cat} | {n} | {main} |\n"));
    }
    md
}

/// Horizontal bar chart of servers per category, as SVG text.
pub fn chart_svg(stats: &CatalogStats, top: usize) -> Result<String> {
    use plotters::prelude::*;
    let bars: Vec<(&str, usize)> = ranked(&stats.servers_per_category).into_iter().take(top.max(1)).collect();
    let n = bars.len().max(1);
    let height = 80 + 22 * n as u32;
    let max = bars.iter().map(|b| b.1).max().unwrap_or(1).max(1);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow::anyhow!("chart: {e}"))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(format!("Servers per category ({} servers)", stats.servers), ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(30)
            .y_label_area_size(230)
            .build_cartesian_2d(0usize..(max + max / 10 + 1), (0usize..n).into_segmented())
            .map_err(|e| anyhow::anyhow!("chart: {e}"))?;
        let labels: Vec<String> = bars.iter().map(|b| b.0.to_string()).collect();
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(n)
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(row) if *row < n => labels.get(n - 1 - *row).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .x_desc("servers")
            .draw()
            .map_err(|e| anyhow::anyhow!("chart: {e}"))?;
        chart
            .draw_series(bars.iter().enumerate().map(|(i, (_, v))| {
                // Largest first from the top: row 0 of the chart is at the bottom.
                let row = n - 1 - i;
                let mut r = Rectangle::new(
                    [(0, SegmentValue::Exact(row)), (*v, SegmentValue::Exact(row + 1))],
                    RGBColor(66, 113, 196).filled(),
                );
                r.set_margin(3, 3, 0, 0);
                r
            }))
            .map_err(|e| anyhow::anyhow!("chart: {e}"))?;
        root.present().map_err(|e| anyhow::anyhow!("chart: {e}"))?;
    }
    Ok(svg)
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StatsSettings {
    /// How many categories the bar chart shows (largest first).
    #[serde(default = "default_top")]
    pub chart_categories: usize,
}

/// `[stats]`; absent: its defaults.
impl crate::settings::Section for StatsSettings {
    const NAME: &'static str = "stats";
    type Value = crate::settings::Always<Self>;
    const KEYS: &'static [Key] = &[Key::new("chart_categories", "integer", "40", "Bars of the category chart.")];
}

impl Default for StatsSettings {
    fn default() -> Self {
        Self { chart_categories: default_top() }
    }
}

fn default_top() -> usize {
    40
}

pub struct StatsStage;

pub static SPEC: StageSpec = StageSpec {
    name: "stats",
    command: "stats",
    version: 1,
    about: "corpus statistics and a chart of the imported (and filtered) catalog",
    // The filtered catalog is described too when the filter has run.
    reads: &[crate::registry::CATALOG.read(), crate::filter::CATALOG.optional()],
    writes: &["catalog.json", "catalog.md", "servers_per_category.svg"],
    section: Some("stats"),
};

impl Stage for StatsStage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }
    fn help(&self) -> &'static str {
        "Corpus statistics of the catalog (and of the filtered catalog).

         Reads `artifacts/registry-import/catalog.json` and, when present,
         `artifacts/filter/catalog.json`. Writes `artifacts/stats/catalog.json`,
         `catalog.md` (tables) and `servers_per_category.svg`. Skipped when up to date."
    }

    fn enabled(&self, settings: &Settings) -> bool {
        crate::registry::in_pipeline(settings)
    }

    fn check(&self, settings: &Settings, problems: &mut Vec<crate::error::Problem>) {
        crate::settings::check_positive(
            problems,
            "stats.chart_categories",
            settings.section::<StatsSettings>().chart_categories,
        );
    }

    fn plan(&self, settings: &Settings) -> Result<Plan> {
        Ok(Plan { inputs: vec![], config_hash: section_hash(&settings.section::<StatsSettings>())? })
    }

    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let imported = compute(&inputs.json(&crate::registry::CATALOG)?);
        let filtered = match inputs.has(&crate::filter::CATALOG) {
            true => Some(compute(&inputs.json(&crate::filter::CATALOG)?)),
            false => None,
        };
        out.json("catalog.json", &serde_json::json!({ "imported": imported, "filtered": filtered }))?;
        out.file("catalog.md", markdown(&imported, filtered.as_ref()).into_bytes());
        out.file(
            "servers_per_category.svg",
            chart_svg(&imported, ctx.settings.section::<StatsSettings>().chart_categories)?.into_bytes(),
        );
        out.count("servers", imported.servers);
        out.count("tools", imported.tools);
        out.count("categories", imported.categories);
        out.notes.push(format!(
            "imported catalog: {} servers, {} tools, {} categories",
            imported.servers, imported.tools, imported.categories
        ));
        if let Some(f) = &filtered {
            out.notes.push(format!(
                "filtered catalog: {} servers, {} tools, {} categories",
                f.servers, f.tools, f.categories
            ));
        }
        out.notes
            .push("tables in artifacts/stats/catalog.md, chart in artifacts/stats/servers_per_category.svg".into());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distribution_median_and_histogram() {
        let d = Distribution::of(&[1, 8, 8, 3]);
        assert_eq!((d.min, d.max, d.median, d.mean), (1, 8, 5.5, 5.0));
        assert_eq!(d.histogram, BTreeMap::from([(1, 1), (3, 1), (8, 2)]));
        assert_eq!(Distribution::of(&[]).max, 0);
    }
}
