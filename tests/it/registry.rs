//! Registry scraping, import (tools whose input schema is not valid JSON Schema included),
//! merge and live tool listing (issue 16), against loopback fixture servers that these tests
//! start (`support/registry_fixture.rs`) and the real reference MCP servers that `make setup`
//! installs.

use crate::support as util;
use crate::support::{mcp_assets, registry_fixture};

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use benchgen::model::Catalog;
use registry_fixture::{Faults, FixtureServer, Kind, Universe};
use serde_json::Value;
use util::{Project, assert_code, stderr, stdout, tree};

const SEED: u64 = 16;
const KEY: &str = "sk-fixture-SECRET-4242";

fn source_toml(name: &str, kind: &str, base: &str, extra: &str) -> String {
    format!(
        "[registry.sources.{name}]\nkind = \"{kind}\"\nbase_url = \"{base}\"\npage_size = 50\nrate_per_s = 500\nburst = 10\n\
         max_pages = 40\ntimeout_secs = 1.0\nbackoff_ms = 20\n{extra}\n"
    )
}

fn project(config: &str) -> Project {
    let p = Project::empty();
    p.write("pipeline/demo.toml", format!("[project]\nname = \"registry\"\n\n{config}"));
    p
}

fn start(kind: Kind, n: usize, faults: Faults) -> (FixtureServer, Universe) {
    let u = Universe::generate(SEED, n);
    let (items, details) = match kind {
        Kind::Glama => (u.glama(), BTreeMap::new()),
        Kind::Official => (u.official(), BTreeMap::new()),
        Kind::Smithery => u.smithery(),
    };
    (FixtureServer::start(kind, items, details, faults), u)
}

fn snapshot_dir(p: &Project, source: &str, id: &str) -> PathBuf {
    p.path(&format!("raw/registry/{source}/{id}"))
}

fn pages_of(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    tree(dir).into_iter().filter(|(k, _)| k != "state.json").collect()
}

/// Same files with the same bytes (reported by name, not by dumping bytes).
#[track_caller]
fn assert_same_files(got: &BTreeMap<String, Vec<u8>>, want: &BTreeMap<String, Vec<u8>>) {
    assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>());
    for (k, v) in got {
        assert!(v == &want[k], "`{k}` differs");
    }
}

fn ids_in(dir: &Path, kind: benchgen::registry::pages::SourceKind) -> BTreeSet<String> {
    let imported = benchgen::registry::import::import_dir(kind, dir).unwrap();
    imported
        .catalog
        .servers
        .iter()
        .map(|s| s.registry.as_ref().unwrap().sources.values().next().unwrap().id.clone())
        .collect()
}

fn scrape(p: &Project, source: &str, args: &[&str]) -> std::process::Output {
    let mut a = vec!["registry", "scrape", "--source", source];
    a.extend_from_slice(args);
    p.cmd().env("FIXTURE_KEY", KEY).args(&a).output().unwrap()
}

#[test]
fn glama_full_scrape_equals_the_fixture_politely_and_keeps_the_key_secret() {
    let (fx, u) = start(Kind::Glama, 430, Faults { require_auth: Some(format!("Bearer {KEY}")), ..Default::default() });
    let p = project(&source_toml("glama", "glama", &fx.base_url(), "api_key_env = \"FIXTURE_KEY\""));
    let o = scrape(&p, "glama", &["--snapshot", "s1"]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains("9 pages (9 fetched"), "{}", stdout(&o));
    assert!(stdout(&o).contains("430 servers"), "{}", stdout(&o));

    let dir = snapshot_dir(&p, "glama", "s1");
    let want: BTreeSet<String> = (0..430).map(|i| format!("g{i:05}")).collect();
    assert_eq!(ids_in(&dir, benchgen::registry::pages::SourceKind::Glama), want);
    assert_eq!(u.servers.len(), 430);
    // Every page requested exactly once; a descriptive User-Agent; the key only as Bearer.
    fx.log(|l| {
        assert_eq!(l.counts.len(), 9);
        assert!(l.counts.values().all(|&c| c == 1), "{:?}", l.counts);
        assert!(
            l.user_agents.iter().all(|ua| ua.starts_with("benchgen/") && ua.contains("registry")),
            "{:?}",
            l.user_agents
        );
        assert_eq!(l.auth, BTreeSet::from([format!("Bearer {KEY}")]));
    });
    // The key is nowhere: not in pages, state, stdout or stderr.
    for (name, bytes) in tree(&p.path("raw")) {
        assert!(!String::from_utf8_lossy(&bytes).contains(KEY), "key leaked into {name}");
    }
    assert!(!stdout(&o).contains(KEY) && !stderr(&o).contains(KEY));

    // Without the key: a clear error naming the variable, and still no key anywhere.
    let o =
        p.cmd().env_remove("FIXTURE_KEY").args(["registry", "scrape", "--source", "glama", "--new"]).output().unwrap();
    assert_code(&o, 1);
    assert!(stderr(&o).contains("`FIXTURE_KEY` is not set"), "{}", stderr(&o));
    // A wrong key: the 401 stops the scrape; the message names source and page, not the key.
    let o = p
        .cmd()
        .env("FIXTURE_KEY", "wrong-key-777")
        .args(["registry", "scrape", "--source", "glama", "--new"])
        .output()
        .unwrap();
    assert_code(&o, 1);
    assert!(stderr(&o).contains("source `glama`, page 1: HTTP 401"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("wrong-key-777"));
}

#[test]
fn official_and_smithery_scrapes_equal_their_fixtures() {
    let (fx, u) = start(Kind::Official, 300, Faults::default());
    let p = project(&source_toml("official", "official", &fx.base_url(), ""));
    assert_code(&scrape(&p, "official", &["--snapshot", "a"]), 0);
    let want: BTreeSet<String> =
        u.servers.iter().filter(|b| b.i % 2 == 0).map(|b| format!("io.github.owner{}/{}", b.i % 37, b.slug)).collect();
    assert_eq!(ids_in(&snapshot_dir(&p, "official", "a"), benchgen::registry::pages::SourceKind::Official), want);
    fx.log(|l| assert!(l.counts.values().all(|&c| c == 1)));

    let (fx, u) = start(Kind::Smithery, 300, Faults::default());
    let p = project(&source_toml("smithery", "smithery", &fx.base_url(), ""));
    let o = scrape(&p, "smithery", &["--snapshot", "a"]);
    assert_code(&o, 0);
    let want: BTreeSet<String> =
        u.servers.iter().filter(|b| b.i % 3 == 0).map(|b| format!("@owner{}/{}", b.i % 37, b.slug)).collect();
    assert_eq!(ids_in(&snapshot_dir(&p, "smithery", "a"), benchgen::registry::pages::SourceKind::Smithery), want);
    // 2 list pages + one detail per server, each once.
    fx.log(|l| {
        assert_eq!(l.counts.len(), 2 + want.len());
        assert!(l.counts.values().all(|&c| c == 1), "{:?}", l.counts);
    });
}

#[test]
fn rate_limits_server_errors_timeouts_and_truncated_pages_are_retried() {
    let faults = Faults {
        statuses: BTreeMap::from([(2, vec![(429, Some("1".to_string()))]), (3, vec![(500, None), (503, None)])]),
        delay_once: BTreeMap::from([(4, Duration::from_secs(3))]),
        truncate_once: BTreeSet::from([5]),
        ..Default::default()
    };
    let (fx, _) = start(Kind::Glama, 300, faults);
    let p = project(&source_toml("glama", "glama", &fx.base_url(), ""));
    let o = scrape(&p, "glama", &["--snapshot", "s"]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains("300 servers"), "{}", stdout(&o));
    assert!(stdout(&o).contains("5 retries"), "{}", stdout(&o));
    fx.log(|l| {
        // Retry-After: 1 was honoured: the retry of page 2 came at least ~1 s after the 429.
        let p2: Vec<&(String, u16, Duration)> = l.seen.iter().filter(|(u, ..)| u.contains("after=cur-50&")).collect();
        assert_eq!(p2.len(), 2);
        assert_eq!(p2[0].1, 429);
        assert!(p2[1].2 - p2[0].2 >= Duration::from_millis(950), "retry after {:?}", p2[1].2 - p2[0].2);
        // Each page answered in full exactly once (the faulty answers were retried).
        assert!(l.served_pages.values().all(|&c| c == 1), "{:?}", l.served_pages);
        assert_eq!(l.served_pages.len(), 6);
    });
    // The saved page 5 is the complete one.
    let page5 = std::fs::read(snapshot_dir(&p, "glama", "s").join("page-000005.json")).unwrap();
    assert!(serde_json::from_slice::<Value>(&page5).is_ok());
}

#[test]
fn defensive_stops_name_source_page_and_field() {
    let cases: Vec<(Kind, Faults, &str)> = vec![
        (
            Kind::Glama,
            Faults { cursor_loop_at: Some(3), ..Default::default() },
            "source `glama`, page 3, field `pageInfo.endCursor`: cursor `cur-50` was already returned by page 1 (a cursor loop)",
        ),
        (
            Kind::Glama,
            Faults { endless: true, ..Default::default() },
            "source `glama`, page 41, field `pageInfo.endCursor`: the source still has a next page after 40 pages",
        ),
        (
            Kind::Smithery,
            Faults { endless: true, ..Default::default() },
            "source `glama`, page 41, field `pagination.totalPages`",
        ),
        (
            Kind::Glama,
            Faults { oversized: Some((2, 300_000)), ..Default::default() },
            "source `glama`, page 2: response is larger than `max_response_bytes` (200000)",
        ),
        (
            Kind::Glama,
            Faults { wrong_shape: Some(2), ..Default::default() },
            "source `glama`, page 2, field `servers`: expected an array, found an object",
        ),
    ];
    for (kind, faults, want) in cases {
        let (fx, _) = start(kind, 300, faults);
        let k = if kind == Kind::Smithery { "smithery" } else { "glama" };
        let p = project(&source_toml("glama", k, &fx.base_url(), "max_response_bytes = 200000\ndetails = false"));
        let o = scrape(&p, "glama", &["--snapshot", "x"]);
        assert_code(&o, 1);
        assert!(stderr(&o).contains(want), "want {want}\n--- stderr\n{}", stderr(&o));
        assert!(stderr(&o).contains("scrape of `glama` stopped"), "{}", stderr(&o));
    }
}

#[test]
fn a_killed_scrape_resumes_without_fetching_a_saved_page_twice() {
    // Reference: one uninterrupted scrape.
    let (fx_ref, _) = start(Kind::Glama, 500, Faults::default());
    let p_ref = project(&source_toml("glama", "glama", &fx_ref.base_url(), ""));
    assert_code(&scrape(&p_ref, "glama", &["--snapshot", "s"]), 0);
    let reference = pages_of(&snapshot_dir(&p_ref, "glama", "s"));
    assert_eq!(reference.len(), 10);

    // Abort (SIGABRT, like kill -9: no cleanup) right after page 4 is saved, then rerun
    // without naming the snapshot: the unfinished one is resumed.
    let (fx, _) = start(Kind::Glama, 500, Faults::default());
    let p = project(&source_toml("glama", "glama", &fx.base_url(), ""));
    let o = p
        .cmd()
        .env("BENCHGEN_FAIL_AT", "registry-page-saved:4")
        .args(["registry", "scrape", "--source", "glama", "--snapshot", "s"])
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(0));
    let o = scrape(&p, "glama", &[]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains("(6 fetched, 1 adopted"), "{}", stdout(&o));
    assert_same_files(&pages_of(&snapshot_dir(&p, "glama", "s")), &reference);
    fx.log(|l| {
        assert_eq!(l.counts.len(), 10);
        assert!(l.counts.values().all(|&c| c == 1), "a page was fetched twice: {:?}", l.counts);
    });

    // A real SIGKILL at an arbitrary moment: every page saved before the kill is never
    // requested again (the one in flight may be).
    let (fx, _) =
        start(Kind::Glama, 500, Faults { every_delay: Some(Duration::from_millis(150)), ..Default::default() });
    let p = project(&source_toml("glama", "glama", &fx.base_url(), ""));
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("benchgen"))
        .current_dir(p.root())
        .env("BENCHGEN_NO_PROGRESS", "1")
        .env_remove("BENCHGEN_CONFIG")
        .args(["registry", "scrape", "--source", "glama", "--snapshot", "k"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let dir = snapshot_dir(&p, "glama", "k");
    let t0 = std::time::Instant::now();
    while !dir.join("page-000004.json").exists() {
        assert!(t0.elapsed() < Duration::from_secs(60), "scrape made no progress");
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let saved: BTreeSet<String> = pages_of(&dir).into_keys().collect();
    let requested_before = fx.log(|l| l.counts.clone());
    assert_code(&scrape(&p, "glama", &[]), 0);
    assert_same_files(&pages_of(&dir), &reference);
    let state: Value = serde_json::from_slice(&std::fs::read(dir.join("state.json")).unwrap()).unwrap();
    fx.log(|l| {
        for page in state["pages"].as_array().unwrap() {
            let file = page["file"].as_str().unwrap();
            let req = page["request"].as_str().unwrap();
            if saved.contains(file) {
                assert_eq!(l.counts[req], 1, "{file} was saved before the kill but fetched again");
            }
            assert!(l.counts[req] <= 2 && requested_before.get(req).copied().unwrap_or(0) <= 1);
        }
    });
}

#[test]
fn a_rescrape_sends_etags_and_reuses_unchanged_pages() {
    let (fx, _) = start(Kind::Glama, 200, Faults::default());
    let p = project(&source_toml("glama", "glama", &fx.base_url(), ""));
    assert_code(&scrape(&p, "glama", &["--snapshot", "a"]), 0);
    fx.reset_log();
    let o = scrape(&p, "glama", &["--snapshot", "b"]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains("4 not modified"), "{}", stdout(&o));
    fx.log(|l| assert_eq!(l.if_none_match, 4));
    assert_same_files(&pages_of(&snapshot_dir(&p, "glama", "a")), &pages_of(&snapshot_dir(&p, "glama", "b")));
}

/// Scrape all three fixture sources of one universe into `p`.
fn three_sources(n: usize) -> (Project, Vec<FixtureServer>, Universe) {
    let (g, u) = start(Kind::Glama, n, Faults::default());
    let (o, _) = start(Kind::Official, n, Faults::default());
    let (s, _) = start(Kind::Smithery, n, Faults::default());
    let cfg = format!(
        "{}{}{}",
        source_toml("glama", "glama", &g.base_url(), ""),
        source_toml("official", "official", &o.base_url(), ""),
        source_toml("smithery", "smithery", &s.base_url(), "")
    );
    let p = project(&cfg);
    for src in ["glama", "official", "smithery"] {
        assert_code(&scrape(&p, src, &["--snapshot", "s1"]), 0);
    }
    (p, vec![g, o, s], u)
}

#[test]
fn each_format_imports_with_provenance_fields_and_feeds_filter() {
    let (p, _fx, _u) = three_sources(120);
    for (fmt, servers, tools) in [("glama", 120, true), ("official", 60, false), ("smithery", 40, true)] {
        let o = p.run(&["registry", "import", "--format", fmt, &format!("raw/registry/{fmt}/s1"), "--force"]);
        assert_code(&o, 0);
        let cat: Catalog = serde_json::from_str(&p.read("artifacts/registry-import/catalog.json")).unwrap();
        assert_eq!(cat.servers.len(), servers, "{fmt}");
        assert_eq!(cat.tool_count() > 0, tools, "{fmt}");
        let info = cat.servers[0].registry.as_ref().unwrap();
        assert_eq!(info.sources[fmt].snapshot, "s1");
        match fmt {
            "glama" => {
                let s = cat
                    .servers
                    .iter()
                    .find(|s| {
                        s.name == "Alpha Bravo 00000" || s.registry.as_ref().unwrap().sources["glama"].id == "g00000"
                    })
                    .unwrap();
                let i = s.registry.as_ref().unwrap();
                assert_eq!(i.repository.as_deref().map(|r| r.starts_with("https://github.com/")), Some(true));
                assert_eq!(s.license.as_deref(), Some("MIT"));
                assert!(
                    i.extra.contains_key("glama.slug") && i.extra.contains_key("glama.environmentVariablesJsonSchema")
                );
                assert_eq!(s.categories, ["finance", "remote"]);
                assert_eq!(i.category_reasons[0].by, "source");
                assert!(i.tools_from.as_deref().unwrap().starts_with("glama snapshot s1"));
            }
            "official" => {
                let i = info;
                assert_eq!(i.packages[0].registry_type, "npm");
                assert!(i.packages[0].version.is_some());
                assert!(i.extra.contains_key("official._meta") && i.extra.contains_key("official.version"));
                assert!(cat.servers.iter().any(|s| !s.registry.as_ref().unwrap().remotes.is_empty()));
            }
            _ => {
                assert!(info.remotes[0].url.starts_with("https://server.smithery.ai/"));
                assert!(info.extra.contains_key("smithery.useCount"));
            }
        }
        // Configured as the pipeline's snapshot, the same import feeds `filter` as is.
        let imported = p.read("artifacts/registry-import/catalog.json");
        let cfg = p.read("pipeline/demo.toml");
        let base = cfg.split("\n[registry]").next().unwrap().to_string();
        p.write(
            "pipeline/demo.toml",
            format!("{base}\n[registry]\nformat = \"{fmt}\"\nsnapshots = [\"raw/registry/{fmt}/s1\"]\n"),
        );
        assert_code(&p.run(&["registry", "import"]), 0);
        assert_eq!(p.read("artifacts/registry-import/catalog.json"), imported);
        assert_code(&p.run(&["filter"]), 0);
        p.write("pipeline/demo.toml", cfg);
    }
    // A format that does not match the folder is refused with a hint.
    let o = p.run(&["registry", "import", "--format", "smithery", "raw/registry/glama/s1", "--force"]);
    assert_code(&o, 1);
    assert!(stderr(&o).contains("is a glama snapshot, not smithery"), "{}", stderr(&o));
}

#[test]
fn merge_recognises_known_duplicates_and_lists_conflicts() {
    let n = 180;
    let (p, _fx, u) = three_sources(n);
    let o =
        p.run(&["registry", "merge", "raw/registry/glama/s1", "raw/registry/official/s1", "raw/registry/smithery/s1"]);
    assert_code(&o, 0);
    let cat: Catalog = serde_json::from_str(&p.read("artifacts/registry-merge/catalog.json")).unwrap();
    // Every official and Smithery server is a duplicate of a Glama one: one server each.
    assert_eq!(cat.servers.len(), n, "{}", p.read("artifacts/registry-merge/merge.md"));
    let by_glama: BTreeMap<String, &benchgen::model::Server> =
        cat.servers.iter().map(|s| (s.registry.as_ref().unwrap().sources["glama"].id.clone(), s)).collect();
    for b in &u.servers {
        let s = by_glama[&format!("g{:05}", b.i)];
        let srcs: BTreeSet<&str> = s.registry.as_ref().unwrap().sources.keys().map(String::as_str).collect();
        let mut want = BTreeSet::from(["glama"]);
        if b.i % 2 == 0 {
            want.insert("official");
        }
        if b.i % 3 == 0 {
            want.insert("smithery");
        }
        assert_eq!(srcs, want, "server {}", b.i);
        // Tool union: Smithery's extra tool joins the Glama ones.
        let names: BTreeSet<&str> = s.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names.contains("smithery_only"), b.i % 6 == 0, "server {}", b.i);
        assert_eq!(s.tools.len(), b.tools.len() + usize::from(b.i % 6 == 0));
        if b.i % 2 == 0 {
            assert_eq!(s.registry.as_ref().unwrap().packages[0].identifier, b.npm);
        }
    }
    // Conflicts: Smithery's description differs for i % 9 == 0 (glama wins by priority).
    let conflicts = p.read("artifacts/registry-merge/conflicts.csv");
    let mut rdr = csv::Reader::from_reader(conflicts.as_bytes());
    let rows: Vec<BTreeMap<String, String>> = rdr.deserialize().map(|r| r.unwrap()).collect();
    let desc: Vec<&BTreeMap<String, String>> = rows.iter().filter(|r| r["field"] == "description").collect();
    // Glama and Smithery disagree; the official registry (even i) sides with Glama.
    let want: usize = u.servers.iter().filter(|b| b.i % 9 == 0).map(|b| 2 + usize::from(b.i % 2 == 0)).sum();
    assert_eq!(desc.len(), want);
    assert!(desc.iter().all(|r| (r["source"] == "glama") == (r["chosen"] == "true")));
    let tools_conf = rows.iter().filter(|r| r["field"] == "tools" && r["chosen"] == "true").count();
    assert_eq!(tools_conf, u.servers.iter().filter(|b| b.i % 6 == 0).count());
    // Smithery matches are by name only: all listed for review; the monorepo servers
    // (same repository, different names) are never merged with each other.
    let review = p.read("artifacts/registry-merge/review.csv");
    assert_eq!(
        review.lines().filter(|l| l.starts_with("merged,name,")).count(),
        u.servers.iter().filter(|b| b.i % 3 == 0).count()
    );
    let mono = cat
        .servers
        .iter()
        .filter(|s| s.registry.as_ref().unwrap().repository.as_deref() == Some("https://github.com/acme/monorepo"))
        .count();
    assert_eq!(mono, u.servers.iter().filter(|b| b.i % 10 == 5).count());
    // Provenance: the description of a conflicting server names both claims.
    let s = by_glama["g00000"];
    let prov = &s.registry.as_ref().unwrap().provenance["description"];
    assert_eq!(prov.iter().map(|c| c.source.as_str()).collect::<Vec<_>>(), ["glama", "official", "smithery"]);
    assert!(prov[0].chosen && !prov[2].chosen);
    // Same inputs, same bytes.
    let before = p.read("artifacts/registry-merge/catalog.json");
    assert_code(
        &p.run(&["registry", "merge", "raw/registry/glama/s1", "raw/registry/official/s1", "raw/registry/smithery/s1"]),
        0,
    );
    assert_eq!(before, p.read("artifacts/registry-merge/catalog.json"));

    // The pipeline's import stage merges `registry.snapshots` the same way; `filter` reads it.
    let cfg = p.read("pipeline/demo.toml").replacen(
        "[registry.sources.glama]",
        "[registry]\nsnapshots = [\"raw/registry/glama/s1\", \"raw/registry/official/s1\", \"raw/registry/smithery/s1\"]\n\n[registry.sources.glama]",
        1,
    );
    p.write("pipeline/demo.toml", cfg);
    assert_code(&p.run(&["registry", "import"]), 0);
    assert_eq!(p.read("artifacts/registry-import/catalog.json"), before);
    assert_code(&p.run(&["filter"]), 0);
}

// ---------------------------------------------------------------------------------------
// Live tool listing.

fn tools_project(allow: &[&str], npm_launch: &str, pypi_launch: &str, time_limit: f64) -> Project {
    let allow: Vec<String> = allow.iter().map(|a| format!("\"{a}\"")).collect();
    project(&format!(
        "[registry.tools]\nallow = [{}]\nnpm = {npm_launch}\npypi = {pypi_launch}\ntime_limit_secs = {time_limit}\nmemory_limit_mb = 4096\n",
        allow.join(", ")
    ))
}

fn catalog_with(servers: Vec<Value>) -> Value {
    serde_json::json!({"servers": servers})
}

fn pkg_server(name: &str, registry_type: &str, id: &str, version: Option<&str>) -> Value {
    let mut pkg = serde_json::json!({"registry_type": registry_type, "identifier": id});
    if let Some(v) = version {
        pkg["version"] = v.into();
    }
    serde_json::json!({"name": name, "description": "", "summary": "", "url": "", "categories": [], "tools": [],
        "registry": {"packages": [pkg]}})
}

#[test]
fn registry_tools_lists_the_reference_servers_and_refuses_what_is_not_allowed() {
    let (Some(_), Some(time_bin)) =
        (mcp_assets::npm_server_js("server-everything"), mcp_assets::venv_bin("mcp-server-time"))
    else {
        return;
    };
    let node_modules = mcp_assets::mcp_cache().join("npm/node_modules");
    // Run the installed copies instead of fetching from the network: the launch templates
    // point at the local install (`{package}` is replaced as usual).
    let npm = format!("[\"node\", \"{}/{{package}}/dist/index.js\"]", node_modules.display());
    let pypi = format!("[\"{}/{{package}}\"]", time_bin.parent().unwrap().display());
    let p = tools_project(&["npm:@modelcontextprotocol/*", "pypi:mcp-server-time"], &npm, &pypi, 60.0);
    let cat = catalog_with(vec![
        pkg_server("everything", "npm", "@modelcontextprotocol/server-everything", Some("2026.8.31")),
        pkg_server("time", "pypi", "mcp-server-time", Some("2026.10.19")),
        pkg_server("evil", "npm", "left-pad-mcp", Some("1.0.0")),
        pkg_server("unpinned", "npm", "@modelcontextprotocol/server-memory", None),
    ]);
    p.write("in/catalog.json", serde_json::to_vec_pretty(&cat).unwrap());
    let o = p.run(&["registry", "tools", "--catalog", "in/catalog.json", "--out", "out"]);
    assert_code(&o, 0);
    let got: Catalog = serde_json::from_str(&p.read("out/catalog.json")).unwrap();
    let tools = |n: &str| -> BTreeSet<String> {
        got.servers.iter().find(|s| s.name == n).unwrap().tools.iter().map(|t| t.name.clone()).collect()
    };
    assert!(tools("everything").contains("echo"), "{:?}", tools("everything"));
    assert!(tools("time").contains("get_current_time") && tools("time").contains("convert_time"));
    let ev = got.servers.iter().find(|s| s.name == "everything").unwrap();
    assert!(ev.registry.as_ref().unwrap().tools_from.as_deref().unwrap().starts_with("listed live at "));
    assert_eq!(ev.tools[0].id, format!("everything::{}", ev.tools[0].name));
    assert!(tools("evil").is_empty() && tools("unpinned").is_empty());
    let live: Value = serde_json::from_str(&p.read("out/live.json")).unwrap();
    assert_eq!(live["evil"]["status"], "refused");
    assert!(live["evil"]["reason"].as_str().unwrap().contains("`npm:left-pad-mcp` is not in `[registry.tools] allow`"));
    assert_eq!(live["unpinned"]["status"], "refused");
    assert!(live["unpinned"]["reason"].as_str().unwrap().contains("no pinned version"));
    // The refused package was never started: its launch would have run node on a missing file.
    assert!(!p.path("out/logs").join("evil.stderr.log").exists());
}

#[test]
fn a_hanging_server_is_cut_off_with_its_process_group() {
    let p = Project::empty();
    // Test double: a "server" that starts a child and never answers, recording both pids.
    let script = p.path("hang.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\nulimit -v > \"$HANG_PIDS.limit\"\nsleep 300 &\necho \"$$ $!\" > \"$HANG_PIDS\"\nwait\n",
    )
    .unwrap();
    std::process::Command::new("chmod").arg("+x").arg(&script).status().unwrap();
    let launch = format!("[\"{}\"]", script.display());
    let p2 = tools_project(&["npm:hang-*"], &launch, "[\"false\"]", 2.0);
    let cat = catalog_with(vec![pkg_server("hang", "npm", "hang-forever", Some("1.0.0"))]);
    p2.write("in/catalog.json", serde_json::to_vec_pretty(&cat).unwrap());
    let pids = p.path("pids");
    let t0 = std::time::Instant::now();
    let o = p2
        .cmd()
        .env("HANG_PIDS", &pids)
        .args(["registry", "tools", "--catalog", "in/catalog.json", "--out", "out"])
        .output()
        .unwrap();
    assert_code(&o, 0);
    assert!(t0.elapsed() < Duration::from_secs(30), "not cut off");
    let live: Value = serde_json::from_str(&p2.read("out/live.json")).unwrap();
    assert_eq!(live["hang"]["status"], "timed-out", "{live}");
    assert!(stderr(&o).contains("`hang`: timed-out"), "{}", stderr(&o));
    // It ran under the configured address-space limit (4096 MiB, in KiB as `ulimit -v` shows it).
    let limit = std::fs::read_to_string(p.path("pids.limit")).unwrap();
    assert_eq!(limit.trim(), (4096 * 1024).to_string());
    // Both the server and its child are gone (the whole process group was killed).
    let text = std::fs::read_to_string(&pids).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    for pid in text.split_whitespace() {
        let alive = Path::new(&format!("/proc/{pid}")).exists()
            && !std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default().contains(") Z ");
        assert!(!alive, "process {pid} survived the cut-off");
    }
}

// ---------------------------------------------------------------------------------------
// Page parser fuzzing.

mod fuzz {
    use benchgen::registry::pages::{SourceKind, parse_detail, parse_page};
    use proptest::prelude::*;

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            "[a-z@/ ]{0,8}".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(serde_json::Value::Array),
                prop::collection::btree_map(
                    prop_oneof![
                        Just("servers".to_string()),
                        Just("pageInfo".to_string()),
                        Just("endCursor".to_string()),
                        Just("hasNextPage".to_string()),
                        Just("metadata".to_string()),
                        Just("nextCursor".to_string()),
                        Just("pagination".to_string()),
                        Just("currentPage".to_string()),
                        Just("totalPages".to_string()),
                        Just("server".to_string()),
                        Just("name".to_string()),
                        Just("id".to_string()),
                        Just("qualifiedName".to_string()),
                        Just("tools".to_string()),
                        "[a-z]{1,5}",
                    ],
                    inner,
                    0..6
                )
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        #[test]
        fn page_parser_never_panics_and_locates_errors(v in json_value(), raw in prop::collection::vec(any::<u8>(), 0..64), page in 1u64..5) {
            for kind in [SourceKind::Glama, SourceKind::Official, SourceKind::Smithery] {
                for bytes in [serde_json::to_vec(&v).unwrap(), raw.clone()] {
                    if let Err(e) = parse_page(kind, "fuzz", page, &bytes) {
                        let msg = e.to_string();
                        prop_assert!(msg.starts_with(&format!("source `fuzz`, page {page}, field `")), "{}", msg);
                        prop_assert!(!e.field.is_empty());
                    }
                    if let Err(e) = parse_detail("fuzz", "@a/b", &bytes) {
                        prop_assert!(e.to_string().starts_with("source `fuzz`, detail of `@a/b`, field `"));
                    }
                }
            }
        }
    }
}

/// `[registry] sample = 20` on ETOM's 491 servers: 20 servers with all their tools, the
/// other 471 listed with the reason; the same seed draws the same servers, another seed
/// others; `sample = 0` is refused by `check` before anything runs.
#[test]
fn a_registry_sample_imports_a_seeded_subset_and_lists_the_servers_left_out() {
    let Some(reg) = crate::support::shared_data("etom/mcp_registry.json") else { return };
    let import = |seed: u64, sample: usize| -> (Catalog, Value, String) {
        let p = project(&format!("[registry]\nsource = {:?}\nsample = {sample}\n", reg.to_str().unwrap()));
        let cfg = p.read("pipeline/demo.toml").replace("[project]\n", &format!("[project]\nseed = {seed}\n"));
        p.write("pipeline/demo.toml", cfg);
        let o = p.run(&["registry", "import"]);
        assert_code(&o, 0);
        let catalog = p.read("artifacts/registry-import/catalog.json");
        let report: Value = serde_json::from_str(&p.read("artifacts/registry-import/import_report.json")).unwrap();
        (serde_json::from_str(&catalog).unwrap(), report, catalog)
    };
    let (cat, report, text) = import(7, 20);
    assert_eq!(cat.servers.len(), 20);
    let full: Value = serde_json::from_slice(&std::fs::read(&reg).unwrap()).unwrap();
    let tools_of = |name: &str| {
        full["servers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["server_name"].as_str().map(str::trim) == Some(name))
            .map(|s| s["tools"].as_array().unwrap().len())
    };
    for s in &cat.servers {
        assert_eq!(Some(s.tools.len()), tools_of(&s.name), "{} keeps every tool", s.name);
    }
    let sample = &report["sample"];
    assert_eq!((sample["sample"].as_u64(), sample["read"].as_u64()), (Some(20), Some(491)), "{sample}");
    let left: Vec<&str> = sample["not_sampled"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(left.len(), 471);
    assert!(left.windows(2).all(|w| w[0] < w[1]), "sorted");
    let kept: BTreeSet<&str> = cat.servers.iter().map(|s| s.name.as_str()).collect();
    assert!(left.iter().all(|n| !kept.contains(n)));
    assert_eq!(
        sample["reason"],
        "left out by `[registry] sample = 20`: a seeded subset of 20 of 491 servers with tools (project seed 7)"
    );
    assert_eq!(report["servers"], 20, "the report counts what was imported");
    // The same seed, the same bytes; another seed, other servers.
    assert!(import(7, 20).2 == text, "the same seed gives the same catalog bytes");
    let other: BTreeSet<String> = import(8, 20).0.servers.into_iter().map(|s| s.name).collect();
    assert_ne!(other.iter().map(String::as_str).collect::<BTreeSet<_>>(), kept);
    // A sample of more servers than there are keeps them all.
    assert_eq!(import(7, 1000).0.servers.len(), 491);
    // Zero is refused before anything is written.
    let p = project(&format!("[registry]\nsource = {:?}\nsample = 0\n", reg.to_str().unwrap()));
    let o = p.run(&["registry", "import"]);
    assert_code(&o, 1);
    assert!(stderr(&o).contains("registry.sample") && stderr(&o).contains("must be at least 1"), "{}", stderr(&o));
    assert!(!p.path("artifacts/registry-import/catalog.json").exists());
}

#[test]
fn servers_no_rule_places_go_to_the_llm_classifier_with_its_reason() {
    let (fx, u) = start(Kind::Official, 60, Faults::default());
    let llm = util::scripted_llm::ScriptedLlm::start(|seen| {
        let text = seen.all_text();
        let category = if text.contains("file-system server") { "file-system" } else { "not-a-category" };
        util::scripted_llm::Answer::json(
            serde_json::json!({"reason": "scripted: its description says so", "category": category}),
        )
    });
    let p = project(&format!(
        "[registry]\nformat = \"official\"\nsnapshots = [\"raw/registry/official/s1\"]\n\n\
         [registry.categories]\nclassifier_role = \"cat\"\n\n\
         [llm.roles.cat]\nprovider = \"vllm\"\nbase_url = \"{}\"\nmodel = \"scripted\"\nmax_tokens = 100\n\n{}",
        llm.base_url(),
        source_toml("official", "official", &fx.base_url(), "")
    ));
    p.copy_in("pipeline/prompts/registry-categories.md");
    assert_code(&scrape(&p, "official", &["--snapshot", "s1"]), 0);
    let o = p.run(&["registry", "import"]);
    assert_code(&o, 0);
    let cat: Catalog = serde_json::from_str(&p.read("artifacts/registry-import/catalog.json")).unwrap();
    // Rules place most servers ("A finance server: …" → finance); file-system and
    // communication descriptions match no rule, so the LLM is asked about them.
    let fs: Vec<&benchgen::model::Server> =
        cat.servers.iter().filter(|s| s.description.contains("file-system server")).collect();
    assert_eq!(fs.len(), u.servers.iter().filter(|b| b.i % 2 == 0 && b.category == "file-system").count());
    for s in &fs {
        assert_eq!(s.categories, ["file-system"]);
        let r = &s.registry.as_ref().unwrap().category_reasons[0];
        assert_eq!(r.by, "llm");
        assert!(
            r.reason.starts_with("cat (ledger #") && r.reason.ends_with("scripted: its description says so"),
            "{}",
            r.reason
        );
    }
    let fin = cat.servers.iter().find(|s| s.description.contains("finance server")).unwrap();
    assert_eq!(fin.registry.as_ref().unwrap().category_reasons[0].by, "rule");
    // An answer outside the taxonomy is not taken: those servers stay unassigned and listed.
    let comm: Vec<&benchgen::model::Server> =
        cat.servers.iter().filter(|s| s.description.contains("communication server")).collect();
    assert!(
        !comm.is_empty() && comm.iter().all(|s| s.categories.is_empty()),
        "{:?}",
        comm.iter().map(|s| (&s.description, &s.registry.as_ref().unwrap().category_reasons)).collect::<Vec<_>>()
    );
    let csv = p.read("artifacts/registry-import/categories.csv");
    assert_eq!(csv.lines().filter(|l| l.ends_with(",none,no rule matched")).count(), comm.len());
    // A rerun is up to date (answers cached, nothing asked again).
    let asked = llm.count();
    assert!(asked >= fs.len() + comm.len());
    assert_code(&p.run(&["registry", "import", "--force"]), 0);
    assert_eq!(llm.count(), asked);
}

#[test]
fn registry_tools_connects_to_an_allowed_streamable_http_remote() {
    // A loopback MCP server over Streamable HTTP: `benchgen sandbox` serving a small catalog.
    let p = tools_project(&["remote:http://127.0.0.1:*"], "[\"false\"]", "[\"false\"]", 30.0);
    let cat_path = mcp_assets::write_fixture_catalog(p.root());
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut server = std::process::Command::new(assert_cmd::cargo::cargo_bin("benchgen"))
        .args(["sandbox", "--catalog", cat_path.to_str().unwrap(), "--http", &format!("127.0.0.1:{port}")])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut url = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(server.stdout.take().unwrap()), &mut url).unwrap();
    let url = url.trim().to_string();
    let remote = |name: &str, u: &str| {
        serde_json::json!({"name": name, "description": "", "summary": "", "url": "", "categories": [], "tools": [],
            "registry": {"remotes": [{"transport": "streamable-http", "url": u}]}})
    };
    let cat = catalog_with(vec![remote("remote", &url), remote("elsewhere", "https://mcp.example.org/mcp")]);
    p.write("in/catalog.json", serde_json::to_vec_pretty(&cat).unwrap());
    let o = p.run(&["registry", "tools", "--catalog", "in/catalog.json", "--out", "out"]);
    server.kill().unwrap();
    server.wait().unwrap();
    assert_code(&o, 0);
    let got: Catalog = serde_json::from_str(&p.read("out/catalog.json")).unwrap();
    let r = got.servers.iter().find(|s| s.name == "remote").unwrap();
    let names: BTreeSet<&str> = r.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, BTreeSet::from(["books::find_book", "books::get_reviews", "weather::forecast"]));
    assert!(r.registry.as_ref().unwrap().tools_from.as_deref().unwrap().contains(&format!("(remote:{url})")));
    let live: Value = serde_json::from_str(&p.read("out/live.json")).unwrap();
    assert_eq!(live["elsewhere"]["status"], "refused");
}

// ---------------------------------------------------------------------------------------
// Issue 10, item 8: tools whose input schema is not valid JSON Schema are reported at import
// and filter rules can drop them.

#[test]
fn invalid_input_schemas_are_reported_at_import_and_a_rule_drops_them() {
    let p = crate::support::Project::demo();
    let reg = p.read("raw/demo/registry.json");
    let mut v: serde_json::Value = serde_json::from_str(&reg).unwrap();
    let bad_id = format!(
        "{}::{}",
        v["servers"][0]["server_name"].as_str().unwrap(),
        v["servers"][0]["tools"][0]["tool_name"].as_str().unwrap()
    );
    v["servers"][0]["tools"][0]["input_schema"] =
        serde_json::json!({"type": "object", "properties": {"symbol": {"type": "strin"}}});
    p.write("raw/demo/registry.json", serde_json::to_vec_pretty(&v).unwrap());

    let o = p.run(&["registry", "import", "--json"]);
    assert_code(&o, 0);
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(s["counts"]["invalid_input_schemas"], 1, "{s}");
    let report: serde_json::Value =
        serde_json::from_str(&p.read("artifacts/registry-import/import_report.json")).unwrap();
    assert_eq!(report["invalid_input_schemas"], 1, "{report}");
    let notes: Vec<&serde_json::Value> =
        report["notes"].as_array().unwrap().iter().filter(|n| n["kind"] == "invalid-input-schema").collect();
    assert_eq!(notes.len(), 1, "{report}");
    assert_eq!(notes[0]["location"], bad_id.as_str());
    assert!(notes[0]["message"].as_str().unwrap().contains("strin"), "{}", notes[0]);

    // A filter rule acts on it, with the reason and the evidence in dropped.csv.
    let cfg = p.read("pipeline/demo.toml").replacen(
        "[[filter.rules]]",
        "[[filter.rules]]\nid = \"invalid-schema\"\ntarget = \"tool\"\nclass = \"custom\"\n\
         reason = \"the sandbox cannot validate its arguments\"\ninvalid_input_schema = true\n\n[[filter.rules]]",
        1,
    );
    p.write("pipeline/demo.toml", cfg);
    assert_code(&p.run(&["filter"]), 0);
    let dropped = p.read("artifacts/filter/dropped.csv");
    let line =
        dropped.lines().find(|l| l.contains(&bad_id)).unwrap_or_else(|| panic!("{bad_id} not dropped:\n{dropped}"));
    assert!(line.contains("invalid-schema") && line.contains("not valid JSON Schema"), "{line}");
    assert_eq!(dropped.lines().filter(|l| l.contains("invalid-schema")).count(), 1, "{dropped}");

    // A server rule cannot use it.
    let cfg = p.read("pipeline/demo.toml").replacen(
        "target = \"tool\"\nclass = \"custom\"",
        "target = \"server\"\nclass = \"custom\"",
        1,
    );
    p.write("pipeline/demo.toml", cfg);
    let o = p.run(&["check"]);
    assert_code(&o, 1);
    assert!(crate::support::stderr(&o).contains("`invalid_input_schema` applies to tool rules only"));
}

#[test]
fn the_etom_snapshot_reports_its_four_invalid_input_schemas() {
    let Some(reg) = crate::support::shared_data("etom/mcp_registry.json") else { return };
    let p = crate::support::Project::demo();
    let o = p.run(&["registry", "import", reg.to_str().unwrap(), "--json"]);
    assert_code(&o, 0);
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(s["counts"]["invalid_input_schemas"], 4, "{s}");
}
