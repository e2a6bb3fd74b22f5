//! `benchgen release verify DIR`: a published release checked as its users will use it.
//!
//! Every file parses in its format (and the tables have the documented schemas); oracle
//! predictions built from each part score 100 % with `benchgen score` in the corrected mode
//! and, for the ETOM and FinMCP files, in the matching compat mode; every tool a sample
//! names is in `tools.parquet`; every dependency points at an earlier call; every sample
//! has its lineage; `SHA256SUMS` and `croissant.json` match the files; `servers.json`
//! parses. Reads only DIR (needs no pipeline config). With `--servers` it also starts the
//! servers `servers.json` pins and reports every tool changed since ([`super::servers`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde_json::{Value, json};

use super::tables;
pub use super::verified::Verified;
use crate::formats::{etom, finmcp};
use crate::model::{Kind, Sample};
use crate::score::{self, BenchFormat, Mode};

/// At most this many failures are listed.
const SHOWN: usize = 20;

/// Temporary prediction files, removed on drop.
struct Scratch(PathBuf);
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn verify(dir: &Path) -> Result<Verified> {
    let mut v = Verified { dir: dir.display().to_string(), ..Default::default() };
    if !dir.is_dir() {
        v.fail(format!("`{}` is not a folder", dir.display()));
        return Ok(v);
    }
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let scratch = Scratch(std::env::temp_dir().join(format!("benchgen-verify-{}-{nanos}", std::process::id())));
    std::fs::create_dir_all(&scratch.0)?;

    checksums(dir, &mut v)?;
    check_croissant(dir, &mut v)?;

    // samples.jsonl: the unified samples, their tools and dependencies.
    let mut referenced: Vec<(String, String)> = Vec::new();
    let unified = check_samples(dir, &mut v, &mut referenced)?;
    // Tables.
    let (tools, sample_rows, tool_rows) = check_tables(dir, &mut v, &unified.ids);
    // Lineage.
    let lineage = check_lineage(dir, &mut v, &unified)?;
    super::cassettes::verify(dir, &unified.ids, &mut v.checks, &mut v.failures);
    super::servers::verify(dir, &mut v);
    super::inspect::verify(dir, &tool_rows, &mut v.checks, &mut v.warnings, &mut v.failures);
    // Published formats.
    let mut parts = check_formats(dir, &mut v, &mut referenced);
    // Every record of every format file and table against `samples.jsonl`.
    let rel = super::content::Released { samples: &unified.samples, lineage: &lineage };
    super::content::check_levels(dir, &mut v, &rel, &tool_rows);
    super::content::check_finmcp(dir, &mut v, &rel);
    if let Some(rows) = &sample_rows {
        super::content::check_samples_table(&mut v, &rel, rows);
    }
    if !tool_rows.is_empty() || sample_rows.is_some() {
        super::content::check_tools_table(&mut v, &rel, &tool_rows);
    }
    check_card(dir, &mut v);
    // Tools.
    check_tools(&mut v, &referenced, &tools);

    // Oracle scores.
    if dir.join("samples.jsonl").exists() && !unified.ids.is_empty() {
        parts.insert(0, ("samples.jsonl".into(), BenchFormat::Unified, None, unified.oracle));
    }
    for (i, (name, format, level, preds)) in parts.iter().enumerate() {
        let pred_path = scratch.0.join(format!("pred_{i}.jsonl"));
        let mut f = std::io::BufWriter::new(std::fs::File::create(&pred_path)?);
        for p in preds {
            serde_json::to_writer(&mut f, p)?;
            f.write_all(b"\n")?;
        }
        f.flush()?;
        drop(f);
        let mut modes = vec![Mode::Corrected];
        match format {
            BenchFormat::Etom => modes.push(Mode::CompatEtom),
            BenchFormat::Finmcp => modes.push(Mode::CompatFinmcp),
            BenchFormat::Unified => {}
        }
        for mode in modes {
            let opts = score::Options {
                benches: vec![dir.join(name)],
                pred: pred_path.clone(),
                bench_format: Some(*format),
                pred_format: None,
                etom_level: *level,
                mode,
            };
            match score::run(&opts) {
                Err(e) => v.fail(format!("{name}: `benchgen score` cannot read it ({mode:?}): {e:#}")),
                Ok(rep) => check_oracle_report(&mut v, name, mode, &rep),
            }
        }
    }
    Ok(v)
}

/// One published part with the oracle predictions built from it: file name, format, ETOM
/// level, predictions.
type Part = (String, BenchFormat, Option<u8>, Vec<Value>);

/// What `samples.jsonl` holds, for the checks after it.
struct Unified {
    ids: Vec<String>,
    samples: Vec<Sample>,
    hashes: HashMap<String, String>,
    oracle: Vec<Value>,
}

/// `samples.jsonl` parses and its dependencies point back; collects the tools it names.
fn check_samples(dir: &Path, v: &mut Verified, referenced: &mut Vec<(String, String)>) -> Result<Unified> {
    let mut ids: Vec<String> = Vec::new();
    let mut hashes: HashMap<String, String> = HashMap::new();
    let mut oracle: Vec<Value> = Vec::new();
    let mut samples: Vec<Sample> = Vec::new();
    match std::fs::File::open(dir.join("samples.jsonl")) {
        Err(e) => v.fail(format!("samples.jsonl: cannot open: {e}")),
        Ok(f) => {
            for (i, l) in BufReader::new(f).lines().enumerate() {
                let l = l?;
                if l.trim().is_empty() {
                    continue;
                }
                let s: Sample = match serde_json::from_str(&l) {
                    Ok(s) => s,
                    Err(e) => {
                        v.fail(format!("samples.jsonl line {}: not a unified sample: {e}", i + 1));
                        continue;
                    }
                };
                for (t, turn) in s.turns.iter().enumerate() {
                    for (c, call) in turn.reference_plan.iter().enumerate() {
                        if let Some(d) = call.depends_on.iter().find(|d| **d >= c) {
                            v.fail(format!(
                                "samples.jsonl line {} ({}): turn {t} call {c} depends on call {d}, which is not earlier (forward dependency)",
                                i + 1,
                                s.id
                            ));
                        }
                        for a in &call.alternatives {
                            referenced.push((a.clone(), format!("samples.jsonl ({})", s.id)));
                        }
                    }
                }
                oracle.push(unified_oracle(&s));
                hashes.insert(s.id.clone(), s.content_hash());
                ids.push(s.id.clone());
                samples.push(s);
            }
            v.samples = ids.len();
            if ids.is_empty() {
                v.warnings.push("samples.jsonl: empty part (0 samples): nothing to score".into());
            } else {
                v.checks.push(format!("samples.jsonl: {} samples parse", ids.len()));
            }
        }
    }
    Ok(Unified { ids, samples, hashes, oracle })
}

/// Rows of a release table, as JSON.
type Rows = Vec<serde_json::Map<String, Value>>;

/// The two tables have their documented schemas and `samples.parquet` the ids of
/// `samples.jsonl`; returns the tool ids of `tools.parquet` and the rows of both tables
/// (`samples.parquet`'s when its ids are right).
fn check_tables(dir: &Path, v: &mut Verified, ids: &[String]) -> (HashSet<String>, Option<Rows>, Rows) {
    let mut tool_rows = Vec::new();
    let tools: HashSet<String> = match tables::read_checked(&dir.join("tools.parquet"), tables::TOOLS_SCHEMA) {
        Ok(df) => {
            let t = tables::strings(&df, "tool_id").unwrap_or_default();
            v.checks.push(format!("tools.parquet: {} tools, documented schema", t.len()));
            tool_rows = tables::rows(&df);
            t.into_iter().collect()
        }
        Err(e) => {
            v.fail(format!("tools.parquet: {e}"));
            HashSet::new()
        }
    };
    let mut sample_rows = None;
    match tables::read_checked(&dir.join("samples.parquet"), tables::SAMPLES_SCHEMA) {
        Ok(df) => {
            let rows = tables::strings(&df, "id").unwrap_or_default();
            if rows != ids {
                v.fail(format!(
                    "samples.parquet: its {} ids are not the {} ids of samples.jsonl in order",
                    rows.len(),
                    ids.len()
                ));
            } else {
                v.checks.push(format!("samples.parquet: {} rows, documented schema", rows.len()));
                sample_rows = Some(tables::rows(&df));
            }
        }
        Err(e) => v.fail(format!("samples.parquet: {e}")),
    }
    (tools, sample_rows, tool_rows)
}

/// Every sample has its lineage, for the same content, naming events or a source; returns
/// the lineage lines by sample id.
fn check_lineage(dir: &Path, v: &mut Verified, unified: &Unified) -> Result<HashMap<String, Value>> {
    let Unified { ids, hashes, .. } = unified;
    let mut lineage: HashMap<String, Value> = HashMap::new();
    match std::fs::File::open(dir.join("lineage.jsonl")) {
        Err(e) => v.fail(format!("lineage.jsonl: cannot open: {e}")),
        Ok(f) => {
            for (i, l) in BufReader::new(f).lines().enumerate() {
                let l = l?;
                if l.trim().is_empty() {
                    continue;
                }
                match serde_json::from_str::<Value>(&l) {
                    Ok(x) if x["id"].is_string() => {
                        lineage.insert(x["id"].as_str().unwrap_or("").to_string(), x);
                    }
                    Ok(_) => v.fail(format!("lineage.jsonl line {}: no `id`", i + 1)),
                    Err(e) => v.fail(format!("lineage.jsonl line {}: not JSON: {e}", i + 1)),
                }
            }
            let mut missing = 0;
            let mut incomplete = 0;
            let mut unchecked = 0;
            let by_id: HashMap<&str, &Sample> = unified.samples.iter().map(|s| (s.id.as_str(), s)).collect();
            for id in ids {
                match lineage.get(id) {
                    None => {
                        missing += 1;
                        v.fail(format!("sample `{id}` has no lineage in lineage.jsonl"));
                    }
                    Some(x) => {
                        if x["content_hash"].as_str() != hashes.get(id).map(String::as_str) {
                            v.fail(format!("lineage of `{id}` is for other content (content_hash differs)"));
                        }
                        if let Some(s) = by_id.get(id.as_str()) {
                            incomplete += usize::from(!lineage_complete(v, s, x, incomplete < SHOWN));
                            unchecked += usize::from(!plan_checked(v, s, x, unchecked < SHOWN));
                        }
                        let has_events = x["events"].as_array().is_some_and(|a| !a.is_empty());
                        let has_source = x["source"]["stage"].is_string() && x["source"]["file"].is_string();
                        if !has_events && !has_source {
                            v.fail(format!("lineage of `{id}` names neither ledger events nor a source artifact"));
                        }
                    }
                }
            }
            let levels = unified.samples.iter().filter(|s| super::lineage::origin(s) == "level").count();
            if unchecked == 0 && levels > 0 {
                v.checks.push(format!(
                    "lineage.jsonl: each of {levels} level samples gives a `kept` decision of its plan check on every step"
                ));
            } else if unchecked > SHOWN {
                v.fail(format!("lineage.jsonl: … {} more level samples miss a step decision", unchecked - SHOWN));
            }
            if missing == 0 && incomplete == 0 {
                v.checks.push(format!(
                    "lineage.jsonl: every one of {} samples has its lineage, reaching every required stage",
                    ids.len()
                ));
            } else if incomplete > SHOWN {
                v.fail(format!("lineage.jsonl: … {} more samples miss a required stage", incomplete - SHOWN));
            }
        }
    }
    Ok(lineage)
}

/// A level sample's lineage line gives its plan check (issue 38): a `kept` decision on each
/// step of the released plan, by a tool of that step — the kept steps in their order are
/// the released plan's calls in theirs (the check prunes, it does not reorder), and the
/// decisions on pruned steps and on dependencies may be there too; a gap is a failure
/// (listed when `show`).
fn plan_checked(v: &mut Verified, s: &Sample, line: &Value, show: bool) -> bool {
    if super::lineage::origin(s) != "level" {
        return true;
    }
    let Some(decisions) = line["plan_check"].as_array() else {
        if show {
            v.fail(format!("lineage of `{}` gives no plan check (`plan_check`)", s.id));
        }
        return false;
    };
    let mut kept: Vec<(u64, &str)> = decisions
        .iter()
        .filter(|d| d.get("dependency").is_none() && d["decision"] == "kept")
        .map(|d| (d["step"].as_u64().unwrap_or(0), d["tool"].as_str().unwrap_or("")))
        .collect();
    kept.sort_unstable();
    let calls: Vec<&crate::model::PlanCall> = s.turns.iter().flat_map(|t| &t.reference_plan).collect();
    // In order: each call takes the next kept decision by one of its tools; kept decisions
    // passed over, or left at the end, are in no released call.
    let mut gaps = Vec::new();
    let mut extra: Vec<&str> = Vec::new();
    let mut at = 0;
    for (i, c) in calls.iter().enumerate() {
        match kept[at..].iter().position(|(_, t)| c.alternatives.iter().any(|a| a == t)) {
            Some(p) => {
                extra.extend(kept[at..at + p].iter().map(|(_, t)| *t));
                at += p + 1;
            }
            None => gaps.push(format!("step {} ({})", i + 1, c.alternatives.join(" | "))),
        }
    }
    extra.extend(kept[at..].iter().map(|(_, t)| *t));
    if !extra.is_empty() {
        gaps.push(format!("kept step(s) not in the released plan: {}", extra.join(", ")));
    }
    if !gaps.is_empty() && show {
        v.fail(format!("lineage of `{}`: the plan check has no `kept` decision on {}", s.id, gaps.join("; ")));
    }
    gaps.is_empty()
}

/// A sample's lineage line reaches every stage [`super::lineage::required_stages`] names;
/// a gap is a failure (listed when `show`).
fn lineage_complete(v: &mut Verified, s: &Sample, line: &Value, show: bool) -> bool {
    let have: HashSet<&str> =
        line["events"].as_array().into_iter().flatten().filter_map(|e| e["stage"].as_str()).collect();
    let reviewed = line["review"].is_object();
    let missing: Vec<String> = super::lineage::required_stages(s, reviewed)
        .into_iter()
        .filter(|st| !have.contains(st.as_str()))
        .map(|st| format!("`{st}`"))
        .collect();
    if !missing.is_empty() && show {
        v.fail(format!(
            "lineage of `{}` ({} {}) misses the required stage(s) {}",
            s.id,
            super::lineage::origin(s),
            s.kind.as_str(),
            missing.join(", ")
        ));
    }
    missing.is_empty()
}

/// The ETOM levels, FinMCP files and EFS sets that exist parse, with their oracle
/// predictions; collects the tools the levels name.
fn check_formats(dir: &Path, v: &mut Verified, referenced: &mut Vec<(String, String)>) -> Vec<Part> {
    let mut parts: Vec<Part> = Vec::new();
    for level in 1..=5u8 {
        let name = format!("level_{level}.json");
        let path = dir.join(&name);
        if !path.exists() {
            continue;
        }
        let queries: Vec<etom::LevelQuery> = match read_json(&path) {
            Ok(q) => q,
            Err(e) => {
                v.fail(format!("{name}: not an ETOM level file: {e}"));
                continue;
            }
        };
        let mut preds = Vec::new();
        for q in &queries {
            for (e, entry) in q.ground_truth_tools.iter().enumerate() {
                for t in entry.tools() {
                    let id = crate::model::tool_id(&t.server_name, &t.tool_name);
                    referenced.push((id, format!("{name} query {}", q.query_id)));
                    if let Some(d) = t.dependencies.iter().flatten().find(|d| **d >= e) {
                        v.fail(format!(
                            "{name} query {}: entry {e} depends on entry {d}, which is not earlier (forward dependency)",
                            q.query_id
                        ));
                    }
                }
            }
            preds.push(etom_oracle(level, q));
        }
        if queries.is_empty() {
            v.warnings.push(format!("{name}: empty part (0 queries): nothing to score"));
            continue;
        }
        v.checks.push(format!("{name}: {} queries parse", queries.len()));
        parts.push((name, BenchFormat::Etom, Some(level), preds));
    }
    for kind in [Kind::SingleTool, Kind::MultiTool, Kind::MultiTurn] {
        let name = format!("finmcp_{}.json", kind.as_str());
        let path = dir.join(&name);
        if !path.exists() {
            continue;
        }
        match read_json::<Vec<finmcp::Sample>>(&path) {
            Ok(samples) if samples.is_empty() => {
                v.warnings.push(format!("{name}: empty part (0 samples): nothing to score"));
            }
            Ok(samples) => {
                v.checks.push(format!("{name}: {} samples parse", samples.len()));
                let preds = samples.iter().map(|s| json!({"id": s.id, "messages_pred": s.messages})).collect();
                parts.push((name, BenchFormat::Finmcp, None, preds));
            }
            Err(e) => v.fail(format!("{name}: not a FinMCP sample file: {e}")),
        }
    }
    let efs = dir.join("tool_equivalence_sets.json");
    if efs.exists() {
        match read_json::<etom::EfsFile>(&efs) {
            Ok(sets) => v.checks.push(format!("tool_equivalence_sets.json: {} sets parse", sets.len())),
            Err(e) => v.fail(format!("tool_equivalence_sets.json: not an ETOM EFS file: {e}")),
        }
    }
    parts
}

/// `README.md` is a dataset card with a YAML header.
fn check_card(dir: &Path, v: &mut Verified) {
    match std::fs::read_to_string(dir.join("README.md")) {
        Ok(card) if card.starts_with("---\n") && card[4..].contains("\n---\n") => {
            v.checks.push("README.md: dataset card with a YAML header".into())
        }
        Ok(_) => v.fail("README.md: no YAML header (`---` … `---`)"),
        Err(e) => v.fail(format!("README.md: cannot read: {e}")),
    }
}

/// Every tool a sample or level names is in `tools.parquet` (the first [`SHOWN`] misses
/// listed).
fn check_tools(v: &mut Verified, referenced: &[(String, String)], tools: &HashSet<String>) {
    let mut unknown = 0;
    for (tool, wher) in referenced {
        if !tools.contains(tool) {
            unknown += 1;
            if unknown <= SHOWN {
                v.fail(format!("{wher}: tool `{tool}` is not in tools.parquet"));
            }
        }
    }
    if unknown == 0 {
        v.checks.push(format!("tools: all {} references are in tools.parquet", referenced.len()));
    }
}

/// The oracle of one part scores 100 % in one mode: no diagnostics, no data defects, every
/// sample an exact match and a perfect F1.
fn check_oracle_report(v: &mut Verified, name: &str, mode: Mode, rep: &score::Report) {
    let label = match mode {
        Mode::Corrected => "corrected",
        Mode::CompatEtom => "--compat etom",
        Mode::CompatFinmcp => "--compat finmcp",
    };
    let mut ok = true;
    for d in rep.diagnostics.iter().take(3) {
        ok = false;
        v.fail(format!("{name} ({label}): {} {}: {}", d.location, d.id.as_deref().unwrap_or(""), d.message));
    }
    for d in rep.data_defects.iter().take(3) {
        ok = false;
        v.fail(format!("{name} ({label}): sample `{}`: {}", d.id, d.message));
    }
    for r in rep.results.iter().filter(|r| !r.em).take(3) {
        ok = false;
        v.fail(format!("{name} ({label}): the oracle misses sample `{}`: {}", r.id, r.reasons.join("; ")));
    }
    // Corrected: pooled F1; compat: the published per-sample average (their
    // pooled counts are zero for L5, where nothing is expected).
    let perfect = |t: Option<crate::score::report::Triple>| t.is_none_or(|t| (t.f1 - 1.0).abs() < 1e-9);
    let f1_ok = rep.sections.iter().flat_map(|s| &s.rows).all(|r| match mode {
        Mode::Corrected => perfect(r.calls_micro) && perfect(r.set_micro),
        _ => perfect(r.calls_macro),
    });
    if !f1_ok && ok {
        ok = false;
        v.fail(format!("{name} ({label}): the oracle's F1 is below 100 %"));
    }
    if ok {
        v.checks.push(format!("{name}: oracle scores 100 % ({label}, {} samples)", rep.samples));
    }
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let f = std::fs::File::open(path)?;
    Ok(serde_json::from_reader(BufReader::with_capacity(1 << 20, f))?)
}

fn checksums(dir: &Path, v: &mut Verified) -> Result<()> {
    let text = match std::fs::read_to_string(dir.join("SHA256SUMS")) {
        Ok(t) => t,
        Err(e) => {
            v.fail(format!("SHA256SUMS: cannot read: {e}"));
            return Ok(());
        }
    };
    let mut listed: BTreeMap<String, String> = BTreeMap::new();
    for (i, l) in text.lines().enumerate() {
        match l.split_once("  ") {
            Some((h, f)) if h.len() == 64 => {
                listed.insert(f.to_string(), h.to_string());
            }
            _ => v.fail(format!("SHA256SUMS line {}: not `<sha256>  <file>`", i + 1)),
        }
    }
    let before = v.failures.len();
    for (f, h) in &listed {
        match super::sha256_file(&dir.join(f)) {
            Ok(got) if &got == h => {}
            Ok(_) => v.fail(format!("SHA256SUMS: `{f}` does not match its checksum")),
            Err(_) => v.fail(format!("SHA256SUMS: `{f}` is listed but missing")),
        }
    }
    for f in super::list_files(dir)? {
        if f != "SHA256SUMS" && !listed.contains_key(&f) {
            v.fail(format!("SHA256SUMS: `{f}` is not listed"));
        }
    }
    if v.failures.len() == before {
        v.checks.push(format!("SHA256SUMS: {} files match", listed.len()));
    }
    Ok(())
}

/// `croissant.json` parses as Croissant 1.1 and its distribution lists every file but the
/// ones written after it, each with the sha256 the file has.
fn check_croissant(dir: &Path, v: &mut Verified) -> Result<()> {
    use super::croissant::{CONFORMS_TO, FILE, UNLISTED};
    // A release made before benchgen wrote Croissant metadata lists no `croissant.json` in
    // its checksums: worth saying, not a failure.
    let sums = std::fs::read_to_string(dir.join("SHA256SUMS")).unwrap_or_default();
    if !dir.join(FILE).exists() && !sums.lines().any(|l| l.ends_with(&format!(" {FILE}"))) {
        v.warnings.push(format!("{FILE}: none (a release made before benchgen wrote Croissant metadata)"));
        return Ok(());
    }
    let doc: Value = match std::fs::read(dir.join(FILE)).map(|b| serde_json::from_slice::<Value>(&b)) {
        Err(e) => {
            v.fail(format!("{FILE}: cannot read: {e}"));
            return Ok(());
        }
        Ok(Err(e)) => {
            v.fail(format!("{FILE}: not JSON: {e}"));
            return Ok(());
        }
        Ok(Ok(doc)) => doc,
    };
    let before = v.failures.len();
    if doc["conformsTo"] != CONFORMS_TO {
        v.fail(format!("{FILE}: `conformsTo` is {}, not \"{CONFORMS_TO}\"", doc["conformsTo"]));
    }
    let mut listed: BTreeMap<String, String> = BTreeMap::new();
    for (i, f) in doc["distribution"].as_array().into_iter().flatten().enumerate() {
        match (f["contentUrl"].as_str(), f["sha256"].as_str()) {
            (Some(url), Some(h)) => {
                listed.insert(url.to_string(), h.to_string());
            }
            _ => v.fail(format!("{FILE}: distribution[{i}] has no `contentUrl` or `sha256`")),
        }
    }
    for (f, h) in &listed {
        match super::sha256_file(&dir.join(f)) {
            Ok(got) if &got == h => {}
            Ok(_) => v.fail(format!("{FILE}: `{f}` does not match its sha256")),
            Err(_) => v.fail(format!("{FILE}: `{f}` is listed but missing")),
        }
    }
    for f in super::list_files(dir)? {
        if !UNLISTED.contains(&f.as_str()) && !listed.contains_key(&f) {
            v.fail(format!("{FILE}: `{f}` is not in its distribution"));
        }
    }
    if v.failures.len() == before {
        let sets = doc["recordSet"].as_array().map_or(0, Vec::len);
        v.checks.push(format!("{FILE}: Croissant 1.1, {} files match, {sets} record sets", listed.len()));
    }
    Ok(())
}

/// A correct prediction for a unified sample: the first alternative of every call.
fn unified_oracle(s: &Sample) -> Value {
    if s.kind == Kind::L5 || s.reference_calls() == 0 {
        return json!({"id": s.id, "refusal": true});
    }
    let turns: Vec<Value> = s
        .turns
        .iter()
        .map(|t| {
            let calls: Vec<Value> = t
                .reference_plan
                .iter()
                .map(|c| json!({"tool": c.alternatives.first().cloned().unwrap_or_default(), "group": c.group}))
                .collect();
            json!({"calls": calls})
        })
        .collect();
    json!({"id": s.id, "turns": turns})
}

/// A correct prediction for an ETOM query: one member of each entry, grouped by dependency depth.
fn etom_oracle(level: u8, q: &etom::LevelQuery) -> Value {
    let id = format!("L{level}-{}", q.query_id);
    if q.ground_truth_tools.is_empty() {
        return json!({"id": id, "refusal": true});
    }
    let first: Vec<&etom::GroundTruthTool> = q.ground_truth_tools.iter().filter_map(|e| e.tools().first()).collect();
    if level == 2 {
        let t = first[0];
        return json!({"id": id, "turns": [{"calls": [{"tool": crate::model::tool_id(&t.server_name, &t.tool_name), "group": 0}]}]});
    }
    let n = first.len();
    let mut depth = vec![0u32; n];
    for _ in 0..n {
        for i in 0..n {
            let d =
                first[i].dependencies.iter().flatten().filter(|&&j| j < n).map(|&j| depth[j] + 1).max().unwrap_or(0);
            depth[i] = d;
        }
    }
    let calls: Vec<Value> = first
        .iter()
        .zip(&depth)
        .map(|(t, d)| json!({"tool": crate::model::tool_id(&t.server_name, &t.tool_name), "group": d}))
        .collect();
    json!({"id": id, "turns": [{"calls": calls}]})
}

/// Text of a verification for the terminal.
pub fn render(v: &Verified) -> String {
    let mut out = String::new();
    for c in &v.checks {
        out.push_str(&format!("ok    {c}\n"));
    }
    for w in &v.warnings {
        out.push_str(&format!("warn  {w}\n"));
    }
    if v.failures.is_empty() {
        out.push_str(&format!("`{}`: release verified ({} samples)", v.dir, v.samples));
    }
    out
}

/// The `release verify` command: exit 1 with the first failures listed. With `live`
/// (`--servers`), the pinned servers are started and compared too, and with `--json` the
/// report (each server's changed tools) is printed even when verification fails.
pub fn command(dir: &Path, live: Option<&super::servers::Live>, printer: &crate::printer::Printer) -> Result<()> {
    let mut v = verify(dir)?;
    if let Some(live) = live {
        super::servers::check(dir, live, &mut v)?;
    }
    if v.failures.is_empty() {
        printer.summary(&render(&v), &v);
        return Ok(());
    }
    // Nothing verified for want of trust: the report's warnings hold the commands to read.
    let untrusted = v.failures.len() == 1 && v.failures[0].starts_with(super::servers::NOTHING_VERIFIED);
    if live.is_some() {
        let human = if untrusted { render(&v) } else { String::new() };
        printer.summary(&human, &v);
    }
    let mut msg = format!("`{}` failed verification ({} problem(s)):", dir.display(), v.failures.len());
    for f in v.failures.iter().take(SHOWN) {
        msg.push_str(&format!("\n  - {f}"));
    }
    if v.failures.len() > SHOWN {
        msg.push_str(&format!("\n  … and {} more", v.failures.len() - SHOWN));
    }
    // Only live servers failed: the release is as it was built, the servers are not.
    let live_failed = v.servers.iter().any(|c| matches!(c.status, "changed" | "not started"));
    let hint = if untrusted {
        "the release is intact; to verify its servers, read the commands above and pass --trust-recorded-starts, or \
         --config naming servers of the same names"
    } else if live_failed && v.failures.iter().all(|f| f.starts_with(super::servers::FILE)) {
        "the release is intact, its servers are not as pinned: start the pinned versions (each server's `start` and \
         `package` in servers.json, or `--config` naming matching servers), or build a new release against them as they are"
    } else {
        "rebuild the release with `benchgen release` under a new `[release] version`"
    };
    Err(crate::error::hinted(msg, hint))
}
