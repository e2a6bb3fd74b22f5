//! `benchgen review prereview` (stage `review-prereview`): one or two LLM roles score
//! every assigned sample with the reviewers' rubric, after a note of their own on the
//! sample (as a person's sheet has one note), so a team can triage before people review,
//! and the demo runs end to end. An optional third role, the tie-break, then reviews the
//! samples the two split on (a second round, once both have answered).
//!
//! These are **LLM scores**: each is recorded with `kind = "llm"` and reviewer
//! `llm:<role>`; `review merge` counts them as human scores only when
//! `[review.prereview] count_as_human = true`, and then says so in every decision it
//! makes from them (`decided_by = "llm"`) and in its report. Runs on `llm::batch`
//! (checkpointed per sample and role, resumable, ledger-linked).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::assign::{ASSIGNMENTS, Assignments, SAMPLES};
use super::{Score, ScoreKind};
use crate::error::Problem;
use crate::ledger::{NewEvent, Parent};
use crate::llm::Prompt;
use crate::llm::batch::{Batch, BatchOptions, Item, ItemError};
use crate::model::Sample;
use crate::settings::{Settings, section_hash};
use crate::stage::{Artifact, ConfigRef, Ctx, Inputs, Output, Plan, PromptRef, Stage, StageSpec};

pub const STAGE: &str = "review-prereview";

/// LLM scores ([`Score`] with `kind = "llm"`), one a line sorted by (sample, reviewer).
pub const SCORES: Artifact<Score> = Artifact::new(STAGE, "scores.jsonl");

pub static SPEC: StageSpec = StageSpec {
    name: STAGE,
    command: "review prereview",
    // 3: the rubric's answer schema is stated in the system message, the prompt's fixed part
    //    (a server with prefix caching processes it once), not after each sample; reasons of
    //    at most 48 characters (90 before) and a note of 80 (120).
    // 4: counts the reviews whose every reason copies its dimension's description
    //    (`rubric_copies`; the report and the release card say how many).
    // 5: one note on the sample, written first, then a whole number per dimension, with no
    //    reason per dimension: the demo's 0.5B reviewers copied the dimension's description
    //    as the reason in 19 of 22 reviews, and those reasons were most of a review's 176
    //    completion tokens, the pre-review's time. `rubric_copies` counts notes that copy a
    //    description.
    // 6: ... or pieces of several descriptions.
    // 7: `tiebreak`: a third role reviews the samples the two LLM reviewers split on.
    version: 7,
    about: "LLM pre-review: LLM roles score each sample with the rubric (marked as LLM scores)",
    reads: &[ASSIGNMENTS.read(), SAMPLES.read()],
    // `failed.json`: the reviews that failed within `max_failed_share` (the demo allows them).
    writes: &["scores.jsonl", "report.md", "failed.json"],
    section: Some("review"),
};

/// `[review.prereview]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrereviewSettings {
    /// One or two LLM roles; each is one LLM reviewer (`llm:<role>`).
    pub roles: Vec<String>,
    #[serde(default = "default_template")]
    pub template: String,
    /// Let LLM scores decide like human ones where people have not scored (the demo).
    #[serde(default)]
    pub count_as_human: bool,
    /// A third LLM role, asked only about the samples on which the two roles split (one
    /// passes the rule, the other fails it): where LLM scores stand in for people, its
    /// verdict decides them (a majority of three) instead of leaving them for a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tiebreak: Option<String>,
    /// How many items are in flight: operational, so not in the config hash.
    #[serde(default = "default_concurrency", skip_serializing)]
    pub concurrency: usize,
    #[serde(
        default,
        deserialize_with = "crate::llm::batch::de_share",
        skip_serializing_if = "crate::llm::batch::is_zero_share"
    )]
    pub max_failed_share: f64,
}

fn default_template() -> String {
    "review_score".into()
}
fn default_concurrency() -> usize {
    2
}

impl PrereviewSettings {
    pub fn check(&self, problems: &mut Vec<Problem>) {
        if self.roles.is_empty() || self.roles.len() > 2 {
            problems.push(Problem::new("review.prereview.roles", "must name one or two LLM roles"));
        }
        if self.roles.len() == 2 && self.roles[0] == self.roles[1] {
            problems.push(Problem::new("review.prereview.roles", "the two LLM reviewers must be different roles"));
        }
        if let Some(t) = &self.tiebreak {
            if self.roles.len() != 2 {
                problems.push(Problem::new(
                    "review.prereview.tiebreak",
                    "breaks ties between two LLM reviewers: name two roles in `roles`",
                ));
            }
            if self.roles.contains(t) {
                problems.push(Problem::new(
                    "review.prereview.tiebreak",
                    format!("`{t}` is already one of `roles`; a tie-break is a third, independent reviewer"),
                ));
            }
        }
        crate::settings::check_positive(problems, "review.prereview.concurrency", self.concurrency);
    }
}

/// The LLM's answer: a note on the sample, then `scores`, one whole number per rubric
/// dimension, keyed by its id.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LlmReview {
    /// A few words of the reviewer's own on this sample, written before the scores.
    pub note: String,
    pub scores: BTreeMap<String, i64>,
}

/// The answer's JSON Schema for this rubric: every dimension a required property and every
/// score an integer on the scale, so a server that turns the schema into a grammar cannot
/// leave a dimension out or score off the scale (the 0.5B model answered `"scores": []`
/// against a free-form list), and any other server's answer is checked and re-asked.
pub fn answer_schema(a: &Assignments) -> Value {
    let dim = json!({"type": "integer", "minimum": a.scale_min, "maximum": a.scale_max});
    let props: serde_json::Map<String, Value> = a.dimensions.iter().map(|d| (d.id.clone(), dim.clone())).collect();
    let ids: Vec<&str> = a.dimensions.iter().map(|d| d.id.as_str()).collect();
    // The note comes first, so the scores follow what the reviewer said of the sample (a
    // server that decodes to the schema writes the properties in this order). One note,
    // not a reason per dimension: the pre-review's time is its output, and the demo's 0.5B
    // reviewers spent most of theirs copying each dimension's description as its reason
    // (176 completion tokens a review, 19 of 22 reviews copies; demo run of 2026-12-06).
    json!({
        "type": "object",
        "properties": {
            "note": {
                "type": "string",
                "description": "A few words of your own on this sample: what it does well or badly.",
                "maxLength": 100,
            },
            "scores": {"type": "object", "properties": props, "required": ids, "additionalProperties": false},
        },
        "required": ["note", "scores"],
        "additionalProperties": false,
    })
}

/// The answer for this rubric: [`answer_schema`], and a check that every dimension is
/// scored on the scale (for servers that ignore the schema; a refusal is re-asked).
pub(crate) fn review_answer(a: &Assignments) -> crate::llm::Answer<LlmReview> {
    let dims: Vec<String> = a.dimensions.iter().map(|d| d.id.clone()).collect();
    let (lo, hi) = (i64::from(a.scale_min), i64::from(a.scale_max));
    crate::llm::Answer::new("review", answer_schema(a)).same_for_every_item().check(move |r: &LlmReview| {
        for d in &dims {
            match r.scores.get(d) {
                None => return Err(format!("the answer has no score for `{d}`")),
                Some(&score) if score < lo || score > hi => {
                    return Err(format!("`{d}` scored {score} outside {lo}-{hi}"));
                }
                Some(_) => {}
            }
        }
        Ok(())
    })
}

/// Whether `reason` copies `description`, the rubric's guidance for its dimension, rather
/// than saying something of the sample: its words (three or more, case and punctuation
/// aside) are the description's first words, the last one perhaps cut short (the answer's
/// `maxLength` cuts a copy mid-word), or four in five of them are the description's words.
/// The demo's 0.5B and 1.5B reviewers both wrote "The tool calls cover everything the query
/// needs" for `completeness`, whatever the sample.
pub fn copies_rubric(reason: &str, description: &str) -> bool {
    let words = |t: &str| -> Vec<String> {
        t.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect()
    };
    let (r, d) = (words(reason), words(description));
    if r.len() < 3 || d.is_empty() {
        return false;
    }
    let (head, last) = r.split_at(r.len() - 1);
    let prefix = d.len() >= r.len() && d[..head.len()] == *head && d[head.len()].starts_with(last[0].as_str());
    let known: BTreeSet<&String> = d.iter().collect();
    prefix || r.iter().filter(|w| known.contains(w)).count() * 5 >= r.len() * 4
}

/// Whether a review's note copies the rubric's descriptions ([`copies_rubric`]), one of them
/// or pieces of several: the review says nothing of its sample.
fn note_copies_rubric(note: &str, dimensions: &[super::Dimension]) -> bool {
    let all: Vec<&str> = dimensions.iter().map(|d| d.description.as_str()).collect();
    dimensions.iter().any(|d| copies_rubric(note, &d.description)) || copies_rubric(note, &all.join(" "))
}

/// What is checkpointed per (sample, role).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Scored {
    pub scores: BTreeMap<String, u8>,
    pub note: String,
    pub exchange: String,
}

pub fn prompt(template: &str, a: &Assignments, s: &Sample, chars: usize) -> Prompt {
    Prompt::new(
        template,
        json!({
            "dimensions": a.dimensions, "scale_min": a.scale_min, "scale_max": a.scale_max,
            "kind": s.kind.as_str(), "scenario": s.scenario.join(" / "), "sample": super::render_sample(s, chars),
        }),
    )
}

fn settings(s: &Settings) -> Option<PrereviewSettings> {
    super::settings(s).prereview
}

/// At most how many samples are assigned for review, before anything runs: the assignments
/// when made, else the pool's bound.
fn assigned_bound(s: &Settings) -> Option<(u64, &'static str)> {
    if let Some(a) = ASSIGNMENTS.on_disk(s) {
        return Some((a.samples.len() as u64, "assigned"));
    }
    super::pool_bound(s).map(|b| (b.samples, "the sample pool"))
}

/// Every review as an LLM [`Score`], sorted by (sample, reviewer), each recorded as a
/// `review` event linked to its exchange.
fn scores_of(
    values: &BTreeMap<String, Scored>,
    a: &Assignments,
    batch: &Batch,
    out: &mut Output,
) -> Result<Vec<Score>> {
    let mut all = Vec::new();
    for (key, sc) in values {
        let (id, role) = key.rsplit_once('@').expect("key shape");
        let x = a.sample(id).expect("assigned");
        let score = Score {
            sample_id: id.to_string(),
            reviewer: format!("llm:{role}"),
            kind: ScoreKind::Llm,
            content_hash: x.content_hash.clone(),
            scores: sc.scores.clone(),
            note: sc.note.clone(),
            source: format!("llm:{}", sc.exchange),
        };
        let mut ev = NewEvent::new(
            super::kind::REVIEW,
            Some(&crate::model::Sample::subject_for(id)),
            serde_json::to_value(&score)?,
        );
        if let Some(eid) = batch.exchange_event(&sc.exchange)? {
            ev = ev.with_parent(Parent::Id(eid));
        }
        out.event(ev);
        all.push(score);
    }
    all.sort_by(|x, y| (&x.sample_id, &x.reviewer).cmp(&(&y.sample_id, &y.reviewer)));
    Ok(all)
}

/// The samples whose two LLM reviews split (one passes the rule, the other fails it), in
/// assignment order; none without a tie-break or without two reviewers.
fn splits(
    p: &PrereviewSettings,
    a: &Assignments,
    values: &BTreeMap<String, Scored>,
    rule: &super::ReviewSettings,
) -> Vec<String> {
    let (Some(_), [r0, r1]) = (&p.tiebreak, p.roles.as_slice()) else { return Vec::new() };
    let verdict = |id: &str, role: &str| values.get(&format!("{id}@{role}")).map(|v| rule.passes(&v.scores));
    a.samples
        .iter()
        .filter(|x| matches!((verdict(&x.id, r0), verdict(&x.id, r1)), (Some(v0), Some(v1)) if v0 != v1))
        .map(|x| x.id.clone())
        .collect()
}

/// What the report, the counts and the run's notes say of the splits and the tie-break.
fn tiebreak_report(
    t: &str,
    split: &[String],
    values: &BTreeMap<String, Scored>,
    rule: &super::ReviewSettings,
    report: &mut String,
    out: &mut Output,
) {
    let passed =
        split.iter().filter(|id| values.get(&format!("{id}@{t}")).is_some_and(|v| rule.passes(&v.scores))).count();
    report.push_str(&format!(
        "\nThe two LLM reviewers split on {} sample(s){}; the tie-break reviewer `{t}` passes {passed} of them.\n",
        split.len(),
        if split.is_empty() { String::new() } else { format!(" ({})", split.join(", ")) },
    ));
    out.count("split", split.len());
    out.count("tiebreak_passing", passed);
    out.notes.push(format!(
        "{} sample(s) split the two LLM reviewers; the tie-break `{t}` passes {passed} of them",
        split.len()
    ));
}

pub struct PrereviewStage;

impl Stage for PrereviewStage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }
    fn help(&self) -> &'static str {
        "LLM pre-review: `[review.prereview] roles` score every sample with the rubric;
         `tiebreak`, a third role, reviews only the samples the two split on (with
         `count_as_human`, its verdict decides them in `review merge`).

         Reads `review-assign/assignments.json` and `samples.jsonl` and the prompt
         `pipeline/prompts/review_score.md`. Writes `artifacts/review-prereview/scores.jsonl`
         (marked as LLM scores) and `report.md`. Resumable per sample and role."
    }
    fn enabled(&self, s: &Settings) -> bool {
        s.section::<super::ReviewSettings>().as_ref().is_some_and(|r| r.prereview.is_some())
    }
    fn roles(&self, s: &Settings) -> Vec<ConfigRef> {
        settings(s)
            .map(|p| {
                let mut refs: Vec<ConfigRef> = p
                    .roles
                    .iter()
                    .enumerate()
                    .map(|(i, r)| ConfigRef::new(format!("review.prereview.roles[{i}]"), r))
                    .collect();
                refs.extend(p.tiebreak.iter().map(|t| ConfigRef::new("review.prereview.tiebreak", t)));
                refs
            })
            .unwrap_or_default()
    }
    fn estimate(&self, s: &Settings) -> Vec<crate::stage::Estimate> {
        let Some(p) = settings(s) else { return Vec::new() };
        let (n, basis) = match assigned_bound(s) {
            Some((n, from)) => (n, format!("≤ {n} samples ({from}) × 1 review")),
            None => {
                let until = crate::stage::UNTIL_POOL;
                let rows = p.roles.iter().chain(&p.tiebreak).map(|r| crate::stage::Estimate::unknown(r, until));
                return crate::stage::merge_by_role(rows).into_iter().map(|e| e.in_flight(p.concurrency)).collect();
            }
        };
        let mut rows: Vec<_> = p.roles.iter().map(|r| crate::stage::Estimate::typed(r, n, basis.clone())).collect();
        if let Some(t) = &p.tiebreak {
            rows.push(crate::stage::Estimate::typed(
                t,
                n,
                format!("≤ {n} samples the two reviewers split on × 1 review"),
            ));
        }
        // A concurrency of 0 leaves the roles' own bounds in charge.
        crate::stage::merge_by_role(rows).into_iter().map(|e| e.in_flight(p.concurrency)).collect()
    }
    fn prompts(&self, s: &Settings) -> Vec<PromptRef> {
        let Some(p) = settings(s) else { return vec![] };
        let vars = json!({"dimensions": super::default_dimensions(), "scale_min": 1, "scale_max": 5,
                          "kind": "multi_tool", "scenario": "a / b", "sample": "User: q"});
        vec![PromptRef::new("review.prereview.template", &p.template, vars)]
    }
    fn plan(&self, s: &Settings) -> Result<Plan> {
        let p = settings(s).ok_or_else(|| {
            crate::error::hinted(
                "no `[review.prereview]` section",
                "name one or two LLM roles in `[review.prereview] roles`",
            )
        })?;
        Ok(Plan {
            inputs: vec![],
            config_hash: section_hash(&json!({"prereview": p, "result_chars": super::settings(s).result_chars}))?,
        })
    }
    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let s = ctx.settings;
        let p = settings(s).expect("planned");
        let chars = super::settings(s).result_chars;
        let a: Assignments = inputs.json(&ASSIGNMENTS)?;
        let samples: Vec<Sample> =
            super::from_jsonl(inputs.bytes_of(&SAMPLES)?, "artifacts/review-assign/samples.jsonl")?;
        let by_id: BTreeMap<&str, &Sample> = samples.iter().map(|x| (x.id.as_str(), x)).collect();
        let mut items = Vec::new();
        for x in &a.samples {
            for role in &p.roles {
                let pr = prompt(&p.template, &a, by_id[x.id.as_str()], chars);
                items.push((format!("{}@{role}", x.id), (role.clone(), pr)));
            }
        }
        let opts = BatchOptions::new(STAGE, "pre-review", "sample reviews")
            .concurrency(p.concurrency)
            .max_failed_share(p.max_failed_share, "review.prereview.max_failed_share")
            .fail_point("review_prereview_item");
        let mut batch = Batch::new(ctx, opts)?;
        let aref = &a;
        let answer = &review_answer(&a);
        let work = |(role, pr): (String, Prompt), llm: Item| async move {
            let reply = llm.ask(&role, &pr, None, answer).await?;
            let mut scores = BTreeMap::new();
            for d in &aref.dimensions {
                // The check made sure every dimension is scored on the scale.
                let Some(&score) = reply.value.scores.get(&d.id) else {
                    return Err(ItemError::Failed(format!("internal: the answer has no score for `{}`", d.id)));
                };
                scores.insert(d.id.clone(), score as u8);
            }
            Ok(Scored { scores, note: super::clip(&reply.value.note, 300), exchange: reply.exchange })
        };
        let mut values = batch.run(items, work)?.values;
        // The tie-break: a third reviewer for the samples the two split on, asked once both
        // have answered (its question depends on their verdicts, so it is a second round).
        let rule = super::settings(s);
        let split = splits(&p, &a, &values, &rule);
        if let Some(t) = &p.tiebreak {
            let tb_items = split
                .iter()
                .map(|id| (format!("{id}@{t}"), (t.clone(), prompt(&p.template, &a, by_id[id.as_str()], chars))))
                .collect();
            values.extend(batch.phase("tie-breaks").run(tb_items, work)?.values);
        }
        let mut report = String::from(
            "# LLM pre-review\n\nThese are LLM scores, not human reviews. They count as human scores only with \
             `[review.prereview] count_as_human = true`.\n\n",
        );
        report.push_str(&format!(
            "Roles: {}{}. Samples: {}.\n\n",
            p.roles.iter().map(|r| format!("`{r}`")).collect::<Vec<_>>().join(", "),
            p.tiebreak.as_ref().map(|t| format!("; tie-break `{t}`")).unwrap_or_default(),
            a.samples.len()
        ));
        let all = scores_of(&values, &a, &batch, out)?;
        let passing = all.iter().filter(|x| rule.passes(&x.scores)).count();
        report.push_str(&format!("{} LLM reviews; {passing} pass the acceptance rule.\n", all.len()));
        let copies = values.values().filter(|sc| note_copies_rubric(&sc.note, &a.dimensions)).count();
        if copies > 0 {
            report.push_str(&format!(
                "\n{copies} of the {} LLM reviews copy the rubric: their note is a dimension's description, not something said of the sample, so their scores say little about it.\n",
                all.len()
            ));
        }
        if let Some(t) = &p.tiebreak {
            tiebreak_report(t, &split, &values, &rule, &mut report, out);
        }
        batch.finish(out)?;
        out.file("scores.jsonl", super::to_jsonl(&all)?);
        out.file("report.md", report.into_bytes());
        out.count("llm_reviews", all.len());
        out.count("llm_passing", passing);
        out.count("rubric_copies", copies);
        out.notes.push(format!("{} LLM reviews (marked as LLM scores); {passing} pass the rule", all.len()));
        if copies > 0 {
            out.notes.push(format!("{copies} of them copy a rubric description as their note (report.md)"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The demo's reviewers' reasons (v4), cut by the answer's `maxLength`, copied the
    /// rubric, and so does a note that is a description; words about the sample do not, nor
    /// words too short to tell.
    #[test]
    fn a_note_or_reason_that_is_a_dimension_s_description_copies_the_rubric() {
        let dims = super::super::default_dimensions();
        let desc = |id: &str| dims.iter().find(|d| d.id == id).unwrap().description.clone();
        for (id, reason) in [
            ("completeness", "The tool calls cover everything the query needs;"),
            ("consistency", "The calls come in a sensible order, each using a"),
            ("freshness", "Time-sensitive data comes from the tools, not"),
            ("reliability", "every claim can be traced to the final answer"),
        ] {
            assert!(copies_rubric(reason, &desc(id)), "{id}: {reason}");
        }
        for (id, reason) in [
            ("completeness", "Misses the step that finds the ticker"),
            ("relevance", "A plausible question about Tesla's price"),
            ("relevance", "Realistic request"),
        ] {
            assert!(!copies_rubric(reason, &desc(id)), "{id}: {reason}");
        }
        for d in &dims {
            let cut: String = d.description.chars().take(48).collect();
            assert!(note_copies_rubric(&cut, &dims), "{}: {cut}", d.id);
        }
        assert!(!note_copies_rubric("Asks for a made-up company's price", &dims), "a note of its own");
        let stitched = "the query is a realistic request and the calls come in a sensible order";
        assert!(note_copies_rubric(stitched, &dims), "pieces of two descriptions");
        assert!(!note_copies_rubric("", &dims));
    }
}
