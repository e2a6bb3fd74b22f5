//! `benchgen review merge` (stage `review-merge`): one decision per sample, the
//! adjudication queue, and agreement between reviewers.
//!
//! A sample is **accepted** iff the acceptance rule holds for both of its reviewers,
//! **rejected** iff it fails for both; when one accepts and the other rejects it goes to
//! the adjudication queue (`queue.csv`, and the web app's adjudication view), where a
//! lead who did not review it (or a recorded `consensus`) decides, with a reason, in
//! `reviews/adjudications.csv` or the web app. Any sample may be **excluded** the same
//! way. Everything else is **undecided**, and undecided samples stay out of the release
//! (each listed with its reason) until decided or excluded. Human scores decide; LLM pre-review scores decide only where no
//! pair of human scores exists and `[review.prereview] count_as_human = true`, and those
//! decisions say `decided_by = "llm"`; where the two LLM reviewers split and
//! `[review.prereview] tiebreak` reviewed the sample, its verdict decides (a majority of
//! three) unless a person adjudicated.
//!
//! `decisions.jsonl` ([`DECISIONS`], one [`Decision`] per sample sorted by id) is what
//! the release reads. `report.md` has the counts, the agreement figures (quadratic κ,
//! ordinal α, exact and ±1 agreement with seeded bootstrap intervals), accepted shares
//! per sample type and sub-scenario; `heatmap.svg` the score pairs per dimension.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Result;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::agreement::{self, DimensionAgreement};
use super::assign::{ASSIGNMENTS, Assignments, SAMPLES};
use super::submissions::WebAdjudication;
use super::{Role, Score, ScoreKind};
use crate::csvout::restore_cell;
use crate::error::{InputError, Problem};
use crate::ledger::NewEvent;
use crate::model::Sample;
use crate::settings::{Settings, section_hash};
use crate::stage::{Artifact, Ctx, Inputs, Output, Plan, Stage, StageSpec};

pub const STAGE: &str = "review-merge";

/// One decision per sample (sorted by id): read by the release.
pub const DECISIONS: Artifact<Decision> = Artifact::new(STAGE, "decisions.jsonl");

pub static SPEC: StageSpec = StageSpec {
    name: STAGE,
    command: "review merge",
    // 2: an agreement figure that rounds to zero reads `0.000`, never `-0.000`.
    // 3: a split of the LLM reviewers is decided by the `[review.prereview] tiebreak`
    //    reviewer's verdict where LLM scores stand in for people.
    // 4: ... only where no person scored it; an LLM pair missing a configured reviewer's
    //    review (it failed) waits instead of deciding on one review.
    // 5: an undecided sample says what it waits for (`waiting_for`), so the release and
    //    `status` can send people to the right place.
    version: 5,
    about: "decisions per sample (rule, adjudication, exclusions) and reviewer agreement (κ, α, heatmap)",
    reads: &[ASSIGNMENTS.read(), SAMPLES.read(), super::sheets::SCORES.optional(), super::prereview::SCORES.optional()],
    writes: &["decisions.jsonl", "agreement.json", "report.md", "heatmap.svg", "queue.csv"],
    section: Some("review"),
};

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Accepted,
    Rejected,
    Excluded,
    Undecided,
}

/// What an undecided sample waits for: the scores of its assigned reviewers, an LLM review
/// standing in for them that failed, an adjudication of their disagreement, or reviewers at
/// all (the assignment could not place it).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum WaitingFor {
    Scores,
    Prereview,
    Adjudication,
    Assignment,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum DecidedBy {
    Human,
    Llm,
    Adjudication,
}

/// One reviewer's scores as they entered the decision.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ReviewOf {
    pub reviewer: String,
    pub kind: ScoreKind,
    pub scores: BTreeMap<String, u8>,
    #[serde(default)]
    pub note: String,
    /// Whether these scores alone satisfy the rule.
    pub passes: bool,
    pub source: String,
    /// The `[review.prereview] tiebreak` reviewer's, asked because the two LLM reviewers
    /// split (not one of the pair: left out of the agreement figures).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tiebreak: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Adjudication {
    /// `accept`, `reject` or `exclude`.
    pub decision: String,
    /// A lead's roster id, or `consensus`.
    pub adjudicator: String,
    pub reason: String,
    /// `file:line` or `web (time)`.
    pub source: String,
    /// The web app's revision number of this adjudication (1 when absent): deciding a
    /// sample again records a new revision, and the latest counts.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub revision: u32,
    /// The earlier revisions it replaced, oldest first (kept, never applied).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub superseded: Vec<Adjudication>,
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

/// The merged decision of one sample.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Decision {
    pub id: String,
    pub content_hash: String,
    pub decision: Outcome,
    /// Who decided; absent while undecided.
    pub decided_by: Option<DecidedBy>,
    pub kind: crate::model::Kind,
    #[serde(default)]
    pub scenario: Vec<String>,
    /// The assigned reviewers (empty when the sample could not be assigned).
    pub reviewers: Vec<String>,
    /// Every review of the sample: the assigned reviewers' and the LLM pre-reviews.
    pub reviews: Vec<ReviewOf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adjudication: Option<Adjudication>,
    pub rule: String,
    /// Why, in one line.
    pub reason: String,
    /// What an undecided sample waits for (absent once decided, and in decisions written
    /// before review-merge v5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<WaitingFor>,
}

pub fn adjudications_path(s: &Settings) -> PathBuf {
    s.root.join("reviews").join("adjudications.csv")
}

pub fn web_adjudications_path(s: &Settings) -> PathBuf {
    super::submissions::web_dir(s).join("adjudications.jsonl")
}

pub struct MergeStage;

impl Stage for MergeStage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }
    fn help(&self) -> &'static str {
        "Decide every sample, queue disagreements for adjudication, measure agreement.

         Reads `review-assign/assignments.json` and `samples.jsonl`, `review-import/scores.jsonl`
         and `review-prereview/scores.jsonl` when present, `reviews/adjudications.csv` and
         `reviews/web/adjudications.jsonl` (rewritten from the web app's database first).
         Writes `artifacts/review-merge/`: `decisions.jsonl`, `agreement.json`, `report.md`,
         `heatmap.svg` and `queue.csv` (the adjudication queue)."
    }
    fn prepare(&self, s: &Settings, _: &crate::printer::Printer) -> Result<()> {
        // Events a killed web app left in its outbox reach the ledger, and its scores and
        // adjudications reach `reviews/web/`, before this stage hashes them.
        super::submissions::dump(s).map(drop)
    }
    fn plan(&self, s: &Settings) -> Result<Plan> {
        let r = super::settings(s);
        let inputs: Vec<PathBuf> =
            [adjudications_path(s), web_adjudications_path(s)].into_iter().filter(|p| p.exists()).collect();
        let hash = section_hash(&json!({
            "seed": s.project.seed, "bootstrap": r.bootstrap,
            "count_as_human": r.prereview.as_ref().is_some_and(|p| p.count_as_human),
            "tiebreak": r.prereview.as_ref().and_then(|p| p.tiebreak.clone()),
        }))?;
        Ok(Plan { inputs, config_hash: hash })
    }
    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let s = ctx.settings;
        let r = super::settings(s);
        let a: Assignments = inputs.json(&ASSIGNMENTS)?;
        let samples: Vec<Sample> =
            super::from_jsonl(inputs.bytes_of(&SAMPLES)?, "artifacts/review-assign/samples.jsonl")?;
        let mut scores: Vec<Score> = Vec::new();
        if inputs.has(&super::sheets::SCORES) {
            scores.extend(super::from_jsonl::<Score>(
                inputs.bytes_of(&super::sheets::SCORES)?,
                "review-import/scores.jsonl",
            )?);
        }
        if inputs.has(&super::prereview::SCORES) {
            scores.extend(super::from_jsonl::<Score>(
                inputs.bytes_of(&super::prereview::SCORES)?,
                "review-prereview/scores.jsonl",
            )?);
        }
        let mut csv_adj = None;
        if adjudications_path(s).exists() {
            let p = adjudications_path(s);
            csv_adj = Some((s.display_path(&p), inputs.bytes(&p)?.to_vec()));
        }
        let mut web_adj = None;
        if web_adjudications_path(s).exists() {
            let p = web_adjudications_path(s);
            web_adj = Some((s.display_path(&p), inputs.bytes(&p)?.to_vec()));
        }
        let count_as_human = r.prereview.as_ref().is_some_and(|p| p.count_as_human);
        let merged = merge(
            &r,
            &a,
            &samples,
            &scores,
            csv_adj.as_ref().map(|(n, b)| (n.as_str(), b.as_slice())),
            web_adj.as_ref().map(|(n, b)| (n.as_str(), b.as_slice())),
            count_as_human,
        )?;
        let agreement = agreement_of(&r, &a, &merged.decisions, s.project.seed);
        for d in &merged.decisions {
            out.event(NewEvent::new(
                super::kind::DECISION,
                Some(&crate::model::Sample::subject_for(&d.id)),
                serde_json::to_value(d)?,
            ));
        }
        out.file("decisions.jsonl", super::to_jsonl(&merged.decisions)?);
        out.json("agreement.json", &agreement)?;
        out.file("heatmap.svg", heatmap(&a, &merged.decisions)?.into_bytes());
        out.file("queue.csv", queue_csv(&merged.decisions)?);
        out.file("report.md", report(&r, &merged, &agreement, count_as_human).into_bytes());
        let n = |o: Outcome| merged.decisions.iter().filter(|d| d.decision == o).count();
        let by = |b: DecidedBy| merged.decisions.iter().filter(|d| d.decided_by == Some(b)).count();
        out.count("samples", merged.decisions.len());
        out.count("accepted", n(Outcome::Accepted));
        out.count("rejected", n(Outcome::Rejected));
        out.count("excluded", n(Outcome::Excluded));
        out.count("undecided", n(Outcome::Undecided));
        out.count("in_queue", merged.queue);
        out.count("decided_by_human", by(DecidedBy::Human));
        out.count("decided_by_llm", by(DecidedBy::Llm));
        out.count("decided_by_adjudication", by(DecidedBy::Adjudication));
        out.count("decided_by_tiebreak", merged.tiebroken);
        out.notes.push(format!(
            "{} samples: {} accepted, {} rejected, {} excluded, {} undecided ({} in the adjudication queue); decided by human {}, LLM {}, adjudication {}",
            merged.decisions.len(),
            n(Outcome::Accepted),
            n(Outcome::Rejected),
            n(Outcome::Excluded),
            n(Outcome::Undecided),
            merged.queue,
            by(DecidedBy::Human),
            by(DecidedBy::Llm),
            by(DecidedBy::Adjudication)
        ));
        if n(Outcome::Undecided) > 0 {
            out.notes.push(format!(
                "{} undecided samples stay out of the release until decided or excluded (see `artifacts/review-merge/report.md`)",
                n(Outcome::Undecided)
            ));
        }
        if by(DecidedBy::Llm) > 0 {
            out.notes.push("LLM pre-review scores stood in for human reviewers (`count_as_human = true`)".into());
        }
        if merged.tiebroken > 0 {
            out.notes.push(format!(
                "{} split(s) of the two LLM reviewers decided by the tie-break reviewer (`[review.prereview] tiebreak`)",
                merged.tiebroken
            ));
        }
        Ok(())
    }
}

/// The merge's result.
#[derive(Debug)]
pub struct Merged {
    pub decisions: Vec<Decision>,
    pub queue: usize,
    /// Splits of the LLM reviewers decided by the tie-break reviewer.
    pub tiebroken: usize,
    /// Web adjudications left out because their sample changed.
    pub web_stale: Vec<String>,
}

/// Decide every sample (pure). Bad adjudications are errors naming `file:line`.
#[allow(clippy::too_many_arguments)]
pub fn merge(
    r: &super::ReviewSettings,
    a: &Assignments,
    samples: &[Sample],
    scores: &[Score],
    csv_adj: Option<(&str, &[u8])>,
    web_adj: Option<(&str, &[u8])>,
    count_as_human: bool,
) -> Result<Merged> {
    // First the pair outcome of every sample (needed to check adjudications).
    let mut pre = pair_outcomes(r, a, samples, scores, count_as_human);

    // Adjudications, checked all at once.
    let mut problems = Vec::new();
    let mut web_stale = Vec::new();
    let mut rows: Vec<(String, WebAdjudication)> = Vec::new();
    if let Some((name, bytes)) = csv_adj {
        read_csv_adjudications(name, bytes, &mut rows, &mut problems);
    }
    let mut earlier_web = BTreeMap::new();
    if let Some((name, bytes)) = web_adj {
        earlier_web = read_web_adjudications(name, bytes, samples, &mut rows, &mut web_stale, &mut problems);
    }
    let mut adj = check_adjudications(a, samples, &pre, rows, earlier_web, &mut problems);
    if !problems.is_empty() {
        return Err(InputError { file: "the adjudications".into(), problems }.into());
    }

    let rule = r.rule();
    let mut decisions = Vec::new();
    let mut queue = 0;
    let mut tiebroken = 0;
    for smp in samples {
        let p = pre.remove(smp.id.as_str()).expect("every sample");
        let assigned = a.sample(&smp.id);
        let adjud = adj.remove(&smp.id);
        let (decision, decided_by, reason, waiting_for) = if let Some(x) =
            adjud.as_ref().filter(|x| x.decision == "exclude")
        {
            (
                Outcome::Excluded,
                Some(DecidedBy::Adjudication),
                format!("excluded by `{}`: {}", x.adjudicator, x.reason),
                None,
            )
        } else if let Some((by, passes)) = &p.pair {
            let who = if *by == DecidedBy::Llm { "LLM reviewers (standing in for humans)" } else { "both reviewers" };
            if passes.iter().all(|x| *x) {
                (Outcome::Accepted, Some(*by), format!("{who} accept"), None)
            } else if passes.iter().all(|x| !*x) {
                (Outcome::Rejected, Some(*by), format!("{who} reject"), None)
            } else if let Some(x) = &adjud {
                let o = if x.decision == "accept" { Outcome::Accepted } else { Outcome::Rejected };
                (
                    o,
                    Some(DecidedBy::Adjudication),
                    format!("reviewers disagreed; `{}` decided: {}", x.adjudicator, x.reason),
                    None,
                )
            } else if let (DecidedBy::Llm, Some((who, passes))) = (by, &p.tiebreak) {
                let (o, verb) = if *passes { (Outcome::Accepted, "accepts") } else { (Outcome::Rejected, "rejects") };
                tiebroken += 1;
                (
                    o,
                    Some(DecidedBy::Llm),
                    format!("LLM reviewers split; the tie-break reviewer `{who}` {verb} (a majority of three)"),
                    None,
                )
            } else {
                queue += 1;
                (
                    Outcome::Undecided,
                    None,
                    "reviewers disagree: in the adjudication queue".into(),
                    Some(WaitingFor::Adjudication),
                )
            }
        } else {
            incomplete(a, &smp.id, assigned.is_some(), &p.waiting)
        };
        decisions.push(Decision {
            id: smp.id.clone(),
            content_hash: smp.content_hash(),
            decision,
            decided_by,
            kind: smp.kind,
            scenario: smp.scenario.clone(),
            reviewers: assigned.map(|x| x.reviewers.clone()).unwrap_or_default(),
            reviews: p.reviews,
            adjudication: adjud,
            rule: rule.clone(),
            reason,
            waiting_for,
        });
    }
    Ok(Merged { decisions, queue, tiebroken, web_stale })
}

/// The decision of a sample without a complete pair of reviews: undecided, and what it waits
/// for (reviewers, their scores, or a failed LLM review standing in for them).
fn incomplete(
    a: &Assignments,
    id: &str,
    assigned: bool,
    waiting: &[String],
) -> (Outcome, Option<DecidedBy>, String, Option<WaitingFor>) {
    if !assigned {
        let why = a.unassigned.iter().find(|u| u.id == id).map(|u| u.reason.clone()).unwrap_or_default();
        return (Outcome::Undecided, None, format!("not assigned: {why}"), Some(WaitingFor::Assignment));
    }
    // A failed LLM review standing in for people: its settings, not a sheet, need a change (a
    // plain rerun replays the same answer).
    let llm = waiting.iter().any(|w| w.starts_with("llm:"));
    let what = if llm { WaitingFor::Prereview } else { WaitingFor::Scores };
    (Outcome::Undecided, None, format!("waiting for scores from {}", waiting.join(" and ")), Some(what))
}

/// A sample's reviews before adjudication: its scores for the current content, the pair
/// outcome when the pair is complete (who decided, each verdict), and who is still due.
struct Pre {
    reviews: Vec<ReviewOf>,
    pair: Option<(DecidedBy, Vec<bool>)>,
    /// The tie-break reviewer's verdict, when it reviewed the sample.
    tiebreak: Option<(String, bool)>,
    waiting: Vec<String>,
}

/// The pair outcome of every sample, from the scores given to its current content.
fn pair_outcomes<'a>(
    r: &super::ReviewSettings,
    a: &Assignments,
    samples: &'a [Sample],
    scores: &[Score],
    count_as_human: bool,
) -> BTreeMap<&'a str, Pre> {
    let mut by_sample: BTreeMap<&str, Vec<&Score>> = BTreeMap::new();
    for sc in scores {
        by_sample.entry(sc.sample_id.as_str()).or_default().push(sc);
    }
    let tiebreaker = r.prereview.as_ref().and_then(|p| p.tiebreak.as_ref()).map(|t| format!("llm:{t}"));
    let is_tiebreak = |sc: &Score| sc.kind == ScoreKind::Llm && tiebreaker.as_ref() == Some(&sc.reviewer);
    let review_of = |sc: &Score| ReviewOf {
        reviewer: sc.reviewer.clone(),
        kind: sc.kind,
        scores: sc.scores.clone(),
        note: sc.note.clone(),
        passes: r.passes(&sc.scores),
        source: sc.source.clone(),
        tiebreak: is_tiebreak(sc),
    };
    let mut pre: BTreeMap<&str, Pre> = BTreeMap::new();
    for smp in samples {
        let hash = smp.content_hash();
        let assigned = a.sample(&smp.id);
        let all: Vec<&Score> = by_sample
            .get(smp.id.as_str())
            .map(|v| v.iter().copied().filter(|x| x.content_hash == hash).collect())
            .unwrap_or_default();
        let mut reviews = Vec::new();
        let mut humans = Vec::new();
        let mut waiting = Vec::new();
        for rv in assigned.map(|x| x.reviewers.as_slice()).unwrap_or_default() {
            match all.iter().find(|x| x.kind == ScoreKind::Human && &x.reviewer == rv) {
                Some(sc) => {
                    humans.push(r.passes(&sc.scores));
                    reviews.push(review_of(sc));
                }
                None => waiting.push(rv.clone()),
            }
        }
        let llm: Vec<&Score> = all.iter().copied().filter(|x| x.kind == ScoreKind::Llm && !is_tiebreak(x)).collect();
        reviews.extend(llm.iter().map(|x| review_of(x)));
        let tb = all.iter().copied().find(|x| is_tiebreak(x));
        reviews.extend(tb.map(review_of));
        // The tie-break stands in for a lead only where no person has scored the sample:
        // one person's verdict is not outvoted by LLM reviews.
        let tiebreak = tb.filter(|_| humans.is_empty()).map(|x| (x.reviewer.clone(), r.passes(&x.scores)));
        // Where LLM reviews stand in, every configured LLM reviewer's is due: one review
        // whose partner failed (the demo tolerates failed reviews) decides nothing alone.
        let missing_llm: Vec<String> = r
            .prereview
            .iter()
            .flat_map(|p| &p.roles)
            .map(|role| format!("llm:{role}"))
            .filter(|who| !llm.iter().any(|x| &x.reviewer == who))
            .collect();
        let pair = if assigned.is_some() && humans.len() == 2 {
            Some((DecidedBy::Human, humans))
        } else if count_as_human && !llm.is_empty() && missing_llm.is_empty() {
            Some((DecidedBy::Llm, llm.iter().map(|x| r.passes(&x.scores)).collect()))
        } else {
            if count_as_human && !llm.is_empty() {
                waiting.extend(missing_llm);
            }
            None
        };
        pre.insert(smp.id.as_str(), Pre { reviews, pair, tiebreak, waiting });
    }
    pre
}

/// The decided rows of the adjudication CSV (a queue row nobody decided is skipped), each
/// with its `file:line`.
fn read_csv_adjudications(
    name: &str,
    bytes: &[u8],
    rows: &mut Vec<(String, WebAdjudication)>,
    problems: &mut Vec<Problem>,
) {
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    let mut rd = csv::ReaderBuilder::new().flexible(true).from_reader(bytes);
    let cols = match rd.headers() {
        Ok(h) => {
            let pos = |c: &str| h.iter().position(|x| x.trim() == c);
            match (pos("sample_id"), pos("content_hash"), pos("decision"), pos("adjudicator"), pos("reason")) {
                (Some(a1), Some(a2), Some(a3), Some(a4), Some(a5)) => Some([a1, a2, a3, a4, a5]),
                _ => {
                    problems.push(Problem::new(
                        format!("{name}:1"),
                        "the header needs `sample_id`, `content_hash`, `decision`, `adjudicator` and `reason`",
                    ));
                    None
                }
            }
        }
        Err(e) => {
            problems.push(Problem::new(format!("{name}:1"), format!("not CSV: {e}")));
            None
        }
    };
    if let Some(c) = cols {
        // Counted by us: the csv crate's line runs one behind with CRLF line ends.
        let mut lines = crate::csvout::Lines::new(bytes);
        for rec in rd.records() {
            match rec {
                Err(e) => problems
                    .push(Problem::new(format!("{name}:{}", lines.of(e.position(), 0)), format!("not CSV: {e}"))),
                Ok(rec) => {
                    let cell = |i: usize| restore_cell(rec.get(i).unwrap_or(""));
                    let loc = format!("{name}:{}", lines.of(rec.position(), 0));
                    if cell(c[2]).is_empty() {
                        continue; // a queue row nobody decided yet
                    }
                    rows.push((
                        loc,
                        WebAdjudication {
                            sample_id: cell(c[0]),
                            content_hash: cell(c[1]),
                            decision: cell(c[2]).to_ascii_lowercase(),
                            adjudicator: cell(c[3]),
                            reason: cell(c[4]),
                            at: String::new(),
                            revision: 1,
                        },
                    ));
                }
            }
        }
    }
}

/// Web adjudications are revisions: per sample the highest revision counts (pushed onto
/// `rows`) and the earlier ones are kept with it as `superseded` (returned, by sample).
/// When the latest was given to content that has changed since, none applies (the lead
/// decides again on the new content).
fn read_web_adjudications(
    name: &str,
    bytes: &[u8],
    samples: &[Sample],
    rows: &mut Vec<(String, WebAdjudication)>,
    web_stale: &mut Vec<String>,
    problems: &mut Vec<Problem>,
) -> BTreeMap<String, Vec<Adjudication>> {
    let mut earlier_web: BTreeMap<String, Vec<Adjudication>> = BTreeMap::new();
    match super::from_jsonl::<WebAdjudication>(bytes, name) {
        Err(e) => problems.push(Problem::new(name, format!("{e:#}"))),
        Ok(v) => {
            let mut by_sample: BTreeMap<String, Vec<(String, WebAdjudication)>> = BTreeMap::new();
            for (i, w) in v.into_iter().enumerate() {
                let loc = format!("{name}:{} (web {}, revision {})", i + 1, w.at, w.revision);
                by_sample.entry(w.sample_id.clone()).or_default().push((loc, w));
            }
            for (id, mut revs) in by_sample {
                revs.sort_by_key(|(_, w)| w.revision);
                if let Some(pair) = revs.windows(2).find(|p| p[0].1.revision == p[1].1.revision) {
                    problems.push(Problem::new(
                        &pair[1].0,
                        format!("`{id}` has revision {} twice (also at {})", pair[1].1.revision, pair[0].0),
                    ));
                    continue;
                }
                let (loc, latest) = revs.pop().expect("one revision at least");
                let current = samples.iter().find(|x| x.id == latest.sample_id).map(|x| x.content_hash());
                if current.as_deref() != Some(latest.content_hash.as_str()) {
                    web_stale.push(format!(
                        "{} by {} (revision {}): the sample changed or left review",
                        latest.sample_id, latest.adjudicator, latest.revision
                    ));
                    continue;
                }
                let kept = revs
                    .into_iter()
                    .map(|(l, w)| Adjudication {
                        decision: w.decision,
                        adjudicator: w.adjudicator,
                        reason: w.reason,
                        source: l,
                        revision: w.revision,
                        superseded: vec![],
                    })
                    .collect();
                earlier_web.insert(id, kept);
                rows.push((loc, latest));
            }
        }
    }
    earlier_web
}

/// The adjudications that apply, by sample; each row that breaks a rule (unknown or
/// changed sample, bad decision, no reason, an adjudicator who may not, an undisputed
/// sample, a second adjudication) is a problem instead.
fn check_adjudications(
    a: &Assignments,
    samples: &[Sample],
    pre: &BTreeMap<&str, Pre>,
    rows: Vec<(String, WebAdjudication)>,
    mut earlier_web: BTreeMap<String, Vec<Adjudication>>,
    problems: &mut Vec<Problem>,
) -> BTreeMap<String, Adjudication> {
    let mut adj: BTreeMap<String, Adjudication> = BTreeMap::new();
    let hashes: BTreeMap<&str, String> = samples.iter().map(|x| (x.id.as_str(), x.content_hash())).collect();
    for (loc, w) in rows {
        let before = problems.len();
        let Some(hash) = hashes.get(w.sample_id.as_str()) else {
            problems.push(Problem::new(&loc, format!("unknown sample `{}`", w.sample_id)));
            continue;
        };
        if *hash != w.content_hash {
            problems.push(Problem::new(
                &loc,
                format!("stale: `{}` changed since (now {hash}); look at it again", w.sample_id),
            ));
        }
        if !["accept", "reject", "exclude"].contains(&w.decision.as_str()) {
            problems.push(Problem::new(
                &loc,
                format!("`{}`: decision must be accept, reject or exclude, found `{}`", w.sample_id, w.decision),
            ));
        }
        if w.reason.trim().is_empty() {
            problems.push(Problem::new(&loc, format!("`{}`: an adjudication needs a `reason`", w.sample_id)));
        }
        check_adjudicator(a, &loc, &w, problems);
        let split = pre
            .get(w.sample_id.as_str())
            .and_then(|p| p.pair.as_ref())
            .is_some_and(|(_, v)| v.iter().any(|x| *x) && v.iter().any(|x| !*x));
        if w.decision != "exclude" && !split {
            problems
                .push(Problem::new(&loc, format!("`{}` is not disputed; only `exclude` applies to it", w.sample_id)));
        }
        if problems.len() > before {
            continue;
        }
        if let Some(prev) = adj.get(&w.sample_id) {
            problems.push(Problem::new(&loc, format!("`{}` was already adjudicated at {}", w.sample_id, prev.source)));
            continue;
        }
        // CSV rows carry no revision (`revision` is 1); only web rows have earlier ones.
        let superseded = if w.at.is_empty() { vec![] } else { earlier_web.remove(&w.sample_id).unwrap_or_default() };
        adj.insert(
            w.sample_id.clone(),
            Adjudication {
                decision: w.decision,
                adjudicator: w.adjudicator,
                reason: w.reason,
                source: loc,
                revision: w.revision,
                superseded,
            },
        );
    }
    adj
}

/// An adjudicator is `consensus` or a lead on the roster who neither reviewed nor wrote the
/// sample.
fn check_adjudicator(a: &Assignments, loc: &str, w: &WebAdjudication, problems: &mut Vec<Problem>) {
    let assigned = a.sample(&w.sample_id);
    if w.adjudicator != "consensus" {
        match a.reviewer(&w.adjudicator) {
            None => problems.push(Problem::new(
                loc,
                format!("adjudicator `{}` is not on the roster (or write `consensus`)", w.adjudicator),
            )),
            Some(rv) => {
                if rv.role != Role::Lead {
                    problems
                        .push(Problem::new(loc, format!("`{}` is not a lead (role = \"lead\" in the roster)", rv.id)));
                }
                if assigned.is_some_and(|x| x.reviewers.contains(&rv.id)) {
                    problems.push(Problem::new(
                        loc,
                        format!("`{}` reviewed `{}` and cannot adjudicate it", rv.id, w.sample_id),
                    ));
                }
                if assigned.and_then(|x| x.author.as_deref()) == Some(rv.id.as_str()) {
                    problems.push(Problem::new(
                        loc,
                        format!("`{}` wrote `{}` and cannot adjudicate it", rv.id, w.sample_id),
                    ));
                }
            }
        }
    }
}

/// Agreement figures per dimension, for each kind of reviewer pair that exists.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Agreement {
    /// `human` (the assigned reviewers) or `llm` (the two LLM pre-reviewers).
    pub between: String,
    pub samples: usize,
    pub dimensions: Vec<DimensionAgreement>,
    /// Agreement on the accept/reject verdict itself (κ over 0/1).
    pub verdict_exact: Option<f64>,
}

/// Score pairs of each dimension from reviews of one kind (two per sample, in order).
pub fn pairs_of(a: &Assignments, decisions: &[Decision], kind: ScoreKind) -> BTreeMap<String, Vec<(u8, u8)>> {
    let mut out: BTreeMap<String, Vec<(u8, u8)>> = a.dimensions.iter().map(|d| (d.id.clone(), vec![])).collect();
    for d in decisions {
        let rs: Vec<&ReviewOf> = d.reviews.iter().filter(|x| x.kind == kind && !x.tiebreak).collect();
        if rs.len() != 2 {
            continue;
        }
        for dim in &a.dimensions {
            if let (Some(x), Some(y)) = (rs[0].scores.get(&dim.id), rs[1].scores.get(&dim.id)) {
                out.get_mut(&dim.id).expect("dimension").push((*x, *y));
            }
        }
    }
    out
}

pub fn agreement_of(r: &super::ReviewSettings, a: &Assignments, decisions: &[Decision], seed: u64) -> Vec<Agreement> {
    let mut out = Vec::new();
    for (kind, label) in [(ScoreKind::Human, "human"), (ScoreKind::Llm, "llm")] {
        let pairs = pairs_of(a, decisions, kind);
        let n = pairs.values().map(Vec::len).max().unwrap_or(0);
        if n == 0 {
            continue;
        }
        let dims = a
            .dimensions
            .iter()
            .enumerate()
            .map(|(i, d)| {
                agreement::dimension(
                    &d.id,
                    &pairs[&d.id],
                    a.scale_min,
                    a.scale_max,
                    r.bootstrap,
                    seed ^ ((i as u64 + 1) << 8),
                )
            })
            .collect();
        let verdicts: Vec<(bool, bool)> = decisions
            .iter()
            .filter_map(|d| {
                let rs: Vec<&ReviewOf> = d.reviews.iter().filter(|x| x.kind == kind && !x.tiebreak).collect();
                (rs.len() == 2).then(|| (rs[0].passes, rs[1].passes))
            })
            .collect();
        let verdict_exact = (!verdicts.is_empty())
            .then(|| verdicts.iter().filter(|(x, y)| x == y).count() as f64 / verdicts.len() as f64);
        out.push(Agreement { between: label.into(), samples: n, dimensions: dims, verdict_exact });
    }
    out
}

fn f(v: Option<f64>) -> String {
    v.map(three).unwrap_or_else(|| "–".into())
}

/// `x` to three decimals, a negative zero (κ of two reviewers who always agree, less a
/// rounding error) as `0.000`: the demo's card read "-0.000 [-0.000, -0.000]".
fn three(x: f64) -> String {
    let s = format!("{x:.3}");
    if s == "-0.000" { "0.000".into() } else { s }
}

fn est(e: &agreement::Estimate) -> String {
    match (e.value, e.ci_low, e.ci_high) {
        (Some(v), Some(l), Some(h)) => format!("{} [{}, {}]", three(v), three(l), three(h)),
        (v, _, _) => f(v),
    }
}

fn report(r: &super::ReviewSettings, m: &Merged, ag: &[Agreement], count_as_human: bool) -> String {
    let ds = &m.decisions;
    let mut s = String::from("# Review: decisions and agreement\n\n");
    let _ = writeln!(s, "Rule: {}.\n", r.rule());
    let n = |o: Outcome| ds.iter().filter(|d| d.decision == o).count();
    let by = |b: DecidedBy| ds.iter().filter(|d| d.decided_by == Some(b)).count();
    let _ = writeln!(s, "| outcome | samples |\n|---|---|");
    for (o, l) in [
        (Outcome::Accepted, "accepted"),
        (Outcome::Rejected, "rejected"),
        (Outcome::Excluded, "excluded"),
        (Outcome::Undecided, "undecided"),
    ] {
        let _ = writeln!(s, "| {l} | {} |", n(o));
    }
    let _ = writeln!(s, "| **total** | {} |\n", ds.len());
    let _ = writeln!(
        s,
        "Decided by: human reviewers {}, LLM reviewers {}, adjudication {}.\n",
        by(DecidedBy::Human),
        by(DecidedBy::Llm),
        by(DecidedBy::Adjudication)
    );
    if by(DecidedBy::Llm) > 0 || count_as_human {
        let _ = writeln!(
            s,
            "**LLM pre-review stood in for human reviewers** (`[review.prereview] count_as_human = true`): \
             decisions with `decided_by = llm` rest on LLM scores, not on people.\n"
        );
    }
    if m.tiebroken > 0 {
        let _ = writeln!(
            s,
            "{} of them, on which the two LLM reviewers split, were decided by the tie-break reviewer \
             (`[review.prereview] tiebreak`, a majority of three).\n",
            m.tiebroken
        );
    }
    if n(Outcome::Undecided) > 0 {
        let _ = writeln!(
            s,
            "{} undecided samples stay out of the release until they are decided or excluded; {} of them are in the \
             adjudication queue (`queue.csv`).\n",
            n(Outcome::Undecided),
            m.queue
        );
    }
    let _ = writeln!(s, "## Agreement\n");
    if ag.is_empty() {
        let _ = writeln!(s, "No sample has two reviews yet.\n");
    }
    for g in ag {
        let who = if g.between == "human" { "the two assigned reviewers" } else { "the two LLM pre-reviewers" };
        let _ = writeln!(
            s,
            "Between {who} ({} samples; 95 % percentile-bootstrap intervals, {} resamples, seeded):\n",
            g.samples, r.bootstrap
        );
        let _ =
            writeln!(s, "| dimension | pairs | κ (quadratic) | α (ordinal) | exact | ±1 |\n|---|---|---|---|---|---|");
        for d in &g.dimensions {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} |",
                d.dimension,
                d.pairs,
                est(&d.kappa_quadratic),
                est(&d.alpha_ordinal),
                est(&d.exact),
                est(&d.within_one)
            );
        }
        let _ = writeln!(s, "\nSame verdict (both accept or both reject): {}.\n", f(g.verdict_exact));
    }
    let _ = writeln!(s, "Score pairs per dimension: `heatmap.svg`.\n");
    for (title, key) in [("sample type", 0), ("sub-scenario", 1)] {
        let _ = writeln!(
            s,
            "## Accepted share per {title}\n\n| {title} | samples | decided | accepted | share |\n|---|---|---|---|---|"
        );
        let mut g: BTreeMap<String, (usize, usize, usize)> = BTreeMap::new();
        for d in ds {
            let k = if key == 0 {
                d.kind.as_str().to_string()
            } else if d.scenario.is_empty() {
                "(none)".into()
            } else {
                d.scenario.join(" / ")
            };
            let e = g.entry(k).or_default();
            e.0 += 1;
            if matches!(d.decision, Outcome::Accepted | Outcome::Rejected) {
                e.1 += 1;
            }
            if d.decision == Outcome::Accepted {
                e.2 += 1;
            }
        }
        for (k, (t, dec, acc)) in g {
            let share = if dec == 0 { "–".into() } else { format!("{:.1} %", 100.0 * acc as f64 / dec as f64) };
            let _ = writeln!(s, "| {k} | {t} | {dec} | {acc} | {share} |");
        }
        let _ = writeln!(s);
    }
    let und: Vec<&Decision> = ds.iter().filter(|d| d.decision == Outcome::Undecided).collect();
    if !und.is_empty() {
        let _ = writeln!(s, "## Undecided\n");
        for d in und {
            let _ = writeln!(s, "- `{}`: {}", d.id, d.reason);
        }
        let _ = writeln!(s);
    }
    for w in &m.web_stale {
        let _ = writeln!(s, "- web adjudication left out: {w}");
    }
    s
}

/// The adjudication queue as a sheet: fill `decision`, `adjudicator`, `reason` and save
/// it as `reviews/adjudications.csv`.
fn queue_csv(ds: &[Decision]) -> Result<Vec<u8>> {
    let mut w = crate::csvout::Writer::new();
    w.write_record(["sample_id", "content_hash", "reviews", "decision", "adjudicator", "reason"])?;
    for d in ds.iter().filter(|d| d.waiting_for == Some(WaitingFor::Adjudication)) {
        let reviews: Vec<String> = d
            .reviews
            .iter()
            .map(|r| {
                let sc: Vec<String> = r.scores.iter().map(|(k, v)| format!("{k}={v}")).collect();
                format!(
                    "{} ({}): {} — {}",
                    r.reviewer,
                    if r.passes { "accepts" } else { "rejects" },
                    sc.join(" "),
                    r.note
                )
            })
            .collect();
        w.write_record([&d.id, &d.content_hash, &reviews.join(" | "), "", "", ""])?;
    }
    w.into_bytes()
}

/// One panel per dimension: counts of (first reviewer, second reviewer) score pairs.
fn heatmap(a: &Assignments, ds: &[Decision]) -> Result<String> {
    use plotters::prelude::*;
    let mut pairs = pairs_of(a, ds, ScoreKind::Human);
    let mut label = "human reviewers";
    if pairs.values().all(Vec::is_empty) {
        pairs = pairs_of(a, ds, ScoreKind::Llm);
        label = "LLM pre-reviewers";
    }
    let k = (a.scale_max - a.scale_min) as i32 + 1;
    let cell = 34;
    let panel = cell * k + 70;
    let w = (panel * a.dimensions.len() as i32).max(300) as u32 + 20;
    let h = (cell * k + 120) as u32;
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, (w, h)).into_drawing_area();
        let e = |e: DrawingAreaErrorKind<_>| anyhow::anyhow!("svg: {e}");
        root.fill(&WHITE).map_err(e)?;
        let title = TextStyle::from(("sans-serif", 15).into_font()).color(&BLACK);
        root.draw(&Text::new(
            format!("Score pairs per dimension ({label}: first reviewer → rows, second → columns)"),
            (10, 8),
            title,
        ))
        .map_err(e)?;
        for (pi, d) in a.dimensions.iter().enumerate() {
            let x0 = 40 + pi as i32 * panel;
            let y0 = 60;
            let small = TextStyle::from(("sans-serif", 12).into_font()).color(&BLACK);
            root.draw(&Text::new(d.id.clone(), (x0, y0 - 22), small.clone())).map_err(e)?;
            let mut counts = vec![vec![0usize; k as usize]; k as usize];
            for (x, y) in &pairs[&d.id] {
                counts[(x - a.scale_min) as usize][(y - a.scale_min) as usize] += 1;
            }
            let max = counts.iter().flatten().copied().max().unwrap_or(0).max(1);
            for i in 0..k {
                root.draw(&Text::new(
                    format!("{}", a.scale_min as i32 + i),
                    (x0 - 14, y0 + i * cell + cell / 2 - 6),
                    small.clone(),
                ))
                .map_err(e)?;
                root.draw(&Text::new(
                    format!("{}", a.scale_min as i32 + i),
                    (x0 + i * cell + cell / 2 - 4, y0 + k * cell + 4),
                    small.clone(),
                ))
                .map_err(e)?;
                for j in 0..k {
                    let c = counts[i as usize][j as usize];
                    let t = c as f64 / max as f64;
                    let shade = RGBColor((255.0 - 200.0 * t) as u8, (255.0 - 140.0 * t) as u8, 255);
                    let (cx, cy) = (x0 + j * cell, y0 + i * cell);
                    root.draw(&Rectangle::new([(cx, cy), (cx + cell, cy + cell)], shade.filled())).map_err(e)?;
                    root.draw(&Rectangle::new(
                        [(cx, cy), (cx + cell, cy + cell)],
                        RGBColor(200, 200, 200).stroke_width(1),
                    ))
                    .map_err(e)?;
                    if c > 0 {
                        root.draw(&Text::new(c.to_string(), (cx + cell / 2 - 4, cy + cell / 2 - 6), small.clone()))
                            .map_err(e)?;
                    }
                }
            }
        }
        root.present().map_err(|e| anyhow::anyhow!("svg: {e}"))?;
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agreement_figures_never_read_as_negative_zero() {
        assert_eq!(three(-0.0000001), "0.000");
        assert_eq!(three(-0.0004), "0.000");
        assert_eq!(three(-0.0005001), "-0.001");
        let e = agreement::Estimate { value: Some(-1e-12), ci_low: Some(-0.25), ci_high: Some(-0.0) };
        assert_eq!(est(&e), "0.000 [-0.250, 0.000]");
        assert_eq!(f(None), "–");
    }
}
