//! The shared vocabulary as stages write it: the filter summary's `drops` (vector's
//! `{count, intentional, reason}`) account for every dropped server and tool, and the
//! decision words in the ledger stay `keep`/`drop`/`undecided`.

use crate::support::{Project, assert_code};
use serde_json::Value;

#[test]
fn filter_summary_counts_every_drop_with_its_reason() {
    let p = Project::demo();
    assert_code(&p.run(&["registry", "import"]), 0);
    assert_code(&p.run(&["filter"]), 0);
    let summary: Value = serde_json::from_str(&p.read("artifacts/filter/summary.json")).unwrap();
    let drops: Vec<benchgen::model::Drops> = serde_json::from_value(summary["drops"].clone()).unwrap();
    let total =
        |what: &str| -> u64 { drops.iter().filter(|d| d.reason.starts_with(what)).map(|d| d.count as u64).sum() };
    assert_eq!(total("servers dropped"), summary["servers_dropped"].as_u64().unwrap());
    assert_eq!(total("tools dropped"), summary["tools_dropped"].as_u64().unwrap());
    assert!(total("servers dropped") > 0 && total("tools dropped") > 0, "{drops:?}");
    assert!(drops.iter().all(|d| d.intentional && d.count > 0));
    assert!(drops.windows(2).all(|w| w[0].reason < w[1].reason), "sorted by reason, no repeats: {drops:?}");
    // Per rule, the drops agree with `by_rule`.
    for (rule, n) in summary["by_rule"].as_object().unwrap() {
        for (plural, count) in n.as_object().unwrap() {
            let got: u64 = drops
                .iter()
                .filter(|d| d.reason.starts_with(&format!("{plural} dropped by rule `{rule}` ")))
                .map(|d| d.count as u64)
                .sum();
            assert_eq!(got, count.as_u64().unwrap(), "{rule} {plural}");
        }
    }
    let csv = p.read("artifacts/filter/dropped.csv");
    assert_eq!(csv.lines().count() as u64 - 1, total("servers dropped") + total("tools dropped"));
    // The decision words in the ledger are the ones they always were.
    let conn = rusqlite::Connection::open(p.path("artifacts/ledger.sqlite")).unwrap();
    let mut stmt = conn
        .prepare("SELECT json_extract(payload, '$.verdict'), COUNT(*) FROM events WHERE kind = 'filter.decision' GROUP BY 1 ORDER BY 1")
        .unwrap();
    let words: Vec<(String, u64)> =
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().collect::<Result<_, _>>().unwrap();
    assert_eq!(words.iter().map(|(w, _)| w.as_str()).collect::<Vec<_>>(), ["drop", "keep"]);
    assert_eq!(words[0].1, total("servers dropped") + total("tools dropped"));
}
