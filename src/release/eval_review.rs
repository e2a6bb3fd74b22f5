//! The review queue of `benchgen eval` as the release reads it: `eval` writes
//! `artifacts/eval/review.csv` (one row per flagged item), an adjudicator fills `decision`
//! in a copy, and `[release] eval_review` names it. The format lives here, with its
//! reader, so `release` imports nothing of `eval` (which reads the release candidate).
//!
//! The release reads the queue itself too ([`QUEUE`]): an item flagged `all-fail` (no
//! panel agent solved it, so its ground truth is suspect) stays out of the published
//! version until the adjudicated sheet says `keep` or `leave out` (issue 38: no all-fail
//! item reaches a release without a recorded decision).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use anyhow::Result;
use serde_json::Value;

use crate::error::{InputError, Problem};
use crate::settings::Settings;
use crate::stage::{Artifact, Inputs};

/// Columns of the sheet.
pub const REVIEW_HEADER: [&str; 6] = ["id", "flags", "solve_rate", "evidence", "decision", "note"];

/// What an adjudicator may write in `decision`: the sample leaves the next release, or
/// stays (blank: not decided yet; a flagged `all-fail` item is then held back).
pub const LEAVE_OUT: &str = "leave out";
pub const KEEP: &str = "keep";

/// The flag that holds an item back until it is decided.
pub const ALL_FAIL: &str = "all-fail";

/// `eval`'s own queue (flags and evidence, decisions blank), declared here because the
/// release reads it and must not import `eval`.
pub const QUEUE: Artifact = Artifact::new("eval", "review.csv");

/// `eval`'s analysis of every item (`items.jsonl`), whose evidence the rule that stands in
/// for a person reads (`[release] decide_flagged = "evidence"`, [`evidence`]).
pub const ITEMS: Artifact = Artifact::new("eval", "items.jsonl");

/// Who decides the items the panel flagged `all-fail` that the adjudicated sheet leaves
/// undecided (`[release] decide_flagged`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Decider {
    /// A person, in the adjudicated sheet (`[release] eval_review`); until then the item is
    /// held back (or published and listed, `hold_flagged = false`).
    #[default]
    Person,
    /// A rule standing in for a person where the panel's evidence can decide: left out
    /// where two or more agents agree on an offered tool outside the reference (not one an
    /// L2's EFS set may lack, nor a reference tool's EFS sibling), kept where an agent solved
    /// it in another tool space, made at least half of the reference's calls as it does
    /// while calling for every one, or where two or more left out only a lookup of an entity
    /// `levels l3` invented; the rest is held back as for a person (an L5 whose agents agree
    /// only on tools that share no word with the request among them). The card and the
    /// CHANGELOG say so.
    Evidence,
}

impl Decider {
    pub fn is_person(&self) -> bool {
        *self == Decider::Person
    }
}

/// What an adjudicated sheet decides: id → the reason as the CHANGELOG gives it.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Adjudicated {
    /// "left out after evaluation: <flags>: <note>".
    pub leave_out: HashMap<String, String>,
    /// "kept after evaluation: <flags>: <note>".
    pub keep: HashMap<String, String>,
    /// The ids decided by rule from the panel's evidence ([`Decider::Evidence`]), standing
    /// in for a person; the others were decided in the sheet.
    pub by_rule: BTreeSet<String>,
}

impl Adjudicated {
    /// Whether a person decided on `id`.
    pub fn decided(&self, id: &str) -> bool {
        self.leave_out.contains_key(id) || self.keep.contains_key(id)
    }

    /// Decides the flagged item `id` by rule ([`Decider::Evidence`]) where the panel's
    /// evidence can: left out where two or more agents agree on an offered tool outside the
    /// reference ([`Evidence::AgreedOtherwise`]), kept where an agent solved it in another
    /// space, its calls cover the reference's ([`Evidence::Covered`]), each turn's calls were
    /// made by some agent ([`Evidence::TurnsCovered`]), or it left out only a lookup of an
    /// invented entity ([`Evidence::Invented`]). Returns whether it
    /// decided; `why` is the flag as [`all_fail`] gives it.
    pub fn decide_by_rule(&mut self, id: &str, why: &str, evidence: &Evidence) -> bool {
        const BY: &str =
            "by rule from the panel's evidence (`[release] decide_flagged = \"evidence\"`), standing in for a person";
        let (keep, reason) = match evidence {
            Evidence::AgreedOtherwise => (false, format!("left out after evaluation {BY}: {why}")),
            Evidence::SolvedIn(space) => {
                (true, format!("kept after evaluation {BY}: {why}; an agent solved it in the `{space}` tool space"))
            }
            Evidence::Invented(entity) => (
                true,
                format!("kept after evaluation {BY}: {why}; the lookup of `{entity}` the agents left out is needed"),
            ),
            Evidence::Covered => (
                true,
                format!(
                    "kept after evaluation {BY}: {why}; the panel's calls cover the reference's, so it failed on arguments, order or extra calls"
                ),
            ),
            Evidence::TurnsCovered(by) => {
                let lapsed = by.iter().any(|a| a == crate::model::LAPSED_TURN);
                let what = if lapsed {
                    "each turn's reference calls were made in that turn by a panel agent, or are the action its request names, which the agents left out without trying any call"
                } else {
                    "each turn's reference calls were made in that turn by a panel agent"
                };
                (
                    true,
                    format!(
                        "kept after evaluation {BY}: {why}; {what} ({}), though no agent held the whole conversation",
                        crate::model::turns_text(by)
                    ),
                )
            }
            Evidence::ForPerson | Evidence::Silent => return false,
        };
        if keep {
            self.keep.insert(id.to_string(), reason);
        } else {
            self.leave_out.insert(id.to_string(), reason);
        }
        self.by_rule.insert(id.to_string());
        true
    }

    /// The lineage record of a kept decision on `id`: who decided and why.
    pub fn kept(&self, id: &str) -> Option<Value> {
        let reason = self.keep.get(id)?;
        let by = if self.by_rule.contains(id) { "rule" } else { "person" };
        Some(serde_json::json!({"decision": KEEP, "decided_by": by, "reason": reason}))
    }
}

/// What the panel's evidence says of a flagged item, for the rule that stands in for a
/// person ([`Decider::Evidence`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Evidence {
    /// An agent solved it in another tool space: (that space).
    SolvedIn(String),
    /// Two or more agents agree on an offered tool outside the reference instead of it.
    AgreedOtherwise,
    /// Two or more agents agree on a tool that is no sign against the reference: one an L2's
    /// EFS set may lack (`proposed_efs_member`), or a reference tool's EFS sibling
    /// (`efs_sibling_of`, the request may not name its server). A person decides, even where
    /// another agent's calls cover the reference: the question is the request's.
    ForPerson,
    /// No agreement on another tool, and some agent's run called for every reference call,
    /// making at least half of its calls as it does.
    Covered,
    /// Two or more agents called only part of the reference, leaving out only lookups of an
    /// entity `levels l3` invented for the request (`invented_entity`, held here): no agent
    /// can know its id, so the left-out lookup is the agents' lapse, not a needless call.
    Invented(String),
    /// A multi-turn item that no run covered, each of whose turns some agent made in that
    /// turn (`turns_covered_by`, held here): the panel made every turn's calls.
    TurnsCovered(Vec<String>),
    /// Neither: the panel says nothing for or against the reference.
    Silent,
}

/// The panel's evidence on each item of `eval`'s `items.jsonl` (`name`; one record per
/// item and tool space), by id: solved in some space first, then agreement against the
/// reference in any space, then one held for a person, then a plan covered or a left-out
/// lookup of an invented entity. A line that is not an item record is an
/// error naming it.
pub fn evidence(name: &str, bytes: &[u8]) -> Result<BTreeMap<String, Evidence>, InputError> {
    // An agreement against the reference in one space outweighs a question for a person in
    // another; that question outweighs a covered plan.
    let rank = |e: &Evidence| match e {
        Evidence::SolvedIn(_) => 0,
        Evidence::AgreedOtherwise => 1,
        Evidence::ForPerson => 2,
        Evidence::Covered | Evidence::Invented(_) | Evidence::TurnsCovered(_) => 3,
        Evidence::Silent => 4,
    };
    let mut out: BTreeMap<String, Evidence> = BTreeMap::new();
    let mut problems = Vec::new();
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let loc = format!("line {}", i + 1);
        let v: Value = match serde_json::from_slice(line) {
            Ok(v) => v,
            Err(e) => {
                problems.push(Problem::new(&loc, format!("not a JSON item record: {e}")));
                continue;
            }
        };
        let Some(id) = v["id"].as_str() else {
            problems.push(Problem::new(format!("{loc} (id)"), "missing: every item record has an `id`"));
            continue;
        };
        let this = of_record(&v);
        // The strongest evidence of any space wins; among equals, the first by file order.
        match out.get(id) {
            Some(had) if rank(had) <= rank(&this) => {}
            _ => {
                out.insert(id.to_string(), this);
            }
        }
    }
    if !problems.is_empty() {
        return Err(InputError { file: name.to_string(), problems });
    }
    Ok(out)
}

/// One item record's evidence (in its tool space).
fn of_record(v: &Value) -> Evidence {
    let all_fail = v["flags"].as_array().is_some_and(|f| f.iter().any(|x| x == ALL_FAIL));
    if !all_fail {
        return Evidence::SolvedIn(v["tool_space"].as_str().unwrap_or("?").to_string());
    }
    let ev = &v["evidence"];
    let listed = |k: &str| ev[k].as_array().is_some_and(|a| !a.is_empty());
    // Two agents calling only part of the reference (`agreed_short`) is left to a person:
    // weak agents stop early that way, so it does not tell a needless call from a lapse;
    // unless all they left out is a lookup of an entity `levels l3` invented
    // (`invented_entity`): no agent can know its id, so it is a lapse.
    // An agreed tool proposed for the EFS set (L2) or of a reference tool's EFS set (other
    // levels) is left to a person: it is the same function, so not a sign against it.
    let for_person = !ev["proposed_efs_member"].is_null() || !ev["efs_sibling_of"].is_null();
    // An L5 whose agents agree only on tools that share no word with the request
    // (`unrelated_to_request`) is left to a person too: weak agents flail that way, so it is
    // no sign that a tool serves the request, but a word test cannot see a synonym
    // ("remind me" and `set_reminder`).
    let for_person = for_person || ev["unrelated_to_request"].is_string();
    if ev["agreed_tool"].is_string() && !for_person {
        Evidence::AgreedOtherwise
    } else if ev["agreed_tool"].is_string() {
        Evidence::ForPerson
    } else if listed("covered_by") {
        Evidence::Covered
    } else if let Some(entity) = ev["invented_entity"].as_str().filter(|_| listed("agreed_short")) {
        Evidence::Invented(entity.to_string())
    } else if listed("turns_covered_by") {
        let by = ev["turns_covered_by"].as_array().into_iter().flatten().filter_map(Value::as_str);
        Evidence::TurnsCovered(by.map(str::to_string).collect())
    } else {
        Evidence::Silent
    }
}

/// The decisions of an adjudicated eval review sheet. Every problem (header, cells, a
/// decision other than `leave out`, `keep` or blank, an id twice) is an error naming file
/// and line.
pub fn read(s: &Settings, inputs: &Inputs, path: &Path) -> Result<Adjudicated> {
    let name = s.display_path(path);
    Ok(parse(&name, inputs.bytes(path)?)?)
}

/// [`read`] of the sheet's bytes, `name` naming it in problems.
pub fn parse(name: &str, bytes: &[u8]) -> Result<Adjudicated, InputError> {
    let mut problems = Vec::new();
    let rows = crate::csvout::read_rows(name, bytes, &REVIEW_HEADER, &mut problems);
    let mut out = Adjudicated::default();
    let mut seen = HashMap::new();
    for r in rows {
        let (id, flags, decision, note) = (r.cells[0].trim(), r.cells[1].trim(), r.cells[4].trim(), r.cells[5].trim());
        if let Some(first) = seen.insert(id.to_string(), r.loc.clone()) {
            problems.push(Problem::new(&r.loc, format!("`{id}` is listed twice (first at {first})")));
            continue;
        }
        let why = if note.is_empty() { String::new() } else { format!(": {note}") };
        match decision.to_lowercase().as_str() {
            d if d == LEAVE_OUT => {
                out.leave_out.insert(id.to_string(), format!("left out after evaluation: {flags}{why}"));
            }
            d if d == KEEP => {
                out.keep.insert(id.to_string(), format!("kept after evaluation: {flags}{why}"));
            }
            "" => {}
            _ => problems.push(Problem::new(
                format!("{} (decision)", r.loc),
                format!("`{decision}`: write `{LEAVE_OUT}`, `{KEEP}` or leave it blank"),
            )),
        }
    }
    if !problems.is_empty() {
        return Err(InputError { file: name.to_string(), problems });
    }
    Ok(out)
}

/// The items of `eval`'s queue flagged [`ALL_FAIL`]: id → "flagged `all-fail` by the eval
/// panel (solve rate 0.0000; <evidence>)", sorted by id.
pub fn all_fail(name: &str, bytes: &[u8]) -> Result<BTreeMap<String, String>, InputError> {
    let mut problems = Vec::new();
    let rows = crate::csvout::read_rows(name, bytes, &REVIEW_HEADER, &mut problems);
    if !problems.is_empty() {
        return Err(InputError { file: name.to_string(), problems });
    }
    Ok(rows
        .into_iter()
        .filter(|r| r.cells[1].split_whitespace().any(|f| f == ALL_FAIL))
        .map(|r| {
            let (id, rate, evidence) = (r.cells[0].trim(), r.cells[2].trim(), r.cells[3].trim());
            let evidence = if evidence.is_empty() { String::new() } else { format!("; {evidence}") };
            (id.to_string(), format!("flagged `{ALL_FAIL}` by the eval panel (solve rate {rate}{evidence})"))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHEET: &str = "id,flags,solve_rate,evidence,decision,note\n\
        L1-1,all-fail label-mismatch,0.0000,2 agents chose Beta::u,,\n\
        L2-1,unstable,0.5000,,,\n\
        L3-1,all-fail,0.0000,,keep,the tool is right; the agents were wrong\n\
        L4-1,all-fail,0.0000,,leave out,\n";

    #[test]
    fn decisions_and_all_fail_flags_are_read_apart() {
        let a = parse("review.csv", SHEET.as_bytes()).unwrap();
        assert_eq!(a.keep["L3-1"], "kept after evaluation: all-fail: the tool is right; the agents were wrong");
        assert_eq!(a.leave_out["L4-1"], "left out after evaluation: all-fail");
        assert!(a.decided("L3-1") && a.decided("L4-1") && !a.decided("L1-1"));
        let flagged = all_fail("review.csv", SHEET.as_bytes()).unwrap();
        assert_eq!(flagged.keys().collect::<Vec<_>>(), ["L1-1", "L3-1", "L4-1"]);
        assert_eq!(flagged["L1-1"], "flagged `all-fail` by the eval panel (solve rate 0.0000; 2 agents chose Beta::u)");
    }

    /// `decide_flagged = "evidence"`: agreement against the reference (a tool outside it, or
    /// only part of it) leaves an item out; solved in another space or a covered plan keeps
    /// it; silence decides nothing; each decision is marked as the rule's.
    #[test]
    fn the_rule_decides_what_the_panels_evidence_can_and_nothing_else() {
        let items = concat!(
            r#"{"id":"L1-1","tool_space":"oracle","flags":["all-fail"],"evidence":{"agreed_tool":"B::u","note":"two chose B::u"}}"#,
            "\n",
            r#"{"id":"L3-1","tool_space":"oracle","flags":["all-fail"],"evidence":{"agreed_tool":"A::z","note":"two chose A::z"}}"#,
            "\n\n",
            r#"{"id":"L2-1","tool_space":"oracle","flags":["all-fail"],"evidence":{"covered_by":["a"],"note":"covered"}}"#,
            "\n",
            r#"{"id":"L4-1","tool_space":"oracle","flags":["all-fail"],"evidence":{"agreed_short":["A::y"],"agreed_short_by":["a","b"],"note":"short"}}"#,
            "\n",
            r#"{"id":"L2-2","tool_space":"oracle","flags":["all-fail"],"evidence":{"agreed_tool":"B::w","proposed_efs_member":"B::w","note":"efs"}}"#,
            "\n",
            r#"{"id":"L3-2","tool_space":"oracle","flags":["all-fail"],"evidence":{"agreed_tool":"B::u","efs_sibling_of":"A::x","note":"sibling"}}"#,
            "\n",
            r#"{"id":"L3-3","tool_space":"oracle","flags":["all-fail"],"evidence":{"agreed_tool":"B::u","efs_sibling_of":"A::x","covered_by":["c"],"note":"sibling, covered"}}"#,
            "\n",
            r#"{"id":"L4-2","tool_space":"full","flags":["all-fail"],"evidence":{"covered_by":["c"],"note":"covered"}}"#,
            "\n",
            r#"{"id":"L4-2","tool_space":"oracle","flags":["all-fail"],"evidence":{"agreed_tool":"B::u","efs_sibling_of":"A::x","note":"sibling"}}"#,
            "\n",
            r#"{"id":"L4-3","tool_space":"oracle","flags":["all-fail"],"evidence":{"agreed_tool":"B::u","efs_sibling_of":"A::x","note":"sibling"}}"#,
            "\n",
            r#"{"id":"L4-3","tool_space":"full","flags":["all-fail"],"evidence":{"agreed_tool":"C::q","note":"two chose C::q"}}"#,
            "\n",
            r#"{"id":"L5-1","tool_space":"full","flags":["all-fail"],"evidence":{"agreed_tool":"B::u","note":"x"}}"#,
            "\n",
            r#"{"id":"L5-1","tool_space":"oracle","flags":[],"solve_rate":0.5}"#,
            "\n",
            r#"{"id":"L3-4","tool_space":"oracle","flags":["all-fail"],"evidence":{"agreed_short":["A::b"],"agreed_short_by":["a","b"],"invented_entity":"Morvira","note":"short of a lookup"}}"#,
            "\n",
            r#"{"id":"L5-2","tool_space":"oracle","flags":["all-fail"],"evidence":{"agreed_tool":"S::send","unrelated_to_request":"shares no word","note":"unrelated"}}"#,
            "\n",
            r#"{"id":"dialog-1","tool_space":"oracle","flags":["all-fail"],"evidence":{"turns_covered_by":["b","a"],"note":"turn by turn"}}"#,
            "\n",
        );
        let ev = evidence("items.jsonl", items.as_bytes()).unwrap();
        assert_eq!(ev["L5-1"], Evidence::SolvedIn("oracle".into()), "solved anywhere wins");
        let mut a = Adjudicated::default();
        let decided: Vec<bool> = ["L1-1", "L2-1", "L3-1", "L4-1", "L5-1", "L2-2", "L3-2", "L3-3", "L4-2", "L4-3"]
            .iter()
            .map(|id| a.decide_by_rule(id, "flagged", &ev[*id]))
            .collect();
        // Two agents calling only part of the reference, agreeing on a tool an L2's EFS set
        // may lack, or on a reference tool's EFS sibling, is left to a person, even where
        // another agent covered the reference, in the same space or another (L3-3, L4-2);
        // an agreement against the reference in another space outweighs it (L4-3).
        assert_eq!(decided, [true, true, true, false, true, false, false, false, false, true]);
        assert_eq!(ev["L4-2"], Evidence::ForPerson);
        // Short only of a lookup of an invented entity: the agents' lapse, kept.
        assert_eq!(ev["L3-4"], Evidence::Invented("Morvira".into()));
        assert!(a.decide_by_rule("L3-4", "flagged", &ev["L3-4"]));
        assert!(
            a.keep["L3-4"].ends_with("the lookup of `Morvira` the agents left out is needed"),
            "{}",
            a.keep["L3-4"]
        );
        // A dialogue whose every turn some agent made in that turn: the reference holds, kept.
        assert_eq!(ev["dialog-1"], Evidence::TurnsCovered(vec!["b".into(), "a".into()]));
        assert!(a.decide_by_rule("dialog-1", "flagged", &ev["dialog-1"]));
        assert!(
            a.keep["dialog-1"].contains("made in that turn by a panel agent (turn 1: `b`, turn 2: `a`)"),
            "{}",
            a.keep["dialog-1"]
        );
        // An L5's agents agreeing on a tool that shares no word with the request: no sign
        // against the reference, and none for it either; a person decides.
        assert_eq!(ev["L5-2"], Evidence::ForPerson);
        assert!(!a.decide_by_rule("L5-2", "flagged", &ev["L5-2"]));
        assert!(a.leave_out.contains_key("L4-3"));
        assert!(a.leave_out["L1-1"].contains("by rule") && a.leave_out.contains_key("L3-1"));
        assert!(a.keep["L2-1"].contains("cover the reference's") && a.keep["L5-1"].contains("`oracle`"));
        assert!(!a.decided("L4-1") && !a.by_rule.contains("L4-1"));
        assert_eq!(a.kept("L2-1").unwrap()["decided_by"], "rule");
        assert!(a.kept("L1-1").is_none());
        let e = evidence("items.jsonl", b"{\"tool_space\":\"oracle\"}\nnot json\n").unwrap_err();
        assert!(e.to_string().contains("line 1 (id)") && e.to_string().contains("line 2"), "{e}");
    }

    #[test]
    fn a_decision_that_is_neither_names_the_line() {
        let e = parse("review.csv", SHEET.replace("keep,", "drop,").as_bytes()).unwrap_err();
        assert!(e.to_string().contains("(decision)") && e.to_string().contains("`drop`"), "{e}");
    }
}
