//! The config reference (`benchgen config reference`, the part of `docs/config.md` between
//! its markers) held to the settings types it describes: every field of every table of
//! every section is described (a section not described yet is named in
//! [`NOT_YET_DESCRIBED`]); every default shown is what the code gives a key left out (the
//! section parsed from its `EXAMPLE` without the key and with the key set to the default
//! shown must read the same, field for field); every list of choices is the one serde
//! accepts; a key shown as required is refused when missing.
//!
//! A table's keys are read from serde's own refusal of an unknown key
//! (`deny_unknown_fields` lists every key the table accepts), so a field added to a
//! settings type fails here until its section's `KEYS` describe it.

use std::collections::BTreeSet;
use std::time::Duration;

use benchgen::config_doc::{Absent, Key, Kind};
use benchgen::settings::SectionDecl;

use crate::support::{Project, assert_code, repo, stdout};

/// Sections whose keys are not described yet (their `KEYS` are empty). Only ever shorter:
/// describing a section means taking it off this list, which the test then demands.
const NOT_YET_DESCRIBED: &[&str] = &[];

/// A key no settings type has: what each table's refusal is asked with.
const PROBE: &str = "zzz_probe";

#[test]
fn the_config_reference_in_the_docs_is_the_generated_one() {
    let o = Project::empty().cmd().args(["config", "reference"]).timeout(Duration::from_secs(60)).output().unwrap();
    assert_code(&o, 0);
    let generated = stdout(&o);
    let page = std::fs::read_to_string(repo().join("docs/config.md")).unwrap();
    let begin = page.find("<!-- config:begin -->").expect("docs/config.md has a `<!-- config:begin -->` marker");
    let end = page.find("<!-- config:end -->").expect("docs/config.md has a `<!-- config:end -->` marker");
    let inside = page[begin + "<!-- config:begin -->".len()..end].trim();
    assert_eq!(
        inside,
        generated.trim(),
        "the key reference in docs/config.md is stale: replace what lies between its markers with the \
         output of `benchgen config reference`"
    );
    for s in benchgen::stages::sections() {
        assert!(generated.contains(&format!("### `[{}]`", s.name())), "`[{}]` is not in the reference", s.name());
    }
}

#[test]
fn every_key_of_every_settings_table_is_described() {
    let mut problems = Vec::new();
    for s in benchgen::stages::sections() {
        let listed = NOT_YET_DESCRIBED.contains(&s.name());
        match (s.keys().is_empty(), listed) {
            (true, true) => continue,
            (true, false) => problems.push(format!("[{}]: no `KEYS` describe it", s.name())),
            (false, true) => problems.push(format!("[{}] is described: take it off NOT_YET_DESCRIBED", s.name())),
            (false, false) => {}
        }
        for table in tables(s.keys()) {
            let shown = if table.is_empty() { s.name().to_string() } else { format!("{}.{table}", s.name()) };
            let described: BTreeSet<&str> =
                s.keys().iter().map(field_of).filter(|(t, _)| *t == table).map(|(_, f)| f).collect();
            match accepted(&s, table) {
                Err(e) => problems.push(format!("[{shown}]: cannot read the keys it accepts: {e}")),
                Ok(accepted) => {
                    for f in accepted.iter().filter(|f| !described.contains(f.as_str())) {
                        problems.push(format!("[{shown}] `{f}` is not described in its section's `KEYS`"));
                    }
                    for f in described.iter().filter(|f| !accepted.contains(**f)) {
                        problems.push(format!("[{shown}] `{f}` is described but is no key of the table"));
                    }
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_default_choice_and_required_key_shown_is_the_codes() {
    let mut problems = Vec::new();
    for s in benchgen::stages::sections() {
        if let Err(e) = s.parse_debug(s.example()) {
            problems.push(format!("[{}]: its EXAMPLE does not parse: {e}", s.name()));
            continue;
        }
        for k in s.keys().iter().filter(|k| k.kind == Kind::Value) {
            let at = format!("[{}] `{}`", s.name(), k.path);
            if let Err(e) = check_key(&s, k) {
                problems.push(format!("{at}: {e}"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The default, choices or requiredness shown for one key, checked against the code.
fn check_key(s: &SectionDecl, k: &Key) -> Result<(), String> {
    if k.ty.starts_with('"') {
        let shown: BTreeSet<String> = k.ty.split(" | ").map(|c| c.trim_matches('"').to_string()).collect();
        let outside = format!("\"{PROBE}\"");
        let refused = s
            .parse_debug(&edited(s, k, Some(outside.as_str())))
            .err()
            .ok_or("a value outside its choices is accepted: it has no fixed choices")?;
        let accepted: BTreeSet<String> = expected(&refused).ok_or(refused)?.into_iter().collect();
        if accepted != shown {
            return Err(format!("choices shown {shown:?}, serde accepts {accepted:?}"));
        }
    }
    let without = s.parse_debug(&edited(s, k, None));
    match k.absent {
        Absent::Is(default) => {
            let value = default.parse::<toml::Value>().map_err(|e| format!("default `{default}` is not TOML: {e}"))?;
            if !fits(k.ty, &value) {
                return Err(format!("default `{default}` is not of type `{}`", k.ty));
            }
            let without = without.map_err(|e| format!("the section does not parse without the key: {e}"))?;
            let with = s
                .parse_debug(&edited(s, k, Some(default)))
                .map_err(|e| format!("set to `{default}`, the section does not parse: {e}"))?;
            if with != without {
                return Err(format!("left out it is not `{default}`:\nleft out: {without}\nset:      {with}"));
            }
        }
        Absent::Required => match without {
            Err(e) if e.contains(&format!("missing field `{}`", k.name())) => {}
            other => return Err(format!("shown as required, but left out the section reads {other:?}")),
        },
        Absent::Unset | Absent::Derived(_) => {
            without.map_err(|e| format!("the section does not parse without the key: {e}"))?;
        }
    }
    Ok(())
}

/// Whether a default's TOML value is of the type shown.
fn fits(ty: &str, value: &toml::Value) -> bool {
    match value {
        toml::Value::String(_) => ty == "string" || ty == "path" || ty.starts_with('"'),
        toml::Value::Integer(_) => ty == "integer" || ty == "number",
        toml::Value::Float(_) => ty == "number",
        toml::Value::Boolean(_) => ty == "bool",
        toml::Value::Array(_) => ty.starts_with("list"),
        toml::Value::Table(_) => ty.starts_with("table"),
        toml::Value::Datetime(_) => false,
    }
}

/// The section's tables: its own (`""`) and every table and list of tables its keys name.
fn tables(keys: &[Key]) -> Vec<&'static str> {
    let mut out = vec![""];
    out.extend(keys.iter().filter(|k| k.kind != Kind::Value).map(|k| k.path));
    out
}

/// `(table, key)`: the table a row's key sits in and its name there. A `<name>` table is
/// one entry of the map its parent key holds (`roles.<role>` is the key `roles`).
fn field_of(k: &Key) -> (&'static str, &'static str) {
    if !k.name().starts_with('<') {
        return (k.parent(), k.name());
    }
    let map = k.parent();
    map.rsplit_once('.').unwrap_or(("", map))
}

/// The keys the table at `table` accepts, from serde's refusal of [`PROBE`] there.
fn accepted(s: &SectionDecl, table: &str) -> Result<BTreeSet<String>, String> {
    let path = if table.is_empty() { PROBE.to_string() } else { format!("{table}.{PROBE}") };
    match s.parse_debug(&edited_at(s, &path, Some("1"))) {
        Ok(_) => Err("a key no settings type has is accepted (no `deny_unknown_fields`?)".into()),
        Err(e) if e.contains(&format!("unknown field `{PROBE}`")) => {
            Ok(expected(&e).unwrap_or_default().into_iter().collect())
        }
        Err(e) => Err(e),
    }
}

/// The names a serde "unknown field" or "unknown variant" message lists as expected
/// (none when it says there are none).
fn expected(message: &str) -> Option<Vec<String>> {
    if message.contains("there are no fields") || message.contains("there are no variants") {
        return Some(Vec::new());
    }
    let (_, list) = message.split_once(", expected ")?;
    Some(list.split('`').skip(1).step_by(2).map(String::from).collect())
}

/// The section's EXAMPLE with `k` set to the TOML value `value`, or left out (`None`).
fn edited(s: &SectionDecl, k: &Key, value: Option<&str>) -> String {
    edited_at(s, k.path, value)
}

/// The section's EXAMPLE with the key at `path` (inside the section) set or left out.
fn edited_at(s: &SectionDecl, path: &str, value: Option<&str>) -> String {
    let mut doc: toml::Table = toml::from_str(s.example()).expect("EXAMPLE parses as TOML");
    let lists: Vec<&str> = s.keys().iter().filter(|k| k.kind == Kind::Tables).map(|k| k.path).collect();
    let mut segments: Vec<&str> = path.split('.').collect();
    let name = segments.pop().unwrap_or_default();
    let section = doc.entry(s.name()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
    let section = section.as_table_mut().expect("the section is a table in EXAMPLE");
    let table = table_at(section, "", &segments, &lists);
    match value {
        Some(v) => {
            let value = v.parse::<toml::Value>().unwrap_or_else(|e| panic!("`{v}` is not TOML: {e}"));
            table.insert(name.to_string(), value);
        }
        None => {
            table.remove(name);
        }
    }
    toml::to_string(&doc).expect("the edited EXAMPLE serialises")
}

/// The table at `rest` (path segments) under `t`, whose path is `done`, made when missing:
/// a `<name>` segment is the first entry there (or a new one), a list of tables (`lists`)
/// its first table (or a new one).
fn table_at<'a>(t: &'a mut toml::Table, done: &str, rest: &[&str], lists: &[&str]) -> &'a mut toml::Table {
    let Some((segment, rest)) = rest.split_first() else { return t };
    let here = if done.is_empty() { segment.to_string() } else { format!("{done}.{segment}") };
    let key = match t.keys().next() {
        Some(first) if segment.starts_with('<') => first.clone(),
        _ if segment.starts_with('<') => "probe".to_string(),
        _ => segment.to_string(),
    };
    let empty = || toml::Value::Table(toml::Table::new());
    let is_list = lists.contains(&here.as_str());
    let v = t.entry(key).or_insert_with(|| if is_list { toml::Value::Array(vec![empty()]) } else { empty() });
    if let Some(items) = v.as_array_mut()
        && items.is_empty()
    {
        items.push(empty());
    }
    let v = if v.is_array() { v.as_array_mut().and_then(|items| items.first_mut()).expect("one table") } else { v };
    let next = v.as_table_mut().unwrap_or_else(|| panic!("`{here}` is not a table in EXAMPLE"));
    table_at(next, &here, rest, lists)
}
