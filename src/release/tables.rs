//! `samples.parquet` and `tools.parquet` (polars): one row per released sample and per
//! catalog tool the release uses. The schemas are listed here once ([`SAMPLES_SCHEMA`],
//! [`TOOLS_SCHEMA`]); `release verify` and the tests check files against them and
//! docs/release.md documents them.
//!
//! Rows are gathered as plain column vectors while the samples stream past (a few small
//! values per sample), then written in one pass, zstd-compressed.

use std::path::Path;

use anyhow::{Context, Result};
use polars_core::prelude::{AnyValue, Column, DataFrame, DataType, NamedFrom, PolarsResult, Series};
use polars_io::prelude::{ParquetCompression, ParquetReader, ParquetWriter, SerReader};

/// `(column, type)` of `samples.parquet`; `?` marks a nullable column.
pub const SAMPLES_SCHEMA: &[(&str, &str)] = &[
    ("id", "str"),
    ("family", "str"),
    ("kind", "str"),
    ("level", "u32?"),
    ("difficulty", "str"),
    ("category", "str"),
    ("scenario", "str"),
    ("turns", "u32"),
    ("calls", "u32"),
    ("steps", "u32"),
    ("distinct_tools", "u32"),
    ("out_of_scope", "bool"),
    ("source", "str"),
    ("author", "str?"),
    ("review_decision", "str?"),
    ("decided_by", "str?"),
    ("review_score_mean", "f64?"),
    ("review_details", "str?"),
    ("content_hash", "str"),
    ("released_as", "str"),
];

/// `(column, type)` of `tools.parquet`.
pub const TOOLS_SCHEMA: &[(&str, &str)] = &[
    ("tool_id", "str"),
    ("server", "str"),
    ("tool", "str"),
    ("description", "str"),
    ("categories", "str"),
    ("input_schema", "str"),
    ("catalog", "str"),
    ("samples", "u32"),
];

/// One row of `samples.parquet`.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SampleRow {
    pub id: String,
    pub family: String,
    pub kind: String,
    pub level: Option<u32>,
    pub difficulty: String,
    pub category: String,
    pub scenario: String,
    pub turns: u32,
    pub calls: u32,
    pub steps: u32,
    pub distinct_tools: u32,
    pub out_of_scope: bool,
    pub source: String,
    pub author: Option<String>,
    pub review_decision: Option<String>,
    pub decided_by: Option<String>,
    pub review_score_mean: Option<f64>,
    pub review_details: Option<String>,
    pub content_hash: String,
    pub released_as: String,
}

/// One row of `tools.parquet`.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ToolRow {
    pub tool_id: String,
    pub server: String,
    pub tool: String,
    pub description: String,
    pub categories: String,
    pub input_schema: String,
    pub catalog: String,
    pub samples: u32,
}

/// Column vectors of `samples.parquet`, filled as samples stream past.
#[derive(Default)]
pub struct SampleColumns {
    id: Vec<String>,
    family: Vec<String>,
    kind: Vec<String>,
    level: Vec<Option<u32>>,
    difficulty: Vec<String>,
    category: Vec<String>,
    scenario: Vec<String>,
    turns: Vec<u32>,
    calls: Vec<u32>,
    steps: Vec<u32>,
    distinct_tools: Vec<u32>,
    out_of_scope: Vec<bool>,
    source: Vec<String>,
    author: Vec<Option<String>>,
    review_decision: Vec<Option<String>>,
    decided_by: Vec<Option<String>>,
    review_score_mean: Vec<Option<f64>>,
    review_details: Vec<Option<String>>,
    content_hash: Vec<String>,
    released_as: Vec<String>,
}

impl SampleColumns {
    pub fn push(&mut self, r: SampleRow) {
        self.id.push(r.id);
        self.family.push(r.family);
        self.kind.push(r.kind);
        self.level.push(r.level);
        self.difficulty.push(r.difficulty);
        self.category.push(r.category);
        self.scenario.push(r.scenario);
        self.turns.push(r.turns);
        self.calls.push(r.calls);
        self.steps.push(r.steps);
        self.distinct_tools.push(r.distinct_tools);
        self.out_of_scope.push(r.out_of_scope);
        self.source.push(r.source);
        self.author.push(r.author);
        self.review_decision.push(r.review_decision);
        self.decided_by.push(r.decided_by);
        self.review_score_mean.push(r.review_score_mean);
        self.review_details.push(r.review_details);
        self.content_hash.push(r.content_hash);
        self.released_as.push(r.released_as);
    }

    fn frame(self) -> PolarsResult<DataFrame> {
        let c = |s: Series| Column::from(s);
        DataFrame::new_infer_height(vec![
            c(Series::new("id".into(), self.id)),
            c(Series::new("family".into(), self.family)),
            c(Series::new("kind".into(), self.kind)),
            c(Series::new("level".into(), self.level)),
            c(Series::new("difficulty".into(), self.difficulty)),
            c(Series::new("category".into(), self.category)),
            c(Series::new("scenario".into(), self.scenario)),
            c(Series::new("turns".into(), self.turns)),
            c(Series::new("calls".into(), self.calls)),
            c(Series::new("steps".into(), self.steps)),
            c(Series::new("distinct_tools".into(), self.distinct_tools)),
            c(Series::new("out_of_scope".into(), self.out_of_scope)),
            c(Series::new("source".into(), self.source)),
            c(Series::new("author".into(), self.author)),
            c(Series::new("review_decision".into(), self.review_decision)),
            c(Series::new("decided_by".into(), self.decided_by)),
            c(Series::new("review_score_mean".into(), self.review_score_mean)),
            c(Series::new("review_details".into(), self.review_details)),
            c(Series::new("content_hash".into(), self.content_hash)),
            c(Series::new("released_as".into(), self.released_as)),
        ])
    }
}

fn tools_frame(rows: Vec<ToolRow>) -> PolarsResult<DataFrame> {
    let col = |name: &str, v: Vec<String>| Column::from(Series::new(name.into(), v));
    let mut cols: [Vec<String>; 7] = Default::default();
    let mut samples = Vec::with_capacity(rows.len());
    for r in rows {
        for (i, v) in [r.tool_id, r.server, r.tool, r.description, r.categories, r.input_schema, r.catalog]
            .into_iter()
            .enumerate()
        {
            cols[i].push(v);
        }
        samples.push(r.samples);
    }
    let [a, b, c, d, e, f, g] = cols;
    DataFrame::new_infer_height(vec![
        col("tool_id", a),
        col("server", b),
        col("tool", c),
        col("description", d),
        col("categories", e),
        col("input_schema", f),
        col("catalog", g),
        Column::from(Series::new("samples".into(), samples)),
    ])
}

fn write(path: &Path, mut df: DataFrame) -> Result<()> {
    let f = std::fs::File::create(path).with_context(|| format!("cannot create `{}`", path.display()))?;
    ParquetWriter::new(std::io::BufWriter::new(f))
        .with_compression(ParquetCompression::Zstd(None))
        .finish(&mut df)
        .with_context(|| format!("cannot write `{}`", path.display()))?;
    Ok(())
}

pub fn write_samples(path: &Path, cols: SampleColumns) -> Result<()> {
    write(path, cols.frame().context("cannot build the samples table")?)
}

pub fn write_tools(path: &Path, rows: Vec<ToolRow>) -> Result<()> {
    write(path, tools_frame(rows).context("cannot build the tools table")?)
}

/// The type name [`SAMPLES_SCHEMA`] uses for a polars type.
fn type_name(d: &DataType) -> &'static str {
    match d {
        DataType::String => "str",
        DataType::UInt32 => "u32",
        DataType::Float64 => "f64",
        DataType::Boolean => "bool",
        _ => "other",
    }
}

/// Read a release table and check its columns against the documented schema.
pub fn read_checked(path: &Path, schema: &[(&str, &str)]) -> Result<DataFrame, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("cannot open: {e}"))?;
    let df = ParquetReader::new(f).finish().map_err(|e| format!("not readable as Parquet: {e}"))?;
    let got: Vec<(String, &str)> = df.schema().iter().map(|(n, d)| (n.to_string(), type_name(d))).collect::<Vec<_>>();
    let want: Vec<(String, &str)> = schema.iter().map(|(n, t)| (n.to_string(), t.trim_end_matches('?'))).collect();
    if got != want {
        return Err(format!("columns {got:?} differ from the documented schema {want:?}"));
    }
    Ok(df)
}

/// The values of a string column (nulls as empty).
pub fn strings(df: &DataFrame, name: &str) -> Result<Vec<String>, String> {
    let c = df.column(name).map_err(|e| e.to_string())?;
    let s = c.str().map_err(|e| e.to_string())?;
    Ok((0..s.len()).map(|i| s.get(i).unwrap_or("").to_string()).collect())
}

/// Every row of a release table as JSON (`str`, `u32`, `f64`, `bool` and nulls; column
/// order kept), for `release verify` to compare with the rows it rebuilds.
pub fn rows(df: &DataFrame) -> Vec<serde_json::Map<String, serde_json::Value>> {
    use serde_json::Value;
    let mut out = vec![serde_json::Map::new(); df.height()];
    for c in df.columns() {
        for (i, row) in out.iter_mut().enumerate() {
            let v = match c.get(i) {
                Ok(AnyValue::String(s)) => Value::String(s.to_string()),
                Ok(AnyValue::StringOwned(s)) => Value::String(s.to_string()),
                Ok(AnyValue::UInt32(n)) => Value::from(n),
                Ok(AnyValue::Float64(f)) => Value::from(f),
                Ok(AnyValue::Boolean(b)) => Value::Bool(b),
                Ok(other) if other.is_null() => Value::Null,
                Ok(other) => Value::String(format!("{other}")),
                Err(_) => Value::Null,
            };
            row.insert(c.name().to_string(), v);
        }
    }
    out
}
