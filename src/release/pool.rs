//! The release's pool pass: the sorted sample files of `validate` and `levels export`,
//! merged by id, streamed into `samples.jsonl`, `lineage.jsonl` and the ETOM and FinMCP
//! files as they pass. The review decisions and the eval audit leave samples out, each
//! with its reason; only the small per-sample values the tables, the changelog and the card
//! need are kept.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::Serialize;
use serde_json::{Value, json};

use super::{
    Audit, CatalogTool, Decision, FUNNEL, HELD, IN_QUEUE, NOT_ASSIGNED, NOT_REVIEWED, ReleaseSettings, ReviewSummary,
    STAGE, Summary, UNDECIDED, WAITING_PREREVIEW, WAITING_SCORES, convert, lineage, sample_row, tables,
};
use crate::error::{InputError, Problem, hinted};
use crate::model::{Family, Kind, Sample};
use crate::settings::Settings;
use crate::stage::{Inputs, Manifest};

/// A JSON array written one element per line, so large files stream.
struct ArrayWriter {
    w: std::io::BufWriter<std::fs::File>,
    n: usize,
    /// The file's name in the release folder.
    name: String,
}

impl ArrayWriter {
    fn create(dir: &Path, name: String) -> Result<Self> {
        let path = dir.join(&name);
        let f = std::fs::File::create(&path).with_context(|| format!("cannot create `{}`", path.display()))?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
        w.write_all(b"[")?;
        Ok(ArrayWriter { w, n: 0, name })
    }

    fn push<T: Serialize>(&mut self, v: &T) -> Result<()> {
        self.w.write_all(if self.n == 0 { b"\n" } else { b",\n" })?;
        serde_json::to_writer(&mut self.w, v)?;
        self.n += 1;
        Ok(())
    }

    fn finish(mut self) -> Result<()> {
        self.w.write_all(if self.n == 0 { b"]\n" } else { b"\n]\n" })?;
        self.w.flush()?;
        Ok(())
    }
}

/// One sorted JSONL source of the pool.
struct Source<'a> {
    name: &'static str,
    file: String,
    lines: std::io::Lines<BufReader<crate::stage::HashedReader>>,
    line: usize,
    last: Option<String>,
    head: Option<(usize, Sample)>,
    _inputs: std::marker::PhantomData<&'a ()>,
}

impl Source<'_> {
    fn advance(&mut self) -> Result<()> {
        self.head = None;
        for l in self.lines.by_ref() {
            self.line += 1;
            let l = l.with_context(|| format!("cannot read `{}`", self.file))?;
            if l.trim().is_empty() {
                continue;
            }
            let s: Sample = serde_json::from_str(&l).map_err(|e| InputError {
                file: self.file.clone(),
                problems: vec![Problem::new(format!("line {}", self.line), format!("not a unified sample: {e}"))],
            })?;
            if let Some(prev) = &self.last
                && s.id.as_str() <= prev.as_str()
            {
                return Err(InputError {
                    file: self.file.clone(),
                    problems: vec![Problem::new(
                        format!("line {} ({})", self.line, s.id),
                        format!("ids must be unique and sorted; `{}` follows `{prev}`", s.id),
                    )],
                }
                .into());
            }
            self.last = Some(s.id.clone());
            self.head = Some((self.line, s));
            return Ok(());
        }
        Ok(())
    }
}

/// What the pool pass keeps for the tables, the changelog and the card: small per-sample
/// values only (the samples themselves are already written).
pub(super) struct Pooled {
    pub(super) summary: Summary,
    pub(super) review: Option<ReviewSummary>,
    pub(super) cols: tables::SampleColumns,
    pub(super) used: BTreeMap<String, u32>,
    pub(super) current: HashMap<String, String>,
    pub(super) left_out: HashMap<String, String>,
    pub(super) without_events: usize,
    pub(super) human: usize,
    pub(super) index: lineage::Index,
    pub(super) etom_track: bool,
    pub(super) fin_track: bool,
    /// `name-version`, and the `release.published` event of each released sample, recorded
    /// once the release is published (subject, payload).
    release: String,
    pub(super) published: Vec<(String, Value)>,
    /// The first released sample of each request text (see [`request_key`]).
    requests: HashMap<String, String>,
}

/// A pool sample and the line it was read from.
struct Drawn {
    source: &'static str,
    file: String,
    line: usize,
    sample: Sample,
}

/// The release files written while the pool streams past.
struct PoolFiles {
    samples_out: std::io::BufWriter<std::fs::File>,
    lineage_out: std::io::BufWriter<std::fs::File>,
    levels: Vec<Option<ArrayWriter>>,
    fins: Vec<Option<ArrayWriter>>,
}

const FIN_KINDS: [Kind; 3] = [Kind::SingleTool, Kind::MultiTool, Kind::MultiTurn];

/// Streams the pool, merged by id, into `samples.jsonl`, `lineage.jsonl` and the ETOM and
/// FinMCP files under `tmp`; every problem of the pool (up to 50) fails it at once.
pub(super) fn write_pool(
    s: &Settings,
    cfg: &ReleaseSettings,
    inputs: &Inputs,
    tmp: &Path,
    catalog: &HashMap<String, CatalogTool>,
    (decisions, audit): (Option<&HashMap<String, Decision>>, &Audit),
) -> Result<Pooled> {
    let mut sources = open_pool(inputs)?;
    let etom_track = inputs.has(&crate::samples::LEVELS);
    let fin_track = inputs.has(&crate::samples::VALIDATED);
    let mut files = PoolFiles::create(tmp, etom_track, fin_track)?;
    let descriptions: convert::Descriptions = catalog
        .iter()
        .filter(|(_, t)| t.catalog == "filter")
        .map(|(k, t)| (k.clone(), t.description.clone()))
        .collect();
    let index = lineage_index(s)?;

    let mut pool = Pooled {
        summary: Summary {
            name: cfg.name.clone(),
            version: cfg.version.clone(),
            license: cfg.license.clone(),
            description: cfg.description.clone(),
            ..Default::default()
        },
        review: decisions.as_ref().map(|_| ReviewSummary::default()),
        cols: tables::SampleColumns::default(),
        used: BTreeMap::new(),
        current: HashMap::new(),
        left_out: HashMap::new(),
        without_events: 0,
        human: 0,
        index,
        etom_track,
        fin_track,
        release: format!("{}-{}", cfg.name, cfg.version),
        published: Vec::new(),
        requests: HashMap::new(),
    };
    let mut problems: Vec<Problem> = Vec::new();

    while let Some(drawn) = next_sample(&mut sources)? {
        let Drawn { file, line, sample, .. } = &drawn;
        pool.summary.pool += 1;

        let hash = sample.content_hash();
        let decision = decisions.as_ref().and_then(|d| d.get(&sample.id));
        pool.count_review(decision);
        if let Some(reason) = why_not(decisions, decision, &hash) {
            *pool.summary.left_out.entry(reason.clone()).or_default() += 1;
            pool.left_out.insert(sample.id.clone(), reason);
            continue;
        }
        if let Some((class, reason)) = audit.leaves_out(&sample.id) {
            *pool.summary.left_out.entry(class.into()).or_default() += 1;
            pool.left_out.insert(sample.id.clone(), reason);
            continue;
        }
        let key = request_key(sample);
        if pool.duplicate(sample, &key) {
            continue;
        }
        if sample.kind.family() != sample.family {
            problems.push(Problem::new(
                format!("{file} line {line} ({})", sample.id),
                format!("kind {} does not belong to family {:?}", sample.kind.as_str(), sample.family),
            ));
            continue;
        }
        let tools = plan_tools(&drawn, catalog, &mut problems);
        if problems.len() > 50 {
            break;
        }
        for t in &tools {
            *pool.used.entry(t.to_string()).or_default() += 1;
        }
        let Some(released_as) = files.write(&drawn, tmp, &descriptions, &mut problems)? else { continue };
        let audited = audit.adjudicated.kept(&sample.id);
        pool.write_lineage(&mut files.lineage_out, &drawn, (hash.as_str(), released_as.as_str()), decision, audited)?;
        pool.requests.insert(key, sample.id.clone());
        pool.add(&drawn, hash, &tools, released_as, decision);
    }
    if !problems.is_empty() {
        problems.truncate(50);
        return Err(InputError { file: "the sample pool".into(), problems }.into());
    }
    pool.summary.empty_files = files.finish()?;
    if pool.summary.samples == 0 {
        if let Some(w) = waiting(&pool.summary.left_out, pool.summary.pool) {
            return Err(w.into());
        }
        return Err(hinted(
            format!("nothing to release: none of the {} pool samples was accepted", pool.summary.pool),
            "see `artifacts/review-merge/` for the decisions",
        ));
    }
    Ok(pool)
}

/// The pool's samples now (what `status` counts against the review's decisions), by id with
/// their content hashes, read from the pool's files as the release finds them; `None` when
/// there is no pool file or one cannot be read.
pub(super) fn pool_hashes(settings: &Settings) -> Option<BTreeMap<String, String>> {
    let mut hashes = BTreeMap::new();
    let mut read = false;
    for a in crate::samples::POOL {
        let path = a.path(settings);
        if !path.is_file() {
            continue;
        }
        read = true;
        let file = std::fs::File::open(&path).ok()?;
        for line in BufReader::new(file).lines() {
            let line = line.ok()?;
            if !line.trim().is_empty() {
                let sample: Sample = serde_json::from_str(&line).ok()?;
                hashes.insert(sample.id.clone(), sample.content_hash());
            }
        }
    }
    read.then_some(hashes)
}

/// The pool's sources that exist, each at its first sample; none is an error.
fn open_pool<'a>(inputs: &'a Inputs) -> Result<Vec<Source<'a>>> {
    let mut sources = Vec::new();
    for h in crate::samples::POOL {
        if inputs.has(h) {
            let mut src = Source {
                name: h.stage,
                file: format!("{}/{}", h.stage, h.file),
                lines: BufReader::with_capacity(1 << 20, inputs.open_of(h)?).lines(),
                line: 0,
                last: None,
                head: None,
                _inputs: Default::default(),
            };
            src.advance()?;
            sources.push(src);
        }
    }
    if sources.is_empty() {
        return Err(hinted(
            "the sample pool is empty: neither `validate` nor `levels export` has produced samples",
            "run `benchgen run` (the log track needs `[synth]`, the registry track `[levels]`)",
        ));
    }
    Ok(sources)
}

/// The ledger lineage of the runs behind the current artifacts of every other stage.
fn lineage_index(s: &Settings) -> Result<lineage::Index> {
    let runs: Vec<i64> = s
        .stage_order
        .clone()
        .into_iter()
        .chain(FUNNEL.iter().copied())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .filter(|st| *st != STAGE)
        .filter_map(|st| Manifest::load(&s.artifacts, st).ok().flatten())
        .map(|m| m.run_id)
        .collect();
    let mut order: Vec<&str> = s.stage_order.clone();
    for f in FUNNEL {
        if !order.contains(f) {
            order.push(f);
        }
    }
    lineage::Index::open(&s.artifacts, &runs, &order)
}

/// The sample with the smallest id among the sources' heads, the source moved past it; an
/// id in two sources is an error.
fn next_sample(sources: &mut [Source]) -> Result<Option<Drawn>> {
    // The source whose head has the smallest id.
    let pick = sources
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.head.as_ref().map(|(_, h)| (i, h.id.clone())))
        .min_by(|a, b| a.1.cmp(&b.1));
    let Some((i, id)) = pick else { return Ok(None) };
    if let Some(other) =
        sources.iter().enumerate().find(|(j, s)| *j != i && s.head.as_ref().is_some_and(|h| h.1.id == id))
    {
        bail!(
            "sample id `{id}` is in both `{}` and `{}`; ids must be unique across the pool",
            sources[i].file,
            other.1.file
        );
    }
    let (line, sample) = sources[i].head.take().expect("picked a head");
    let source = sources[i].name;
    let file = sources[i].file.clone();
    sources[i].advance()?;
    Ok(Some(Drawn { source, file, line, sample }))
}

/// What makes two samples the same request: their user turns, lower-cased, with runs of
/// whitespace and punctuation at the ends folded (so "Do X." and "do  x" are one request).
fn request_key(sample: &Sample) -> String {
    let turns: Vec<String> = sample
        .turns
        .iter()
        .map(|t| {
            let words: Vec<&str> = t.user.split_whitespace().collect();
            words.join(" ").trim_matches(|c: char| c.is_ascii_punctuation()).to_lowercase()
        })
        .collect();
    format!("{:?}\u{1f}{}", sample.family, turns.join("\u{1e}"))
}

/// Pool samples the review has not decided yet (not scored, in the queue, not assigned).
pub(super) fn review_pending(left_out: &BTreeMap<String, usize>) -> usize {
    [NOT_REVIEWED, CHANGED, WAITING_SCORES, WAITING_PREREVIEW, IN_QUEUE, UNDECIDED, NOT_ASSIGNED]
        .iter()
        .filter_map(|k| left_out.get(*k))
        .sum()
}

/// Nothing accepted yet and samples waiting for people: the release waits (`benchgen run`
/// stops here with exit code 3) instead of failing. The message counts what each group waits
/// for and where its people work; `next` lists their steps.
pub(super) fn waiting(left_out: &BTreeMap<String, usize>, pool: usize) -> Option<crate::error::Waiting> {
    let count = |k: &str| left_out.get(k).copied().unwrap_or(0);
    let unscored = count(WAITING_SCORES);
    // In the pool but in no review decision: the review stages have not seen it yet.
    let unexported = count(NOT_REVIEWED);
    let prereview = count(WAITING_PREREVIEW);
    // Decisions written before review-merge v5 do not say why they are undecided; most wait
    // in the queue or for a second score, and both are named for them.
    let (queued, legacy) = (count(IN_QUEUE), count(UNDECIDED));
    let unassigned = count(NOT_ASSIGNED);
    let held = count(HELD);
    let review = review_pending(left_out);
    if review + held == 0 {
        return None;
    }
    let mut parts = Vec::new();
    let mut steps = Vec::new();
    let changed = count(CHANGED);
    if unexported > 0 {
        parts.push(format!("{unexported} not yet assigned to reviewers"));
    }
    if changed > 0 {
        parts.push(format!("{changed} changed since their review"));
    }
    if unexported + changed > 0 {
        steps.push("`benchgen run` assigns them and writes their reviewers' sheets");
    }
    if unscored > 0 {
        parts.push(format!("{unscored} not scored yet"));
    }
    if unscored + legacy > 0 {
        steps.push(
            "reviewers fill their sheets (`artifacts/review-export/sheets/<reviewer>.csv` or .xlsx, returned into \
             `reviews/returned/`) or score in the web app (`benchgen review serve`)",
        );
    }
    if prereview > 0 {
        parts.push(format!(
            "{prereview} whose LLM review, standing in for people, failed (`artifacts/review-prereview/`)"
        ));
        steps.push(
            "change the failed LLM reviewer's settings (its seed or model) and rerun `benchgen review prereview`, \
             or have people score those samples",
        );
    }
    if queued > 0 {
        parts.push(format!(
            "{queued} in the adjudication queue (their reviewers disagree: `artifacts/review-merge/queue.csv`)"
        ));
    }
    if legacy > 0 {
        parts.push(format!(
            "{legacy} undecided (waiting for a second score or an adjudication: `artifacts/review-merge/report.md`)"
        ));
    }
    if queued + legacy > 0 {
        steps.push(
            "a lead decides each disagreement in `reviews/adjudications.csv` (a copy of \
             `artifacts/review-merge/queue.csv` with `decision`, `adjudicator` and `reason` filled)",
        );
    }
    if unassigned > 0 {
        parts.push(format!(
            "{unassigned} without two eligible reviewers (`artifacts/review-assign/report.md` says why)"
        ));
        steps.push("add reviewers to the `[review]` roster or widen who may review what, so that each sample gets two");
    }
    if held > 0 {
        parts.push(format!(
            "{held} held back after evaluation (no panel agent solved them: `artifacts/eval/review.csv`)"
        ));
        steps.push(
            "a person decides each held item: copy `artifacts/eval/review.csv` to `reviews/eval/`, write `keep` or \
             `leave out` in `decision` (with a note) and name the copy in `[release] eval_review` (docs/eval.md)",
        );
    }
    Some(crate::error::Waiting {
        message: format!(
            "{} of the {pool} pool samples wait for review ({}); nothing is released until a sample is accepted",
            review + held,
            parts.join(", ")
        ),
        next: format!(
            "{}; then run `benchgen run` again{}",
            steps.join("; "),
            if review > 0 { " (docs/review.md)" } else { "" }
        ),
    })
}

fn why_not(decisions: Option<&HashMap<String, Decision>>, decision: Option<&Decision>, hash: &str) -> Option<String> {
    match (&decisions, decision) {
        (None, _) => None,
        (Some(_), None) => Some(NOT_REVIEWED.to_string()),
        (Some(_), Some(d)) => left_out_by_review(d, hash),
    }
}

/// An accepted sample whose content is not the reviewed one: the next `run` sends it to its
/// reviewers again (their scores were for other content).
pub(super) const CHANGED: &str = "changed after review (content hash differs from the reviewed one)";

/// Why the review keeps a sample with this decision and content hash out (`None`: accepted,
/// as reviewed). The release and `status` both count by it.
pub(super) fn left_out_by_review(d: &Decision, hash: &str) -> Option<String> {
    if d.decision != "accepted" {
        return d.left_out_reason();
    }
    (d.content_hash != hash).then(|| CHANGED.to_string())
}

/// The tools a sample's reference plans name; a malformed call or a tool in no catalog is a
/// problem.
fn plan_tools<'a>(
    drawn: &'a Drawn,
    catalog: &HashMap<String, CatalogTool>,
    problems: &mut Vec<Problem>,
) -> BTreeSet<&'a str> {
    let Drawn { file, line, sample, .. } = drawn;
    let mut tools: BTreeSet<&str> = BTreeSet::new();
    for (t, turn) in sample.turns.iter().enumerate() {
        for (c, call) in turn.reference_plan.iter().enumerate() {
            if call.alternatives.is_empty() {
                problems.push(Problem::new(
                    format!("{file} line {line} ({}).turns[{t}].reference_plan[{c}]", sample.id),
                    "a reference call needs at least one alternative",
                ));
            }
            if let Some(d) = call.depends_on.iter().find(|d| **d >= c) {
                problems.push(Problem::new(
                    format!("{file} line {line} ({}).turns[{t}].reference_plan[{c}].depends_on", sample.id),
                    format!("depends on call {d}, which is not an earlier call"),
                ));
            }
            for a in &call.alternatives {
                if !catalog.contains_key(a) {
                    problems.push(Problem::new(
                        format!("{file} line {line} ({}).turns[{t}].reference_plan[{c}]", sample.id),
                        format!("tool `{a}` is in no catalog (filter/catalog.json, logs-import/catalog.json)"),
                    ));
                }
                tools.insert(a);
            }
        }
    }
    tools
}

impl PoolFiles {
    /// `samples.jsonl`, `lineage.jsonl` and, for each track that ran, its files (so a track
    /// that ran writes every one of them, even empty).
    fn create(tmp: &Path, etom_track: bool, fin_track: bool) -> Result<Self> {
        let samples_out = std::io::BufWriter::with_capacity(
            1 << 20,
            std::fs::File::create(tmp.join("samples.jsonl")).context("cannot create samples.jsonl")?,
        );
        let lineage_out = std::io::BufWriter::with_capacity(
            1 << 20,
            std::fs::File::create(tmp.join("lineage.jsonl")).context("cannot create lineage.jsonl")?,
        );
        let mut levels: Vec<Option<ArrayWriter>> = Vec::new();
        for l in 1..=5 {
            levels.push(if etom_track { Some(ArrayWriter::create(tmp, format!("level_{l}.json"))?) } else { None });
        }
        let mut fins: Vec<Option<ArrayWriter>> = Vec::new();
        for k in FIN_KINDS {
            fins.push(if fin_track {
                Some(ArrayWriter::create(tmp, format!("finmcp_{}.json", k.as_str()))?)
            } else {
                None
            });
        }
        Ok(Self { samples_out, lineage_out, levels, fins })
    }

    /// Writes a sample into its family's file and `samples.jsonl`; returns where it was
    /// released, or `None` (with a problem) for an ETOM id without its query number.
    fn write(
        &mut self,
        drawn: &Drawn,
        tmp: &Path,
        descriptions: &convert::Descriptions,
        problems: &mut Vec<Problem>,
    ) -> Result<Option<String>> {
        let Drawn { file, line, sample, .. } = drawn;
        let released_as = match sample.family {
            Family::Etom => {
                let level = sample.kind.level().expect("etom kind");
                let Some(n) = convert::etom_query_number(&sample.id, level) else {
                    problems.push(Problem::new(
                        format!("{file} line {line} ({})", sample.id),
                        format!("an ETOM L{level} sample needs the id `L{level}-<number>` (its query id in level_{level}.json)"),
                    ));
                    return Ok(None);
                };
                let w = match &mut self.levels[usize::from(level) - 1] {
                    Some(w) => w,
                    slot => slot.insert(ArrayWriter::create(tmp, format!("level_{level}.json"))?),
                };
                w.push(&convert::to_etom(sample, n, descriptions))?;
                format!("level_{level}.json#{n}")
            }
            Family::Finmcp => {
                let k = FIN_KINDS.iter().position(|k| *k == sample.kind).expect("finmcp kind");
                let w = match &mut self.fins[k] {
                    Some(w) => w,
                    slot => slot.insert(ArrayWriter::create(tmp, format!("finmcp_{}.json", sample.kind.as_str()))?),
                };
                w.push(&convert::to_finmcp(sample))?;
                format!("finmcp_{}.json#{}", sample.kind.as_str(), sample.id)
            }
        };

        serde_json::to_writer(&mut self.samples_out, sample)?;
        self.samples_out.write_all(b"\n")?;
        Ok(Some(released_as))
    }

    /// Flushes every file; returns the names of the format files that hold no record.
    fn finish(self) -> Result<BTreeSet<String>> {
        let Self { mut samples_out, mut lineage_out, levels, fins } = self;
        samples_out.flush()?;
        lineage_out.flush()?;
        drop((samples_out, lineage_out));
        let mut empty = BTreeSet::new();
        for w in levels.into_iter().chain(fins).flatten() {
            if w.n == 0 {
                empty.insert(w.name.clone());
            }
            w.finish()?;
        }
        Ok(empty)
    }
}

impl Pooled {
    fn count_review(&mut self, decision: Option<&Decision>) {
        let Some(r) = self.review.as_mut() else { return };
        let key = decision.map(|d| d.decision.as_str()).unwrap_or(NOT_REVIEWED);
        *r.decisions.entry(key.to_string()).or_default() += 1;
        if let Some(d) = decision {
            r.reviewed += 1;
            *r.by.entry(if d.decided_by.is_empty() { "?".into() } else { d.decided_by.clone() }).or_default() += 1;
        }
    }

    /// A request released twice (byte-identical queries of two L2 items, say) asks the same
    /// thing twice: the first in id order stays, the other is left out with its reason.
    fn duplicate(&mut self, sample: &Sample, key: &str) -> bool {
        let Some(first) = self.requests.get(key) else { return false };
        *self.summary.left_out.entry("duplicate request".into()).or_default() += 1;
        self.left_out.insert(sample.id.clone(), format!("duplicate request: the same text as `{first}`"));
        true
    }

    /// A released sample's line of `lineage.jsonl`: its source line, review and ledger events.
    fn write_lineage(
        &mut self,
        lineage_out: &mut impl Write,
        drawn: &Drawn,
        (hash, released_as): (&str, &str),
        decision: Option<&Decision>,
        audited: Option<Value>,
    ) -> Result<()> {
        let Drawn { source, file, line, sample } = drawn;
        let roots = self.index.roots(&sample.id, &sample.provenance_id)?;
        let mut events = self.index.lineage(&roots)?;
        let steps = self.index.step_decisions(&roots)?;
        if events.is_empty() {
            self.without_events += 1;
        }
        let (entry, payload) = lineage::published(&self.release, &sample.id, hash, released_as);
        self.published.push((entry.subject.clone().unwrap_or_default(), payload));
        events.push(entry.into());
        let mut l = json!({
            "id": sample.id,
            "content_hash": hash,
            "source": {"stage": source, "file": file, "line": line},
            "provenance_id": sample.provenance_id,
            "released_as": released_as,
        });
        if let Some(d) = decision {
            l["review"] = json!({"decision": d.decision, "decided_by": d.decided_by});
            if d.decided_by == "human" || d.decided_by == "adjudication" {
                self.human += 1;
            }
        }
        // A flagged item kept after evaluation: who kept it (a person or the rule standing
        // in for one) and why.
        if let Some(a) = audited {
            l["eval_audit"] = a;
        }
        // A level sample: the plan check's decision on each step (issue 38).
        if let Some(s) = steps {
            l["plan_check"] = s;
        }
        l["events"] = serde_json::to_value(&events)?;
        serde_json::to_writer(&mut *lineage_out, &l)?;
        lineage_out.write_all(b"\n")?;
        Ok(())
    }

    /// A released sample's figures for the card and its row of `samples.parquet`.
    fn add(
        &mut self,
        drawn: &Drawn,
        hash: String,
        tools: &BTreeSet<&str>,
        released_as: String,
        decision: Option<&Decision>,
    ) {
        let Drawn { source, sample, .. } = drawn;
        let summary = &mut self.summary;
        let row = sample_row(sample, source, hash.clone(), tools.len(), released_as, decision);
        let ks = summary.by_kind.entry(row.kind.clone()).or_default();
        ks.n += 1;
        ks.turns += sample.turns.len();
        ks.calls += sample.reference_calls();
        ks.steps += row.steps as usize;
        ks.tools += tools.len();
        *ks.difficulty.entry(row.difficulty.clone()).or_default() += 1;
        *summary.scenarios.entry(row.category.clone()).or_default() += 1;
        self.cols.push(row);
        self.current.insert(sample.id.clone(), hash);
        summary.samples += 1;
    }
}
