//! `croissant.json`: the release described in MLCommons Croissant 1.1 (JSON-LD) with its
//! Responsible-AI fields, so dataset search engines and `mlcroissant` can find, check and
//! load it without reading the card.
//!
//! What is in it: the dataset's name, description, license, version and a BibTeX citation;
//! one `cr:FileObject` per release file with its relative `contentUrl`, `encodingFormat`
//! and `sha256`; one `cr:RecordSet` per loadable part (`samples.jsonl`, each level and
//! FinMCP file holding a record, as the card gives configs) plus `lineage.jsonl`, whose
//! records are each sample's provenance; and the `rai:` fields from what the release knows
//! (funnel, review, anonymisation, limitations).
//!
//! It is written after every data file and before the card and `SHA256SUMS`, so it can
//! list the data files' checksums and `SHA256SUMS` can list it; it leaves out itself and
//! the two files written after it ([`UNLISTED`]). Nothing comes from the clock (no
//! `datePublished`): a rebuild gives the same bytes. `url` is a placeholder until the
//! release is published somewhere (see docs/release.md).
//!
//! Fields are those `mlcroissant` 1.1.1 loads: scalars, and arrays of scalars taken out of
//! nested values with a `transform.jsonPath` (`isArray`). A nested object as `sc:Text`
//! fails to load there (it casts the object to bytes), so whole turns and messages stay in
//! the files themselves.

use std::path::Path;

use anyhow::{Context, Result};
use serde_json::{Map, Value, json};

use super::Summary;

/// The file's name in the release folder.
pub const FILE: &str = "croissant.json";
/// The Croissant version this file conforms to.
pub const CONFORMS_TO: &str = "http://mlcommons.org/croissant/1.1";
/// Files the distribution cannot list: itself, and the card and checksums written after
/// it from the files it lists.
pub const UNLISTED: [&str; 3] = [FILE, "README.md", "SHA256SUMS"];

/// The standard Croissant 1.1 `@context` (every key `mlcroissant` expects, so it does not
/// warn of a non-standard context).
fn context() -> Value {
    json!({
        "@language": "en",
        "@vocab": "https://schema.org/",
        "arrayShape": "cr:arrayShape",
        "citeAs": "cr:citeAs",
        "column": "cr:column",
        "conformsTo": "dct:conformsTo",
        "containedIn": "cr:containedIn",
        "cr": "http://mlcommons.org/croissant/",
        "rai": "http://mlcommons.org/croissant/RAI/",
        "data": {"@id": "cr:data", "@type": "@json"},
        "dataType": {"@id": "cr:dataType", "@type": "@vocab"},
        "dct": "http://purl.org/dc/terms/",
        "description": {"@container": "@language"},
        "equivalentProperty": "cr:equivalentProperty",
        "examples": {"@id": "cr:examples", "@type": "@json"},
        "extract": "cr:extract",
        "field": "cr:field",
        "fileProperty": "cr:fileProperty",
        "fileObject": "cr:fileObject",
        "fileSet": "cr:fileSet",
        "format": "cr:format",
        "includes": "cr:includes",
        "isArray": "cr:isArray",
        "isLiveDataset": "cr:isLiveDataset",
        "jsonPath": "cr:jsonPath",
        "key": "cr:key",
        "md5": "cr:md5",
        "name": {"@container": "@language"},
        "parentField": "cr:parentField",
        "path": "cr:path",
        "recordSet": "cr:recordSet",
        "references": "cr:references",
        "regex": "cr:regex",
        "repeated": "cr:repeated",
        "replace": "cr:replace",
        "samplingRate": "cr:samplingRate",
        "sc": "https://schema.org/",
        "separator": "cr:separator",
        "source": "cr:source",
        "subField": "cr:subField",
        "transform": "cr:transform"
    })
}

/// The metadata of a release: `files` are the release files it lists with their sha256
/// (relative paths, sorted; [`UNLISTED`] ones are skipped if given).
pub fn render(s: &Summary, files: &[(String, String)]) -> Value {
    let files: Vec<&(String, String)> = files.iter().filter(|(f, _)| !UNLISTED.contains(&f.as_str())).collect();
    let mut doc = json!({
        "@context": context(),
        "@type": "sc:Dataset",
        "conformsTo": CONFORMS_TO,
        "name": s.name,
        "description": description(s),
        "license": license_url(&s.license),
        // A placeholder: the release does not know where it will be published.
        "url": format!("https://example.org/benchgen/{}/{}", s.name, s.version),
        "version": s.version,
        "citeAs": cite_as(s),
        "inLanguage": "en",
        "keywords": ["tool-use", "function-calling", "mcp", "agents", "benchmark"],
        "isLiveDataset": false,
    });
    let map = doc.as_object_mut().expect("an object");
    rai(s, map);
    map.insert("distribution".into(), Value::Array(files.iter().map(|(f, h)| file_object(f, h)).collect()));
    let sets: Vec<Value> = files.iter().filter_map(|(f, _)| record_set(s, f)).collect();
    map.insert("recordSet".into(), Value::Array(sets));
    doc
}

/// `croissant.json` in `dir`, pretty-printed with a trailing newline.
pub fn write(dir: &Path, s: &Summary, files: &[(String, String)]) -> Result<()> {
    let text = serde_json::to_string_pretty(&render(s, files))? + "\n";
    std::fs::write(dir.join(FILE), text).with_context(|| format!("cannot write `{FILE}`"))
}

/// Rewrites the `sha256` of every file `croissant.json` in `dir` lists from the file as it
/// is now (after a deliberate edit, as `SHA256SUMS` is recomputed with [`super::checksums`]).
pub fn rehash(dir: &Path) -> Result<()> {
    let path = dir.join(FILE);
    let mut doc: Value = serde_json::from_slice(&std::fs::read(&path)?)?;
    for f in doc["distribution"].as_array_mut().into_iter().flatten() {
        if let Some(rel) = f["contentUrl"].as_str().map(str::to_string) {
            f["sha256"] = Value::String(super::sha256_file(&dir.join(rel))?);
        }
    }
    std::fs::write(&path, serde_json::to_string_pretty(&doc)? + "\n")?;
    Ok(())
}

fn description(s: &Summary) -> String {
    let kinds: Vec<String> = s.by_kind.iter().map(|(k, v)| format!("{} {k}", v.n)).collect();
    let head = format!(
        "A tool-use benchmark for LLM agents built by benchgen: {} samples ({}) over {} tools.",
        s.samples,
        kinds.join(", "),
        s.tools
    );
    match s.description.trim() {
        "" => head,
        d => format!("{d}\n\n{head}"),
    }
}

/// A Hugging Face license id as the license's URL where it is a common one; otherwise the
/// id itself (Croissant takes any text or URL).
fn license_url(id: &str) -> String {
    let url = match id.to_ascii_lowercase().as_str() {
        "cc-by-4.0" => "https://creativecommons.org/licenses/by/4.0/",
        "cc-by-sa-4.0" => "https://creativecommons.org/licenses/by-sa/4.0/",
        "cc-by-nc-4.0" => "https://creativecommons.org/licenses/by-nc/4.0/",
        "cc-by-nc-sa-4.0" => "https://creativecommons.org/licenses/by-nc-sa/4.0/",
        "cc0-1.0" => "https://creativecommons.org/publicdomain/zero/1.0/",
        "mit" => "https://spdx.org/licenses/MIT.html",
        "apache-2.0" => "https://spdx.org/licenses/Apache-2.0.html",
        _ => return id.to_string(),
    };
    url.to_string()
}

/// A BibTeX entry from the name and version (no year: it would come from the clock).
fn cite_as(s: &Summary) -> String {
    let key: String =
        format!("{}_{}", s.name, s.version).chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    format!(
        "@misc{{{key},\n  title = {{{{{}}}: a tool-use benchmark, version {}}},\n  note = {{Built with benchgen}}\n}}",
        s.name, s.version
    )
}

fn encoding_format(f: &str) -> &'static str {
    match f.rsplit('.').next().unwrap_or("") {
        "jsonl" => "application/jsonlines",
        "json" => "application/json",
        "parquet" => "application/x-parquet",
        "svg" => "image/svg+xml",
        "md" => "text/markdown",
        "py" => "text/x-python",
        _ => "application/octet-stream",
    }
}

fn file_object(f: &str, sha256: &str) -> Value {
    let mut o = json!({"@type": "cr:FileObject", "@id": f, "name": f});
    let what = super::card::describe_file(f);
    if !what.is_empty() {
        o["description"] = json!(what);
    }
    o["contentUrl"] = json!(f);
    o["encodingFormat"] = json!(encoding_format(f));
    o["sha256"] = json!(sha256);
    o
}

/// How a field takes its values: a JSONL column or a JSON path into a JSON array, then
/// an optional path into the value (into each element when the field is an array).
struct Src<'a> {
    column: Option<&'a str>,
    json_path: Option<&'a str>,
    transform: Option<&'a str>,
    array: bool,
}

const fn column(c: &str) -> Src<'_> {
    Src { column: Some(c), json_path: None, transform: None, array: false }
}
const fn path(p: &str) -> Src<'_> {
    Src { column: None, json_path: Some(p), transform: None, array: false }
}

impl<'a> Src<'a> {
    /// The value is an array of scalars.
    const fn array(self) -> Self {
        Src { array: true, ..self }
    }
    /// The value is an array of objects: `p` of each.
    const fn each(self, p: &'a str) -> Self {
        Src { transform: Some(p), array: true, ..self }
    }
    /// The value is an object: its `p`.
    const fn pick(self, p: &'a str) -> Self {
        Src { transform: Some(p), ..self }
    }
}

/// One `cr:Field` of record set `set` read from `file`.
fn field(set: &str, file: &str, (name, data_type, what): (&str, &str, &str), src: Src) -> Value {
    let mut extract = Map::new();
    if let Some(c) = src.column {
        extract.insert("column".into(), json!(c));
    }
    if let Some(p) = src.json_path {
        extract.insert("jsonPath".into(), json!(p));
    }
    let mut source = json!({"fileObject": {"@id": file}, "extract": extract});
    if let Some(t) = src.transform {
        source["transform"] = json!({"jsonPath": t});
    }
    let mut f = json!({"@type": "cr:Field", "@id": format!("{set}/{name}"), "name": name, "description": what,
                       "dataType": data_type});
    if src.array {
        f["isArray"] = json!(true);
    }
    f["source"] = source;
    f
}

/// The record set of a release file, if it is a loadable part holding records (as the
/// card's configs: `samples.jsonl` and the level and FinMCP files that are not empty), or
/// `lineage.jsonl`.
fn record_set(s: &Summary, file: &str) -> Option<Value> {
    let (set, what, fields) = match file {
        "samples.jsonl" => ("samples", "Every sample in benchgen's unified format.", samples_fields(file)),
        "lineage.jsonl" => (
            "lineage",
            "Per-sample provenance: where each sample came from and the ledger events behind it (full records in lineage.jsonl).",
            lineage_fields(file),
        ),
        f if s.empty_files.contains(f) => return None,
        f if f.starts_with("level_") && f.ends_with(".json") => {
            (f.trim_end_matches(".json"), "An ETOM level file, one record per query.", level_fields(f))
        }
        f if f.starts_with("finmcp_") && f.ends_with(".json") => {
            (f.trim_end_matches(".json"), "A FinMCP sample file, one record per sample.", finmcp_fields(f))
        }
        _ => return None,
    };
    let mut rs = json!({"@type": "cr:RecordSet", "@id": set, "name": set, "description": what});
    if matches!(set, "samples" | "lineage") {
        rs["key"] = json!({"@id": format!("{set}/id")});
    }
    rs["field"] = Value::Array(fields);
    Some(rs)
}

fn samples_fields(file: &str) -> Vec<Value> {
    let f = |spec, src| field("samples", file, spec, src);
    vec![
        f(("id", "sc:Text", "Unified sample id."), column("id")),
        f(("family", "sc:Text", "`etom` or `finmcp`."), column("family")),
        f(("kind", "sc:Text", "L1…L5, single_tool, multi_tool or multi_turn."), column("kind")),
        f(("difficulty", "sc:Text", "easy, medium or hard."), column("difficulty")),
        f(("out_of_scope", "sc:Boolean", "No tool can serve the request (L5)."), column("out_of_scope")),
        f(("provenance_id", "sc:Text", "The ledger subject the sample was made under."), column("provenance_id")),
        f(("scenario", "sc:Text", "The scenario path."), column("scenario").array()),
        f(("user", "sc:Text", "The user message of each turn."), column("turns").each("user")),
        f(
            ("gold_reply", "sc:Text", "The reference reply of each turn (null where there is none)."),
            column("turns").each("gold_reply"),
        ),
    ]
}

fn level_fields(file: &str) -> Vec<Value> {
    let set = file.trim_end_matches(".json");
    // L2 and L4 list one row of alternatives per call; the others one tool per call.
    let rows = matches!(set, "level_2" | "level_4");
    let (each, what) = if rows {
        ("[0].tool_id", "The first alternative of each ground-truth call.")
    } else {
        ("tool_id", "The tool of each ground-truth call.")
    };
    let f = |spec, src| field(set, file, spec, src);
    vec![
        f(("query_id", "sc:Integer", "The query number n of the unified id L<level>-<n>."), path("$[*].query_id")),
        f(("query", "sc:Text", "The user request."), path("$[*].query")),
        f(("ground_truth_tools_count", "sc:Integer", "Ground-truth calls."), path("$[*].ground_truth_tools_count")),
        f(("tool_ids", "sc:Text", what), path("$[*].ground_truth_tools").each(each)),
    ]
}

fn finmcp_fields(file: &str) -> Vec<Value> {
    let set = file.trim_end_matches(".json");
    let f = |spec, src| field(set, file, spec, src);
    vec![
        f(("id", "sc:Text", "Unified sample id."), path("$[*].id")),
        f(("task", "sc:Text", "single step, multi step or multi turn."), path("$[*].task")),
        f(("difficulty", "sc:Text", "easy, medium or hard."), path("$[*].diff_level.level")),
        f(("turns", "sc:Integer", "User turns."), path("$[*].diff_level.turns")),
        f(("calls", "sc:Integer", "Reference tool calls."), path("$[*].diff_level.tool_number")),
        f(("roles", "sc:Text", "The role of each message."), path("$[*].messages").each("role")),
        f(("contents", "sc:Text", "The content of each message."), path("$[*].messages").each("content")),
    ]
}

fn lineage_fields(file: &str) -> Vec<Value> {
    let f = |spec, src| field("lineage", file, spec, src);
    vec![
        f(("id", "sc:Text", "Unified sample id."), column("id")),
        f(("content_hash", "sc:Text", "The released sample's content hash."), column("content_hash")),
        f(("released_as", "sc:Text", "Where the sample is in the published formats."), column("released_as")),
        f(("source_stage", "sc:Text", "The stage whose artifact held the sample."), column("source").pick("stage")),
        f(("source_file", "sc:Text", "That artifact."), column("source").pick("file")),
        f(("source_line", "sc:Integer", "Its line."), column("source").pick("line")),
        f(
            ("event_stages", "sc:Text", "The stage of each ledger event in the sample's lineage, in pipeline order."),
            column("events").each("stage"),
        ),
    ]
}

/// The Responsible-AI fields (`rai:`), from what the release itself knows: the funnel,
/// the review, the log track's anonymisation and the card's limitations.
fn rai(s: &Summary, map: &mut Map<String, Value>) {
    map.insert("rai:dataCollection".into(), json!(collection(s)));
    let left: Vec<String> = s.left_out.iter().map(|(why, n)| format!("Left out {n} pool sample(s): {why}.")).collect();
    if !left.is_empty() {
        map.insert("rai:dataPreprocessingProtocol".into(), json!(left));
    }
    annotation(s, map);
    map.insert("rai:personalSensitiveInformation".into(), json!([personal(s)]));
    map.insert("rai:dataBiases".into(), json!(biases(s)));
    map.insert(
        "rai:dataUseCases".into(),
        json!(["Evaluating how LLM agents select and call tools (`benchgen score`, the ETOM and FinMCP evaluators)."]),
    );
    map.insert("rai:dataLimitations".into(), json!(s.limitations));
    map.insert(
        "rai:dataReleaseMaintenancePlan".into(),
        json!("A published version is never overwritten; changes come as a new version with CHANGELOG.md against the previous one."),
    );
}

/// Where the samples come from: each funnel stage's counts, the pool and the models.
fn collection(s: &Summary) -> String {
    let mut text = String::from(
        "Built by the benchgen pipeline from a tool registry snapshot (registry track: registry-import, filter, EFS, ETOM levels) and/or recorded tool-use logs (log track: logs-import, curation, split, synthesis, execution in a sandbox, validation).",
    );
    if !s.funnel.is_empty() {
        let stages: Vec<String> = s.funnel.iter().map(|(st, c)| format!("{st} ({c})")).collect();
        text.push_str(&format!(" Stage counts from each stage's manifest: {}.", stages.join("; ")));
    }
    text.push_str(&format!(" Sample pool: {} samples; released: {}.", s.pool, s.samples));
    if !s.llm.is_empty() {
        let models: Vec<String> = s
            .llm
            .iter()
            .map(|((p, m), u)| format!("{p}/{m} ({}; {} requests)", u.roles.join(", "), u.requests))
            .collect();
        text.push_str(&format!(" Models behind the released samples: {}.", models.join("; ")));
    }
    text.push_str(" Per-sample provenance: lineage.jsonl (the `lineage` record set).");
    text
}

/// Who decided each sample, and how well reviewers agreed.
fn annotation(s: &Summary, map: &mut Map<String, Value>) {
    let Some(r) = &s.review else {
        map.insert(
            "rai:dataAnnotationProtocol".into(),
            json!(["Not reviewed: samples passed automatic validation only (`[release] require_review = false`)."]),
        );
        map.insert("rai:annotationsPerItem".into(), json!("0"));
        return;
    };
    let counts = |m: &std::collections::BTreeMap<String, usize>| {
        m.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ")
    };
    let mut protocol = vec![
        format!(
            "{} pool samples reviewed; only samples accepted with their reviewed content hash are released.",
            r.reviewed
        ),
        format!("Decisions: {}.", counts(&r.decisions)),
        format!("Decided by: {}.", counts(&r.by)),
    ];
    if r.llm_stand_in {
        protocol
            .push("No released sample was decided by a person: an LLM pre-review stood in for human reviewers.".into());
        let reviewers: Vec<String> = s
            .llm
            .iter()
            .filter(|(_, u)| u.roles.iter().any(|role| role.contains("review")))
            .map(|((p, m), _)| format!("{p}/{m}"))
            .collect();
        if !reviewers.is_empty() {
            map.insert("rai:machineAnnotationTools".into(), json!(reviewers));
        }
    }
    map.insert("rai:dataAnnotationProtocol".into(), json!(protocol));
    map.insert(
        "rai:annotationsPerItem".into(),
        json!(format!("One merged review decision per sample (decided by: {}).", counts(&r.by))),
    );
    if let Some(a) = r.agreement.as_deref().map(str::trim).filter(|a| !a.is_empty()) {
        map.insert(
            "rai:dataAnnotationAnalysis".into(),
            json!([format!("Inter-reviewer agreement (review-merge report):\n{a}")]),
        );
    }
}

/// What the log track's anonymiser did, or that no log was imported.
fn personal(s: &Summary) -> String {
    match s.anonymised {
        Some(n) => format!(
            "Every text of the imported logs was anonymised before it reached the pipeline's artifacts: {n} value(s) (e-mail addresses, phone numbers, national ids, bank cards, IBANs, IP addresses and configured patterns, per `[logs.anonymise]`) were replaced by keyed pseudonyms `<KIND>_<10 hex>` (HMAC-SHA256), consistent across sessions. Free text the detectors do not recognise (names, addresses) is not replaced."
        ),
        None => "No logs were imported for this release (the log track did not run): its samples come from a tool registry snapshot and model-written requests, and no anonymisation ran.".into(),
    }
}

/// What is known to skew the samples: the scenario mix, the difficulty mix and the models
/// that wrote them.
fn biases(s: &Summary) -> Vec<String> {
    let mut out = Vec::new();
    let mut scen: Vec<(&String, &usize)> = s.scenarios.iter().collect();
    scen.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    if let Some(total) = (s.samples > 0).then_some(s.samples) {
        let top: Vec<String> = scen
            .iter()
            .take(3)
            .map(|(k, n)| format!("{} {}/{total}", if k.is_empty() { "(none)" } else { k.as_str() }, n))
            .collect();
        out.push(format!(
            "Scenarios follow the source registry and logs, not a designed distribution: {} scenario(s), the largest {}.",
            scen.len(),
            top.join(", ")
        ));
    }
    if !s.llm.is_empty() {
        out.push(format!(
            "Requests and replies were written or rewritten by {} LLM(s) and carry their phrasing.",
            s.llm.len()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::release::{KindStats, ReviewSummary};

    fn summary() -> Summary {
        let mut s = Summary {
            name: "it-bench".into(),
            version: "1.0.0".into(),
            license: "cc-by-4.0".into(),
            description: "Fixture.".into(),
            samples: 3,
            pool: 4,
            tools: 2,
            limitations: vec!["Made by hand.".into()],
            anonymised: Some(7),
            ..Default::default()
        };
        s.by_kind.insert("L2".into(), KindStats { n: 2, ..Default::default() });
        s.by_kind.insert("multi_tool".into(), KindStats { n: 1, ..Default::default() });
        s.scenarios.insert("dev".into(), 2);
        s.scenarios.insert("markets".into(), 1);
        s.empty_files.insert("level_5.json".into());
        s.left_out.insert("review: rejected".into(), 1);
        s.funnel.push(("logs-import".into(), "anonymised 7, sessions 3".into()));
        s.review = Some(ReviewSummary {
            reviewed: 4,
            decisions: [("accepted".to_string(), 3), ("rejected".to_string(), 1)].into(),
            by: [("llm".to_string(), 4)].into(),
            llm_stand_in: true,
            agreement: Some("| relevance | 0.81 |".into()),
        });
        s
    }

    fn files() -> Vec<(String, String)> {
        [
            "CHANGELOG.md",
            "README.md",
            "SHA256SUMS",
            "croissant.json",
            "finmcp_multi_tool.json",
            "level_2.json",
            "level_5.json",
            "lineage.jsonl",
            "plots/kinds.svg",
            "samples.jsonl",
            "samples.parquet",
        ]
        .iter()
        .enumerate()
        .map(|(i, f)| (f.to_string(), format!("{i:064x}")))
        .collect()
    }

    #[test]
    fn every_listed_file_is_in_the_distribution_with_its_sha256() {
        let doc = render(&summary(), &files());
        assert_eq!(doc["conformsTo"], CONFORMS_TO);
        assert_eq!(doc["license"], "https://creativecommons.org/licenses/by/4.0/");
        assert!(doc["citeAs"].as_str().unwrap().starts_with("@misc{it_bench_1_0_0,"), "{doc}");
        assert!(doc.get("datePublished").is_none(), "nothing from the clock");
        let got: Vec<(String, String)> = doc["distribution"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| (f["contentUrl"].as_str().unwrap().to_string(), f["sha256"].as_str().unwrap().to_string()))
            .collect();
        let want: Vec<(String, String)> =
            files().into_iter().filter(|(f, _)| !UNLISTED.contains(&f.as_str())).collect();
        assert_eq!(got, want, "every file but croissant.json, README.md and SHA256SUMS, with its sha256");
        let fmt = |id: &str| {
            doc["distribution"].as_array().unwrap().iter().find(|f| f["@id"] == id).unwrap()["encodingFormat"].clone()
        };
        assert_eq!(fmt("samples.jsonl"), "application/jsonlines");
        assert_eq!(fmt("level_2.json"), "application/json");
        assert_eq!(fmt("samples.parquet"), "application/x-parquet");
    }

    #[test]
    fn one_record_set_per_part_that_holds_records_and_one_for_lineage() {
        let doc = render(&summary(), &files());
        let sets: Vec<&str> = doc["recordSet"].as_array().unwrap().iter().map(|r| r["@id"].as_str().unwrap()).collect();
        assert_eq!(sets, ["finmcp_multi_tool", "level_2", "lineage", "samples"], "level_5.json is empty");
        for rs in doc["recordSet"].as_array().unwrap() {
            let id = rs["@id"].as_str().unwrap();
            for f in rs["field"].as_array().unwrap() {
                assert!(f["@id"].as_str().unwrap().starts_with(&format!("{id}/")), "{f}");
                assert!(["sc:Text", "sc:Integer", "sc:Boolean"].contains(&f["dataType"].as_str().unwrap()), "{f}");
                let src = f["source"]["fileObject"]["@id"].as_str().unwrap();
                assert!(doc["distribution"].as_array().unwrap().iter().any(|d| d["@id"] == src), "{src}");
            }
        }
        let l2 = &doc["recordSet"][1]["field"][3];
        assert_eq!(l2["source"]["transform"]["jsonPath"], "[0].tool_id", "L2 rows: the first alternative");
        assert_eq!(l2["isArray"], true);
    }

    #[test]
    fn rai_fields_say_who_reviewed_and_what_was_anonymised() {
        let doc = render(&summary(), &files());
        for key in [
            "rai:dataCollection",
            "rai:dataAnnotationProtocol",
            "rai:annotationsPerItem",
            "rai:dataAnnotationAnalysis",
            "rai:personalSensitiveInformation",
            "rai:dataLimitations",
            "rai:dataBiases",
        ] {
            assert!(doc.get(key).is_some(), "{key} missing: {doc}");
        }
        let protocol = doc["rai:dataAnnotationProtocol"].to_string();
        assert!(protocol.contains("an LLM pre-review stood in") && protocol.contains("llm 4"), "{protocol}");
        assert!(doc["rai:personalSensitiveInformation"][0].as_str().unwrap().contains("7 value(s)"));
        assert_eq!(doc["rai:dataLimitations"], json!(["Made by hand."]));
        assert!(doc["rai:dataCollection"].as_str().unwrap().contains("logs-import (anonymised 7, sessions 3)"));
        let mut s = summary();
        s.review = None;
        s.anonymised = None;
        let doc = render(&s, &files());
        assert_eq!(doc["rai:annotationsPerItem"], "0");
        assert!(doc["rai:personalSensitiveInformation"][0].as_str().unwrap().contains("log track did not run"));
    }

    #[test]
    fn the_same_release_gives_the_same_bytes() {
        let a = serde_json::to_string_pretty(&render(&summary(), &files())).unwrap();
        let b = serde_json::to_string_pretty(&render(&summary(), &files())).unwrap();
        assert_eq!(a, b);
        assert!(a.starts_with("{\n  \"@context\": {\n    \"@language\": \"en\","), "keys keep their order: {a}");
    }
}
