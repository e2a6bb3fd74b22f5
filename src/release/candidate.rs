//! `benchgen release candidate`: the release's files in `artifacts/release-candidate/`,
//! published nowhere, so that `benchgen eval` audits exactly what would be published
//! before it is (issue 38: no item that every panel agent failed reaches a release
//! without a recorded decision). The same build as `release` ([`super::build`]) without
//! the hold of flagged items, which needs the evaluation of this candidate.
//!
//! Part of `benchgen run` where both `[release]` and `[eval]` are configured; the order is
//! then `release-candidate` → `eval` → `release`.

use anyhow::Result;

use crate::settings::Settings;
use crate::stage::{Ctx, Inputs, Output, Plan, Stage, StageSpec};

pub const STAGE: &str = "release-candidate";

pub static SPEC: StageSpec = StageSpec {
    name: STAGE,
    command: "release candidate",
    // 2: writes `servers.json`, as `release` does. 3: and the Inspect AI task. 4: its
    // `servers.json` counts log samples apart and redacts credentials, as `release` 9. 5: the
    // Inspect AI task's loop does not rerun repeated calls, as `release` 10. 6: a flagged item
    // kept by the adjudicated sheet has its decision in `lineage.jsonl`, as `release` 11. 7:
    // the Inspect AI task's system prompt, as `release` 12. 8: the card's curation section,
    // as `release` 14. 9: the Inspect AI task's system prompt, as `release` 15. 10:
    // `invented_entities.json`, as `release` 18. 11: the card counts the tie-break's
    // decisions, as `release` 19.
    version: 11,
    about: "the release's files, unpublished, for the eval panel to audit before `release` publishes",
    reads: super::pool_reads!(),
    writes: super::WRITES,
    section: Some("release"),
};

pub struct CandidateStage;

impl Stage for CandidateStage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }

    fn help(&self) -> &'static str {
        "The release candidate: the files `benchgen release` would publish, built from the same
         inputs and `[release]` settings into `artifacts/release-candidate/` and published
         nowhere. `benchgen eval` runs its panel on the candidate; `benchgen release` then holds
         back every item the panel flagged `all-fail` until the adjudicated sheet (`[release]
         eval_review`) says `keep` or `leave out`. Part of `benchgen run` when `[eval]` is
         configured."
    }

    fn plan(&self, s: &Settings) -> Result<Plan> {
        super::plan(s)
    }

    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        super::build(ctx, inputs, out, super::Mode::Candidate)
    }

    /// Only where an eval panel audits it.
    fn enabled(&self, settings: &Settings) -> bool {
        settings.section_on("release") && settings.section_on("eval")
    }
}
