//! Review: assignment, sheets, import validation, LLM pre-review, merge with
//! adjudication, agreement figures against published worked examples, and the web
//! app's access rules over HTTP (the real-browser test is in `review_browser.rs`).
//!
//! Upstream samples are made here: a test project brings them as `[review]
//! extra_samples`, or as the sample pool's `artifacts/validate/samples.jsonl` with a
//! manifest written the way the runner writes one.

use std::collections::BTreeMap;
use std::io::BufRead;

use benchgen::review::agreement::{self, Metric};
use benchgen::review::assign::{self, Assignments};
use benchgen::review::{ReviewSettings, Reviewer, Role};
use serde_json::{Value, json};

use crate::support::{Project, assert_code, stderr, stdout};

pub const SECRET: &str = "it-review-secret-0123456789";

pub const ROSTER: &str = r#"
[[reviewer]]
id = "alice"
name = "Alice"

[[reviewer]]
id = "bob"
name = "Bob"

[[reviewer]]
id = "carol"
name = "Carol"

[[reviewer]]
id = "dave"
name = "Dave"

[[reviewer]]
id = "lena"
name = "Lena"
role = "lead"
"#;

/// A FinMCP-style sample with an executed trajectory.
pub fn sample(i: usize, author: Option<&str>) -> Value {
    let mut v = json!({
        "id": format!("s{i:03}"), "family": "finmcp",
        "kind": if i.is_multiple_of(3) { "single_tool" } else { "multi_tool" },
        "scenario": ["wealth", if i.is_multiple_of(2) { "funds" } else { "stocks" }],
        "turns": [{
            "user": format!("What is the latest NAV of fund F{i}?"),
            "reference_plan": [{"alternatives": ["fin::nav"], "group": 0}],
            "gold_reply": format!("=The NAV of F{i} is {i}.12 as of today."),
            "trajectory": [[{"tool": "fin::nav", "arguments": {"fund": format!("F{i}")}, "result": format!("{{\"nav\": {i}.12}}")}]]
        }],
        "out_of_scope": false, "difficulty": "easy", "provenance_id": format!("test:{i}")
    });
    if let Some(a) = author {
        v["author"] = json!(a);
    }
    v
}

pub fn jsonl(items: &[Value]) -> String {
    items.iter().map(|v| v.to_string() + "\n").collect()
}

pub struct RP {
    pub p: Project,
}

impl RP {
    /// A project with `n` samples brought as `extra_samples` and the five-member roster.
    pub fn new(n: usize, extra_cfg: &str) -> Self {
        let p = Project::empty();
        p.write("reviews/reviewers.toml", ROSTER);
        let items: Vec<Value> = (0..n).map(|i| sample(i, if i % 5 == 0 { Some("alice") } else { None })).collect();
        p.write("raw/samples.jsonl", jsonl(&items));
        p.write(
            "pipeline/demo.toml",
            format!(
                "[project]\nseed = 7\n\n[review]\nextra_samples = [\"raw/samples.jsonl\"]\nbootstrap = 200\n{extra_cfg}"
            ),
        );
        RP { p }
    }
    pub fn run(&self, args: &[&str]) -> std::process::Output {
        self.p.cmd().env("BENCHGEN_REVIEW_SECRET", SECRET).args(args).output().unwrap()
    }
    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert_code(&o, 0);
        stdout(&o) + &stderr(&o)
    }
    /// Twelve samples assigned, exported and returned: everyone accepts everything except
    /// `carol`, who rejects (freshness 2) whatever she reviews; imported, not merged.
    pub fn carol_disputes() -> (Self, Assignments) {
        let rp = RP::new(12, "");
        rp.ok(&["review", "assign"]);
        rp.ok(&["review", "export"]);
        let a = rp.assignments();
        for r in &a.reviewers {
            let reject = r.id == "carol";
            rp.fill(&r.id, |_| Some(if reject { [5, 5, 5, 5, 2] } else { [5, 4, 4, 5, 4] }));
        }
        rp.ok(&["review", "import"]);
        (rp, a)
    }
    pub fn assignments(&self) -> Assignments {
        serde_json::from_str(&self.p.read("artifacts/review-assign/assignments.json")).unwrap()
    }
    pub fn decisions(&self) -> BTreeMap<String, Value> {
        self.p
            .read("artifacts/review-merge/decisions.jsonl")
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .map(|v| (v["id"].as_str().unwrap().to_string(), v))
            .collect()
    }
    /// Fill `reviewer`'s exported sheet with `scores(sample_id)` (None: leave the row
    /// empty) and put it in `reviews/returned/`.
    pub fn fill(&self, reviewer: &str, scores: impl Fn(&str) -> Option<[u8; 5]>) {
        let text = self.p.read(&format!("artifacts/review-export/sheets/{reviewer}.csv"));
        let mut rd = csv::Reader::from_reader(text.as_bytes());
        let mut w = csv::Writer::from_writer(Vec::new());
        w.write_record(rd.headers().unwrap()).unwrap();
        for rec in rd.records() {
            let mut cells: Vec<String> = rec.unwrap().iter().map(str::to_string).collect();
            if let Some(s) = scores(&cells[0]) {
                for (i, v) in s.iter().enumerate() {
                    cells[8 + i] = v.to_string();
                }
                cells[13] = format!("note by {reviewer}");
            }
            w.write_record(&cells).unwrap();
        }
        self.p.write(&format!("reviews/returned/{reviewer}.csv"), w.into_inner().unwrap());
    }
}

fn roster(spec: &[(&str, Option<usize>, &[&str])]) -> Vec<Reviewer> {
    spec.iter()
        .map(|(id, cap, exp)| Reviewer {
            id: id.to_string(),
            name: id.to_uppercase(),
            expertise: exp.iter().map(|s| s.to_string()).collect(),
            capacity: *cap,
            role: Role::Reviewer,
            token_version: 1,
        })
        .collect()
}

fn samples(n: usize, author_every: usize) -> BTreeMap<String, benchgen::model::Sample> {
    (0..n)
        .map(|i| {
            let author = (author_every > 0 && i % author_every == 0).then_some("r1");
            let s: benchgen::model::Sample = serde_json::from_value(sample(i, author)).unwrap();
            (s.id.clone(), s)
        })
        .collect()
}

#[test]
fn assignment_two_distinct_balanced_within_one_authors_capacity_expertise_sticky() {
    let cfg = ReviewSettings::default();
    // Balanced: 7 reviewers, 40 samples, no constraints → loads within 1.
    let r7 = roster(&[
        ("r1", None, &[]),
        ("r2", None, &[]),
        ("r3", None, &[]),
        ("r4", None, &[]),
        ("r5", None, &[]),
        ("r6", None, &[]),
        ("r7", None, &[]),
    ]);
    let s40 = samples(40, 0);
    let (a, _) = assign::assign(&cfg, &r7, &s40, None, 11);
    assert_eq!(a.samples.len(), 40);
    assert!(a.unassigned.is_empty());
    for x in &a.samples {
        assert_eq!(x.reviewers.len(), 2);
        assert_ne!(x.reviewers[0], x.reviewers[1], "two distinct reviewers");
    }
    let loads: Vec<usize> = a.reviewers.iter().map(|r| r.assigned).collect();
    assert_eq!(loads.iter().sum::<usize>(), 80);
    assert!(loads.iter().max().unwrap() - loads.iter().min().unwrap() <= 1, "balanced within 1: {loads:?}");
    // Seeded: same seed same draw; another seed another draw.
    assert_eq!(assign::assign(&cfg, &r7, &s40, None, 11).0, a);
    assert_ne!(assign::assign(&cfg, &r7, &s40, None, 12).0.samples, a.samples);

    // Authors, capacity and expertise.
    let r = roster(&[
        ("r1", None, &[]),
        ("r2", Some(3), &[]),
        ("r3", None, &["stocks"]),
        ("r4", None, &[]),
        ("r5", None, &[]),
    ]);
    let s = samples(20, 2); // r1 wrote every even-numbered sample
    let (a, _) = assign::assign(&cfg, &r, &s, None, 3);
    for x in &a.samples {
        if x.author.as_deref() == Some("r1") {
            assert!(!x.reviewers.contains(&"r1".to_string()), "{} assigned to its author", x.id);
        }
        if x.reviewers.contains(&"r3".to_string()) {
            assert!(x.scenario.contains(&"stocks".to_string()), "{} is not r3's expertise", x.id);
        }
    }
    assert_eq!(a.reviewer("r2").unwrap().assigned, 3, "capacity is a hard limit");
    // A roster too small for the constraints: listed with the reason, never dropped.
    let tiny = roster(&[("r1", None, &[]), ("r2", None, &[])]);
    let (a, _) = assign::assign(&cfg, &tiny, &samples(4, 2), None, 3);
    assert_eq!(a.samples.len() + a.unassigned.len(), 4);
    assert_eq!(a.unassigned.len(), 2, "samples s000 and s002 were written by r1: {:?}", a.unassigned);
    assert!(a.unassigned[0].reason.contains("1 the author"), "{}", a.unassigned[0].reason);

    // Sticky: rerunning after new samples keeps every earlier assignment and assigns only the new.
    let first = assign::assign(&cfg, &r7, &samples(30, 0), None, 5).0;
    let second = assign::assign(&cfg, &r7, &s40, Some(&first), 5).0;
    for x in &first.samples {
        assert_eq!(second.sample(&x.id).unwrap().reviewers, x.reviewers, "{} was reassigned", x.id);
    }
    assert_eq!(second.samples.len(), 40);
    let loads: Vec<usize> = second.reviewers.iter().map(|r| r.assigned).collect();
    assert!(loads.iter().max().unwrap() - loads.iter().min().unwrap() <= 1, "still balanced: {loads:?}");
    // A reviewer leaving the roster: only their slots are drawn again.
    let r6: Vec<Reviewer> = r7.iter().filter(|r| r.id != "r7").cloned().collect();
    let third = assign::assign(&cfg, &r6, &s40, Some(&second), 5).0;
    for x in &second.samples {
        let now = &third.sample(&x.id).unwrap().reviewers;
        assert!(!now.contains(&"r7".to_string()));
        for rv in x.reviewers.iter().filter(|r| *r != "r7") {
            assert!(now.contains(rv), "{} lost {rv}", x.id);
        }
    }
}

#[test]
fn assign_command_is_sticky_deterministic_and_reads_the_sample_pool() {
    let rp = RP::new(12, "");
    let out = rp.ok(&["review", "assign"]);
    assert!(out.contains("12 samples assigned to 5 reviewers"), "{out}");
    let first = rp.assignments();
    // Personal links: one per reviewer, owner-only, and no token or link code in any artifact.
    let token = token_of(&rp.p, "alice");
    assert_eq!(token.len(), 64);
    let code = link_of(&rp.p, "alice", "").split("#link=").nth(1).unwrap().to_string();
    assert_eq!(code.len(), 64);
    assert_ne!(code, token);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(rp.p.path("reviews/links/alice.txt")).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "links are private");
    }
    for (f, bytes) in rp.p.artifacts() {
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains(&token) && !text.contains(&code), "a secret leaked into artifacts/{f}");
    }
    // The sample pool: `validate/samples.jsonl` with a manifest, as the runner writes them.
    let pool: Vec<Value> = (100..104).map(|i| sample(i, None)).collect();
    let body = jsonl(&pool);
    rp.p.write("artifacts/validate/samples.jsonl", &body);
    let hash = benchgen::store::sha256_hex(body.as_bytes());
    rp.p.write(
        "artifacts/validate/manifest.json",
        serde_json::to_vec_pretty(&json!({"stage": "validate", "stage_version": 1, "code_version": "0.1.0",
            "config_hash": "test", "inputs": {}, "prompts": {}, "outputs": {"samples.jsonl": hash}, "counts": {},
            "run_id": 1, "started_at": "2026-01-01T00:00:00Z", "finished_at": "2026-01-01T00:00:00Z", "duration_ms": 0}))
        .unwrap(),
    );
    rp.ok(&["review", "assign"]);
    let second = rp.assignments();
    assert_eq!(second.samples.len(), 16);
    for x in &first.samples {
        assert_eq!(second.sample(&x.id).unwrap().reviewers, x.reviewers, "rerun moved {}", x.id);
    }
    for x in &second.samples {
        assert_ne!(x.author.as_deref(), Some(x.reviewers[0].as_str()));
        assert_ne!(x.author.as_deref(), Some(x.reviewers[1].as_str()));
    }
    // From scratch in another project: byte-identical assignments.
    let rp2 = RP::new(12, "");
    rp2.ok(&["review", "assign"]);
    assert_eq!(
        rp2.p.read("artifacts/review-assign/assignments.json"),
        serde_json::to_string_pretty(&first).unwrap() + "\n"
    );
    // A duplicate id across sources is an error naming both places.
    rp2.p.write("artifacts/validate/samples.jsonl", jsonl(&[sample(3, None)]));
    let o = rp2.run(&["review", "assign"]);
    assert_code(&o, 1);
    assert!(
        stderr(&o).contains("raw/samples.jsonl:4") && stderr(&o).contains("sample id `s003` already came from"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn export_writes_neutralised_csv_and_xlsx_with_drop_downs() {
    let rp = RP::new(6, "");
    rp.ok(&["review", "assign"]);
    rp.ok(&["review", "export"]);
    let a = rp.assignments();
    for r in &a.reviewers {
        let csv_text = rp.p.read(&format!("artifacts/review-export/sheets/{}.csv", r.id));
        let mut rd = csv::Reader::from_reader(csv_text.as_bytes());
        let rows: Vec<csv::StringRecord> = rd.records().map(Result::unwrap).collect();
        assert_eq!(rows.len(), r.assigned);
        for row in &rows {
            assert!(row[7].starts_with("'="), "formula-looking answers are neutralised: {:?}", &row[7]);
            assert!(row[6].contains("fin::nav(") && row[6].contains("-> {\"nav\""), "{}", &row[6]);
        }
        let xlsx = std::fs::read(rp.p.path(&format!("artifacts/review-export/sheets/{}.xlsx", r.id))).unwrap();
        assert!(xlsx.starts_with(b"PK"), "an XLSX (zip) file");
    }
    // The drop-down: a list validation of the scale over the five score columns (I..M).
    let xlsx = std::fs::read(rp.p.path("artifacts/review-export/sheets/bob.xlsx")).unwrap();
    let mut z = zip::ZipArchive::new(std::io::Cursor::new(xlsx)).unwrap();
    let mut xml = String::new();
    std::io::Read::read_to_string(&mut z.by_name("xl/worksheets/sheet1.xml").unwrap(), &mut xml).unwrap();
    let n = a.reviewer("bob").unwrap().assigned + 1;
    assert!(xml.contains(&format!("<dataValidation type=\"list\" allowBlank=\"1\" showInputMessage=\"1\" showErrorMessage=\"1\" sqref=\"I2:M{n}\"><formula1>\"1,2,3,4,5\"</formula1>")), "{xml}");
    assert!(!xml.contains("<f>"), "no formulas: every cell is a string");
    // Byte-identical on a rerun from scratch (fixed workbook time).
    let again = RP::new(6, "");
    again.ok(&["review", "assign"]);
    again.ok(&["review", "export"]);
    assert_eq!(again.p.artifacts()["review-export/sheets/bob.xlsx"], rp.p.artifacts()["review-export/sheets/bob.xlsx"]);
}

#[test]
fn import_rejects_every_bad_row_with_file_line_applies_nothing_and_catches_stale_hashes() {
    let rp = RP::new(15, "");
    rp.ok(&["review", "assign"]);
    rp.ok(&["review", "export"]);
    let a = rp.assignments();
    let alice: Vec<String> =
        a.samples.iter().filter(|x| x.reviewers.contains(&"alice".into())).map(|x| x.id.clone()).collect();
    assert!(alice.len() >= 4, "{alice:?}");
    let not_alice = a.samples.iter().find(|x| !x.reviewers.contains(&"alice".into())).unwrap().id.clone();
    rp.fill("alice", |_| Some([4, 4, 5, 4, 4]));
    // Break rows on purpose: one problem kind per line.
    let good = rp.p.read("reviews/returned/alice.csv");
    let mut rd = csv::Reader::from_reader(good.as_bytes());
    let header = rd.headers().unwrap().clone();
    let mut rows: Vec<Vec<String>> = rd.records().map(|r| r.unwrap().iter().map(str::to_string).collect()).collect();
    rows[0][8] = "6".into(); // line 2: off the scale
    rows[1][9] = "x".into(); // line 3: not a number
    rows[1][10] = String::new(); // line 3: missing
    rows[2][1] = "sha256:0000".into(); // line 4: stale hash
    let mut foreign = rows[0].clone();
    foreign[0] = not_alice.clone(); // line N+2: not assigned to alice
    foreign[8] = "4".into();
    let mut unknown = rows[0].clone();
    unknown[0] = "nope".into();
    unknown[8] = "4".into();
    let mut dup = rows[3].clone();
    dup[8] = "3".into();
    rows.push(foreign);
    rows.push(unknown);
    rows.push(dup);
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(&header).unwrap();
    for r in &rows {
        w.write_record(r).unwrap();
    }
    let bad = w.into_inner().unwrap();
    rp.p.write("reviews/returned/alice.csv", &bad);
    // The line each record starts on (the conversation cell spans several lines).
    let mut rd = csv::Reader::from_reader(bad.as_slice());
    let line: Vec<u64> = rd.records().map(|r| r.unwrap().position().unwrap().line()).collect();
    let o = rp.run(&["review", "import"]);
    assert_code(&o, 1);
    let err = stderr(&o);
    let n = rows.len();
    let at = |i: usize| format!("reviews/returned/alice.csv:{}:", line[i]);
    for want in [
        format!("{} sample `{}`: `relevance` must be a whole number from 1 to 5, found `6`", at(0), rows[0][0]),
        format!("{} sample `{}`: `completeness` must be a whole number from 1 to 5, found `x`", at(1), rows[1][0]),
        format!("{} sample `{}`: `consistency` has no score", at(1), rows[1][0]),
        format!("{} stale:", at(2)),
        format!("{} reviewer `alice` is not assigned to `{not_alice}`", at(n - 3)),
        format!("{} unknown sample `nope`", at(n - 2)),
        format!("{} `alice` already scored", at(n - 1)),
    ] {
        assert!(err.contains(&want), "missing `{want}` in:\n{err}");
    }
    assert!(!rp.p.path("artifacts/review-import").exists(), "nothing applied");

    // The good sheet imports; one review event per score.
    rp.p.write("reviews/returned/alice.csv", &good);
    let out = rp.ok(&["review", "import"]);
    assert!(out.contains(&format!("{} scores imported", alice.len())), "{out}");

    // Edit a sample alice scored: re-assign keeps her, but her old sheet is now stale.
    let mut items: Vec<Value> =
        rp.p.read("raw/samples.jsonl").lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let edited = alice[0].clone();
    for v in items.iter_mut().filter(|v| v["id"] == edited.as_str()) {
        v["turns"][0]["gold_reply"] = json!("An edited answer.");
    }
    rp.p.write("raw/samples.jsonl", jsonl(&items));
    rp.ok(&["review", "assign"]);
    assert!(rp.assignments().sample(&edited).unwrap().reviewers.contains(&"alice".into()));
    let o = rp.run(&["review", "import"]);
    assert_code(&o, 1);
    assert!(stderr(&o).contains(&format!("stale: `{edited}` changed since this sheet was exported")), "{}", stderr(&o));
}

/// `rows` (header first) as CSV with CRLF line ends, as Excel and Python's csv module save it.
fn crlf_csv(rows: &[Vec<String>]) -> Vec<u8> {
    let mut w = csv::WriterBuilder::new().terminator(csv::Terminator::CRLF).from_writer(Vec::new());
    for r in rows {
        w.write_record(r).unwrap();
    }
    w.into_inner().unwrap()
}

#[test]
fn crlf_sheets_and_adjudications_are_located_on_their_real_line_and_name_the_sample() {
    let rp = RP::new(12, "");
    rp.ok(&["review", "assign"]);
    rp.ok(&["review", "export"]);
    rp.fill("alice", |_| Some([4, 4, 5, 4, 4]));
    let lf = rp.p.read("reviews/returned/alice.csv");
    let mut rd = csv::Reader::from_reader(lf.as_bytes());
    let header: Vec<String> = rd.headers().unwrap().iter().map(str::to_string).collect();
    // With LF line ends the csv crate's own line numbers are right: the expected lines.
    let mut line = BTreeMap::new();
    let mut rows = vec![header];
    for r in rd.records() {
        let r = r.unwrap();
        line.insert(r[0].to_string(), r.position().unwrap().line());
        rows.push(r.iter().map(str::to_string).collect());
    }
    assert!(rows.len() >= 4);

    // A bad score on the second data row is reported on its own line, naming the sample.
    let mut bad = rows.clone();
    bad[2][8] = "6".into();
    rp.p.write("reviews/returned/alice.csv", crlf_csv(&bad));
    let o = rp.run(&["review", "import"]);
    assert_code(&o, 1);
    let id = &bad[2][0];
    let want = format!(
        "reviews/returned/alice.csv:{}: sample `{id}`: `relevance` must be a whole number from 1 to 5, found `6`",
        line[id]
    );
    assert!(stderr(&o).contains(&want), "missing `{want}` in:\n{}", stderr(&o));

    // The good sheet with CRLF line ends: every score's source is its real line.
    rp.p.write("reviews/returned/alice.csv", crlf_csv(&rows));
    rp.ok(&["review", "import"]);
    let mut seen = 0;
    for l in rp.p.read("artifacts/review-import/scores.jsonl").lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        if v["reviewer"] == "alice" {
            let id = v["sample_id"].as_str().unwrap();
            assert_eq!(v["source"], format!("reviews/returned/alice.csv:{}", line[id]), "{v}");
            seen += 1;
        }
    }
    assert_eq!(seen, rows.len() - 1);

    // `reviews/adjudications.csv` saved with CRLF: the first data row is line 2.
    rp.p.write(
        "reviews/adjudications.csv",
        "sample_id,content_hash,decision,adjudicator,reason\r\nnope,sha256:00,accept,lena,checked\r\n",
    );
    let o = rp.run(&["review", "merge"]);
    assert_code(&o, 1);
    assert!(stderr(&o).contains("reviews/adjudications.csv:2: unknown sample `nope`"), "{}", stderr(&o));
}

/// A cell of a filled XLSX sheet, as a spreadsheet program stores what the reviewer did.
#[derive(Clone)]
enum Xl {
    Text(String),
    Num(f64),
    Formula(&'static str),
}

/// Read `reviewer`'s exported XLSX sheet back (with calamine, as strings), let `edit`
/// change the rows (cells by column index), and write the result to
/// `reviews/returned/<reviewer>.xlsx` with rust_xlsxwriter: score choices as numbers, as
/// Excel and LibreOffice store a drop-down pick.
fn fill_xlsx(rp: &RP, reviewer: &str, edit: impl Fn(&mut Vec<Vec<Xl>>)) {
    fill_xlsx_and(rp, reviewer, edit, None)
}

/// [`fill_xlsx`], plus one more text cell at `(row, column)` (0-based).
fn fill_xlsx_and(rp: &RP, reviewer: &str, edit: impl Fn(&mut Vec<Vec<Xl>>), extra: Option<(u32, u16, &str)>) {
    use calamine::Reader;
    let bytes = std::fs::read(rp.p.path(&format!("artifacts/review-export/sheets/{reviewer}.xlsx"))).unwrap();
    let mut wb = calamine::Xlsx::new(std::io::Cursor::new(bytes)).unwrap();
    let range = wb.worksheet_range("review").unwrap();
    let mut rows: Vec<Vec<Xl>> = range.rows().map(|r| r.iter().map(|c| Xl::Text(c.to_string())).collect()).collect();
    edit(&mut rows);
    let mut out = rust_xlsxwriter::Workbook::new();
    let ws = out.add_worksheet();
    ws.set_name("review").unwrap();
    for (r, row) in rows.iter().enumerate() {
        for (c, cell) in row.iter().enumerate() {
            let (r, c) = (r as u32, c as u16);
            match cell {
                Xl::Text(t) if t.is_empty() => {}
                Xl::Text(t) => {
                    ws.write_string(r, c, t).unwrap();
                }
                Xl::Num(n) => {
                    ws.write_number(r, c, *n).unwrap();
                }
                Xl::Formula(f) => {
                    ws.write_formula(r, c, *f).unwrap();
                }
            }
        }
    }
    if let Some((r, c, t)) = extra {
        ws.write_string(r, c, t).unwrap();
    }
    rp.p.write(&format!("reviews/returned/{reviewer}.xlsx"), out.save_to_buffer().unwrap());
}

/// Put five scores (as numbers) into a sheet row's score columns.
fn set_scores(row: &mut [Xl], s: [u8; 5]) {
    for (i, v) in s.into_iter().enumerate() {
        row[8 + i] = Xl::Num(v as f64);
    }
}

#[test]
fn xlsx_sheets_import_with_the_csv_checks_and_round_trip_to_merge() {
    let rp = RP::new(12, "");
    rp.ok(&["review", "assign"]);
    rp.ok(&["review", "export"]);
    let a = rp.assignments();
    let alice: Vec<String> =
        a.samples.iter().filter(|x| x.reviewers.contains(&"alice".into())).map(|x| x.id.clone()).collect();
    assert!(alice.len() >= 4, "{alice:?}");
    let not_alice = a.samples.iter().find(|x| !x.reviewers.contains(&"alice".into())).unwrap().id.clone();

    // Bad rows, one kind per sheet row (row 1 is the header); nothing is applied.
    fill_xlsx(&rp, "alice", |rows| {
        for row in rows.iter_mut().skip(1) {
            set_scores(row, [5, 4, 4, 5, 4]);
        }
        rows[1][8] = Xl::Num(6.0); // row 2: off the scale
        rows[2][9] = Xl::Num(4.5); // row 3: not whole
        rows[3][10] = Xl::Formula("=2+2"); // row 4: a formula, never evaluated
        rows[4][1] = Xl::Text("sha256:0000".into()); // row 5: stale hash
        let mut foreign = rows[1].clone();
        foreign[0] = Xl::Text(not_alice.clone());
        foreign[8] = Xl::Num(4.0);
        rows.push(foreign); // row N+2: not assigned to alice
        let mut other = rows[2].clone();
        other[2] = Xl::Text("mallory".into());
        other[9] = Xl::Num(4.0);
        rows.push(other); // a row claiming to be bob's in alice's sheet
    });
    let n = alice.len();
    let o = rp.run(&["review", "import"]);
    assert_code(&o, 1);
    let err = stderr(&o);
    let f = "reviews/returned/alice.xlsx";
    // The sample id of a row of the returned workbook (0-based; row 0 is the header).
    let xlsx_id = |row: usize| {
        use calamine::Reader;
        let mut wb = calamine::Xlsx::new(std::io::Cursor::new(std::fs::read(rp.p.path(f)).unwrap())).unwrap();
        wb.worksheet_range("review").unwrap().rows().nth(row).unwrap()[0].to_string()
    };
    for want in [
        format!("{f}:2: sample `{}`: `relevance` must be a whole number from 1 to 5, found `6`", xlsx_id(1)),
        format!("{f}:3: sample `{}`: `completeness` must be a whole number from 1 to 5, found `4.5`", xlsx_id(2)),
        format!("{f}:4: `consistency` (cell K4) holds a formula (`=2+2`)"),
        format!("{f}:5: stale:"),
        format!("{f}:{}: reviewer `alice` is not assigned to `{not_alice}`", n + 2),
        format!("{f}:{}: reviewer `mallory` is not assigned to", n + 3),
    ] {
        assert!(err.contains(&want), "missing `{want}` in:\n{err}");
    }
    assert!(!rp.p.path("artifacts/review-import").exists(), "nothing applied");

    // Every reviewer returns the XLSX: carol rejects (freshness 2), the rest accept; alice's
    // note was typed with a leading `'` (as the CSV neutralises), which is restored.
    for r in &a.reviewers {
        let reject = r.id == "carol";
        let id = r.id.clone();
        fill_xlsx(&rp, &r.id, |rows| {
            for row in rows.iter_mut().skip(1) {
                set_scores(row, if reject { [5, 5, 5, 5, 2] } else { [5, 4, 4, 5, 4] });
                row[13] = Xl::Text(if id == "alice" { "'=checked by alice".into() } else { format!("note by {id}") });
            }
            if id == "dave" {
                // The score cells as text (a sheet saved by a program that typed them so).
                for row in rows.iter_mut().skip(1) {
                    row[8] = Xl::Text("5".into());
                }
            }
        });
    }
    let out = rp.ok(&["review", "import"]);
    let total = a.samples.len() * 2;
    assert!(out.contains(&format!("{total} scores imported ({total} from sheets, 0 from the web app)")), "{out}");
    let scores: Vec<Value> =
        rp.p.read("artifacts/review-import/scores.jsonl").lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let a0 = scores.iter().find(|s| s["reviewer"] == "alice").unwrap();
    assert_eq!(a0["note"], "=checked by alice", "the neutralising `'` is removed");
    assert!(a0["source"].as_str().unwrap().starts_with("reviews/returned/alice.xlsx:"), "{a0}");
    assert_eq!(
        a0["scores"],
        json!({"relevance": 5, "completeness": 4, "consistency": 4, "reliability": 5, "freshness": 4})
    );
    rp.ok(&["review", "merge"]);
    let d = rp.decisions();
    for x in &a.samples {
        let want = if x.reviewers.contains(&"carol".into()) { "undecided" } else { "accepted" };
        assert_eq!(d[&x.id]["decision"], want, "{}", d[&x.id]);
    }

    // The same scores as CSV beside the XLSX: each row is scored twice, and said so.
    rp.fill("bob", |_| Some([5, 4, 4, 5, 4]));
    let o = rp.run(&["review", "import"]);
    assert_code(&o, 1);
    assert!(stderr(&o).contains("`bob` already scored"), "{}", stderr(&o));
}

#[test]
fn merge_applies_the_rule_queues_disagreement_and_adjudication_decides_with_lineage() {
    let (rp, a) = RP::carol_disputes();
    let out = rp.ok(&["review", "merge"]);
    let d = rp.decisions();
    assert_eq!(d.len(), 12);
    let mut disputed = None;
    for x in &a.samples {
        let dec = &d[&x.id];
        let carol = x.reviewers.contains(&"carol".to_string());
        if carol {
            assert_eq!(dec["decision"], "undecided", "{dec}");
            assert!(dec["reason"].as_str().unwrap().contains("adjudication queue"));
            if !x.reviewers.contains(&"lena".to_string()) && x.author.as_deref() != Some("lena") {
                disputed.get_or_insert(x.clone());
            }
        } else {
            assert_eq!(dec["decision"], "accepted", "{dec}");
            assert_eq!(dec["decided_by"], "human");
            assert_eq!(dec["reviews"].as_array().unwrap().len(), 2);
        }
        assert!(dec["rule"].as_str().unwrap().contains(">= 4"), "{dec}");
    }
    assert!(out.contains("undecided samples stay out of the release"), "{out}");
    let report = rp.p.read("artifacts/review-merge/report.md");
    assert!(report.contains("| relevance |") && report.contains("κ (quadratic)"), "{report}");
    assert!(report.contains("## Accepted share per sample type") && report.contains("multi_tool"), "{report}");
    assert!(rp.p.read("artifacts/review-merge/heatmap.svg").starts_with("<svg"));
    let queue = rp.p.read("artifacts/review-merge/queue.csv");
    let disputed = disputed.expect("a disputed sample lena did not review");
    assert!(queue.contains(&disputed.id));

    // A reviewer of the sample cannot adjudicate it; errors name file:line, nothing applied.
    let hash = &disputed.content_hash;
    let r0 = &disputed.reviewers[0];
    rp.p.write(
        "reviews/adjudications.csv",
        format!("sample_id,content_hash,decision,adjudicator,reason\n{id},{hash},accept,{r0},mine\n", id = disputed.id),
    );
    let o = rp.run(&["review", "merge"]);
    assert_code(&o, 1);
    assert!(
        stderr(&o).contains(&format!(
            "reviews/adjudications.csv:2: `{r0}` reviewed `{}` and cannot adjudicate it",
            disputed.id
        )),
        "{}",
        stderr(&o)
    );
    // The lead decides, with a reason.
    rp.p.write(
        "reviews/adjudications.csv",
        format!("sample_id,content_hash,decision,adjudicator,reason\n{id},{hash},accept,lena,freshness is fine: the data is live\n", id = disputed.id),
    );
    rp.ok(&["review", "merge"]);
    let dec = &rp.decisions()[&disputed.id];
    assert_eq!(dec["decision"], "accepted");
    assert_eq!(dec["decided_by"], "adjudication");
    assert_eq!(dec["adjudication"]["adjudicator"], "lena");
    // `explain sample:<id>` shows both reviews, the adjudication and the rule.
    let ex = rp.ok(&["explain", &format!("sample:{}", disputed.id)]);
    // explain wraps its text at 100 columns: read it as one line.
    let ex = ex.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(ex.contains("accepted (decided by adjudication)"), "{ex}");
    assert!(ex.contains("adjudicated `accept` by `lena`: freshness is fine"), "{ex}");
    assert!(ex.contains("rule: accepted iff both reviewers score >= 4"), "{ex}");
    for r in &disputed.reviewers {
        assert!(ex.contains(&format!("human review by `{r}`")), "{ex}");
    }
}

#[test]
fn merge_agreement_on_a_hand_made_table_matches_the_formulas() {
    // Two reviewers, 8 samples; relevance scores chosen by hand.
    let rel: [(u8, u8); 8] = [(5, 5), (4, 5), (3, 3), (2, 3), (5, 4), (1, 2), (4, 4), (3, 5)];
    let rp = RP::new(8, "");
    rp.ok(&["review", "assign"]);
    rp.ok(&["review", "export"]);
    let a = rp.assignments();
    let idx: BTreeMap<String, usize> = a.samples.iter().enumerate().map(|(i, x)| (x.id.clone(), i)).collect();
    for r in &a.reviewers {
        let id = r.id.clone();
        let a2 = a.clone();
        let idx2 = idx.clone();
        rp.fill(&r.id, move |sid| {
            let i = idx2[sid];
            let first = a2.samples[i].reviewers[0] == id;
            let v = if first { rel[i].0 } else { rel[i].1 };
            Some([v, 4, 4, 4, 4])
        });
    }
    rp.ok(&["review", "import"]);
    rp.ok(&["review", "merge"]);
    let ag: Value = serde_json::from_str(&rp.p.read("artifacts/review-merge/agreement.json")).unwrap();
    let human = &ag[0];
    assert_eq!(human["between"], "human");
    let relv = human["dimensions"].as_array().unwrap().iter().find(|d| d["dimension"] == "relevance").unwrap();
    let k = agreement::quadratic_kappa(&rel, 1, 5).unwrap();
    let al = agreement::ordinal_alpha(&rel, 1, 5).unwrap();
    assert!((relv["kappa_quadratic"]["value"].as_f64().unwrap() - k).abs() < 1e-12);
    assert!((relv["alpha_ordinal"]["value"].as_f64().unwrap() - al).abs() < 1e-12);
    assert_eq!(relv["exact"]["value"].as_f64().unwrap(), 3.0 / 8.0);
    assert_eq!(relv["within_one"]["value"].as_f64().unwrap(), 7.0 / 8.0);
    assert!(
        relv["kappa_quadratic"]["ci_low"].as_f64().unwrap() <= relv["kappa_quadratic"]["ci_high"].as_f64().unwrap()
    );
    // Every other dimension is constant (4 vs 4): κ is undefined there, reported as such.
    let comp = human["dimensions"].as_array().unwrap().iter().find(|d| d["dimension"] == "completeness").unwrap();
    assert!(comp["kappa_quadratic"]["value"].is_null());
    assert_eq!(comp["exact"]["value"].as_f64().unwrap(), 1.0);
}

#[test]
fn agreement_statistics_match_published_worked_examples() {
    // Quadratic weighted κ: the worked examples of Maple's EssayTools[QuadraticWeightedKappa]
    // help page (scores 1..10, range from the data): 0.758620689655172 and 0.438095238095238.
    let p1: Vec<(u8, u8)> = [9, 7, 8, 7, 6, 8, 3, 5, 10].into_iter().zip([8, 8, 6, 6, 7, 6, 1, 4, 8]).collect();
    let p2: Vec<(u8, u8)> = [9, 7, 8, 7, 6, 8, 3, 5, 10].into_iter().zip([3, 5, 6, 6, 7, 6, 1, 4, 8]).collect();
    assert!((agreement::quadratic_kappa(&p1, 1, 10).unwrap() - 0.758620689655172).abs() < 1e-12);
    assert!((agreement::quadratic_kappa(&p2, 1, 10).unwrap() - 0.438095238095238).abs() < 1e-12);

    // Krippendorff's α: K. Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability",
    // the 4 observers × 12 units example with missing values: ordinal α = 0.815 (as also
    // tested by the `krippendorff` Python package).
    let n = None;
    let obs: [[Option<f64>; 12]; 4] = [
        [Some(1.), Some(2.), Some(3.), Some(3.), Some(2.), Some(1.), Some(4.), Some(1.), Some(2.), n, n, n],
        [
            Some(1.),
            Some(2.),
            Some(3.),
            Some(3.),
            Some(2.),
            Some(2.),
            Some(4.),
            Some(1.),
            Some(2.),
            Some(5.),
            n,
            Some(3.),
        ],
        [n, Some(3.), Some(3.), Some(3.), Some(2.), Some(3.), Some(4.), Some(2.), Some(2.), Some(5.), Some(1.), n],
        [
            Some(1.),
            Some(2.),
            Some(3.),
            Some(3.),
            Some(2.),
            Some(4.),
            Some(4.),
            Some(1.),
            Some(2.),
            Some(5.),
            Some(1.),
            n,
        ],
    ];
    let units: Vec<Vec<Option<f64>>> = (0..12).map(|u| (0..4).map(|o| obs[o][u]).collect()).collect();
    let dom = [1., 2., 3., 4., 5.];
    let ord = agreement::krippendorff_alpha(&units, &dom, Metric::Ordinal).unwrap();
    assert_eq!((ord * 1000.0).round() / 1000.0, 0.815, "{ord}");

    // The three-coder, fifteen-unit example of Wikipedia's "Krippendorff's alpha" article
    // (a computational example): nominal α = 0.691, interval α = 0.811.
    let w: [[Option<f64>; 15]; 3] = [
        [n, n, n, n, n, Some(3.), Some(4.), Some(1.), Some(2.), Some(1.), Some(1.), Some(3.), Some(3.), n, Some(3.)],
        [Some(1.), n, Some(2.), Some(1.), Some(3.), Some(3.), Some(4.), Some(3.), n, n, n, n, n, n, n],
        [
            n,
            n,
            Some(2.),
            Some(1.),
            Some(3.),
            Some(4.),
            Some(4.),
            n,
            Some(2.),
            Some(1.),
            Some(1.),
            Some(3.),
            Some(3.),
            n,
            Some(4.),
        ],
    ];
    let units: Vec<Vec<Option<f64>>> = (0..15).map(|u| (0..3).map(|o| w[o][u]).collect()).collect();
    let dom = [1., 2., 3., 4.];
    let nom = agreement::krippendorff_alpha(&units, &dom, Metric::Nominal).unwrap();
    let int = agreement::krippendorff_alpha(&units, &dom, Metric::Interval).unwrap();
    assert!((nom - 0.691358).abs() < 1e-6, "{nom}");
    assert!((int - 0.810845).abs() < 1e-6, "{int}");
}

/// A scripted pre-review answer: 5 on every rubric dimension but `freshness`.
fn scripted_review(note: &str, freshness: u8) -> crate::support::scripted_llm::Answer {
    let dims = ["relevance", "completeness", "consistency", "reliability", "freshness"];
    let scores: serde_json::Map<String, Value> =
        dims.iter().map(|d| (d.to_string(), json!(if *d == "freshness" { freshness } else { 5 }))).collect();
    crate::support::scripted_llm::Answer::json(json!({"note": note, "scores": scores}))
}

/// `[llm.roles.<name>]` for each name on the scripted server at `url`, whose `model` is the
/// name (so the double can answer as that role), each with the lines of `extra`.
fn scripted_roles(url: &str, names: &[&str], extra: &str) -> String {
    names
        .iter()
        .map(|n| format!("[llm.roles.{n}]\nprovider = \"vllm\"\nbase_url = \"{url}\"\nmodel = \"{n}\"\n{extra}\n"))
        .collect()
}

#[test]
fn llm_prereview_is_marked_and_decides_only_when_the_config_says_so() {
    use crate::support::scripted_llm::ScriptedLlm;
    // Role `strict` rejects (freshness 2) samples whose id ends in 1; `lenient` accepts all.
    let llm = ScriptedLlm::start(|seen| {
        let text = seen.all_text();
        let strict = text.contains("You review benchmark samples") && seen.body["model"] == "strict";
        let odd = text.contains("fund F1?") || text.contains("fund F11?");
        scripted_review("scripted review", if strict && odd { 2 } else { 4 })
    });
    let roles = format!(
        "[review.prereview]\nroles = [\"strict\", \"lenient\"]\ncount_as_human = COUNT\n\n{}",
        scripted_roles(&llm.base_url(), &["strict", "lenient"], "")
    );
    let rp = RP::new(4, &roles.replace("COUNT", "false"));
    rp.p.copy_in("pipeline/prompts/review_score.md");
    rp.ok(&["review", "assign"]);
    let out = rp.ok(&["review", "prereview"]);
    assert!(out.contains("8 LLM reviews (marked as LLM scores)"), "{out}");
    let scores = rp.p.read("artifacts/review-prereview/scores.jsonl");
    assert!(scores.lines().all(|l| l.contains("\"kind\":\"llm\"") && l.contains("\"reviewer\":\"llm:")), "{scores}");
    rp.ok(&["review", "merge"]);
    assert!(rp.decisions().values().all(|d| d["decision"] == "undecided"), "LLM scores do not count by default");
    assert!(rp.decisions().values().all(|d| d["waiting_for"] == "scores"), "each waits for its reviewers' scores");

    // With count_as_human, LLM scores decide, and say so.
    rp.p.write(
        "pipeline/demo.toml",
        rp.p.read("pipeline/demo.toml").replace("count_as_human = false", "count_as_human = true"),
    );
    let out = rp.ok(&["review", "merge"]);
    let d = rp.decisions();
    assert_eq!(d["s000"]["decision"], "accepted");
    assert_eq!(d["s000"]["decided_by"], "llm");
    assert_eq!(d["s001"]["decision"], "undecided", "strict rejects, lenient accepts: queued");
    assert_eq!(d["s001"]["waiting_for"], "adjudication", "{}", d["s001"]);
    assert!(d["s000"].get("waiting_for").is_none(), "a decided sample waits for nothing: {}", d["s000"]);
    assert!(out.contains("LLM pre-review scores stood in for human reviewers"), "{out}");
    assert!(rp.p.read("artifacts/review-merge/report.md").contains("**LLM pre-review stood in for human reviewers**"));
    let ag: Value = serde_json::from_str(&rp.p.read("artifacts/review-merge/agreement.json")).unwrap();
    assert_eq!(ag[0]["between"], "llm");
}

#[test]
fn a_split_of_the_llm_reviewers_is_decided_by_the_tiebreak_reviewer_asked_only_about_it() {
    use crate::support::scripted_llm::ScriptedLlm;
    // `strict` rejects (freshness 2) the sample about fund F1, `lenient` accepts all, and the
    // tie-break `senior` rejects everything: only the split sample may reach it.
    let llm = ScriptedLlm::start(|seen| {
        let text = seen.all_text();
        let model = seen.body["model"].as_str().unwrap_or_default().to_string();
        let odd = text.contains("fund F1?");
        let f = if model == "senior" || (model == "strict" && odd) { 2 } else { 4 };
        scripted_review(&format!("scripted review by {model}"), f)
    });
    let roles = format!(
        "[review.prereview]\nroles = [\"strict\", \"lenient\"]\ntiebreak = \"senior\"\ncount_as_human = COUNT\n\n{}",
        scripted_roles(&llm.base_url(), &["strict", "lenient", "senior"], "")
    );
    let rp = RP::new(4, &roles.replace("COUNT", "false"));
    rp.p.copy_in("pipeline/prompts/review_score.md");
    rp.ok(&["review", "assign"]);
    let out = rp.ok(&["review", "prereview"]);
    assert!(out.contains("1 sample(s) split the two LLM reviewers; the tie-break `senior` passes 0 of them"), "{out}");
    let scores = rp.p.read("artifacts/review-prereview/scores.jsonl");
    let senior: Vec<&str> = scores.lines().filter(|l| l.contains("\"reviewer\":\"llm:senior\"")).collect();
    assert_eq!(senior.len(), 1, "asked about the split sample only: {scores}");
    assert!(senior[0].contains("\"sample_id\":\"s001\""), "{scores}");
    assert_eq!(scores.lines().count(), 9, "4 samples × 2 reviewers + 1 tie-break");
    assert!(rp.p.read("artifacts/review-prereview/report.md").contains("split on 1 sample(s) (s001)"));
    // LLM scores that do not stand in for people decide nothing, the tie-break's included.
    rp.ok(&["review", "merge"]);
    assert!(rp.decisions().values().all(|d| d["decision"] == "undecided"));

    rp.p.write(
        "pipeline/demo.toml",
        rp.p.read("pipeline/demo.toml").replace("count_as_human = false", "count_as_human = true"),
    );
    let out = rp.ok(&["review", "merge"]);
    assert!(out.contains("1 split(s) of the two LLM reviewers decided by the tie-break reviewer"), "{out}");
    let d = rp.decisions();
    assert_eq!(d["s000"]["decision"], "accepted", "the two agree: the tie-break was not asked and decides nothing");
    assert_eq!(d["s001"]["decision"], "rejected");
    assert_eq!(d["s001"]["decided_by"], "llm");
    let reason = d["s001"]["reason"].as_str().unwrap();
    assert!(reason.contains("tie-break reviewer `llm:senior` rejects"), "{reason}");
    let tb: Vec<&Value> = d["s001"]["reviews"].as_array().unwrap().iter().filter(|r| r["tiebreak"] == true).collect();
    assert_eq!(tb.len(), 1);
    assert_eq!(tb[0]["reviewer"], "llm:senior");
    assert!(rp.p.read("artifacts/review-merge/report.md").contains("decided by the tie-break reviewer"));
    // Agreement is between the two reviewers: four pairs, the tie-break's review in none.
    let ag: Value = serde_json::from_str(&rp.p.read("artifacts/review-merge/agreement.json")).unwrap();
    assert_eq!(ag[0]["between"], "llm");
    assert_eq!(ag[0]["samples"], 4);
    assert_eq!(ag[0]["verdict_exact"], 0.75, "{ag}");

    // A person's adjudication still overrules the tie-break.
    rp.p.write(
        "reviews/adjudications.csv",
        format!(
            "sample_id,content_hash,reviews,decision,adjudicator,reason\ns001,{},,accept,consensus,alice and bob: fund F1 is a real fund\n",
            d["s001"]["content_hash"].as_str().unwrap()
        ),
    );
    rp.ok(&["review", "merge"]);
    let d = rp.decisions();
    assert_eq!(d["s001"]["decision"], "accepted");
    assert_eq!(d["s001"]["decided_by"], "adjudication");
}

#[test]
fn one_llm_review_whose_partner_failed_decides_nothing_alone() {
    use crate::support::scripted_llm::{Answer, ScriptedLlm};
    // `flaky` cannot review the sample about fund F2 (no valid answer, the item fails within
    // `max_failed_share`); `steady` accepts everything.
    let llm = ScriptedLlm::start(|seen| {
        let text = seen.all_text();
        if seen.body["model"] == "flaky" && text.contains("fund F2?") {
            return Answer::text("I would rather not say.");
        }
        scripted_review("scripted review", 5)
    });
    let roles = format!(
        "[review.prereview]\nroles = [\"steady\", \"flaky\"]\ncount_as_human = true\nmax_failed_share = 0.5\n\n{}",
        scripted_roles(&llm.base_url(), &["steady", "flaky"], "max_retries = 0\n")
    );
    let rp = RP::new(4, &roles);
    rp.p.copy_in("pipeline/prompts/review_score.md");
    rp.ok(&["review", "assign"]);
    rp.ok(&["review", "prereview"]);
    assert_eq!(rp.p.read("artifacts/review-prereview/scores.jsonl").lines().count(), 7, "one review failed");
    rp.ok(&["review", "merge"]);
    let d = rp.decisions();
    assert_eq!(d["s001"]["decision"], "accepted");
    assert_eq!(d["s002"]["decision"], "undecided", "{}", d["s002"]);
    let reason = d["s002"]["reason"].as_str().unwrap();
    assert!(reason.starts_with("waiting for scores from") && reason.contains("llm:flaky"), "{reason}");
    assert_eq!(d["s002"]["waiting_for"], "prereview", "a failed LLM review, not a sheet, holds it");
}

#[test]
fn a_tiebreak_needs_two_reviewers_and_is_not_one_of_them() {
    let rp = RP::new(2, "[review.prereview]\nroles = [\"a\"]\ntiebreak = \"a\"\n");
    let o = rp.run(&["review", "prereview"]);
    let err = stderr(&o);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("review.prereview.tiebreak") && err.contains("name two roles in `roles`"), "{err}");
    assert!(err.contains("`a` is already one of `roles`"), "{err}");
}

/// A running `benchgen review serve` on a free loopback port, stopped on drop.
pub struct Server {
    pub child: std::process::Child,
    pub base: String,
    // Kept open: the server's stdout must not see a closed pipe.
    _out: std::io::BufReader<std::process::ChildStdout>,
}

impl Server {
    pub fn start(p: &Project) -> Server {
        Self::start_with(p, &[])
    }
    /// Started with extra environment variables (e.g. a `BENCHGEN_FAIL_AT` fail point).
    pub fn start_with(p: &Project, env: &[(&str, &str)]) -> Server {
        let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("benchgen"))
            .current_dir(p.root())
            .envs(env.iter().copied())
            .env("BENCHGEN_REVIEW_SECRET", SECRET)
            .env("BENCHGEN_NO_PROGRESS", "1")
            .env_remove("BENCHGEN_CONFIG")
            .args(["review", "serve", "--addr", "127.0.0.1:0"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        out.read_line(&mut line).unwrap();
        let base = line.trim().strip_prefix("serving ").unwrap_or_else(|| panic!("unexpected: {line:?}")).to_string();
        Server { child, base, _out: out }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `application/x-www-form-urlencoded` by hand (percent-encoding every byte but [A-Za-z0-9]).
pub fn form_body(pairs: &[(&str, &str)]) -> String {
    let enc = |s: &str| {
        s.bytes()
            .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
            .collect::<String>()
    };
    pairs.iter().map(|(k, v)| format!("{}={}", enc(k), enc(v))).collect::<Vec<_>>().join("&")
}

/// The personal token (to paste) from the reviewer's `reviews/links/<id>.txt`.
pub fn token_of(p: &Project, reviewer: &str) -> String {
    let text = p.read(&format!("reviews/links/{reviewer}.txt"));
    let line = text.lines().find(|l| l.starts_with("Personal token ")).unwrap_or_else(|| panic!("{text}"));
    let token = line.rsplit(": ").next().unwrap().trim().to_string();
    assert!(!text.contains(&format!("={token}")), "the token is in no address: {text}");
    token
}

/// The single-use sign-in link from the reviewer's `reviews/links/<id>.txt`, on `base`.
pub fn link_of(p: &Project, reviewer: &str, base: &str) -> String {
    let text = p.read(&format!("reviews/links/{reviewer}.txt"));
    let url = text.lines().find_map(|l| l.strip_prefix("Link (works once): ")).unwrap_or_else(|| panic!("{text}"));
    let path = &url[url.find("/login#link=").expect("the code travels in the fragment")..];
    format!("{base}{path}")
}

/// Post a link's code as the sign-in page's script does.
pub async fn sign_in_link(http: &reqwest::Client, base: &str, code: &str) -> reqwest::Response {
    http.post(format!("{base}/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form_body(&[("token", ""), ("link", code)]))
        .send()
        .await
        .unwrap()
}

/// Sign in as the sign-in page's script does: POST the link's token.
pub async fn sign_in(http: &reqwest::Client, base: &str, token: &str) -> reqwest::Response {
    http.post(format!("{base}/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form_body(&[("token", token)]))
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_app_authorises_every_request_and_its_submissions_reach_the_pipeline() {
    let rp = RP::new(6, "");
    rp.ok(&["review", "assign"]);
    let a = rp.assignments();
    let x = a.samples.iter().find(|x| x.reviewers.contains(&"alice".into())).unwrap().clone();
    let other = x.reviewers.iter().find(|r| *r != "alice").unwrap().clone();
    let outsider = a.reviewers.iter().find(|r| !x.reviewers.contains(&r.id)).unwrap().id.clone();
    let srv = Server::start(&rp.p);
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let base = srv.base.clone();
    let login = |who: String| {
        let http = http.clone();
        let base = base.clone();
        let token = token_of(&rp.p, &who);
        async move {
            let r = sign_in(&http, &base, &token).await;
            assert_eq!(r.status(), 303);
            assert_eq!(r.headers()["location"], "/", "no token left in the URL");
            let c = r.headers()["set-cookie"].to_str().unwrap().to_string();
            assert!(c.contains("HttpOnly") && c.contains("SameSite=Strict"), "{c}");
            c.split(';').next().unwrap().to_string()
        }
    };
    // No session → 401, with the CSP on every page and no address ever sent as a referrer.
    let r = http.get(format!("{base}/")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.headers()["content-security-policy"].to_str().unwrap().contains("script-src 'self'"));
    assert_eq!(r.headers()["referrer-policy"], "no-referrer");
    // A token in the query string (where logs keep it) is refused unchecked.
    let r = http.get(format!("{base}/login?token={}", token_of(&rp.p, "alice"))).send().await.unwrap();
    assert_eq!(r.status(), 400);
    assert!(!r.headers().contains_key("set-cookie"));
    // The sign-in link works once; its code is no token.
    let link = link_of(&rp.p, &outsider, &base);
    let code = link.split("#link=").nth(1).unwrap().to_string();
    assert_eq!(sign_in(&http, &base, &code).await.status(), 401, "a link code is not a personal token");
    let r = sign_in_link(&http, &base, &code).await;
    assert_eq!(r.status(), 303);
    assert!(r.headers()["set-cookie"].to_str().unwrap().contains("HttpOnly"));
    let r = sign_in_link(&http, &base, &code).await;
    assert_eq!(r.status(), 401);
    assert!(r.text().await.unwrap().contains("used already"));
    // Signing in from another site (login CSRF) is refused.
    let r = http
        .post(format!("{base}/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("sec-fetch-site", "cross-site")
        .header("origin", "null")
        .body(form_body(&[("token", &token_of(&rp.p, "alice"))]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(!r.headers().contains_key("set-cookie"));
    let r = http.get(format!("{base}/s/{}", x.id)).send().await.unwrap();
    assert_eq!(r.status(), 401);

    let ca = login("alice".into()).await;
    let page = http.get(format!("{base}/")).header("cookie", &ca).send().await.unwrap().text().await.unwrap();
    assert!(page.contains(&format!("0 of {} done", a.reviewer("alice").unwrap().assigned)), "{page}");
    let page = http.get(format!("{base}/s/{}", x.id)).header("cookie", &ca).send().await.unwrap().text().await.unwrap();
    let csrf = page.split("name=\"csrf\" content=\"").nth(1).unwrap().split('"').next().unwrap().to_string();
    let form = [
        ("csrf", csrf.as_str()),
        ("relevance", "5"),
        ("completeness", "5"),
        ("consistency", "4"),
        ("reliability", "4"),
        ("freshness", "4"),
        ("note", "fine"),
    ];
    // A form post to this sample's submit URL with the given cookie and extra headers.
    let submit = |cookie: &str, headers: &[(&str, &str)], body: String| {
        let mut rq = http
            .post(format!("{base}/s/{}/submit", x.id))
            .header("cookie", cookie)
            .header("content-type", "application/x-www-form-urlencoded");
        for (k, v) in headers {
            rq = rq.header(*k, *v);
        }
        async move { rq.body(body).send().await.unwrap().status() }
    };
    // Without the CSRF token, or from another origin: 403 and nothing saved.
    assert_eq!(submit(&ca, &[], form_body(&form[1..])).await, 403);
    assert_eq!(submit(&ca, &[("origin", "http://evil.example")], form_body(&form)).await, 403);
    // `Origin: null` (what a no-referrer page sends) from a page on another port of this
    // host (`same-site`), even with the CSRF token: 403.
    assert_eq!(submit(&ca, &[("origin", "null"), ("sec-fetch-site", "same-site")], form_body(&form)).await, 403);
    // A sample not assigned to the outsider: 403 to read or write.
    let co = login(outsider.clone()).await;
    assert_eq!(http.get(format!("{base}/s/{}", x.id)).header("cookie", &co).send().await.unwrap().status(), 403);
    // Submit (as Chromium posts our own form under `Referrer-Policy: no-referrer`); the
    // other reviewer cannot read alice's scores before submitting (blind).
    assert_eq!(submit(&ca, &[("origin", "null"), ("sec-fetch-site", "same-origin")], form_body(&form)).await, 303);
    let cb = login(other.clone()).await;
    let api = format!("{base}/api/s/{}/scores/alice", x.id);
    assert_eq!(http.get(&api).header("cookie", &cb).send().await.unwrap().status(), 403);
    assert_eq!(http.get(&api).header("cookie", &co).send().await.unwrap().status(), 403);
    let mine = http.get(&api).header("cookie", &ca).send().await.unwrap().text().await.unwrap();
    assert!(mine.contains("\"submitted\":true") && mine.contains("\"relevance\":5"), "{mine}");
    // After both submitted, each sees the other's review.
    let pb = http.get(format!("{base}/s/{}", x.id)).header("cookie", &cb).send().await.unwrap().text().await.unwrap();
    let csrf_b = pb.split("name=\"csrf\" content=\"").nth(1).unwrap().split('"').next().unwrap().to_string();
    let mut fb = form.to_vec();
    fb[0] = ("csrf", csrf_b.as_str());
    assert_eq!(submit(&cb, &[], form_body(&fb)).await, 303);
    assert_eq!(http.get(&api).header("cookie", &cb).send().await.unwrap().status(), 200);
    // Rate-limited sign-in attempts: after 5 failures, even a right token waits.
    // One failure so far (the link code posted as a token).
    for _ in 0..4 {
        assert_eq!(sign_in(&http, &base, "wrong").await.status(), 401);
    }
    let r = sign_in(&http, &base, &token_of(&rp.p, "alice")).await;
    assert_eq!(r.status(), 429);
    assert!(r.headers().contains_key("retry-after"));
    drop(srv);

    // The submissions enter the pipeline through `review import`, one review event each.
    let out = rp.ok(&["review", "import"]);
    assert!(out.contains("2 scores imported (0 from sheets, 2 from the web app)"), "{out}");
    let ex = rp.ok(&["explain", &format!("sample:{}", x.id)]);
    // explain wraps its text at 100 columns: read it as one line.
    let ex = ex.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(ex.contains("human review by `alice` (web"), "{ex}");
    let ledger = rusqlite::Connection::open(rp.p.path("artifacts/ledger.sqlite")).unwrap();
    let n: i64 = ledger
        .query_row("SELECT count(*) FROM events WHERE stage = 'review-serve' AND kind = 'review'", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 2, "every web submission is a review event");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_adjudication_is_for_leads_who_did_not_review_and_reaches_merge() {
    let rp = RP::new(12, "");
    rp.ok(&["review", "assign"]);
    let a = rp.assignments();
    // A sample lena (the lead) did not review, and one she did.
    let x = a.samples.iter().find(|x| !x.reviewers.contains(&"lena".into())).unwrap().clone();
    let own = a.samples.iter().find(|x| x.reviewers.contains(&"lena".into())).unwrap().clone();
    let srv = Server::start(&rp.p);
    let base = srv.base.clone();
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let ct = ("content-type", "application/x-www-form-urlencoded");
    let session = |who: &str| {
        let (http, base, token) = (http.clone(), base.clone(), token_of(&rp.p, who));
        async move {
            let r = sign_in(&http, &base, &token).await;
            r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string()
        }
    };
    let csrf_of =
        |page: &str| page.split("name=\"csrf\" content=\"").nth(1).unwrap().split('"').next().unwrap().to_string();
    // Both reviewers of each sample submit: the first accepts, the second rejects (freshness 1).
    for s in [&x, &own] {
        for (i, rv) in s.reviewers.iter().enumerate() {
            let c = session(rv).await;
            let page =
                http.get(format!("{base}/s/{}", s.id)).header("cookie", &c).send().await.unwrap().text().await.unwrap();
            let fresh = if i == 0 { "5" } else { "1" };
            let body = form_body(&[
                ("csrf", &csrf_of(&page)),
                ("relevance", "5"),
                ("completeness", "5"),
                ("consistency", "5"),
                ("reliability", "5"),
                ("freshness", fresh),
            ]);
            let r = http
                .post(format!("{base}/s/{}/submit", s.id))
                .header("cookie", &c)
                .header(ct.0, ct.1)
                .body(body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 303);
        }
    }
    // Not a lead: 403. The lead sees x in her queue, not the sample she reviewed herself.
    let cr = session(&x.reviewers[0]).await;
    assert_eq!(http.get(format!("{base}/adjudicate")).header("cookie", &cr).send().await.unwrap().status(), 403);
    let cl = session("lena").await;
    let q = http.get(format!("{base}/adjudicate")).header("cookie", &cl).send().await.unwrap().text().await.unwrap();
    assert!(q.contains(&format!("/adjudicate/{}", x.id)), "{q}");
    assert!(!q.contains(&format!("/adjudicate/{}\"", own.id)), "{q}");
    assert_eq!(
        http.get(format!("{base}/adjudicate/{}", own.id)).header("cookie", &cl).send().await.unwrap().status(),
        403
    );
    let page = http
        .get(format!("{base}/adjudicate/{}", x.id))
        .header("cookie", &cl)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("freshness = 1") && page.contains("freshness = 5"), "both reviews are shown: {page}");
    let body = form_body(&[("csrf", &csrf_of(&page)), ("decision", "reject"), ("reason", "stale data in the answer")]);
    let r = http
        .post(format!("{base}/adjudicate/{}", x.id))
        .header("cookie", &cl)
        .header(ct.0, ct.1)
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let r = http
        .post(format!("{base}/adjudicate/{}", own.id))
        .header("cookie", &cl)
        .header(ct.0, ct.1)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403, "a reviewer never adjudicates their own disagreement");
    drop(srv);

    rp.ok(&["review", "import"]);
    rp.ok(&["review", "merge"]);
    let d = rp.decisions();
    assert_eq!(d[&x.id]["decision"], "rejected");
    assert_eq!(d[&x.id]["decided_by"], "adjudication");
    assert_eq!(d[&x.id]["adjudication"]["adjudicator"], "lena");
    assert!(d[&x.id]["adjudication"].get("superseded").is_none(), "{}", d[&x.id]);
    assert_eq!(d[&own.id]["decision"], "undecided", "still in the queue");

    // Deciding again (after a restart) records revision 2; the first is kept, the latest counts.
    let srv = Server::start(&rp.p);
    let base = srv.base.clone();
    let r = sign_in(&http, &base, &token_of(&rp.p, "lena")).await;
    let cl = r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    let page = http
        .get(format!("{base}/adjudicate/{}", x.id))
        .header("cookie", &cl)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("Decided already") && page.contains("revision 1: <b>reject</b> by lena"), "{page}");
    assert!(page.contains("Deciding again records revision 2"), "{page}");
    let body =
        form_body(&[("csrf", &csrf_of(&page)), ("decision", "accept"), ("reason", "the data was live after all")]);
    let r = http
        .post(format!("{base}/adjudicate/{}", x.id))
        .header("cookie", &cl)
        .header(ct.0, ct.1)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let q = http.get(format!("{base}/adjudicate")).header("cookie", &cl).send().await.unwrap().text().await.unwrap();
    assert!(q.contains("decided: accept (revision 2 by lena)"), "{q}");
    drop(srv);
    rp.ok(&["review", "merge"]);
    let web: Vec<Value> =
        rp.p.read("reviews/web/adjudications.jsonl").lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(web.len(), 2, "both revisions are dumped: {web:?}");
    assert_eq!((web[0]["revision"].as_u64(), web[1]["revision"].as_u64()), (Some(1), Some(2)));
    let dec = &rp.decisions()[&x.id];
    assert_eq!(dec["decision"], "accepted", "the latest revision counts: {dec}");
    assert_eq!(dec["decided_by"], "adjudication");
    assert_eq!(dec["adjudication"]["revision"], 2);
    assert_eq!(dec["adjudication"]["reason"], "the data was live after all");
    let sup = dec["adjudication"]["superseded"].as_array().expect("the first revision is kept");
    assert_eq!(sup.len(), 1);
    // Revision 1 is not written as a field (`revision` appears from 2 on); its source names it.
    assert_eq!(sup[0]["decision"], "reject", "{dec}");
    assert!(sup[0]["source"].as_str().unwrap().contains("revision 1)"), "{dec}");
    // Both are in the ledger, the second naming what it replaces.
    let ledger = rusqlite::Connection::open(rp.p.path("artifacts/ledger.sqlite")).unwrap();
    let events: Vec<(i64, String, Option<String>)> = {
        let mut st = ledger
            .prepare(
                "SELECT json_extract(payload, '$.revision'), json_extract(payload, '$.decision'),
                        json_extract(payload, '$.replaces.decision')
                 FROM events WHERE kind = 'review.adjudication' AND subject = ?1 ORDER BY id",
            )
            .unwrap();
        st.query_map([format!("sample:{}", x.id)], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    };
    let want: Vec<(i64, String, Option<String>)> =
        vec![(1, "reject".to_string(), None), (2, "accept".to_string(), Some("reject".to_string()))];
    assert_eq!(events, want);
    let ex = rp.ok(&["explain", &format!("sample:{}", x.id)]);
    // explain wraps its text at 100 columns: read it as one line.
    let ex = ex.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(ex.contains("accepted (decided by adjudication)"), "{ex}");
    assert!(ex.contains("(revision 2, replacing revision 1 `reject` by `lena`)"), "{ex}");
}

/// The revisions of web adjudications as `review merge` reads them when no app database
/// rewrites them: two lines with one revision number are an error, and a latest revision
/// given to content changed since applies nothing (not the revision before it).
#[test]
fn merge_reads_web_adjudication_revisions_latest_first_and_refuses_duplicates() {
    let (rp, a) = RP::carol_disputes();
    let x = a
        .samples
        .iter()
        .find(|x| {
            x.reviewers.contains(&"carol".into())
                && !x.reviewers.contains(&"lena".into())
                && x.author.as_deref() != Some("lena")
        })
        .expect("a disputed sample lena may adjudicate")
        .clone();
    let line = |rev: u32, decision: &str, hash: &str| {
        json!({"sample_id": x.id, "content_hash": hash, "decision": decision, "adjudicator": "lena",
               "reason": format!("reason {rev}"), "at": format!("2026-12-01T10:0{rev}:00Z"), "revision": rev})
    };
    let h = x.content_hash.as_str();
    rp.p.write("reviews/web/adjudications.jsonl", jsonl(&[line(2, "accept", h), line(1, "reject", h)]));
    rp.ok(&["review", "merge"]);
    let dec = &rp.decisions()[&x.id];
    assert_eq!(dec["decision"], "accepted", "{dec}");
    assert_eq!(dec["adjudication"]["superseded"][0]["decision"], "reject", "{dec}");
    // The same revision twice: an error naming both lines, nothing applied.
    rp.p.write("reviews/web/adjudications.jsonl", jsonl(&[line(1, "accept", h), line(1, "reject", h)]));
    let o = rp.run(&["review", "merge"]);
    assert_code(&o, 1);
    assert!(stderr(&o).contains(&format!("`{}` has revision 1 twice", x.id)), "{}", stderr(&o));
    // The latest revision saw other content: nothing applies, the sample waits in the queue.
    rp.p.write(
        "reviews/web/adjudications.jsonl",
        jsonl(&[line(1, "accept", h), line(2, "reject", "sha256:older-content")]),
    );
    rp.ok(&["review", "merge"]);
    let dec = &rp.decisions()[&x.id];
    assert_eq!(dec["decision"], "undecided", "{dec}");
    assert!(rp.p.read("artifacts/review-merge/report.md").contains("(revision 2): the sample changed"));
}

/// Wait for a server stopped by a fail point (abort) and return how it ended.
fn aborted(srv: &mut Server) -> std::process::ExitStatus {
    let t0 = std::time::Instant::now();
    loop {
        if let Some(st) = srv.child.try_wait().unwrap() {
            return st;
        }
        assert!(t0.elapsed() < std::time::Duration::from_secs(60), "the fail point never stopped the server");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Sign `who` in and submit `scores` for `id`; the answer (if any) is returned, since a
/// server stopped by a fail point may not answer.
async fn submit_web(rp: &RP, base: &str, who: &str, id: &str, scores: [&str; 5]) -> Option<reqwest::StatusCode> {
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let r = sign_in(&http, base, &token_of(&rp.p, who)).await;
    let c = r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    let page = http.get(format!("{base}/s/{id}")).header("cookie", &c).send().await.unwrap().text().await.unwrap();
    let csrf = page.split("name=\"csrf\" content=\"").nth(1).unwrap().split('"').next().unwrap().to_string();
    let dims = ["relevance", "completeness", "consistency", "reliability", "freshness"];
    let mut pairs = vec![("csrf", csrf.as_str())];
    pairs.extend(dims.iter().copied().zip(scores));
    http.post(format!("{base}/s/{id}/submit"))
        .header("cookie", &c)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form_body(&pairs))
        .send()
        .await
        .ok()
        .map(|r| r.status())
}

/// The web app's `review` events in the ledger: (subject, outbox key) per event.
fn serve_events(rp: &RP) -> Vec<(String, String)> {
    let ledger = rusqlite::Connection::open(rp.p.path("artifacts/ledger.sqlite")).unwrap();
    let mut st = ledger
        .prepare(
            "SELECT subject, json_extract(payload, '$.outbox') FROM events
             WHERE stage = 'review-serve' AND kind = 'review' ORDER BY id",
        )
        .unwrap();
    st.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().collect::<rusqlite::Result<_>>().unwrap()
}

fn outbox_pending(rp: &RP) -> i64 {
    let db = rusqlite::Connection::open(rp.p.path("reviews/review.sqlite")).unwrap();
    db.query_row("SELECT count(*) FROM outbox WHERE ledger_event IS NULL", [], |r| r.get(0)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_web_submission_becomes_exactly_one_ledger_event_across_kills() {
    use std::os::unix::process::ExitStatusExt;
    let rp = RP::new(8, "");
    rp.ok(&["review", "assign"]);
    let a = rp.assignments();
    let mine: Vec<String> =
        a.samples.iter().filter(|x| x.reviewers.contains(&"bob".into())).map(|x| x.id.clone()).collect();
    assert!(mine.len() >= 2, "{mine:?}");
    let (x1, x2) = (mine[0].clone(), mine[1].clone());

    // 1. Killed after the score's commit, before its ledger write: the event waits in the
    //    outbox, and `review import` records it, once.
    let mut srv = Server::start_with(&rp.p, &[("BENCHGEN_FAIL_AT", "review-outbox-before-ledger")]);
    let _ = submit_web(&rp, &srv.base.clone(), "bob", &x1, ["5", "4", "4", "5", "4"]).await;
    assert_eq!(aborted(&mut srv).signal(), Some(libc::SIGABRT));
    drop(srv);
    let db = rusqlite::Connection::open(rp.p.path("reviews/review.sqlite")).unwrap();
    let status: String = db
        .query_row("SELECT status FROM scores WHERE sample_id = ?1 AND reviewer = 'bob'", [&x1], |r| r.get(0))
        .unwrap();
    assert_eq!(status, "submitted", "the score was committed");
    assert!(serve_events(&rp).is_empty(), "not in the ledger yet: {:?}", serve_events(&rp));
    assert_eq!(outbox_pending(&rp), 1);
    let out = rp.ok(&["review", "import"]);
    assert!(out.contains("1 scores imported (0 from sheets, 1 from the web app)"), "{out}");
    let ev = serve_events(&rp);
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0].0, format!("sample:{x1}"));
    assert!(ev[0].1.starts_with("review-serve:"), "{ev:?}");
    assert_eq!(outbox_pending(&rp), 0);
    // A restart and another import record nothing again.
    drop(Server::start(&rp.p));
    rp.ok(&["review", "import", "--force"]);
    assert_eq!(serve_events(&rp), ev);

    // 2. Killed after the ledger write, before the outbox entry is marked as recorded: the
    //    next start finds the event by its key and does not append it twice.
    let mut srv = Server::start_with(&rp.p, &[("BENCHGEN_FAIL_AT", "review-outbox-recorded")]);
    let _ = submit_web(&rp, &srv.base.clone(), "bob", &x2, ["2", "2", "3", "2", "2"]).await;
    assert_eq!(aborted(&mut srv).signal(), Some(libc::SIGABRT));
    drop(srv);
    assert_eq!(serve_events(&rp).len(), 2, "{:?}", serve_events(&rp));
    assert_eq!(outbox_pending(&rp), 1, "recorded in the ledger, not yet marked");
    let srv = Server::start(&rp.p);
    assert_eq!(outbox_pending(&rp), 0, "the start marked it");
    // 3. A plain kill -9 while serving, right after an acknowledged submission: the event is
    //    in the ledger once, whether the drainer ran before the kill or `review merge` moves
    //    it; a start after that adds nothing.
    let x3 = mine.get(2).cloned().unwrap_or_else(|| x1.clone());
    let done = submit_web(&rp, &srv.base.clone(), "bob", &x3, ["4", "4", "4", "4", "4"]).await;
    assert_eq!(done, Some(reqwest::StatusCode::SEE_OTHER));
    drop(srv); // SIGKILL
    rp.ok(&["review", "merge"]);
    drop(Server::start(&rp.p));
    let ev = serve_events(&rp);
    let subjects: Vec<&str> = ev.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(subjects, [format!("sample:{x1}"), format!("sample:{x2}"), format!("sample:{x3}")], "{ev:?}");
    let keys: std::collections::BTreeSet<&String> = ev.iter().map(|e| &e.1).collect();
    assert_eq!(keys.len(), 3, "every event has its own outbox key: {ev:?}");
    assert_eq!(outbox_pending(&rp), 0);
}

/// Rewrite one member of a zip (XLSX) archive with `f(old bytes)`, keeping the others.
fn rezip(xlsx: &[u8], member: &str, f: impl Fn(&[u8]) -> Vec<u8>) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut z = zip::ZipArchive::new(std::io::Cursor::new(xlsx)).unwrap();
    let mut out = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for i in 0..z.len() {
        let mut file = z.by_index(i).unwrap();
        let name = file.name().unwrap().to_string();
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).unwrap();
        let opts = zip::write::SimpleFileOptions::default();
        out.start_file(name.as_str(), opts).unwrap();
        out.write_all(&if name == member { f(&bytes) } else { bytes }).unwrap();
    }
    out.finish().unwrap().into_inner()
}

#[test]
fn a_broken_xlsx_sheet_is_a_located_problem_never_a_panic() {
    let rp = RP::new(6, "");
    rp.ok(&["review", "assign"]);
    rp.ok(&["review", "export"]);
    let a = rp.assignments();
    let good = std::fs::read(rp.p.path("artifacts/review-export/sheets/alice.xlsx")).unwrap();
    let csv = rp.p.read("artifacts/review-export/sheets/alice.csv").into_bytes();
    let half = |b: &[u8]| b[..b.len() / 2].to_vec();
    let mut variants: Vec<(&str, Vec<u8>)> = vec![
        ("empty file", Vec::new()),
        ("a CSV named .xlsx", csv),
        ("sheet XML cut in half", rezip(&good, "xl/worksheets/sheet1.xml", half)),
        ("shared strings cut in half", rezip(&good, "xl/sharedStrings.xml", half)),
        ("workbook XML cut in half", rezip(&good, "xl/workbook.xml", half)),
        (
            "sheet XML replaced",
            rezip(&good, "xl/worksheets/sheet1.xml", |_| {
                b"<worksheet><sheetData><row r=\"999999999999\"><c r=\"ZZZZ1\" t=\"s\"><v>77</v></c></row></sheetData></worksheet>".to_vec()
            }),
        ),
    ];
    for cut in [1, 3, 5, 7] {
        variants.push(("truncated", good[..good.len() * cut / 8].to_vec()));
    }
    for at in [40, good.len() / 3, good.len() / 2, good.len() - 30] {
        let mut b = good.clone();
        b[at] ^= 0x5a;
        variants.push(("a byte flipped", b));
    }
    // A stray value in the sheet's very last cell (a slip after Ctrl+End): one problem at
    // its row, read without building the 17-billion-cell grid up to it.
    fill_xlsx_and(
        &rp,
        "alice",
        |rows| rows.iter_mut().skip(1).for_each(|r| set_scores(r, [4, 4, 4, 4, 4])),
        Some((1_048_575, 16_383, "x")),
    );
    let o = rp.run(&["review", "import"]);
    assert_code(&o, 1);
    assert!(
        stderr(&o)
            .contains("reviews/returned/alice.xlsx:1048576: cell XFD1048576 lies right of the last column `note`"),
        "{}",
        stderr(&o)
    );
    assert!(!rp.p.path("artifacts/review-import").exists(), "nothing applied");
    for (what, bytes) in variants {
        let res = std::panic::catch_unwind(|| {
            benchgen::review::sheets::import(&a, &[("alice.xlsx".to_string(), bytes.clone())], None)
        });
        let Ok(res) = res else { panic!("{what}: the reader panicked") };
        match res {
            Err(e) => {
                assert!(!e.problems.is_empty(), "{what}");
                for p in &e.problems {
                    assert!(p.location.starts_with("alice.xlsx:"), "{what}: {} {}", p.location, p.message);
                }
            }
            // A flipped byte may land where it changes nothing that matters.
            Ok(imported) => assert!(imported.scores.is_empty(), "{what}: nothing was filled in"),
        }
    }
}
