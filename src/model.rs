//! Core records shared by the stages: the normalised catalog.
//!
//! Wire format of `artifacts/registry-import/catalog.json` and `artifacts/filter/catalog.json`:
//! `{"servers": [Server]}`, servers sorted by name and tools by name, so the same
//! catalog always serialises to the same bytes. Categories keep their given order
//! because the first one is the server's main category.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Separator between server and tool name in a tool id.
pub const TOOL_ID_SEP: &str = "::";

/// The tool id `"<server>::<tool>"`, both parts trimmed.
pub fn tool_id(server: &str, tool: &str) -> String {
    format!("{}{TOOL_ID_SEP}{}", server.trim(), tool.trim())
}

/// Split a tool id at the first `::` (a byte scan: scoring runs this for every call read).
pub fn split_tool_id(id: &str) -> Option<(&str, &str)> {
    let b = id.as_bytes();
    let i = b.windows(2).position(|w| w == TOOL_ID_SEP.as_bytes())?;
    Some((&id[..i], &id[i + 2..]))
}

/// A tool id as every stage compares it: `server::tool` with both parts trimmed (split at the
/// first `::`, so a tool name may itself hold `::`); an id without `::` is trimmed whole.
/// Published benchmarks carry stray spaces around `::`, and user-given ids are typed by hand.
pub fn norm_tool_id(id: &str) -> String {
    match split_tool_id(id) {
        Some((server, tool)) => tool_id(server, tool),
        None => id.trim().to_string(),
    }
}

/// [`norm_tool_id`] without allocating when the id is already normal (the usual case).
pub fn norm_tool_id_cow(id: &str) -> std::borrow::Cow<'_, str> {
    let clean = |p: &str| p.trim().len() == p.len();
    let normal = match split_tool_id(id) {
        Some((a, b)) => clean(a) && clean(b),
        None => clean(id),
    };
    if normal { std::borrow::Cow::Borrowed(id) } else { std::borrow::Cow::Owned(norm_tool_id(id)) }
}

/// What a stage left out of its output, in vector's shape: how many, whether on purpose (a
/// rule, a verdict, a policy) or because something failed, and why. Stage summaries list these
/// under `drops` so every drop is counted with its reason.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Drops {
    pub count: usize,
    pub intentional: bool,
    pub reason: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Catalog {
    pub servers: Vec<Server>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Server {
    pub name: String,
    pub description: String,
    pub summary: String,
    pub url: String,
    pub categories: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
    pub tools: Vec<Tool>,
    /// Where a scraped server came from (registry ids, repository, packages, remotes,
    /// per-field provenance). Absent for catalogs imported from ETOM's snapshot, so those
    /// serialise exactly as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<Box<RegistryInfo>>,
}

/// Registry metadata of one server (see `docs/registry.md`, "Catalog fields").
///
/// Every collection is skipped when empty so a record carries only what its sources said.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RegistryInfo {
    /// Per source name: the server's id, page URL and snapshot in that source.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub sources: std::collections::BTreeMap<String, SourceRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub packages: Vec<Package>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remotes: Vec<Remote>,
    /// Categories (or attributes) as the sources gave them, before mapping.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub source_categories: Vec<String>,
    /// Why each entry of `categories` was assigned.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub category_reasons: Vec<CategoryReason>,
    /// Where the tool list came from: `"<source> snapshot <id>"` or `"listed live at <time>"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools_from: Option<String>,
    /// Per field: which source said what (only fields some source set).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub provenance: std::collections::BTreeMap<String, Vec<FieldClaim>>,
    /// Source fields benchgen does not model, kept as given (`"<source>.<field>"` keys).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub extra: std::collections::BTreeMap<String, Value>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SourceRef {
    pub id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url: String,
    pub snapshot: String,
    /// When the snapshot was taken (RFC 3339, UTC).
    pub fetched_at: String,
}

/// A runnable package (`registry_type` is `npm`, `pypi`, `oci`, …).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(deny_unknown_fields)]
pub struct Package {
    pub registry_type: String,
    pub identifier: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<String>,
}

/// A remote endpoint (`transport` is `streamable-http`, `sse`, …).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(deny_unknown_fields)]
pub struct Remote {
    pub transport: String,
    pub url: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CategoryReason {
    pub category: String,
    /// `rule`, `llm` or `source`.
    pub by: String,
    pub reason: String,
}

/// One source's value for one field.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FieldClaim {
    pub source: String,
    pub at: String,
    pub value: Value,
    /// This claim's value is the one the catalog uses.
    #[serde(default)]
    pub chosen: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Tool {
    pub id: String,
    pub name: String,
    pub description: String,
    pub input_schema: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
}

impl Catalog {
    pub fn tool_count(&self) -> usize {
        self.servers.iter().map(|s| s.tools.len()).sum()
    }

    /// Sort servers by name and tools by name (the canonical order).
    pub fn sort(&mut self) {
        self.servers.sort_by(|a, b| a.name.cmp(&b.name));
        for s in &mut self.servers {
            s.tools.sort_by(|a, b| a.name.cmp(&b.name));
        }
    }

    pub fn tools(&self) -> impl Iterator<Item = (&Server, &Tool)> {
        self.servers.iter().flat_map(|s| s.tools.iter().map(move |t| (s, t)))
    }

    pub fn load(path: &std::path::Path) -> anyhow::Result<Self> {
        use anyhow::Context;
        let bytes = std::fs::read(path).with_context(|| format!("cannot read `{}`", path.display()))?;
        serde_json::from_slice(&bytes).with_context(|| format!("`{}` is not a benchgen catalog", path.display()))
    }
}

// ---------------------------------------------------------------------------
// Unified benchmark samples (SPEC.md "Core model").
//
// Wire format, one JSON object per line of a `.jsonl` file:
// `{"id", "family": "etom"|"finmcp", "kind": "L1".."L5"|"single_tool"|"multi_tool"|"multi_turn",
//   "scenario": [..], "turns": [{"user", "reference_plan": [PlanCall], "gold_reply"?,
//   "trajectory"?: [[RecordedCall]]}], "out_of_scope", "difficulty": "easy"|"medium"|"hard",
//   "provenance_id", "author"?}`.
//
// This is the sample pool's contract: every stage that makes samples writes them in this
// shape (see `crate::samples`), and review and release read nothing else.

/// Which reference method a sample follows (decides how it is scored).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    Etom,
    Finmcp,
}

/// The task type of a sample: ETOM levels or FinMCP task kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Kind {
    L1,
    L2,
    L3,
    L4,
    L5,
    #[serde(rename = "single_tool")]
    SingleTool,
    #[serde(rename = "multi_tool")]
    MultiTool,
    #[serde(rename = "multi_turn")]
    MultiTurn,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::L1 => "L1",
            Kind::L2 => "L2",
            Kind::L3 => "L3",
            Kind::L4 => "L4",
            Kind::L5 => "L5",
            Kind::SingleTool => "single_tool",
            Kind::MultiTool => "multi_tool",
            Kind::MultiTurn => "multi_turn",
        }
    }

    /// The family a kind belongs to.
    pub fn family(self) -> Family {
        match self {
            Kind::L1 | Kind::L2 | Kind::L3 | Kind::L4 | Kind::L5 => Family::Etom,
            _ => Family::Finmcp,
        }
    }

    /// The ETOM level number, if this is an ETOM kind.
    pub fn level(self) -> Option<u8> {
        match self {
            Kind::L1 => Some(1),
            Kind::L2 => Some(2),
            Kind::L3 => Some(3),
            Kind::L4 => Some(4),
            Kind::L5 => Some(5),
            _ => None,
        }
    }

    pub fn from_level(level: u8) -> Option<Kind> {
        [Kind::L1, Kind::L2, Kind::L3, Kind::L4, Kind::L5].get(usize::from(level).checked_sub(1)?).copied()
    }
}

/// Difficulty by the number of reference calls: easy ≤ 5, medium 6–10, hard > 10.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Difficulty {
    Easy,
    Medium,
    Hard,
}

impl Difficulty {
    pub fn from_calls(calls: usize) -> Self {
        match calls {
            0..=5 => Difficulty::Easy,
            6..=10 => Difficulty::Medium,
            _ => Difficulty::Hard,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Difficulty::Easy => "easy",
            Difficulty::Medium => "medium",
            Difficulty::Hard => "hard",
        }
    }
}

/// One call of a reference plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanCall {
    /// Tool ids; more than one when any member of an equal function set serves the call.
    pub alternatives: Vec<String>,
    /// Index of the sequential step; calls sharing a group may run in parallel.
    pub group: u32,
    /// Indices of earlier calls (in this turn's plan) whose output this call consumes.
    #[serde(default)]
    pub depends_on: Vec<usize>,
}

/// One user turn and what a correct agent does in it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Turn {
    pub user: String,
    pub reference_plan: Vec<PlanCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gold_reply: Option<String>,
    /// The executed reference trajectory of this turn: sequential groups of calls (calls in
    /// one group ran in parallel), as reviewers see it. Empty when nothing was executed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trajectory: Vec<Vec<RecordedCall>>,
}

/// One executed tool call of a reference trajectory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedCall {
    /// Tool id (`server::tool`).
    pub tool: String,
    pub arguments: serde_json::Value,
    /// The tool's result as text (what the agent saw).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// Set when the call failed (transport failure or `isError`), with the reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Set when the call is not part of the reference plan, with the reason (`repeated: …`,
    /// `unrequested: …`): the agent made it, the request does not need it. Its result stays
    /// a recorded response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left_out: Option<String>,
}

/// One benchmark item in the unified format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sample {
    pub id: String,
    pub family: Family,
    pub kind: Kind,
    #[serde(default)]
    pub scenario: Vec<String>,
    pub turns: Vec<Turn>,
    #[serde(default)]
    pub out_of_scope: bool,
    pub difficulty: Difficulty,
    #[serde(default)]
    pub provenance_id: String,
    /// Who wrote the sample (a reviewer id, or `llm:<role>` for synthesised ones), so review
    /// never assigns a sample to its author.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
}

/// Ledger subjects of samples are `sample:<id>`.
const SAMPLE_SUBJECT: &str = "sample:";

impl Turn {
    /// The reference plan's executed calls: the trajectory without its left-out calls, in
    /// non-empty groups (group `g` carries out the plan's `g`-th group).
    pub fn gold_trajectory(&self) -> Vec<Vec<RecordedCall>> {
        self.trajectory
            .iter()
            .map(|g| g.iter().filter(|c| c.left_out.is_none()).cloned().collect::<Vec<_>>())
            .filter(|g| !g.is_empty())
            .collect()
    }
}

impl Sample {
    /// The ledger subject of this sample's lineage (`benchgen explain sample:<id>`).
    pub fn subject(&self) -> String {
        Self::subject_for(&self.id)
    }

    /// The ledger subject of the sample with this id: every stage recording about a sample
    /// (synthesis, validation, review, release) files its events under it.
    pub fn subject_for(id: &str) -> String {
        format!("{SAMPLE_SUBJECT}{id}")
    }

    /// The sample id a ledger subject (or an `explain` id) names; `None` when it names
    /// no sample.
    pub fn id_in_subject(subject: &str) -> Option<&str> {
        subject.strip_prefix(SAMPLE_SUBJECT)
    }

    /// SHA-256 of the sample's JSON line: review scores are tied to it, so editing a sample
    /// invalidates the scores given to the old text.
    pub fn content_hash(&self) -> String {
        crate::store::sha256_hex(&serde_json::to_vec(self).expect("a sample serialises"))
    }

    /// Number of reference calls over all turns (what difficulty counts).
    pub fn reference_calls(&self) -> usize {
        self.turns.iter().map(|t| t.reference_plan.len()).sum()
    }
}

/// In an eval item's `evidence.turns_covered_by` (written by `eval`, read by `release`'s rule
/// in place of a person): a turn no agent made, whose request asks for the action its
/// reference call does, and in which no agent called anything. Here, where both read it.
pub const LAPSED_TURN: &str = "";

/// `evidence.turns_covered_by` as words: who made each turn, or that its requested action was
/// left out without a call.
pub fn turns_text(by: &[String]) -> String {
    let turn = |(i, a): (usize, &String)| match a.as_str() {
        LAPSED_TURN => format!(
            "turn {}: no agent called anything, though its request asks for the action its reference call does",
            i + 1
        ),
        a => format!("turn {}: `{a}`", i + 1),
    };
    by.iter().enumerate().map(turn).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_subject_reads_back_as_its_id() {
        assert_eq!(Sample::subject_for("chain-1"), "sample:chain-1");
        assert_eq!(Sample::id_in_subject(&Sample::subject_for("a:b")), Some("a:b"));
        assert_eq!(Sample::id_in_subject("log:chain-1"), None);
    }

    #[test]
    fn tool_ids_normalise_around_the_first_separator() {
        assert_eq!(norm_tool_id(" My Server :: do it "), "My Server::do it");
        assert_eq!(norm_tool_id("S::a::b"), "S::a::b");
        assert_eq!(norm_tool_id(" S ::a:: b"), "S::a:: b");
        assert_eq!(norm_tool_id("  bare  "), "bare");
        assert_eq!(norm_tool_id("::t"), "::t");
        assert_eq!(norm_tool_id(""), "");
        assert_eq!(split_tool_id("S::t"), Some(("S", "t")));
        assert_eq!(split_tool_id("S:t"), None);
        for id in ["S::t", " S::t", "S ::t", "S:: t", "S::t ", "bare", " bare", "", "a::b::c", "::"] {
            let cow = norm_tool_id_cow(id);
            assert_eq!(cow, norm_tool_id(id), "{id:?}");
            assert_eq!(
                matches!(cow, std::borrow::Cow::Borrowed(_)),
                cow == id,
                "{id:?} allocates only when it changes"
            );
        }
    }

    #[test]
    fn drops_serialise_in_vectors_shape() {
        let d = Drops { count: 3, intentional: true, reason: "rule `arith`".into() };
        assert_eq!(serde_json::to_string(&d).unwrap(), r#"{"count":3,"intentional":true,"reason":"rule `arith`"}"#);
    }

    #[test]
    fn samples_round_trip_with_trajectory_and_hash_follows_content() {
        let line = r#"{"id":"m1","family":"finmcp","kind":"multi_tool","scenario":["ops","disk"],"turns":[{"user":"q","reference_plan":[{"alternatives":["S::a"],"group":0}],"gold_reply":"done","trajectory":[[{"tool":"S::a","arguments":{"x":1},"result":"ok"}]]}],"out_of_scope":false,"difficulty":"easy","provenance_id":"chain:3","author":"llm:synth"}"#;
        let mut s: Sample = serde_json::from_str(line).unwrap();
        assert_eq!(s.turns[0].trajectory[0][0].result.as_deref(), Some("ok"));
        let before = s.content_hash();
        assert_eq!(before, s.clone().content_hash());
        s.turns[0].gold_reply = Some("done.".into());
        assert_ne!(before, s.content_hash(), "an edit changes the hash");
        let old: Sample = serde_json::from_str(
            r#"{"id":"x","family":"etom","kind":"L1","turns":[{"user":"q","reference_plan":[]}],"difficulty":"easy"}"#,
        )
        .unwrap();
        assert_eq!(
            serde_json::to_string(&old).unwrap(),
            r#"{"id":"x","family":"etom","kind":"L1","scenario":[],"turns":[{"user":"q","reference_plan":[]}],"out_of_scope":false,"difficulty":"easy","provenance_id":""}"#,
            "optional fields stay out of old lines"
        );
    }
}
