//! The dataset card (`README.md` of a release) in the Hugging Face dataset-card style, and
//! its SVG plots. Everything on it comes from the release's own numbers and the ledger
//! lineage, never from the clock, so a rebuilt release has the same card.

use std::collections::BTreeMap;

use anyhow::Result;

use super::Summary;

/// One horizontal bar chart as SVG text (largest first when `sort`).
pub fn bars_svg(title: &str, unit: &str, bars: &[(String, usize)]) -> Result<String> {
    use plotters::prelude::*;
    let n = bars.len().max(1);
    let height = 80 + 24 * n as u32;
    let max = bars.iter().map(|b| b.1).max().unwrap_or(1).max(1);
    let err = |e: &dyn std::fmt::Display| anyhow::anyhow!("plot `{title}`: {e}");
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (860, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(30)
            .y_label_area_size(220)
            .build_cartesian_2d(0usize..(max + max / 10 + 1), (0usize..n).into_segmented())
            .map_err(|e| err(&e))?;
        let labels: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(n)
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(row) if *row < n => labels.get(n - 1 - *row).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .x_desc(unit)
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(|e| err(&e))?;
        chart
            .draw_series(bars.iter().enumerate().map(|(i, (_, v))| {
                let row = n - 1 - i;
                let mut r = Rectangle::new(
                    [(0, SegmentValue::Exact(row)), (*v, SegmentValue::Exact(row + 1))],
                    RGBColor(66, 113, 196).filled(),
                );
                r.set_margin(3, 3, 0, 0);
                r
            }))
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}

/// The plots of a release: `(file under plots/, svg)`.
pub fn plots(s: &Summary) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    let diff: Vec<(String, usize)> = ["easy", "medium", "hard"]
        .iter()
        .map(|d| (d.to_string(), s.by_kind.values().map(|k| k.difficulty.get(*d).copied().unwrap_or(0)).sum()))
        .collect();
    out.push(("plots/difficulty.svg".into(), bars_svg("Samples per difficulty", "samples", &diff)?));
    let kinds: Vec<(String, usize)> = s.by_kind.iter().map(|(k, v)| (k.clone(), v.n)).collect();
    out.push(("plots/kinds.svg".into(), bars_svg("Samples per type", "samples", &kinds)?));
    let mut scen: Vec<(String, usize)> = s.scenarios.iter().map(|(k, v)| (k.clone(), *v)).collect();
    scen.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    scen.truncate(20);
    out.push(("plots/scenarios.svg".into(), bars_svg("Samples per scenario (top 20)", "samples", &scen)?));
    Ok(out)
}

fn size_category(n: usize) -> &'static str {
    match n {
        0..1_000 => "n<1K",
        1_000..10_000 => "1K<n<10K",
        10_000..100_000 => "10K<n<100K",
        100_000..1_000_000 => "100K<n<1M",
        _ => "n>1M",
    }
}

fn avg(sum: usize, n: usize) -> String {
    if n == 0 { "–".into() } else { format!("{:.2}", sum as f64 / n as f64) }
}

/// The card's Markdown.
pub fn render(s: &Summary) -> String {
    let mut md = String::new();
    yaml_header(&mut md, s);

    md.push_str(&format!("# {} {}\n\n", s.name, s.version));
    if !s.description.is_empty() {
        md.push_str(&format!("{}\n\n", s.description.trim()));
    }
    md.push_str(&format!(
        "A tool-use benchmark for LLM agents built by benchgen: {} samples ({}) over {} tools.\n\n",
        s.samples,
        s.by_kind.iter().map(|(k, v)| format!("{} {k}", v.n)).collect::<Vec<_>>().join(", "),
        s.tools
    ));
    match &s.review {
        Some(r) if r.llm_stand_in => md.push_str(&format!(
            "**Review**: {} samples reviewed; decisions were made by an LLM pre-review standing in for human reviewers ({} by `llm`), not by people.\n\n",
            r.reviewed, r.by.get("llm").copied().unwrap_or(0)
        )),
        Some(r) => md.push_str(&format!("**Review**: {} samples reviewed; only accepted samples are released.\n\n", r.reviewed)),
        None => md.push_str("**Review**: none. This release was built without the review stage (`require_review = false`).\n\n"),
    }

    md.push_str("## Files\n\n| file | what |\n|---|---|\n");
    for f in &s.files {
        let empty = if s.empty_files.contains(f) { " (empty in this release: no dataset config)" } else { "" };
        md.push_str(&format!("| `{f}` | {}{empty} |\n", describe_file(f)));
    }
    md.push_str(
        "\nWith Hugging Face `datasets`: `load_dataset(\"<this folder or repo>\", \"level_2\", split=\"test\")`; the default config `all` is `samples.jsonl`, and `samples.parquet` is for dataframe tools.\n",
    );
    md.push_str(&companions(s));
    md.push_str(
        "\nWith Inspect AI (`pip install inspect-ai`): `inspect eval inspect/benchgen_task.py --model openai/<model>` runs every sample with its tools answered from `cassettes.jsonl` and scores it as `benchgen score` does; `python inspect/benchgen_task.py predictions <log>` writes the predictions `benchgen score` reads.\n",
    );
    md.push('\n');

    md.push_str("## Statistics\n\nPer type (Table-1 style; calls are reference calls, steps sequential groups):\n\n");
    md.push_str("| type | samples | avg turns | avg calls | avg steps | avg distinct tools | easy | medium | hard |\n");
    md.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let mut total = super::KindStats::default();
    for (k, v) in &s.by_kind {
        md.push_str(&stats_row(k, v));
        total.add(v);
    }
    md.push_str(&stats_row("**all**", &total));
    md.push_str(
        "\n![difficulty](plots/difficulty.svg)\n\n![types](plots/kinds.svg)\n\n![scenarios](plots/scenarios.svg)\n\n",
    );

    md.push_str("## Scenarios\n\n| scenario | samples |\n|---|---:|\n");
    let mut scen: Vec<(&String, &usize)> = s.scenarios.iter().collect();
    scen.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    for (k, v) in scen.iter().take(30) {
        md.push_str(&format!("| {} | {v} |\n", if k.is_empty() { "(none)" } else { k.as_str() }));
    }
    if scen.len() > 30 {
        md.push_str(&format!("| … {} more | |\n", scen.len() - 30));
    }
    md.push('\n');

    md.push_str("## Yield funnel\n\nFrom raw inputs to this release (counts from each stage's manifest):\n\n");
    md.push_str("| stage | counts |\n|---|---|\n");
    for (stage, counts) in &s.funnel {
        md.push_str(&format!("| `{stage}` | {counts} |\n"));
    }
    md.push_str(&format!("| sample pool | {} samples |\n", s.pool));
    for (reason, n) in &s.left_out {
        md.push_str(&format!("| left out | {n}: {reason} |\n"));
    }
    md.push_str(&format!("| **release** | {} samples |\n\n", s.samples));
    curation_section(&mut md, s);

    review_section(&mut md, s);

    made_section(&mut md, s);

    md.push_str("## Known limitations\n\n");
    for l in &s.limitations {
        md.push_str(&format!("- {l}\n"));
    }
    md.push('\n');

    md.push_str("## Lineage and verification\n\n");
    md.push_str("`lineage.jsonl` gives, per sample, the ledger events it descends from (stage, kind, subject and a content reference: the request hash of an LLM exchange, else the hash of the event's payload). `benchgen explain sample:<id>` prints the full chain from the ledger. `benchgen release verify <dir>` checks every file's format, scores oracle predictions on every part (100 % expected), the tools, dependencies, lineage and `SHA256SUMS`.\n");
    if let Some(c) = &s.changelog_head {
        md.push_str(&format!("\n## Changes\n\n{c} See `CHANGELOG.md`.\n"));
    }
    md
}

/// How `logs curate` decided the real sessions: each criterion's drops by who decided them
/// (`rule`, `feedback`, `llm` for one verdict, `llm-agreed` for two agreeing ones, …), their
/// share of the sessions and one example with its reason.
fn curation_section(md: &mut String, s: &Summary) {
    let Some(c) = &s.curation else { return };
    md.push_str(
        "## Real sessions: curation

",
    );
    md.push_str(&format!("`logs curate` kept {} of {} logged sessions", c.kept, c.sessions));
    if c.dropped.is_empty() {
        md.push_str(" and dropped none.\n\n");
        return;
    }
    md.push_str(". Dropped, per criterion and by whom (`rule`: by rule; `feedback`: the user's own feedback; `llm`: one LLM verdict; `llm-agreed`: two agreeing verdicts; `llm-failed`: the judgement failed), with the share of all sessions (`artifacts/logs-curate/report.json` has up to three examples each):\n\n");
    md.push_str("| criterion | decided by | sessions | share | example |\n|---|---|---:|---:|---|\n");
    for d in &c.dropped {
        let example =
            d.examples.first().map_or(String::new(), |e| format!("{}: {}", cell(&e.id, 80), cell(&e.reason, 160)));
        md.push_str(&format!(
            "| {} | {} | {} | {:.1} % | {example} |\n",
            cell(&d.criterion, 40),
            cell(&d.by, 40),
            d.sessions,
            d.share * 100.0
        ));
    }
    md.push('\n');
}

/// `text` as one table cell of at most `max` characters: on one line, cut first (a cut
/// must not split an escape), then `\`, `|`, `<` and `` ` `` escaped, since ids and reasons
/// come from the user's logs and from an LLM.
fn cell(text: &str, max: usize) -> String {
    let text = crate::text::one_line(text);
    let text: String = match text.chars().count() > max {
        true => text.chars().take(max - 1).chain(['…']).collect(),
        false => text,
    };
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' | '|' | '`' => {
                out.push('\\');
                out.push(c);
            }
            '<' => out.push_str("&lt;"),
            c => out.push(c),
        }
    }
    out
}

/// The card's YAML header: what the Hub reads (configs point at the released files).
fn yaml_header(md: &mut String, s: &Summary) {
    md.push_str("---\n");
    md.push_str(&format!("pretty_name: {}\n", yaml_str(&s.name)));
    md.push_str(&format!("license: {}\n", yaml_str(&s.license)));
    md.push_str("language:\n- en\n");
    md.push_str("task_categories:\n- text-generation\n- question-answering\n");
    md.push_str("tags:\n- tool-use\n- function-calling\n- mcp\n- agents\n- benchmark\n");
    md.push_str(&format!("size_categories:\n- {}\n", size_category(s.samples)));
    // Every config is JSON: `datasets` picks one loader for all of a card's configs (from the
    // default's files), so a Parquet default made each JSON config fail ("Parquet magic
    // bytes not found"); an empty part has no config (its loader finds "no data").
    md.push_str("configs:\n");
    md.push_str("- config_name: all\n  default: true\n  data_files:\n  - split: test\n    path: samples.jsonl\n");
    for f in &s.files {
        if let Some(name) = f.strip_suffix(".json").filter(|n| n.starts_with("level_") || n.starts_with("finmcp_"))
            && !s.empty_files.contains(f)
        {
            md.push_str(&format!("- config_name: {name}\n  data_files:\n  - split: test\n    path: {f}\n"));
        }
    }
    md.push_str("---\n\n");
}

/// The review's decisions, who made them and the agreement figures, or that there was none.
fn review_section(md: &mut String, s: &Summary) {
    md.push_str("## Review and agreement\n\n");
    match &s.review {
        Some(r) => {
            md.push_str("| decision | samples |\n|---|---:|\n");
            for (d, n) in &r.decisions {
                md.push_str(&format!("| {d} | {n} |\n"));
            }
            md.push_str("\n| decided by | samples |\n|---|---:|\n");
            for (d, n) in &r.by {
                md.push_str(&format!("| {d} | {n} |\n"));
            }
            md.push('\n');
            match &r.agreement {
                Some(a) => md.push_str(&format!("{}\n\n", a.trim())),
                None => md.push_str("No agreement figures were found in `review-merge/report.md`.\n\n"),
            }
        }
        None => md.push_str("Not reviewed.\n\n"),
    }
}

/// The models and endpoints behind the released samples, their tokens, and the ledger
/// events by kind.
fn made_section(md: &mut String, s: &Summary) {
    md.push_str("## How it was made\n\nModels and endpoints behind the released samples (each distinct LLM request counted once):\n\n");
    if s.llm.is_empty() {
        md.push_str("No LLM exchange is in the lineage of a released sample.\n\n");
    } else {
        md.push_str("| provider | model | roles | requests | prompt tokens | completion tokens |\n|---|---|---|---:|---:|---:|\n");
        let (mut pt, mut ct) = (0u64, 0u64);
        for ((provider, model), u) in &s.llm {
            md.push_str(&format!(
                "| {provider} | {model} | {} | {} | {} | {} |\n",
                u.roles.join(", "),
                u.requests,
                u.prompt_tokens,
                u.completion_tokens
            ));
            pt += u.prompt_tokens;
            ct += u.completion_tokens;
        }
        md.push_str(&format!("\nToken cost: {pt} prompt + {ct} completion = {} tokens.\n\n", pt + ct));
        md.push_str(&batched_note(&s.llm));
    }
    if !s.event_kinds.is_empty() {
        md.push_str("Ledger events behind the released samples, by kind: ");
        md.push_str(&s.event_kinds.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", "));
        md.push_str(".\n\n");
    }
}

/// The card's links to the files that describe the data rather than hold it, those this
/// release has: one line, or nothing.
fn companions(s: &Summary) -> String {
    let links: Vec<&str> = [
        ("croissant.json", "[`croissant.json`](croissant.json) (MLCommons Croissant 1.1 metadata)"),
        (
            "servers.json",
            "[`servers.json`](servers.json) (the MCP servers the samples were executed against, pinned; `benchgen release verify <dir> --servers` reports every tool changed since)",
        ),
    ]
    .into_iter()
    .filter(|(f, _)| s.files.iter().any(|x| x == f))
    .map(|(_, link)| link)
    .collect();
    if links.is_empty() { String::new() } else { format!("\nAlongside the data: {}.\n", links.join("; ")) }
}

fn stats_row(label: &str, v: &super::KindStats) -> String {
    let d = |k: &str| v.difficulty.get(k).copied().unwrap_or(0);
    format!(
        "| {label} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
        v.n,
        avg(v.turns, v.n),
        avg(v.calls, v.n),
        avg(v.steps, v.n),
        avg(v.tools, v.n),
        d("easy"),
        d("medium"),
        d("hard")
    )
}

pub(super) fn describe_file(f: &str) -> &'static str {
    match f {
        "samples.jsonl" => "every sample in benchgen's unified format",
        "samples.parquet" => "one row per sample: type, difficulty, scenario, counts, review decision and scores",
        "tools.parquet" => "the catalog tools the samples use",
        "lineage.jsonl" => "per sample, the ledger events that produced it",
        "tool_equivalence_sets.json" => "ETOM equal function sets",
        "CHANGELOG.md" => "samples added, removed and changed against the previous version",
        "SHA256SUMS" => "checksums of every file",
        "README.md" => "this card",
        "croissant.json" => {
            "MLCommons Croissant 1.1 metadata (JSON-LD): files with checksums, loadable record sets, responsible-AI fields"
        }
        "servers.json" => {
            "the MCP servers the samples were executed against, pinned: how each was started, its package and version, protocol version and `tools/list` hashes"
        }
        "cassettes.jsonl" => {
            "per sample, the recorded tool responses of its reference trajectory, by tool and arguments (what `benchgen eval` answers calls with)"
        }
        "inspect/benchgen_task.py" => {
            "an Inspect AI task over `samples.jsonl`: `inspect eval inspect/benchgen_task.py --model <model>` runs the benchmark without benchgen"
        }
        "inspect/tools.json" => "the tools' schemas and the answers' seed, for the Inspect AI task",
        "invented_entities.json" => {
            "per L3 sample whose request is about an entity `levels l3` invented, that entity (no agent can know its id without the lookup; `benchgen eval` reads it)"
        }
        f if f.starts_with("level_") => "ETOM level file (ETOM's evaluator and `benchgen score --compat etom` read it)",
        f if f.starts_with("finmcp_") => "FinMCP sample JSON (`benchgen score --compat finmcp` reads it)",
        f if f.starts_with("plots/") => "plot",
        _ => "",
    }
}

fn yaml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// The agreement section of the review report, if it has one.
pub fn agreement_from_report(report: &str) -> Option<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in report.lines() {
        if line.starts_with('#') {
            let l = line.to_lowercase();
            if inside && !l.contains("agreement") {
                break;
            }
            inside = l.contains("agreement");
            continue;
        }
        if inside {
            out.push(line);
        }
    }
    let text = out.join("\n");
    (!text.trim().is_empty()).then_some(text)
}

/// Which of the requests batch jobs answered, per model; empty when none did (a card of
/// live calls reads as before). Said because batch jobs cost less per token than live calls.
fn batched_note(llm: &BTreeMap<(String, String), ModelUse>) -> String {
    let batched: Vec<String> = llm
        .iter()
        .filter(|(_, u)| u.batched > 0)
        .map(|((provider, model), u)| format!("{provider} {model}: {} of {}", u.batched, u.requests))
        .collect();
    if batched.is_empty() {
        return String::new();
    }
    format!("Requests answered by batch jobs (priced at the batch prices): {}.\n\n", batched.join("; "))
}

/// Per provider and model: what the released samples cost.
#[derive(Debug, Default, Clone)]
pub struct ModelUse {
    pub roles: Vec<String>,
    pub requests: usize,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Of `requests`, those a batch job answered.
    pub batched: usize,
}

pub fn model_use(llm: &BTreeMap<String, super::lineage::LlmUse>) -> BTreeMap<(String, String), ModelUse> {
    let mut out: BTreeMap<(String, String), ModelUse> = BTreeMap::new();
    for u in llm.values() {
        let m = out.entry((u.provider.clone(), u.model.clone())).or_default();
        if !m.roles.contains(&u.role) {
            m.roles.push(u.role.clone());
            m.roles.sort();
        }
        m.requests += 1;
        m.prompt_tokens += u.prompt_tokens;
        m.completion_tokens += u.completion_tokens;
        m.batched += usize::from(u.batched);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agreement_section_is_cut_from_the_report() {
        let r = "# Review\n\nx\n\n## Agreement\n\n| dim | kappa |\n|---|---|\n| a | 0.5 |\n\n## Next\nno\n";
        assert_eq!(agreement_from_report(r).unwrap().trim(), "| dim | kappa |\n|---|---|\n| a | 0.5 |");
        assert_eq!(agreement_from_report("# Review\nnothing"), None);
    }

    #[test]
    fn the_card_shows_each_curation_drop_with_its_decider_share_and_an_example() {
        use super::super::{Curation, CurationDrop, CurationExample};
        let ex = |id: &str, reason: &str| CurationExample { id: id.into(), reason: reason.into() };
        let mut s =
            Summary { curation: Some(Curation { sessions: 219, kept: 219, dropped: vec![] }), ..Default::default() };
        assert!(render(&s).contains("`logs curate` kept 219 of 219 logged sessions and dropped none."));
        let drop = |criterion: &str, by: &str, sessions, share, examples| CurationDrop {
            criterion: criterion.into(),
            by: by.into(),
            sessions,
            share,
            examples,
        };
        s.curation = Some(Curation {
            sessions: 219,
            kept: 206,
            dropped: vec![
                drop("resolved", "rule", 9, 0.0411, vec![ex("ops-0007", "every call failed")]),
                drop("need", "llm-agreed", 4, 0.0183, vec![ex("ops-0101", "a | pipe\nand a line"), ex("x", "y")]),
                drop("need", "llm", 1, 0.0046, vec![ex("a|b`c", "<b>bold</b> a\\|b")]),
                drop("answer", "llm-failed", 0, 0.0, vec![]),
            ],
        });
        let md = render(&s);
        assert!(
            md.contains("`logs curate` kept 206 of 219 logged sessions. Dropped, per criterion and by whom"),
            "{md}"
        );
        assert!(md.contains("| resolved | rule | 9 | 4.1 % | ops-0007: every call failed |\n"), "{md}");
        assert!(md.contains("| need | llm-agreed | 4 | 1.8 % | ops-0101: a \\| pipe and a line |\n"), "{md}");
        assert!(md.contains("| answer | llm-failed | 0 | 0.0 % |  |\n"), "{md}");
        // What the logs and the model wrote cannot break the table or become HTML.
        assert!(md.contains("| need | llm | 1 | 0.5 % | a\\|b\\`c: &lt;b>bold&lt;/b> a\\\\\\|b |\n"), "{md}");
        // The section comes after the funnel, and only with the log track.
        assert!(md.find("## Yield funnel").unwrap() < md.find("## Real sessions: curation").unwrap());
        assert!(!render(&Summary::default()).contains("## Real sessions"));
    }

    #[test]
    fn a_chart_is_svg() {
        let svg = bars_svg("t", "n", &[("a".into(), 3), ("b".into(), 1)]).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("\na\n</text>") && svg.contains("\nb\n</text>"), "{svg}");
        let sizes: Vec<f64> =
            svg.split("font-size=\"").skip(1).map(|r| r.split('"').next().unwrap().parse().unwrap()).collect();
        assert!(!sizes.is_empty() && sizes.iter().all(|s| *s >= 10.0), "labels are readable: {sizes:?}");
    }
}
