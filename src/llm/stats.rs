//! `benchgen llm stats`: LLM accounting from the ledger, per stage and role.
//!
//! calls = live exchanges (`batched` of them answered by batch jobs); cache hits = exchanges
//! served from the ledger; retries = extra attempts of live exchanges and of failed ones (a
//! batched request's extra batches count); failures = `llm.failure` events (retries
//! exhausted or an answer still invalid after re-asks); tokens and latency percentiles
//! (nearest rank, over live exchanges not batched); `seconds` = those exchanges' latencies
//! summed (time spent waiting for the model, more than the wall time when requests
//! overlap); cost = tokens × the role's `prices` in the current config (USD per million
//! tokens; batched tokens at its batch prices), absent when no prices are given. The text
//! adds one `all stages` row per role.

use std::collections::BTreeMap;

use anyhow::Result;
use serde::Serialize;
use serde_json::Value;

use crate::ledger::{Ledger, kind};
use crate::settings::Settings;

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct RoleStats {
    pub stage: String,
    pub role: String,
    pub model: String,
    pub calls: u64,
    /// Of `calls`, those answered by batch jobs (`mode = "batch"`).
    pub batched: u64,
    pub cache_hits: u64,
    pub retries: u64,
    pub failures: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub latency_ms_p50: Option<u64>,
    pub latency_ms_p90: Option<u64>,
    pub latency_ms_p99: Option<u64>,
    /// Latencies of the live exchanges, summed.
    pub seconds: f64,
    pub cost_usd: Option<f64>,
    /// When each live exchange (not batched) ran: milliseconds since the epoch, from when
    /// it was sent for its latency (an exchange recorded before `started_at`: back from its
    /// recording time), what an estimate needs to tell requests that overlapped from
    /// requests one after another.
    #[serde(skip)]
    pub spans: Vec<(i64, i64)>,
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[u64], p: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    Some(sorted[rank.min(sorted.len()) - 1])
}

/// One stage and role's row being summed: the row, the latencies, and the batched prompt
/// and completion tokens.
type Acc = (RoleStats, Vec<u64>, [u64; 2]);

/// Accounting rows, sorted by stage and role; `stage` limits to one stage.
pub fn collect(settings: &Settings, stage: Option<&str>) -> Result<Vec<RoleStats>> {
    let Some(ledger) = Ledger::open_existing(&settings.artifacts)? else { return Ok(Vec::new()) };
    let rows = ledger.rows_of_kinds_in(&[kind::LLM_EXCHANGE, super::LLM_FAILURE], stage)?;
    Ok(summarise(settings, rows))
}

/// The accounting rows of one run's exchanges (`run`'s stage notes add each stage's).
pub fn collect_run(settings: &Settings, run_id: i64) -> Result<Vec<RoleStats>> {
    let Some(ledger) = Ledger::open_existing(&settings.artifacts)? else { return Ok(Vec::new()) };
    let rows = ledger.rows_of_kinds_in_run(&[kind::LLM_EXCHANGE, super::LLM_FAILURE], run_id)?;
    Ok(summarise(settings, rows))
}

fn summarise(settings: &Settings, rows: Vec<crate::ledger::EventRow>) -> Vec<RoleStats> {
    let mut acc: BTreeMap<(String, String), Acc> = BTreeMap::new();
    for row in rows {
        let crate::ledger::EventRow { kind: k, stage: st, payload, time, .. } = row;
        let p: Value = serde_json::from_str(&payload).unwrap_or(Value::Null);
        let role = p["role"].as_str().unwrap_or("?").to_string();
        let (s, lat, batch_tokens) = acc.entry((st.clone(), role.clone())).or_insert_with(|| {
            (RoleStats { stage: st.clone(), role: role.clone(), ..Default::default() }, Vec::new(), [0, 0])
        });
        if let Some(m) = p["model"].as_str() {
            s.model = m.to_string();
        }
        let attempts = p["attempts"].as_u64().unwrap_or(1);
        if k == super::LLM_FAILURE {
            s.failures += 1;
            if p["kind"] == "transport" {
                s.retries += attempts.saturating_sub(1);
            }
        } else if p["cached"] == Value::Bool(true) {
            s.cache_hits += 1;
        } else {
            s.calls += 1;
            s.retries += attempts.saturating_sub(1);
            let tokens = |k: &str| p["usage"][k].as_u64().unwrap_or(0);
            let (pt, ct) = (tokens("prompt_tokens"), tokens("completion_tokens"));
            s.prompt_tokens += pt;
            s.completion_tokens += ct;
            if p.get("batch").is_some() {
                s.batched += 1;
                batch_tokens[0] += pt;
                batch_tokens[1] += ct;
            }
            if let Some(l) = p["latency_ms"].as_u64() {
                lat.push(l);
                s.seconds += l as f64 / 1000.0;
                // The span the request ran: from when it was sent, where the exchange says
                // (since 2026-12-07), else back from when it was recorded.
                let at = |t: &str| t.parse::<jiff::Timestamp>().ok().map(|t| t.as_millisecond());
                if p.get("batch").is_none() {
                    match (p["started_at"].as_str().and_then(at), at(&time)) {
                        (Some(start), _) => s.spans.push((start, start + l as i64)),
                        (None, Some(end)) => s.spans.push((end - l as i64, end)),
                        (None, None) => {}
                    }
                }
            }
        }
    }
    let mut out = Vec::new();
    for (_, (mut s, mut lat, [bpt, bct])) in acc {
        lat.sort_unstable();
        s.latency_ms_p50 = percentile(&lat, 50.0);
        s.latency_ms_p90 = percentile(&lat, 90.0);
        s.latency_ms_p99 = percentile(&lat, 99.0);
        if let Some(prices) = settings.section::<crate::llm::LlmSettings>().roles.get(&s.role).and_then(|r| r.prices) {
            let live = prices.cost(s.prompt_tokens - bpt, s.completion_tokens - bct, false);
            s.cost_usd = Some(live + prices.cost(bpt, bct, true));
        }
        out.push(s);
    }
    out
}

/// One row per role over every stage (percentiles are not summed: left out).
pub fn role_totals(rows: &[RoleStats]) -> Vec<RoleStats> {
    let mut by: BTreeMap<&str, RoleStats> = BTreeMap::new();
    for r in rows {
        let t = by.entry(&r.role).or_insert_with(|| RoleStats {
            stage: "all stages".into(),
            role: r.role.clone(),
            model: r.model.clone(),
            ..Default::default()
        });
        t.calls += r.calls;
        t.batched += r.batched;
        t.cache_hits += r.cache_hits;
        t.retries += r.retries;
        t.failures += r.failures;
        t.prompt_tokens += r.prompt_tokens;
        t.completion_tokens += r.completion_tokens;
        t.seconds += r.seconds;
        t.cost_usd = match (t.cost_usd, r.cost_usd) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        };
    }
    by.into_values().collect()
}

pub fn render(rows: &[RoleStats]) -> String {
    if rows.is_empty() {
        return "no LLM calls recorded in the ledger\n".into();
    }
    let opt = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_else(|| "-".into());
    let totals = role_totals(rows);
    // Columns as wide as their longest name (`review-prereview`), so rows stay aligned.
    let ws = rows.iter().map(|r| r.stage.len()).chain([12]).max().unwrap_or(12);
    let wr = rows.iter().map(|r| r.role.len()).chain([12]).max().unwrap_or(12);
    let line = |c: [&str; 13]| {
        format!(
            "{:<ws$} {:<wr$} {:>6} {:>6} {:>7} {:>8} {:>10} {:>10} {:>8} {:>7} {:>7} {:>7} {:>9}\n",
            c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10], c[11], c[12]
        )
    };
    let mut out = line([
        "stage",
        "role",
        "calls",
        "hits",
        "retries",
        "failures",
        "prompt_tok",
        "compl_tok",
        "call_s",
        "p50_ms",
        "p90_ms",
        "p99_ms",
        "cost_usd",
    ]);
    for r in rows.iter().chain(&totals) {
        let cost = r.cost_usd.map(|c| format!("{c:.4}")).unwrap_or_else(|| "-".into());
        let nums =
            [r.calls, r.cache_hits, r.retries, r.failures, r.prompt_tokens, r.completion_tokens].map(|n| n.to_string());
        let lat = [r.latency_ms_p50, r.latency_ms_p90, r.latency_ms_p99].map(opt);
        let secs = format!("{:.1}", r.seconds);
        out.push_str(&line([
            &r.stage, &r.role, &nums[0], &nums[1], &nums[2], &nums[3], &nums[4], &nums[5], &secs, &lat[0], &lat[1],
            &lat[2], &cost,
        ]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_live_exchange_runs_from_when_it_was_sent_for_its_latency() {
        let row = |payload: serde_json::Value| crate::ledger::EventRow {
            kind: kind::LLM_EXCHANGE.into(),
            stage: "s".into(),
            subject: None,
            payload: payload.to_string(),
            time: "2026-12-07T17:00:10Z".into(),
        };
        let recorded = "2026-12-07T17:00:10Z".parse::<jiff::Timestamp>().unwrap().as_millisecond();
        let sent = json!({"role": "r", "latency_ms": 2000, "started_at": "2026-12-07T17:00:05Z"});
        let older = json!({"role": "r", "latency_ms": 2000});
        let batched = json!({"role": "r", "latency_ms": 0, "batch": "b"});
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("pipeline")).unwrap();
        std::fs::write(dir.path().join("pipeline/t.toml"), "").unwrap();
        let settings = Settings::load(&dir.path().join("pipeline/t.toml")).unwrap();
        let rows = summarise(&settings, vec![row(sent), row(older), row(batched)]);
        // Sent at :05 for 2 s; recorded at :10 after 2 s (no time of its own); none for a batch.
        assert_eq!(rows[0].spans, [(recorded - 5000, recorded - 3000), (recorded - 2000, recorded)]);
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), Some(50));
        assert_eq!(percentile(&v, 90.0), Some(90));
        assert_eq!(percentile(&v, 99.0), Some(99));
        assert_eq!(percentile(&[7], 99.0), Some(7));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn rows_stay_aligned_when_a_stage_name_is_longer_than_twelve() {
        let row = |stage: &str, role: &str| RoleStats {
            stage: stage.into(),
            role: role.into(),
            model: "m".into(),
            calls: 3,
            batched: 0,
            cache_hits: 0,
            retries: 0,
            failures: 0,
            prompt_tokens: 100,
            completion_tokens: 10,
            latency_ms_p50: Some(5),
            latency_ms_p90: None,
            latency_ms_p99: None,
            seconds: 1.5,
            cost_usd: None,
            spans: Vec::new(),
        };
        let text = render(&[row("review-prereview", "reviewer_a"), row("filter", "classifier")]);
        let role_at: Vec<usize> = text
            .lines()
            .map(|l| l.find("role").or_else(|| l.find("reviewer_a")).or_else(|| l.find("classifier")).unwrap())
            .collect();
        assert!(role_at.windows(2).all(|w| w[0] == w[1]), "{text}");
        assert_eq!(text.lines().map(str::len).collect::<std::collections::BTreeSet<_>>().len(), 1, "{text}");
        // One total row per role, after the stage rows.
        let last: Vec<&str> = text.lines().skip(3).collect();
        assert!(last.iter().all(|l| l.starts_with("all stages")), "{text}");
        assert!(last[0].contains("classifier") && last[0].contains("1.5"), "{text}");
    }
}
