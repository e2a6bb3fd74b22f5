//! `benchgen review assign` (stage `review-assign`): two distinct reviewers per sample,
//! drawn at random (seeded) among the eligible ones with the lightest load.
//!
//! Eligible for a sample: not its author, below capacity, and (when the reviewer lists
//! expertise tags) qualified for one of the sample's tags (its family, kind or a scenario
//! label). Among the eligible, the two least loaded are taken; ties are broken by a
//! seeded hash of (sample, reviewer), so the draw is random yet reproducible. Without
//! tags or capacities, loads stay within 1 of each other.
//!
//! Assignments are sticky: a rerun keeps every earlier assignment (read from this
//! stage's previous `assignments.json`) and assigns only new samples, or a slot whose
//! reviewer left the roster. A sample that cannot get two reviewers is listed in
//! `unassigned` with the reason, never silently skipped.
//!
//! Outputs: `assignments.json` ([`Assignments`]), `samples.jsonl` (every sample under
//! review, sorted by id: what export, the web app and merge show), `report.md`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{Dimension, Reviewer, Role};
use crate::error::{InputError, Problem};
use crate::ledger::{Explanation, Ledger, NewEvent};
use crate::model::Sample;
use crate::settings::{Settings, section_hash};
use crate::stage::{Artifact, Ctx, Inputs, Output, Plan, Stage, StageSpec};

pub const STAGE: &str = "review-assign";

/// Who reviews what, read by every later review stage and the web app.
pub const ASSIGNMENTS: Artifact<Assignments> = Artifact::new(STAGE, "assignments.json");
/// The samples under review (unified JSONL, sorted by id).
pub const SAMPLES: Artifact<Sample> = Artifact::new(STAGE, "samples.jsonl");

pub static SPEC: StageSpec = StageSpec {
    name: STAGE,
    command: "review assign",
    version: 1,
    about: "two distinct reviewers per sample from the roster (seeded, balanced, expertise, capacity, never the author)",
    reads: &crate::samples::reads(),
    writes: &["assignments.json", "samples.jsonl", "report.md"],
    section: Some("review"),
};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Assignments {
    /// The acceptance rule in words.
    pub rule: String,
    pub dimensions: Vec<Dimension>,
    pub scale_min: u8,
    pub scale_max: u8,
    pub accept_min: u8,
    pub reviewers: Vec<RosterEntry>,
    pub samples: Vec<Assigned>,
    pub unassigned: Vec<Unassigned>,
}

impl Assignments {
    pub fn sample(&self, id: &str) -> Option<&Assigned> {
        self.samples.binary_search_by(|a| a.id.as_str().cmp(id)).ok().map(|i| &self.samples[i])
    }
    pub fn reviewer(&self, id: &str) -> Option<&RosterEntry> {
        self.reviewers.iter().find(|r| r.id == id)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RosterEntry {
    pub id: String,
    pub name: String,
    pub role: Role,
    #[serde(default)]
    pub expertise: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<usize>,
    pub token_version: u32,
    /// Samples assigned to this reviewer.
    pub assigned: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Assigned {
    pub id: String,
    pub content_hash: String,
    pub family: crate::model::Family,
    pub kind: crate::model::Kind,
    #[serde(default)]
    pub scenario: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    /// Two distinct roster ids, in draw order.
    pub reviewers: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Unassigned {
    pub id: String,
    pub reason: String,
}

pub struct AssignStage;

fn extra_paths(s: &Settings) -> Vec<std::path::PathBuf> {
    super::settings(s).extra_samples.iter().map(|p| s.resolve(p)).collect()
}

impl Stage for AssignStage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }
    fn help(&self) -> &'static str {
        "Two distinct reviewers per sample from the roster (`reviews/reviewers.toml`).

         Reads the sample pool (`validate/samples.jsonl`, `levels-export/samples.jsonl`, and
         `[review] extra_samples`) and the roster. Seeded, balanced draw respecting expertise
         tags and capacity; never a sample's author. Earlier assignments are kept: a rerun
         assigns only new samples. Writes `artifacts/review-assign/`: `assignments.json`,
         `samples.jsonl`, `report.md`; then each reviewer's personal link to
         `reviews/links/<id>.txt` when the review secret (`[review] token_secret_env`) is set."
    }
    fn after_command(&self, s: &Settings, printer: &crate::printer::Printer) {
        match write_links(s) {
            Ok(paths) => printer.info(&format!("{} personal links in `reviews/links/`", paths.len())),
            Err(e) => printer.warn(&format!("no review links written: {e:#}")),
        }
    }
    /// The review family's events (assignments, reviews, decisions).
    fn describe_event(&self, kind: &str, payload: &serde_json::Value) -> Option<String> {
        use super::kind::{ASSIGN, DECISION, REVIEW};
        [REVIEW, DECISION, ASSIGN].contains(&kind).then(|| super::describe(kind, payload))
    }
    /// The review family's ids: a sample of the pool (`sample:<id>`).
    fn explain_subject(&self, ledger: &Ledger, runs: &[i64], id: &str) -> Result<Option<Explanation>> {
        match Sample::id_in_subject(id) {
            Some(sample) => super::explain_sample(ledger, runs, sample).map(Some),
            None => Ok(None),
        }
    }
    fn check(&self, s: &Settings, problems: &mut Vec<Problem>) {
        super::settings(s).check(problems);
    }
    fn plan(&self, s: &Settings) -> Result<Plan> {
        let r = super::settings(s);
        let mut inputs = vec![super::roster_path(s)];
        inputs.extend(extra_paths(s));
        let hash = section_hash(&json!({
            "seed": s.project.seed, "dimensions": r.dimensions, "scale": [r.scale_min, r.scale_max],
            "accept_min": r.accept_min,
        }))?;
        Ok(Plan { inputs, config_hash: hash })
    }
    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let s = ctx.settings;
        let r = super::settings(s);
        let roster_path = super::roster_path(s);
        let roster_text = std::str::from_utf8(inputs.bytes(&roster_path)?)
            .with_context(|| format!("`{}` is not UTF-8", s.display_path(&roster_path)))?
            .to_string();
        let roster = super::parse_roster(&roster_text, &s.display_path(&roster_path))?;

        let mut sources: Vec<(String, Vec<u8>)> = Vec::new();
        for a in crate::samples::POOL {
            if inputs.has(a) {
                sources.push((format!("artifacts/{}/{}", a.stage, a.file), inputs.bytes_of(a)?.to_vec()));
            }
        }
        for p in extra_paths(s) {
            sources.push((s.display_path(&p), inputs.bytes(&p)?.to_vec()));
        }
        let samples = read_samples(&sources)?;
        let previous = previous(s);
        let (assignments, notes) = assign(&r, &roster, &samples, previous.as_ref(), s.project.seed);

        for a in &assignments.samples {
            out.event(NewEvent::new(
                super::kind::ASSIGN,
                Some(&crate::model::Sample::subject_for(&a.id)),
                json!({"reviewers": a.reviewers, "content_hash": a.content_hash,
                       "kept": previous.as_ref().is_some_and(|p| p.sample(&a.id).is_some_and(|x| x.reviewers == a.reviewers))}),
            ));
        }
        let sorted: Vec<&Sample> = samples.values().collect();
        out.file("samples.jsonl", super::to_jsonl(&sorted)?);
        out.json("assignments.json", &assignments)?;
        out.file("report.md", report(&assignments, &notes).into_bytes());
        out.count("samples", assignments.samples.len() + assignments.unassigned.len());
        out.count("assigned", assignments.samples.len());
        out.count("unassigned", assignments.unassigned.len());
        out.count("reviewers", assignments.reviewers.len());
        out.notes.push(format!(
            "{} samples assigned to {} reviewers ({} unassigned)",
            assignments.samples.len(),
            assignments.reviewers.len(),
            assignments.unassigned.len()
        ));
        out.notes.extend(notes);
        Ok(())
    }
}

/// This stage's last committed assignments (the sticky state), if any and readable.
fn previous(s: &Settings) -> Option<Assignments> {
    ASSIGNMENTS.on_disk(s)
}

/// Samples from each source, by id; a duplicate id or a bad line is an error naming
/// `file:line` (every problem at once).
pub fn read_samples(sources: &[(String, Vec<u8>)]) -> Result<BTreeMap<String, Sample>> {
    let mut problems = Vec::new();
    let mut out: BTreeMap<String, (Sample, String)> = BTreeMap::new();
    for (shown, bytes) in sources {
        let Ok(text) = std::str::from_utf8(bytes) else {
            problems.push(Problem::new(shown, "is not UTF-8"));
            continue;
        };
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let loc = format!("{shown}:{}", i + 1);
            match serde_json::from_str::<Sample>(line) {
                Err(e) => problems.push(Problem::new(&loc, format!("not a sample: {e}"))),
                Ok(smp) => {
                    if let Some((_, prev)) = out.get(&smp.id) {
                        problems.push(Problem::new(&loc, format!("sample id `{}` already came from {prev}", smp.id)));
                    } else {
                        out.insert(smp.id.clone(), (smp, loc));
                    }
                }
            }
        }
    }
    if !problems.is_empty() {
        return Err(InputError { file: "the samples under review".into(), problems }.into());
    }
    Ok(out.into_iter().map(|(k, (v, _))| (k, v)).collect())
}

/// A stable pseudo-random rank of (sample, reviewer) under the seed.
fn rank(seed: u64, sample: &str, reviewer: &str) -> u64 {
    let h = crate::store::sha256_hex(format!("{seed}\u{1f}{sample}\u{1f}{reviewer}").as_bytes());
    let hex = h.trim_start_matches("sha256:");
    u64::from_str_radix(&hex[..16], 16).unwrap_or(0)
}

fn tags(s: &Sample) -> BTreeSet<String> {
    let mut t: BTreeSet<String> = s.scenario.iter().map(|x| x.to_lowercase()).collect();
    t.insert(s.kind.as_str().to_lowercase());
    t.insert(match s.family {
        crate::model::Family::Etom => "etom".into(),
        crate::model::Family::Finmcp => "finmcp".into(),
    });
    t
}

/// The assignment itself (pure): keeps `previous` where still valid, then assigns the
/// remaining samples in a seeded order. Returns notes for the summary.
pub fn assign(
    r: &super::ReviewSettings,
    roster: &[Reviewer],
    samples: &BTreeMap<String, Sample>,
    previous: Option<&Assignments>,
    seed: u64,
) -> (Assignments, Vec<String>) {
    let mut notes = Vec::new();
    let on_roster: BTreeSet<&str> = roster.iter().map(|x| x.id.as_str()).collect();
    let mut load: BTreeMap<&str, usize> = roster.iter().map(|x| (x.id.as_str(), 0)).collect();
    let mut chosen: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut reassigned = 0;
    if let Some(p) = previous {
        for a in &p.samples {
            if !samples.contains_key(&a.id) {
                continue;
            }
            let kept: Vec<String> = a.reviewers.iter().filter(|x| on_roster.contains(x.as_str())).cloned().collect();
            if kept.len() < a.reviewers.len() {
                reassigned += 1;
            }
            for x in &kept {
                *load.get_mut(x.as_str()).expect("on roster") += 1;
            }
            let key = samples.get_key_value(&a.id).expect("present").0.as_str();
            chosen.insert(key, kept);
        }
    }
    if reassigned > 0 {
        notes.push(format!(
            "{reassigned} earlier assignment(s) lost a reviewer who left the roster; the slot was drawn again"
        ));
    }
    // New samples (and open slots) in a seeded random order.
    let mut todo: Vec<&str> =
        samples.keys().map(String::as_str).filter(|id| chosen.get(id).is_none_or(|v| v.len() < 2)).collect();
    todo.sort_by_key(|id| (rank(seed, id, ""), *id));
    let mut unassigned = Vec::new();
    for id in todo {
        let smp = &samples[id];
        let have = chosen.remove(id).unwrap_or_default();
        let (mut cands, why_not) = eligible(roster, smp, &have, &load);
        cands.sort_by_key(|rv| (load[rv.id.as_str()], rank(seed, id, &rv.id)));
        let need = 2 - have.len();
        if cands.len() < need {
            let detail: Vec<String> = why_not.iter().map(|(w, n)| format!("{n} {w}")).collect();
            unassigned.push(Unassigned {
                id: id.to_string(),
                reason: format!(
                    "only {} eligible reviewer(s) for {} open slot(s) ({} in the roster: {})",
                    cands.len(),
                    need,
                    roster.len(),
                    if detail.is_empty() { "none excluded".into() } else { detail.join(", ") }
                ),
            });
            // Earlier kept reviewers stay counted (their work is not lost) but the sample
            // waits for a full pair.
            for x in &have {
                *load.get_mut(x.as_str()).expect("on roster") -= 1;
            }
            continue;
        }
        let mut pair = have;
        for rv in cands.into_iter().take(need) {
            *load.get_mut(rv.id.as_str()).expect("on roster") += 1;
            pair.push(rv.id.clone());
        }
        chosen.insert(id, pair);
    }
    let samples_out = assigned(chosen, samples);
    let reviewers = roster_entries(roster, &load);
    unassigned.sort_by(|a, b| a.id.cmp(&b.id));
    (
        Assignments {
            rule: r.rule(),
            dimensions: r.dimensions.clone(),
            scale_min: r.scale_min,
            scale_max: r.scale_max,
            accept_min: r.accept_min,
            reviewers,
            samples: samples_out,
            unassigned,
        },
        notes,
    )
}

/// The reviewers who may take an open slot of `smp` (not on it already, not its author,
/// under capacity, with matching expertise), and how many were left out for each reason.
fn eligible<'a>(
    roster: &'a [Reviewer],
    smp: &Sample,
    have: &[String],
    load: &BTreeMap<&str, usize>,
) -> (Vec<&'a Reviewer>, BTreeMap<&'static str, usize>) {
    let stags = tags(smp);
    let mut why_not: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut cands: Vec<&Reviewer> = Vec::new();
    for rv in roster {
        let reason = if have.contains(&rv.id) {
            Some("already assigned")
        } else if smp.author.as_deref() == Some(rv.id.as_str()) {
            Some("the author")
        } else if rv.capacity.is_some_and(|c| load[rv.id.as_str()] >= c) {
            Some("at capacity")
        } else if !rv.expertise.is_empty() && !rv.expertise.iter().any(|t| stags.contains(&t.to_lowercase())) {
            Some("no matching expertise")
        } else {
            None
        };
        match reason {
            Some(w) => *why_not.entry(w).or_default() += 1,
            None => cands.push(rv),
        }
    }
    (cands, why_not)
}

/// Each sample's pair of reviewers, with what the sheet shows of the sample.
fn assigned(chosen: BTreeMap<&str, Vec<String>>, samples: &BTreeMap<String, Sample>) -> Vec<Assigned> {
    chosen
        .into_iter()
        .map(|(id, reviewers)| {
            let smp = &samples[id];
            Assigned {
                id: id.to_string(),
                content_hash: smp.content_hash(),
                family: smp.family,
                kind: smp.kind,
                scenario: smp.scenario.clone(),
                author: smp.author.clone(),
                reviewers,
            }
        })
        .collect()
}

/// The roster as assigned: each reviewer with how many samples they now hold.
fn roster_entries(roster: &[Reviewer], load: &BTreeMap<&str, usize>) -> Vec<RosterEntry> {
    roster
        .iter()
        .map(|rv| RosterEntry {
            id: rv.id.clone(),
            name: rv.name.clone(),
            role: rv.role,
            expertise: rv.expertise.clone(),
            capacity: rv.capacity,
            token_version: rv.token_version,
            assigned: load[rv.id.as_str()],
        })
        .collect()
}

fn report(a: &Assignments, notes: &[String]) -> String {
    let mut s = String::from("# Review assignments\n\n");
    let _ = writeln!(s, "Rule: {}.\n", a.rule);
    let _ = writeln!(s, "| reviewer | name | role | expertise | capacity | assigned |\n|---|---|---|---|---|---|");
    for r in &a.reviewers {
        let _ = writeln!(
            s,
            "| `{}` | {} | {:?} | {} | {} | {} |",
            r.id,
            r.name,
            r.role,
            r.expertise.join(", "),
            r.capacity.map(|c| c.to_string()).unwrap_or_else(|| "-".into()),
            r.assigned
        );
    }
    let _ = writeln!(s, "\n{} samples assigned, {} unassigned.", a.samples.len(), a.unassigned.len());
    for u in &a.unassigned {
        let _ = writeln!(s, "- `{}`: {}", u.id, u.reason);
    }
    for n in notes {
        let _ = writeln!(s, "\n{n}");
    }
    s
}

/// After `review assign`: write each reviewer's personal link to
/// `reviews/links/<id>.txt` (owner-only permissions). The token derives from the secret
/// in `review.token_secret_env`; only its hash is ever stored by the server.
pub fn write_links(s: &Settings) -> Result<Vec<std::path::PathBuf>> {
    let secret = super::secret(s)?;
    let bytes = std::fs::read(ASSIGNMENTS.path(s)).context("cannot read the assignments")?;
    let a: Assignments = serde_json::from_slice(&bytes)?;
    let addr = super::settings(s).serve.addr;
    let dir = s.root.join("reviews").join("links");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create `{}`", dir.display()))?;
    let mut written = Vec::new();
    for r in &a.reviewers {
        let rv = Reviewer {
            id: r.id.clone(),
            name: r.name.clone(),
            expertise: vec![],
            capacity: None,
            role: r.role,
            token_version: r.token_version,
        };
        let token = super::token_for(&secret, &rv);
        let code = super::link_code_for(&secret, &rv);
        let path = dir.join(format!("{}.txt", r.id));
        let text = format!(
            "Review sign-in for {} ({}); keep this private.\n\
             Link (works once): http://{addr}/login#link={code}\n\
             Personal token (paste it at http://{addr}/login to sign in again): {token}\n\
             The link's code is after `#`, so it never reaches a server log; it leaves the address bar at sign-in, \
             and once used it is spent, so the copy in the browser's history signs nobody in. The token never \
             appears in an address.\n",
            r.name, r.id
        );
        crate::store::write_atomic(&path, text.as_bytes())?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        }
        written.push(path);
    }
    Ok(written)
}
