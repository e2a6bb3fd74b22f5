//! What the first run will ask of the LLM: per enabled stage and role, an upper bound of
//! its exchanges (each stage's [`crate::stage::Stage::estimate`]) and about how long they
//! take here, from the ledger's own timings of the role (a `benchgen llm ping` is the
//! shortest measurement). `benchgen check` and `benchgen init` print the table, so a run
//! that takes twelve minutes on a small machine says so before it starts.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::llm::Provider;
use crate::settings::Settings;
use crate::stage::Estimate;

/// One row of the table: a stage's exchanges with one role, and their time.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Row {
    pub stage: String,
    pub role: String,
    /// Upper bound, re-asks included.
    pub exchanges: u64,
    /// When every answer is valid at once.
    pub first_try: u64,
    pub basis: String,
    /// Measured mean seconds per exchange of the role (`None`: never timed here).
    pub seconds_per_exchange: Option<f64>,
    /// Seconds the first-try exchanges take, sequential or spread over requests in flight.
    pub seconds: Option<f64>,
    /// The time column as printed.
    pub time: String,
    /// Its exchanges cannot be counted yet (the basis says until when): counted as 0.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub unknown: bool,
    /// The role's live exchanges in the stage's last run that asked a model ([`LastRun`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_run: Option<u64>,
    /// The role's exchanges the ledger answered in that run.
    #[serde(skip_serializing_if = "is_zero")]
    pub last_run_cached: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A stage's latest finished run that asked a model, from the ledger: what the stage took
/// last time, under whatever settings it had. Where the models decide how many exchanges a
/// stage makes, the bounds are ceilings (the demo's: 35–38 min for a 14–15-minute run) and
/// this is the forecast (a rerun answered partly from the ledger says how much).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LastRun {
    pub run: i64,
    /// From the run's first record to its end.
    pub seconds: f64,
    /// Live exchanges, every role's.
    pub exchanges: u64,
    /// Exchanges the ledger answered.
    pub cached: u64,
    /// Live exchanges of roles the stage's rows do not name (a role since renamed).
    pub other_roles: u64,
}

/// The whole table with its total.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Table {
    pub rows: Vec<Row>,
    pub exchanges: u64,
    /// Sum of the measured rows' seconds.
    pub seconds: f64,
    /// Roles in the table without a timing (their rows add nothing to `seconds`).
    pub unmeasured: Vec<String>,
    /// Stages with a row that cannot be counted yet: the total leaves them out and says so.
    pub uncounted: Vec<String>,
    /// Roles timed by `benchgen llm ping` alone: its prompt and answer are a few tokens, a
    /// stage's are hundreds, so their time is a lower bound (the table says `≥`).
    pub ping_only: Vec<String>,
    /// The last run that asked a model of each stage in the table that has one.
    pub last_runs: BTreeMap<String, LastRun>,
}

/// The table over the stages `run` includes under `settings`.
pub fn table(settings: &Settings) -> Table {
    let timed = timed_rows(settings);
    let pinged = ping_only(&timed);
    let probed = probe_only(&timed);
    let mut timings = seconds_per_exchange(settings, &timed);
    // As `run`'s notes: a role timed by no stage or probe takes the pace of its siblings,
    // over its own lower bound from `llm ping` too; one without a sibling keeps that.
    let paced = stage_paces(settings, &timings, &pinged);
    let borrowed: std::collections::BTreeSet<String> =
        paced.keys().filter(|r| !timings.contains_key(*r) || pinged.contains(*r)).cloned().collect();
    timings.extend(paced);
    let model_runs = model_runs(settings);
    let mut last_runs = BTreeMap::new();
    let mut rows = Vec::new();
    for stage in crate::stages::enabled(settings) {
        let name = stage.spec().name;
        let last = model_runs.get(name);
        let estimates = crate::stage::merge_by_role(stage.estimate(settings));
        if let Some(m) = last.filter(|_| !estimates.is_empty()) {
            let listed = |role: &String| estimates.iter().any(|e| &e.role == role);
            last_runs.insert(
                name.to_string(),
                LastRun {
                    run: m.id,
                    seconds: m.seconds(),
                    exchanges: m.exchanges.values().sum(),
                    cached: m.cached.values().sum(),
                    other_roles: m.exchanges.iter().filter(|(r, _)| !listed(r)).map(|(_, n)| n).sum(),
                },
            );
        }
        for e in estimates {
            let per = timings.get(&e.role).copied();
            let mut r = row(settings, name, e, per);
            r.last_run = last.map(|m| m.exchanges.get(&r.role).copied().unwrap_or(0));
            r.last_run_cached = last.and_then(|m| m.cached.get(&r.role).copied()).unwrap_or(0);
            if r.seconds.is_some() && borrowed.contains(&r.role) {
                r.time = r.time.replacen(" measured", " measured for the other roles of its endpoint and model", 1);
            } else if r.seconds.is_some() && pinged.contains(&r.role) {
                r.time = format!(
                    "{} from `llm ping` only: a stage's exchange takes longer (`llm ping --probe` times one)",
                    r.time.replacen('≈', "≥", 1)
                );
            } else if r.seconds.is_some() && probed.contains(&r.role) {
                r.time = format!("{} from `llm ping --probe`: one stage-sized exchange", r.time);
            }
            rows.push(r);
        }
    }
    let mut ping_only: Vec<String> = rows
        .iter()
        .filter(|r| r.seconds.is_some() && pinged.contains(&r.role) && !borrowed.contains(&r.role))
        .map(|r| r.role.clone())
        .collect();
    ping_only.sort();
    ping_only.dedup();
    let mut unmeasured: Vec<String> =
        rows.iter().filter(|r| r.seconds.is_none() && r.first_try > 0).map(|r| r.role.clone()).collect();
    unmeasured.sort();
    unmeasured.dedup();
    let mut uncounted: Vec<String> = rows.iter().filter(|r| r.unknown).map(|r| r.stage.clone()).collect();
    uncounted.dedup();
    Table {
        uncounted,
        exchanges: rows.iter().map(|r| r.exchanges).sum(),
        seconds: rows.iter().filter_map(|r| r.seconds).sum(),
        unmeasured,
        ping_only,
        last_runs,
        rows,
    }
}

/// The ledger's last run that asked a model of each stage (none where it cannot be read).
fn model_runs(settings: &Settings) -> BTreeMap<String, crate::ledger::ModelRun> {
    crate::ledger::Ledger::open_read_only(&settings.artifacts)
        .ok()
        .flatten()
        .and_then(|l| l.last_model_runs().ok())
        .unwrap_or_default()
}

/// The ledger's pace of each role for `run`'s stage notes: read when the first stage runs
/// (a run with every stage up to date reads nothing) and brought up to date with each
/// stage's own exchanges as it finishes, so a stage's note counts every exchange timed
/// before it, this run's too.
#[derive(Default)]
pub struct Pace {
    timed: std::cell::OnceCell<Vec<crate::llm::stats::RoleStats>>,
    /// Each stage's last run that asked a model before this run (read at the first note).
    model_runs: std::cell::OnceCell<BTreeMap<String, crate::ledger::ModelRun>>,
}

impl Pace {
    fn timed(&self, settings: &Settings) -> &[crate::llm::stats::RoleStats] {
        self.timed.get_or_init(|| timed_rows(settings))
    }

    /// After a stage's run `run_id`: its exchanges join the pace (read by the run's id, which
    /// the ledger indexes). A ledger that cannot be read adds nothing.
    pub fn update(&mut self, settings: &Settings, run_id: i64) {
        if let Some(timed) = self.timed.get_mut() {
            let rows = crate::llm::stats::collect_run(settings, run_id).unwrap_or_default();
            timed.extend(rows.into_iter().filter(is_timed));
        }
    }

    /// What `run` adds as `stage` starts: how many LLM exchanges it makes at most (first
    /// tries) and, where each of its roles has been timed, about how long they take (a
    /// multi-round stage's bars each time one round). `None` for a stage without LLM
    /// exchanges.
    pub fn note(&self, settings: &Settings, stage: &dyn crate::stage::Stage) -> Option<String> {
        // `llm ping`'s few tokens do not time a stage (its pace would be a lower bound).
        let timed = self.timed(settings);
        let timings = stage_paces(settings, &seconds_per_exchange(settings, timed), &ping_only(timed));
        let name = stage.spec().name;
        let rows: Vec<Row> = crate::stage::merge_by_role(stage.estimate(settings))
            .into_iter()
            .map(|e| {
                let per = timings.get(&e.role).copied();
                row(settings, name, e, per)
            })
            .filter(|r| r.first_try > 0 && !r.unknown)
            .collect();
        let exchanges: u64 = rows.iter().map(|r| r.first_try).sum();
        // Where the models decide the count, the bound is a ceiling; what the stage made
        // and took last time is the forecast.
        let last = self.model_runs.get_or_init(|| model_runs(settings)).get(name).map(|last| {
            let made: u64 = last.exchanges.values().sum();
            let cached: u64 = last.cached.values().sum();
            let more = if cached > 0 { format!(" ({cached} more from the ledger)") } else { String::new() };
            format!("its last run made {made} in {}{more}", duration(last.seconds()))
        });
        if exchanges == 0 {
            // A bound not countable yet: the last run alone, where there is one.
            return last;
        }
        // `check`'s bound: exact where the stage's caps fix the count, more where the input
        // decides (`filter` counts every server and tool an `ask` rule might match).
        let n = if exchanges == 1 { "1 LLM exchange".to_string() } else { format!("{exchanges} LLM exchanges") };
        let mut note = match rows.iter().map(|r| r.seconds).sum::<Option<f64>>() {
            Some(secs) => {
                format!("up to {n} (re-asks aside), about {} at the pace the ledger has timed", duration(secs))
            }
            None => format!("up to {n} (re-asks aside)"),
        };
        if let Some(last) = last {
            note.push_str(&format!("; {last}"));
        }
        Some(note)
    }
}

/// The pace a stage's exchanges go at, per role: `own` ([`seconds_per_exchange`]) where a
/// stage or a probe timed the role, else the mean pace of such roles on the same endpoint
/// and model — a model's pace on a machine is the model's, whichever role asks (the demo's
/// six 1.5B roles share one llama-server). `llm ping`'s few tokens (`pinged`) time no stage
/// and lend nothing. `run`'s notes and `check`'s table both time by it.
fn stage_paces(
    settings: &Settings,
    own: &BTreeMap<String, f64>,
    pinged: &std::collections::BTreeSet<String>,
) -> BTreeMap<String, f64> {
    let mut timings: BTreeMap<String, f64> =
        own.iter().filter(|(r, _)| !pinged.contains(*r)).map(|(r, s)| (r.clone(), *s)).collect();
    let roles = &settings.section::<crate::llm::LlmSettings>().roles;
    let mut by_server: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for (name, per) in &timings {
        if roles.contains_key(name) {
            by_server.entry(server_of(settings, name)).or_default().push(*per);
        }
    }
    for name in roles.keys() {
        if timings.contains_key(name) {
            continue;
        }
        if let Some(pers) = by_server.get(&server_of(settings, name)) {
            timings.insert(name.clone(), pers.iter().sum::<f64>() / pers.len() as f64);
        }
    }
    timings
}

/// One stage's estimate for one role as a row: the bound with every typed answer re-asked
/// as often as the role's `reask` allows, and the time of the first tries.
pub fn row(settings: &Settings, stage: &str, e: Estimate, per: Option<f64>) -> Row {
    let reask = crate::llm::role_reask(settings, &e.role);
    let exchanges = e.typed * (1 + u64::from(reask)) + e.plain;
    let first_try = e.typed + e.plain;
    let unknown = e.unknown;
    let mut basis = e.basis;
    if e.typed > 0 && reask > 0 {
        basis.push_str(&format!("; typed answers × {} with re-asks", reask + 1));
    }
    let at_once = at_once(settings, &e.role, e.in_flight);
    // A bound not known yet has no time either (its 0 exchanges would read "≈ 0 s").
    let per = per.filter(|_| !e.unknown);
    let seconds = per.map(|s| first_try as f64 * s / at_once as f64);
    let time = if e.unknown {
        "unknown until its input can be read".into()
    } else {
        time_text(per, seconds, at_once, &e.role)
    };
    Row {
        stage: stage.to_string(),
        role: e.role,
        exchanges,
        first_try,
        basis,
        seconds_per_exchange: per,
        seconds,
        time,
        unknown,
        last_run: None,
        last_run_cached: 0,
    }
}

/// The ledger's per-stage, per-role rows with live exchanges timed (exchanges answered by
/// batch jobs have no latency of their own and are left out). A ledger that cannot be read
/// times nothing (the table says so).
fn timed_rows(settings: &Settings) -> Vec<crate::llm::stats::RoleStats> {
    let rows = crate::llm::stats::collect(settings, None).unwrap_or_default();
    rows.into_iter().filter(is_timed).collect()
}

fn is_timed(r: &crate::llm::stats::RoleStats) -> bool {
    r.calls > r.batched && r.seconds > 0.0
}

/// The ledger stages of `benchgen llm ping` and of its `--probe`.
const PING: &str = "llm-ping";
const PROBE: &str = "llm-probe";

/// Seconds per live exchange of each role in `timed` ([`timed_rows`]), over every stage and
/// `llm ping --probe`; `llm ping`'s few tokens only where nothing else timed the role
/// (averaged in, they would pull a stage-sized mean down). On a local server, requests
/// that overlapped share their time: per stage, the time any request of the server (roles
/// of one model, see [`server_of`]) was running, shared among its roles by their summed
/// latencies, over each role's count — two requests in flight on two cores take about the
/// time of one each, not two (summed latencies counted the demo's stages two to three times
/// over). A remote endpoint serves requests side by side: its latency is the pace, and
/// [`row`] spreads a stage's exchanges over those in flight. Rows without spans count their
/// latencies.
fn seconds_per_exchange(settings: &Settings, timed: &[crate::llm::stats::RoleStats]) -> BTreeMap<String, f64> {
    let pinged = ping_only(timed);
    let used: Vec<&crate::llm::stats::RoleStats> =
        timed.iter().filter(|r| r.stage != PING || pinged.contains(&r.role)).collect();
    let local = |role: &str| {
        settings.section::<crate::llm::LlmSettings>().roles.get(role).is_some_and(|r| r.provider == Provider::Local)
    };
    // (stage, server) → (the spans of its local rows, their summed latency)
    type Group = (Vec<(i64, i64)>, f64);
    let mut groups: BTreeMap<(&str, String), Group> = BTreeMap::new();
    for r in used.iter().filter(|r| local(&r.role) && !r.spans.is_empty()) {
        let g = groups.entry((r.stage.as_str(), server_of(settings, &r.role))).or_default();
        g.0.extend(&r.spans);
        g.1 += r.seconds;
    }
    let covered: BTreeMap<(&str, String), f64> = groups
        .into_iter()
        .map(|(k, (spans, latency))| (k, covered_ms(spans) as f64 / 1000.0 / latency.max(f64::MIN_POSITIVE)))
        .collect();
    // role → (seconds, live exchanges)
    let mut by_role: BTreeMap<String, (f64, u64)> = BTreeMap::new();
    for r in &used {
        let share = match covered.get(&(r.stage.as_str(), server_of(settings, &r.role))) {
            Some(wall_per_latency) if local(&r.role) && !r.spans.is_empty() => *wall_per_latency,
            _ => 1.0,
        };
        let t = by_role.entry(r.role.clone()).or_default();
        t.0 += r.seconds * share;
        t.1 += r.calls - r.batched;
    }
    by_role.into_iter().map(|(role, (secs, calls))| (role, secs / calls as f64)).collect()
}

/// Who answers a role: its endpoint and model (a role no longer configured is its own).
fn server_of(settings: &Settings, role: &str) -> String {
    let resolve = |p: &std::path::Path| settings.resolve(p);
    match settings.section::<crate::llm::LlmSettings>().roles.get(role) {
        Some(r) => format!("{} {}", r.endpoint_identity(&resolve), r.model_name(&resolve)),
        None => format!("role {role}"),
    }
}

/// Milliseconds covered by the union of `spans`.
fn covered_ms(mut spans: Vec<(i64, i64)>) -> i64 {
    spans.sort_unstable();
    let (mut total, mut reach) = (0, i64::MIN);
    for (start, end) in spans {
        let from = start.max(reach);
        if end > from {
            total += end - from;
        }
        reach = reach.max(end);
    }
    total
}

/// The roles whose only timed exchanges are `benchgen llm ping`'s (see [`Table::ping_only`]).
fn ping_only(timed: &[crate::llm::stats::RoleStats]) -> std::collections::BTreeSet<String> {
    only(timed, |stage| stage == PING)
}

/// The roles timed by `llm ping --probe` and no stage.
fn probe_only(timed: &[crate::llm::stats::RoleStats]) -> std::collections::BTreeSet<String> {
    let probed = only(timed, |stage| stage == PING || stage == PROBE);
    probed.into_iter().filter(|role| timed.iter().any(|r| &r.role == role && r.stage == PROBE)).collect()
}

/// The roles all of whose timed rows are of stages `of` accepts.
fn only(timed: &[crate::llm::stats::RoleStats], of: impl Fn(&str) -> bool) -> std::collections::BTreeSet<String> {
    let roles: std::collections::BTreeSet<String> = timed.iter().map(|r| r.role.clone()).collect();
    roles.into_iter().filter(|role| timed.iter().filter(|r| &r.role == role).all(|r| of(&r.stage))).collect()
}

/// Requests of `role` a stage has in flight at once. One local server shares this
/// machine's cores between its requests, so they gain nothing from overlapping: its
/// measured latency is taken as sequential.
fn at_once(settings: &Settings, role: &str, in_flight: usize) -> usize {
    let Some(r) = settings.section::<crate::llm::LlmSettings>().roles.get(role) else { return 1 };
    if r.provider == Provider::Local {
        return 1;
    }
    let endpoints = r.base_urls.as_ref().map_or(1, |u| u.len().max(1));
    let bound = r.max_concurrency.max(1) * endpoints;
    if in_flight == 0 { bound } else { in_flight.min(bound) }
}

fn time_text(per: Option<f64>, seconds: Option<f64>, at_once: usize, role: &str) -> String {
    match (per, seconds) {
        (Some(per), Some(secs)) => {
            let spread = if at_once > 1 { format!(", {at_once} at once") } else { String::new() };
            format!("≈ {} ({per:.1} s/exchange measured{spread})", duration(secs))
        }
        _ => format!("not measured: `benchgen llm ping --probe --role {role}` measures the role"),
    }
}

/// Seconds as a person reads them: `40 s`, `11 min`, `2.5 h`.
pub fn duration(secs: f64) -> String {
    if secs < 90.0 {
        format!("{} s", secs.round() as u64)
    } else if secs < 90.0 * 60.0 {
        format!("{} min", (secs / 60.0).round() as u64)
    } else {
        format!("{:.1} h", secs / 3600.0)
    }
}

/// The table as text, with a total line; empty when no enabled stage calls an LLM. Where
/// the ledger has a stage's last run that asked a model, a `last run` column gives what it
/// made and took.
pub fn render(t: &Table) -> String {
    if t.rows.is_empty() {
        return String::new();
    }
    let with_last = !t.last_runs.is_empty();
    let mut head = vec!["stage", "role", "exchanges (≤)", "basis", "time ≈"];
    if with_last {
        head.push("last run");
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut cells: Vec<Vec<String>> = t
        .rows
        .iter()
        .map(|r| {
            let mut c = vec![r.stage.clone(), r.role.clone(), r.exchanges.to_string(), r.basis.clone(), r.time.clone()];
            if with_last {
                let cached =
                    if r.last_run_cached > 0 { format!(" + {} cached", r.last_run_cached) } else { String::new() };
                c.push(match (r.last_run, t.last_runs.get(&r.stage)) {
                    (Some(n), Some(last)) if seen.insert(r.stage.clone()) => {
                        let others = if last.other_roles > 0 {
                            format!(", {} by roles not listed", last.other_roles)
                        } else {
                            String::new()
                        };
                        format!("{n}{cached} (the stage: {}, run {}{others})", duration(last.seconds), last.run)
                    }
                    (Some(n), _) => format!("{n}{cached}"),
                    _ => "-".into(),
                });
            }
            c
        })
        .collect();
    let measured = t.rows.iter().any(|r| r.seconds.is_some());
    let about = if t.ping_only.is_empty() { "≈" } else { "≥" };
    let total_time = match (measured, t.unmeasured.is_empty()) {
        (true, true) => format!("{about} {}", duration(t.seconds)),
        (true, false) => {
            format!("{about} {} + roles not measured: {}", duration(t.seconds), t.unmeasured.join(", "))
        }
        (false, _) => format!("not measured: {}", t.unmeasured.join(", ")),
    };
    // A stage whose inputs cannot be read yet adds 0: the total is a bound without it.
    let left = if t.uncounted.is_empty() {
        String::new()
    } else {
        format!("without {} (not countable yet)", t.uncounted.join(", "))
    };
    let mut total = vec!["total".into(), String::new(), t.exchanges.to_string(), left, total_time];
    if with_last {
        let n: u64 = t.last_runs.values().map(|l| l.exchanges).sum();
        let cached: u64 = t.last_runs.values().map(|l| l.cached).sum();
        let cached = if cached > 0 { format!(" + {cached} cached") } else { String::new() };
        let secs: f64 = t.last_runs.values().map(|l| l.seconds).sum();
        let stages = t.last_runs.len();
        let plural = if stages == 1 { "" } else { "s" };
        total.push(format!("{n}{cached} ({} over {stages} stage{plural})", duration(secs)));
    }
    cells.push(total);
    let width =
        |i: usize| cells.iter().map(|c| c[i].chars().count()).chain([head[i].chars().count()]).max().unwrap_or(0);
    let widths: Vec<usize> = (0..head.len() - 1).map(width).collect();
    let line = |c: &[&str]| {
        let pad = |s: &str, w: usize| format!("{s}{}", " ".repeat(w.saturating_sub(s.chars().count())));
        let mut parts: Vec<String> = widths.iter().zip(c).map(|(w, s)| pad(s, *w)).collect();
        parts.push(c[c.len() - 1].to_string());
        format!("{}\n", parts.join(" | "))
    };
    let mut out = String::from(
        "LLM exchanges of the first run (upper bounds; time: their first tries at this ledger's measured latency, a ceiling rather than a forecast)",
    );
    if with_last {
        out.push_str(
            "; last run: the live exchanges of the stage's latest run that asked a model and the stage's time, under the settings it had (where the models decide the count, the forecast)",
        );
    }
    out.push_str(":\n");
    out.push_str(&line(&head));
    for c in &cells {
        out.push_str(&line(&c.iter().map(String::as_str).collect::<Vec<_>>()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::Stage;
    use serde_json::json;

    /// A registry track over two servers (3 + 1 tools) with a classifier that may re-ask
    /// once, and L1 sampling 2 tools with 3 candidates each.
    const REGISTRY: &str = r#"
[registry]
source = "raw/registry.json"

[filter]
classifier_role = "classifier"

[llm.roles.classifier]
provider = "vllm"
base_url = "http://127.0.0.1:9/v1"
model = "m"
reask = 1
max_concurrency = 3

[levels]
writer_role = "writer"
judge_role = "classifier"

[levels.l1]
candidates = 3
max_items = 2
"#;

    /// A project in a temp folder: `config` as `pipeline/t.toml` and the raw files given.
    fn project(config: &str, files: &[(&str, String)]) -> (tempfile::TempDir, Settings) {
        let dir = tempfile::tempdir().unwrap();
        for (rel, text) in files.iter().chain([&("pipeline/t.toml", config.to_string())]) {
            let p = dir.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        let settings = Settings::load(&dir.path().join("pipeline/t.toml")).unwrap();
        (dir, settings)
    }

    fn registry() -> (&'static str, String) {
        let schema = json!({"type": "object", "properties": {}});
        let tool = |n: &str| json!({"tool_name": n, "tool_description": "d", "input_schema": schema});
        let servers = json!({"servers": [
            {"server_name": "a", "categories": ["x"], "tools": [tool("t1"), tool("t2"), tool("t3")]},
            {"server_name": "b", "categories": ["x"], "tools": [tool("t4")]},
        ]});
        ("raw/registry.json", servers.to_string())
    }

    #[test]
    fn registry_stages_bound_their_exchanges_by_the_snapshot_and_the_caps() {
        let (_dir, s) = project(REGISTRY, &[registry()]);
        let filter = crate::filter::FilterStage.estimate(&s);
        assert_eq!(filter.len(), 1, "{filter:?}");
        // Every server and tool asked at most once, each answer re-asked at most once.
        let r = row(&s, "filter", filter[0].clone(), Some(2.0));
        assert_eq!((r.first_try, r.exchanges), (6, 12), "{r:?}");
        assert!(r.basis.contains("2 servers + 4 tools") && r.basis.contains("× 2 with re-asks"), "{}", r.basis);
        // No bound of the stage's own: the role's 3 requests in flight share the 6 × 2 s.
        assert_eq!(r.seconds, Some(4.0));
        assert!(r.time.contains("2.0 s/exchange measured, 3 at once"), "{}", r.time);
        // L1: 2 of the 4 tools, one draft each and at most one asked again (writer), 3
        // candidates and at most one asked again each verified, and the plan check's one step
        // the rules may leave open (judge).
        let l1 = crate::levels::l1::L1Stage.estimate(&s);
        let by: BTreeMap<&str, (u64, u64)> = l1.iter().map(|e| (e.role.as_str(), (e.typed, e.plain))).collect();
        assert_eq!(by, BTreeMap::from([("writer", (4, 0)), ("classifier", (10, 0))]));
        let judge = l1.iter().find(|e| e.role == "classifier").unwrap();
        assert!(judge.basis.contains("plan-check step"), "{}", judge.basis);
    }

    #[test]
    fn a_stage_that_cannot_count_yet_is_named_beside_the_total() {
        // The registry file is not there yet: the registry's stages count nothing, and the
        // total says it is a bound without them rather than passing their 0 as a count.
        let (_dir, s) = project(REGISTRY, &[]);
        let t = table(&s);
        let filter = t.rows.iter().find(|r| r.stage == "filter").unwrap_or_else(|| panic!("{t:?}"));
        assert!(filter.unknown && filter.exchanges == 0 && filter.seconds.is_none(), "{filter:?}");
        assert_eq!(filter.time, "unknown until its input can be read");
        assert!(filter.basis.starts_with("unknown until `registry import` can read the registry"), "{}", filter.basis);
        assert!(t.uncounted.contains(&"filter".to_string()) && t.uncounted.contains(&"levels-l1".to_string()), "{t:?}");
        let text = render(&t);
        let total = text.lines().last().unwrap();
        assert!(total.starts_with("total") && total.contains("without filter, "), "{text}");
        // With the registry there, nothing is left out.
        let (_dir, s) = project(REGISTRY, &[registry()]);
        let t = table(&s);
        assert!(t.uncounted.is_empty() && t.rows.iter().all(|r| !r.unknown), "{t:?}");
        assert!(!render(&t).contains("not countable"));
    }

    #[test]
    fn curation_counts_the_sessions_in_the_log_files_before_any_import() {
        let demo = include_str!("../raw/demo/logs/chats.jsonl");
        let chats: String = demo.lines().take(3).map(|l| format!("{l}\n")).collect();
        let config = "[[logs.sources]]\npath = \"raw/chats.jsonl\"\nformat = \"openai\"\n\n\
                      [logs.curate]\njudge_role = \"judge\"\nsecond_role = \"second\"\n";
        let (_dir, s) = project(config, &[("raw/chats.jsonl", chats)]);
        let rows = crate::logs::curate::CurateStage.estimate(&s);
        let by: BTreeMap<&str, u64> = rows.iter().map(|e| (e.role.as_str(), e.typed)).collect();
        // Need and answer per session, and a second verdict for each when the first says no.
        assert_eq!(by, BTreeMap::from([("judge", 6), ("second", 6)]), "{rows:?}");
        assert!(rows[0].basis.contains("3 sessions in the log files"), "{}", rows[0].basis);
    }

    #[test]
    fn without_a_ledger_the_table_says_how_to_measure_each_role() {
        let (_dir, s) = project(REGISTRY, &[registry()]);
        let t = table(&s);
        assert!(t.rows.iter().any(|r| r.stage == "filter" && r.role == "classifier"), "{t:?}");
        assert!(t.rows.iter().all(|r| r.seconds.is_none()), "{t:?}");
        assert_eq!(t.exchanges, t.rows.iter().map(|r| r.exchanges).sum::<u64>());
        let text = render(&t);
        assert!(
            text.contains("exchanges (≤)") && text.contains("`benchgen llm ping --probe --role classifier`"),
            "{text}"
        );
        assert!(text.lines().last().unwrap().starts_with("total"), "{text}");
        assert!(t.unmeasured.contains(&"classifier".to_string()) && t.unmeasured.contains(&"writer".to_string()));
        assert!(!text.contains("last run"), "no stage ran: no column\n{text}");
    }

    #[test]
    fn a_ledger_with_a_stage_s_last_model_run_adds_what_it_made_and_took() {
        let (dir, s) = project(REGISTRY, &[registry()]);
        let mut l = crate::ledger::Ledger::open(&dir.path().join("artifacts")).unwrap();
        let ask = |role: &str| {
            crate::ledger::NewEvent::new(crate::ledger::kind::LLM_EXCHANGE, Some("i"), json!({"role": role}))
        };
        let hit = crate::ledger::NewEvent::new(
            crate::ledger::kind::LLM_EXCHANGE,
            Some("i"),
            json!({"role": "classifier", "cached": true}),
        );
        // Two writer and one classifier exchange, one the ledger answered, and one of a role
        // the config no longer names; `efs-verify`, which this config does not run, has none.
        let events = [ask("writer"), ask("writer"), ask("classifier"), hit, ask("old")];
        let (run, _) = l.record_run("levels-l1", "c", "v", &events).unwrap();
        l.record_run("efs-verify", "c", "v", &[ask("classifier")]).unwrap();
        drop(l);
        let t = table(&s);
        assert_eq!(t.last_runs.keys().collect::<Vec<_>>(), ["levels-l1"], "{t:?}");
        let last = &t.last_runs["levels-l1"];
        assert_eq!((last.run, last.exchanges, last.cached, last.other_roles), (run, 4, 1, 1));
        let l1: BTreeMap<&str, Option<u64>> =
            t.rows.iter().filter(|r| r.stage == "levels-l1").map(|r| (r.role.as_str(), r.last_run)).collect();
        assert_eq!(l1, BTreeMap::from([("classifier", Some(1)), ("writer", Some(2))]));
        assert!(t.rows.iter().filter(|r| r.stage == "filter").all(|r| r.last_run.is_none()), "{t:?}");
        let text = render(&t);
        let header = text.lines().find(|l| l.starts_with("stage ")).unwrap();
        assert_eq!(
            header.split('|').map(str::trim).collect::<Vec<_>>(),
            ["stage", "role", "exchanges (≤)", "basis", "time ≈", "last run"]
        );
        // The stage's first row carries its time and run; the total sums the stages that ran.
        let cell = |l: &str| l.rsplit('|').next().unwrap().trim().to_string();
        let rows: Vec<String> = text.lines().filter(|l| l.starts_with("levels-l1")).map(cell).collect();
        assert_eq!(rows, [format!("2 (the stage: 0 s, run {run}, 1 by roles not listed)"), "1 + 1 cached".into()]);
        assert!(text.lines().filter(|l| l.starts_with("filter")).all(|l| cell(l) == "-"), "{text}");
        assert_eq!(cell(text.lines().last().unwrap()), "4 + 1 cached (0 s over 1 stage)", "{text}");
    }

    #[test]
    fn runs_stage_note_times_a_role_by_its_siblings_on_the_same_server_and_model() {
        let stats = |role: &str| crate::llm::stats::RoleStats {
            stage: "filter".into(),
            role: role.into(),
            calls: 2,
            seconds: 4.0,
            ..Default::default()
        };
        let l1 = crate::levels::l1::L1Stage;
        let writer = |url: &str| {
            format!("{REGISTRY}\n[llm.roles.writer]\nprovider = \"vllm\"\nbase_url = \"{url}\"\nmodel = \"m\"\n")
        };
        // The writer asks the classifier's server and model: timed by the classifier's pace.
        let (_dir, s) = project(&writer("http://127.0.0.1:9/v1"), &[registry()]);
        let pace = Pace { timed: vec![stats("classifier")].into(), ..Default::default() };
        let note = pace.note(&s, &l1).unwrap();
        assert!(
            note.starts_with("up to 14 LLM exchanges (re-asks aside), about ")
                && note.ends_with(" at the pace the ledger has timed"),
            "{note}"
        );
        // Another server: the writer is not timed, so neither is the stage.
        let (_dir, s) = project(&writer("http://127.0.0.1:10/v1"), &[registry()]);
        assert_eq!(pace.note(&s, &l1).unwrap(), "up to 14 LLM exchanges (re-asks aside)");
        // Timed by `llm ping`'s few tokens alone, a role does not time a stage.
        let pace = Pace {
            timed: vec![crate::llm::stats::RoleStats { stage: PING.into(), ..stats("classifier") }].into(),
            ..Default::default()
        };
        assert_eq!(pace.note(&s, &crate::filter::FilterStage).unwrap(), "up to 6 LLM exchanges (re-asks aside)");
        // Nothing timed: the count alone; a stage that asks no LLM says nothing.
        let untimed = Pace { timed: vec![].into(), ..Default::default() };
        assert_eq!(untimed.note(&s, &crate::filter::FilterStage), Some("up to 6 LLM exchanges (re-asks aside)".into()));
        assert_eq!(untimed.note(&s, &crate::embed::EmbedStage), None);
        // The stage's last run that asked a model follows the bound: the forecast where the
        // models decide the count.
        let last = crate::ledger::ModelRun {
            id: 7,
            started_at: "2026-12-07T17:00:00Z".into(),
            finished_at: "2026-12-07T17:01:12Z".into(),
            exchanges: BTreeMap::from([("classifier".to_string(), 2), ("writer".to_string(), 1)]),
            cached: BTreeMap::from([("classifier".to_string(), 4)]),
        };
        let ran = Pace { model_runs: BTreeMap::from([("filter".to_string(), last)]).into(), ..Default::default() };
        assert_eq!(
            ran.note(&s, &crate::filter::FilterStage).unwrap(),
            "up to 6 LLM exchanges (re-asks aside); its last run made 3 in 72 s (4 more from the ledger)"
        );
        assert_eq!(ran.note(&s, &l1).unwrap(), "up to 14 LLM exchanges (re-asks aside)");
    }

    #[test]
    fn check_times_a_role_never_timed_by_the_roles_of_its_endpoint_and_model() {
        let config = format!(
            "{REGISTRY}\n[llm.roles.writer]\nprovider = \"vllm\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n"
        );
        let table_after = |stage: &str| {
            let (dir, s) = project(&config, &[registry()]);
            let mut l = crate::ledger::Ledger::open(&dir.path().join("artifacts")).unwrap();
            let ask = json!({"role": "classifier", "latency_ms": 2000});
            l.record_run(
                stage,
                "c",
                "v",
                &[crate::ledger::NewEvent::new(crate::ledger::kind::LLM_EXCHANGE, None, ask)],
            )
            .unwrap();
            table(&s)
        };
        // The classifier timed by a stage lends its pace to the writer on its endpoint and model.
        let t = table_after("filter");
        let writer: Vec<&Row> = t.rows.iter().filter(|r| r.role == "writer").collect();
        assert!(!writer.is_empty(), "{t:?}");
        for r in writer {
            assert_eq!(r.seconds_per_exchange, Some(2.0), "{r:?}");
            assert!(r.time.contains("2.0 s/exchange measured for the other roles of its endpoint and model"), "{r:?}");
        }
        assert!(t.unmeasured.is_empty(), "{t:?}");
        // Timed by `llm ping`'s few tokens alone, it lends nothing.
        let t = table_after(PING);
        assert!(t.rows.iter().filter(|r| r.role == "writer").all(|r| r.seconds.is_none()), "{t:?}");
        assert_eq!(t.unmeasured, ["writer"]);
        // A role `llm ping` alone timed takes a sibling's stage pace over its lower bound.
        let (dir, s) = project(&config, &[registry()]);
        let mut l = crate::ledger::Ledger::open(&dir.path().join("artifacts")).unwrap();
        let ask = |role: &str, ms: u64| {
            crate::ledger::NewEvent::new(
                crate::ledger::kind::LLM_EXCHANGE,
                None,
                json!({"role": role, "latency_ms": ms}),
            )
        };
        l.record_run("filter", "c", "v", &[ask("classifier", 2000)]).unwrap();
        l.record_run(PING, "c", "v", &[ask("writer", 100)]).unwrap();
        let t = table(&s);
        let writer = t.rows.iter().find(|r| r.role == "writer").unwrap();
        assert_eq!(writer.seconds_per_exchange, Some(2.0), "{writer:?}");
        assert!(writer.time.contains("measured for the other roles") && !writer.time.contains('≥'), "{writer:?}");
        assert!(t.ping_only.is_empty(), "{t:?}");
    }

    #[test]
    fn a_probe_or_a_stage_times_a_role_and_the_pings_few_tokens_count_only_alone() {
        let stats = |stage: &str, role: &str, calls: u64, seconds: f64| crate::llm::stats::RoleStats {
            stage: stage.into(),
            role: role.into(),
            calls,
            seconds,
            ..Default::default()
        };
        let timed = vec![
            stats(PING, "a", 1, 0.5),
            stats(PING, "b", 1, 0.5),
            stats(PROBE, "b", 1, 6.0),
            stats(PING, "c", 2, 1.0),
            stats(PROBE, "c", 1, 7.0),
            stats("efs-verify", "c", 4, 32.0),
        ];
        let (_dir, s) = project(REGISTRY, &[]);
        let per = seconds_per_exchange(&s, &timed);
        // `a`: the ping alone (a lower bound); `b`: its probe, not the mean with the ping;
        // `c`: the probe and the stage, 39 s over 5 exchanges.
        assert_eq!((per["a"], per["b"], per["c"]), (0.5, 6.0, 39.0 / 5.0));
        assert_eq!(ping_only(&timed).into_iter().collect::<Vec<_>>(), ["a"]);
        assert_eq!(probe_only(&timed).into_iter().collect::<Vec<_>>(), ["b"]);
    }

    #[test]
    fn requests_in_flight_together_on_one_local_server_share_their_time() {
        let roles = |writer_model: &str| {
            format!(
                "{REGISTRY}\n[llm.roles.judge]\nprovider = \"local\"\nmodel_path = \"small.gguf\"\n\n\
                 [llm.roles.writer]\nprovider = \"local\"\nmodel_path = \"{writer_model}\"\n"
            )
        };
        let spans = |role: &str, spans: Vec<(i64, i64)>| crate::llm::stats::RoleStats {
            stage: "review".into(),
            role: role.into(),
            calls: spans.len() as u64,
            seconds: spans.iter().map(|(a, b)| (b - a) as f64 / 1000.0).sum(),
            spans,
            ..Default::default()
        };
        // Two requests of each role, two at a time: the judge's take 10 s each, the writer's
        // 10 and 20 s; the four took 30 s.
        let timed = vec![
            spans("judge", vec![(0, 10_000), (10_000, 20_000)]),
            spans("writer", vec![(0, 10_000), (10_000, 30_000)]),
            spans("classifier", vec![(0, 10_000), (0, 10_000)]),
        ];
        let (_dir, s) = project(&roles("small.gguf"), &[]);
        let per = seconds_per_exchange(&s, &timed);
        // One server: the 30 s shared by latency (20 : 30), over each role's two requests.
        assert_eq!((per["judge"], per["writer"]), (6.0, 9.0), "{per:?}");
        // Two models (two servers): each ran its own requests one after another.
        let (_dir, s) = project(&roles("large.gguf"), &[]);
        let per = seconds_per_exchange(&s, &timed);
        assert_eq!((per["judge"], per["writer"]), (10.0, 15.0), "{per:?}");
        // A remote endpoint's latency is its pace (`row` spreads a stage over its requests in
        // flight), overlapping or not.
        assert_eq!(per["classifier"], 10.0);
        assert_eq!(covered_ms(vec![(20, 30), (0, 10), (5, 15)]), 25);
    }

    #[test]
    fn one_row_per_role_adds_up_its_asks() {
        let rows = crate::stage::merge_by_role([
            Estimate::typed("a", 2, "x"),
            Estimate::plain("b", 5, "y"),
            Estimate::plain("a", 3, "z"),
        ]);
        let got: Vec<(&str, u64, u64, &str)> =
            rows.iter().map(|e| (e.role.as_str(), e.typed, e.plain, e.basis.as_str())).collect();
        assert_eq!(got, [("a", 2, 3, "x + z"), ("b", 0, 5, "y")]);
    }

    #[test]
    fn durations_read_as_seconds_minutes_or_hours() {
        assert_eq!(duration(42.4), "42 s");
        assert_eq!(duration(116.0 * 6.2), "12 min");
        assert_eq!(duration(3.0 * 3600.0), "3.0 h");
    }
}
