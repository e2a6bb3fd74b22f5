//! The import graph of `src/`, read from the source text: no loop between top-level
//! modules, and no strongly connected set of more than three files. A loop through
//! every family (as `settings.rs` naming each family's settings type made) means any
//! change recompiles and re-reasons everything; this test keeps one from coming back.
//!
//! A reference is a `crate::a::b` or `super::x` path (also inside `use crate::{…}`
//! groups); comments and string literals are left out. Test code counts like any other
//! (issue 41: `stage.rs`'s own tests named `stages::all()`, a loop through every family
//! this check did not see): a file's inline `mod tests { … }` is read with the file (a
//! `super::` inside it names the file's own module first), one declared
//! `#[cfg(test)] mod x;` (or named `tests.rs`) is read where its place under `src/` puts
//! it, one declared `#[path = "f.rs"] mod x;` as module `x` of the declaring module, so
//! either is part of the declaring module's family. (Issue 41: the typed-call registry, a
//! test-only file of `llm` naming every family's answers, tied every family into one loop
//! this check did not see.) A file at the crate root (`settings.rs`, `stage.rs`, the
//! test-only `typed_calls.rs` and this file) is a top-level module of its own: it is in a
//! loop only when a module it imports imports it back, so a test-only root file that names
//! every family, imported by none, closes none. A path names the deepest module file it
//! reaches (`crate::efs::pairs::X` is `src/efs/pairs.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use petgraph::graph::{DiGraph, NodeIndex};

#[path = "../tests/it/support/source_text.rs"]
mod source_text;

/// Module path (`["efs", "pairs"]`, `[]` for the crate root) → file, for every file under
/// `src/` (test-only files too) but the binary's `main.rs`, by its place under `src/`.
fn module_files(src: &Path) -> BTreeMap<Vec<String>, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let rel = p.strip_prefix(src).unwrap();
            let mut parts: Vec<String> =
                rel.iter().map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string()).collect();
            match parts.last().map(String::as_str) {
                Some("main") if parts.len() == 1 => continue, // the binary: a crate of its own
                Some("lib") if parts.len() == 1 => parts.clear(),
                Some("mod") => {
                    parts.pop();
                }
                _ => {}
            }
            out.insert(parts, p);
        }
    }
    out
}

/// `files` with each file declared `#[path = "f.rs"] mod x;` (the path relative to the
/// declaring file's folder) moved to module `x` of the declaring module, in its family,
/// wherever it lies under `src/`. Paths outside `src/` (the shared test helpers) are not read.
fn with_path_attributes(mut files: BTreeMap<Vec<String>, PathBuf>) -> BTreeMap<Vec<String>, PathBuf> {
    let by_file: BTreeMap<PathBuf, Vec<String>> =
        files.iter().filter_map(|(m, p)| Some((p.canonicalize().ok()?, m.clone()))).collect();
    let mut moves: Vec<(Vec<String>, Vec<String>)> = Vec::new();
    for (module, path) in &files {
        let text = std::fs::read_to_string(path).unwrap();
        // Found in the blanked text (not in comments or strings), the file name read from
        // the source text at the same place (the blanking keeps every byte's position).
        let code = strip_comments_and_strings(&text);
        for (at, _) in code.match_indices("#[path") {
            let Some(file) = text[at..].split('"').nth(1) else { continue };
            let Some(close) = code[at..].find(']') else { continue };
            let after = &code[at + close + 1..];
            let Some(semi) = after.find(';') else { continue };
            let decl = &after[..semi];
            if decl.contains('{') {
                continue; // an inline module: a folder for its children, not a file
            }
            let words: Vec<&str> = decl.split_whitespace().collect();
            let Some(k) = words.iter().position(|w| *w == "mod") else { continue };
            let Some(&name) = words.get(k + 1) else { continue };
            let Some(dir) = path.parent() else { continue };
            let Ok(target) = dir.join(file).canonicalize() else { continue };
            if let Some(old) = by_file.get(&target) {
                let mut new = module.clone();
                new.push(name.to_string());
                moves.push((old.clone(), new));
            }
        }
    }
    for (old, new) in moves {
        if let Some(p) = files.remove(&old) {
            files.insert(new, p);
        }
    }
    files
}

/// The text with comments and string/char literals blanked (same length, same lines): the
/// blanker `tests/it/function_length.rs` uses too.
fn strip_comments_and_strings(text: &str) -> String {
    String::from_utf8(source_text::code_only(text)).unwrap_or_default()
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The index just past the brace that closes the one at `open` (the text's end if none).
fn block_end(code: &str, open: usize) -> usize {
    let mut depth = 0;
    for (k, c) in code[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return open + k + 1;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// The byte ranges of the inline modules' bodies (`mod tests { … }`): a `super::` inside
/// one names the file's own module first, not its parent.
fn inline_modules(code: &str) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    for (at, _) in code.match_indices("mod ") {
        if code[..at].chars().next_back().is_some_and(is_ident) {
            continue;
        }
        let rest = code[at + "mod ".len()..].trim_start();
        let name = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
        let body = rest[name..].trim_start();
        if name > 0 && body.starts_with('{') {
            let open = code.len() - body.len();
            out.push(open..block_end(code, open));
        }
    }
    out
}

/// The paths a file refers to, each as module segments from the crate root, with the
/// line it is on.
fn references(code: &str, module: &[String]) -> Vec<(Vec<String>, usize)> {
    let mut refs = Vec::new();
    let inline = inline_modules(code);
    let chars: Vec<(usize, char)> = code.char_indices().collect();
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut i = 0;
    while i < chars.len() {
        let (at, _) = chars[i];
        let rest = &code[at..];
        let before_ok = i == 0 || !is_ident(chars[i - 1].1);
        let start: Option<(Vec<String>, usize)> = if !before_ok {
            None
        } else if rest.starts_with("crate::") {
            Some((Vec::new(), "crate::".len()))
        } else if rest.starts_with("super::") {
            let (mut len, mut levels) = (0, 0);
            while code[at + len..].starts_with("super::") {
                len += "super::".len();
                levels += 1;
            }
            // Each inline module around the path takes one `super::` before the file's does.
            let inside = inline.iter().filter(|r| r.contains(&at)).count();
            let mut base = module.to_vec();
            for _ in inside..levels {
                base.pop();
            }
            Some((base, len))
        } else {
            None
        };
        let Some((base, len)) = start else {
            i += 1;
            continue;
        };
        let after = &code[at + len..];
        for path in expand(after) {
            let mut full = base.clone();
            full.extend(path);
            refs.push((full, line_of(at)));
        }
        // Skip what was read (a `super::super::` is one reference).
        while i < chars.len() && chars[i].0 < at + len {
            i += 1;
        }
    }
    refs
}

/// The paths after `crate::` (`a::b::C`, or each entry of a `{…}` group, nested).
fn expand(after: &str) -> Vec<Vec<String>> {
    let after = after.trim_start();
    if let Some(group) = after.strip_prefix('{') {
        let mut depth = 1;
        let mut end = group.len();
        for (k, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = k;
                        break;
                    }
                }
                _ => {}
            }
        }
        let inner = &group[..end];
        let mut parts = Vec::new();
        let (mut depth, mut last) = (0, 0);
        for (k, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&inner[last..k]);
                    last = k + 1;
                }
                _ => {}
            }
        }
        parts.push(&inner[last..]);
        return parts.into_iter().filter(|p| !p.trim().is_empty()).flat_map(expand).collect();
    }
    let mut segs = Vec::new();
    let mut rest = after;
    loop {
        let word: String = rest.chars().take_while(|c| is_ident(*c)).collect();
        if word.is_empty() {
            if rest.starts_with('{') {
                return expand(rest).into_iter().map(|p| segs.iter().cloned().chain(p).collect()).collect();
            }
            break;
        }
        rest = &rest[word.len()..];
        if word == "self" {
            break;
        }
        segs.push(word);
        match rest.strip_prefix("::") {
            Some(r) => rest = r.trim_start(),
            None => break,
        }
    }
    vec![segs]
}

/// The deepest module file a path reaches.
fn resolve<'a>(path: &[String], files: &'a BTreeMap<Vec<String>, PathBuf>) -> Option<&'a Vec<String>> {
    (0..=path.len()).rev().find_map(|n| files.get_key_value(&path[..n]).map(|(k, _)| k))
}

struct Graph {
    files: DiGraph<Vec<String>, ()>,
    /// file → file: the first reference that makes the edge (for messages).
    why: BTreeMap<(Vec<String>, Vec<String>), String>,
}

fn build(src: &Path) -> Graph {
    let files = with_path_attributes(module_files(src));
    let mut code = BTreeMap::new();
    for (module, path) in &files {
        let text = std::fs::read_to_string(path).unwrap();
        code.insert(module.clone(), strip_comments_and_strings(&text));
    }
    let mut g = Graph { files: DiGraph::new(), why: BTreeMap::new() };
    let mut nodes: BTreeMap<Vec<String>, NodeIndex> = BTreeMap::new();
    for m in files.keys() {
        nodes.insert(m.clone(), g.files.add_node(m.clone()));
    }
    for (module, text) in &code {
        let Some(&from) = nodes.get(module) else { continue };
        if module.is_empty() {
            continue; // `lib.rs` only declares the modules
        }
        for (path, line) in references(text, module) {
            let Some(target) = resolve(&path, &files) else { continue };
            let Some(&to) = nodes.get(target) else { continue };
            if to == from || target.is_empty() {
                continue;
            }
            if g.files.find_edge(from, to).is_none() {
                g.files.add_edge(from, to, ());
                let file = files[module].strip_prefix(src).unwrap_or(&files[module]);
                let shown = format!("src/{}:{line} `crate::{}`", file.display(), path.join("::"));
                g.why.insert((module.clone(), target.clone()), shown);
            }
        }
    }
    g
}

fn name(m: &[String]) -> String {
    if m.is_empty() { "crate".into() } else { m.join("::") }
}

/// One loop through `members` (a strongly connected set), as `a -> b -> … -> a`, each
/// step with the reference that makes it.
fn one_cycle<N: Ord + Clone>(edges: &BTreeMap<N, BTreeSet<N>>, members: &BTreeSet<N>, start: &N) -> Vec<N> {
    // Breadth-first from `start` back to it, inside the set.
    let mut prev: BTreeMap<N, N> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start.clone()]);
    while let Some(n) = queue.pop_front() {
        for m in edges.get(&n).into_iter().flatten().filter(|m| members.contains(*m)) {
            if m == start {
                let mut path = vec![n.clone()];
                let mut cur = n.clone();
                while let Some(p) = prev.get(&cur) {
                    path.push(p.clone());
                    cur = p.clone();
                }
                path.reverse();
                path.push(start.clone());
                return path;
            }
            if !prev.contains_key(m) && m != start {
                prev.insert(m.clone(), n.clone());
                queue.push_back(m.clone());
            }
        }
    }
    vec![start.clone()]
}

/// The problems of the graph: loops between top-level modules, and file sets over three.
fn problems(g: &Graph) -> Vec<String> {
    let mut out = Vec::new();
    // Top-level modules: the first segment (the crate root has no edges kept).
    let top = |m: &Vec<String>| m[0].clone();
    let mut top_edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut top_why: BTreeMap<(String, String), String> = BTreeMap::new();
    for e in g.files.raw_edges() {
        let (a, b) = (&g.files[e.source()], &g.files[e.target()]);
        let (ta, tb) = (top(a), top(b));
        if ta != tb {
            top_edges.entry(ta.clone()).or_default().insert(tb.clone());
            top_why.entry((ta, tb)).or_insert_with(|| g.why[&(a.clone(), b.clone())].clone());
        }
    }
    let mut tg: DiGraph<String, ()> = DiGraph::new();
    let mut idx = BTreeMap::new();
    for (a, bs) in &top_edges {
        for n in std::iter::once(a).chain(bs) {
            idx.entry(n.clone()).or_insert_with(|| tg.add_node(n.clone()));
        }
    }
    for (a, bs) in &top_edges {
        for b in bs {
            tg.add_edge(idx[a], idx[b], ());
        }
    }
    for scc in petgraph::algo::tarjan_scc(&tg) {
        if scc.len() < 2 {
            continue;
        }
        let members: BTreeSet<String> = scc.iter().map(|n| tg[*n].clone()).collect();
        let start = members.iter().next().unwrap().clone();
        let cycle = one_cycle(&top_edges, &members, &start);
        let steps: Vec<String> = cycle
            .windows(2)
            .map(|w| format!("    {} -> {} ({})", w[0], w[1], top_why[&(w[0].clone(), w[1].clone())]))
            .collect();
        // Every edge inside the set, so each loop can be found and broken.
        let inside: Vec<String> = top_why
            .iter()
            .filter(|((a, b), _)| members.contains(a) && members.contains(b))
            .map(|((a, b), why)| format!("    {a} -> {b} ({why})"))
            .collect();
        out.push(format!(
            "import loop between top-level modules {{{}}}, e.g.:\n{}\n  its edges:\n{}",
            members.iter().cloned().collect::<Vec<_>>().join(", "),
            steps.join("\n"),
            inside.join("\n")
        ));
    }
    let file_edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> =
        g.files.raw_edges().iter().fold(BTreeMap::new(), |mut m, e| {
            m.entry(g.files[e.source()].clone()).or_default().insert(g.files[e.target()].clone());
            m
        });
    for scc in petgraph::algo::tarjan_scc(&g.files) {
        if scc.len() <= 3 {
            continue;
        }
        let members: BTreeSet<Vec<String>> = scc.iter().map(|n| g.files[*n].clone()).collect();
        let start = members.iter().next().unwrap().clone();
        let cycle = one_cycle(&file_edges, &members, &start);
        let steps: Vec<String> = cycle
            .windows(2)
            .map(|w| format!("    {} -> {} ({})", name(&w[0]), name(&w[1]), g.why[&(w[0].clone(), w[1].clone())]))
            .collect();
        out.push(format!(
            "{} files import each other in a loop ({}), e.g.:\n{}",
            members.len(),
            members.iter().map(|m| name(m)).collect::<Vec<_>>().join(", "),
            steps.join("\n")
        ));
    }
    out
}

#[test]
fn no_import_loop_between_top_level_modules() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let g = build(&src);
    assert!(g.files.node_count() > 50, "the source files were not found under {}", src.display());
    let problems = problems(&g);
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

#[test]
fn the_reader_finds_paths_groups_and_super_in_code_and_tests_and_skips_comments_and_strings() {
    let text = r#"
use crate::{a::{B, c::D}, e};
use super::f::G;
// crate::commented::Out
fn x() { let _ = "crate::quoted::Out"; crate::h::i(); }
#[cfg(test)]
mod tests {
    use super::K;
    use crate::test_only::X;
}
#[cfg(test)]
mod helpers;
"#;
    let code = strip_comments_and_strings(text);
    let refs: Vec<String> =
        references(&code, &["m".to_string(), "n".to_string()]).into_iter().map(|(p, _)| p.join("::")).collect();
    // Inside `mod tests`, `super::K` is the `K` of the file's own module `m::n`.
    assert_eq!(refs, ["a::B", "a::c::D", "e", "m::f::G", "h::i", "m::n::K", "test_only::X"]);
}

#[test]
fn an_inline_test_module_counts_in_its_file() {
    // Issue 41: `stage.rs`'s own tests named `stages::all()`, a loop through every family.
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::write(src.join("lib.rs"), "pub mod a;\npub mod b;\n").unwrap();
    std::fs::write(src.join("a.rs"), "pub struct X;\n#[cfg(test)]\nmod tests {\n    use crate::b::Y;\n}\n").unwrap();
    std::fs::write(src.join("b.rs"), "pub struct Y;\nfn f() { let _ = crate::a::X; }\n").unwrap();
    let p = problems(&build(src));
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(p[0].starts_with("import loop between top-level modules {a, b}"), "{}", p[0]);
    assert!(p[0].contains("a -> b (src/a.rs:4 `crate::b::Y`)"), "{}", p[0]);
}

#[test]
fn a_loop_is_named_with_the_references_that_make_it() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::write(src.join("lib.rs"), "pub mod a;\npub mod b;\npub mod c;\n").unwrap();
    std::fs::write(src.join("a.rs"), "use crate::b::X;\n").unwrap();
    std::fs::write(src.join("b.rs"), "pub struct X;\nfn f() { crate::c::g(); }\n").unwrap();
    std::fs::write(src.join("c.rs"), "pub fn g() { let _ = crate::a::Y; }\n").unwrap();
    let p = problems(&build(src));
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(p[0].starts_with("import loop between top-level modules {a, b, c}"), "{}", p[0]);
    assert!(p[0].contains("a -> b (src/a.rs:1 `crate::b::X`)"), "{}", p[0]);
    assert!(p[0].contains("c -> a ("), "{}", p[0]);
}

#[test]
fn a_test_only_file_counts_in_the_family_that_declares_it() {
    // Issue 41: a test-only file of `a` (declared `#[cfg(test)] mod x;`, or by `#[path]`
    // from anywhere under `src/`) that imports `b`, which imports `a`, is a loop.
    let decls = [
        ("#[cfg(test)]\nmod checks;\n", "a/checks.rs"),
        ("#[cfg(test)]\n#[path = \"a_sites.rs\"]\npub mod sites;\n", "a_sites.rs"),
    ];
    for (decl, file) in decls {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path();
        std::fs::create_dir(src.join("a")).unwrap();
        std::fs::write(src.join("lib.rs"), "pub mod a;\npub mod b;\n").unwrap();
        std::fs::write(src.join("a.rs"), format!("pub struct X;\n{decl}")).unwrap();
        std::fs::write(src.join(file), "use super::X;\nuse crate::b::Y;\n").unwrap();
        std::fs::write(src.join("b.rs"), "pub struct Y;\nfn f() { let _ = crate::a::X; }\n").unwrap();
        let p = problems(&build(src));
        assert_eq!(p.len(), 1, "{file}: {p:?}");
        assert!(p[0].starts_with("import loop between top-level modules {a, b}"), "{file}: {}", p[0]);
        assert!(p[0].contains(&format!("a -> b (src/{file}:2 `crate::b::Y`)")), "{file}: {}", p[0]);
    }
}

#[test]
fn a_test_only_root_file_that_names_every_family_closes_no_loop() {
    // Like `typed_calls.rs`: at the crate root, in no family, imported by none.
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::write(src.join("lib.rs"), "pub mod a;\npub mod b;\n#[cfg(test)]\nmod registry;\n").unwrap();
    std::fs::write(src.join("a.rs"), "pub struct X;\n").unwrap();
    std::fs::write(src.join("b.rs"), "pub struct Y;\nfn f() { let _ = crate::a::X; }\n").unwrap();
    std::fs::write(src.join("registry.rs"), "use crate::{a, b};\nfn all() { let _ = (a::X, b::Y); }\n").unwrap();
    let g = build(src);
    // Read (its two edges are there), and no problem.
    assert_eq!(g.files.edge_count(), 3, "{:?}", g.why);
    let p = problems(&g);
    assert!(p.is_empty(), "{p:?}");
}
