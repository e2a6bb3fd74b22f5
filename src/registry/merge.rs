//! `registry merge`: several sources' catalogs into one, the same server recognised across
//! sources, every field with its provenance, conflicts listed.
//!
//! Matching rules, in order (each pass only joins groups that share no source, so two
//! servers one source lists separately are never merged):
//! 1. **package**: the same `registry_type:identifier` (case-insensitive) — certain;
//! 2. **repository**: the same normalised repository URL, when the repository is unique
//!    within each source (a monorepo such as `modelcontextprotocol/servers` holds many
//!    servers, so there it also needs rule 3's name to agree) — certain;
//! 3. **name**: the same normalised name (last path segment, lower case, without the
//!    words `mcp`, `server`, `io`, `github`, `com`) — doubtful: merged unless both sides
//!    name different repositories, and listed in `review.csv` either way.
//!
//! Field values: the first source in priority order that has a non-empty value wins
//! (`priority`, default the order the snapshots are given); a field where sources
//! disagree is a conflict row. Tools: the union by name; where several sources list the
//! same tool, the most recently fetched source's definition wins, and that is recorded.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;
use serde_json::{Value, json};

use crate::model::{Catalog, FieldClaim, RegistryInfo, Server, Tool, tool_id};

/// One source's catalog, as imported.
pub struct SourceCatalog {
    pub source: String,
    pub catalog: Catalog,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Conflict {
    pub server: String,
    pub field: String,
    pub source: String,
    pub value: String,
    pub chosen: bool,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Review {
    /// `merged` or `kept-apart`.
    pub decision: String,
    pub rule: String,
    pub a: String,
    pub b: String,
    pub reason: String,
}

#[derive(Debug, Default, Serialize)]
pub struct MergeSummary {
    pub inputs: BTreeMap<String, usize>,
    pub servers: usize,
    pub tools: usize,
    pub merged_by: BTreeMap<String, usize>,
    pub conflicts: usize,
    pub review: usize,
}

pub struct Merged {
    pub catalog: Catalog,
    pub conflicts: Vec<Conflict>,
    pub review: Vec<Review>,
    pub summary: MergeSummary,
}

/// Repository URL reduced to `host/owner/repo[/subfolder]`.
pub fn normalise_repo(url: &str) -> Option<String> {
    let mut u = url.trim().to_lowercase();
    if u.is_empty() {
        return None;
    }
    if let Some(rest) = u.strip_prefix("git@") {
        u = rest.replacen(':', "/", 1);
    }
    for p in ["git+https://", "https://", "http://", "git://", "ssh://git@", "ssh://"] {
        if let Some(r) = u.strip_prefix(p) {
            u = r.to_string();
            break;
        }
    }
    let u = u.strip_prefix("www.").unwrap_or(&u).to_string();
    let mut parts: Vec<&str> = u.split(['/', '?', '#']).filter(|s| !s.is_empty()).collect();
    if parts.len() < 3 {
        return None;
    }
    let repo = parts[2].trim_end_matches(".git").to_string();
    let mut out = format!("{}/{}/{repo}", parts[0], parts[1]);
    // `…/tree/<branch>/<sub>` names a folder of a monorepo.
    if parts.len() > 5 && (parts[3] == "tree" || parts[3] == "blob") {
        parts.drain(..5);
        out.push('/');
        out.push_str(&parts.join("/"));
    }
    Some(out)
}

/// Name reduced for matching: last path segment, lower-case words without filler.
pub fn normalise_name(name: &str) -> String {
    const FILLER: &[&str] = &["mcp", "server", "io", "github", "com", "the"];
    let last = name.rsplit('/').next().unwrap_or(name);
    let words: Vec<String> = last
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .filter(|w| !FILLER.contains(&w.as_str()))
        .collect();
    if words.is_empty() { last.to_lowercase() } else { words.join("") }
}

struct Rec<'a> {
    source: usize,
    server: &'a Server,
    at: String,
}

struct Dsu {
    parent: Vec<usize>,
    sources: Vec<BTreeSet<usize>>,
}

impl Dsu {
    fn find(&mut self, x: usize) -> usize {
        let mut r = x;
        while self.parent[r] != r {
            r = self.parent[r];
        }
        let mut c = x;
        while self.parent[c] != r {
            let n = self.parent[c];
            self.parent[c] = r;
            c = n;
        }
        r
    }

    /// Join unless the groups share a source. Returns whether they were (or now are) one.
    fn union(&mut self, a: usize, b: usize) -> Result<bool, ()> {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra == rb {
            return Ok(false);
        }
        if !self.sources[ra].is_disjoint(&self.sources[rb]) {
            return Err(());
        }
        let (keep, gone) = if ra < rb { (ra, rb) } else { (rb, ra) };
        self.parent[gone] = keep;
        let moved = std::mem::take(&mut self.sources[gone]);
        self.sources[keep].extend(moved);
        Ok(true)
    }
}

fn label(r: &Rec, names: &[String]) -> String {
    let id = r.server.registry.as_ref().and_then(|i| i.sources.values().next()).map(|s| s.id.as_str()).unwrap_or("");
    format!("{}:{id} ({})", names[r.source], r.server.name)
}

/// Records joined into servers: the union-find, with the merges counted per rule and the
/// joins listed for review.
struct Grouping<'a> {
    recs: &'a [Rec<'a>],
    names: &'a [String],
    dsu: Dsu,
    review: Vec<Review>,
    merged_by: BTreeMap<String, usize>,
}

impl Grouping<'_> {
    /// Join records `a` and `b` by `rule`: a merge is counted (and listed when `doubtful`),
    /// a join that two servers of one source would refuse is listed as kept apart.
    fn join(&mut self, a: usize, b: usize, rule: &str, doubtful: bool) {
        let (recs, names) = (self.recs, self.names);
        match self.dsu.union(a, b) {
            Ok(true) => {
                *self.merged_by.entry(rule.to_string()).or_default() += 1;
                if doubtful {
                    self.review.push(Review {
                        decision: "merged".into(),
                        rule: rule.into(),
                        a: label(&recs[a], names),
                        b: label(&recs[b], names),
                        reason: "matched by normalised name only".into(),
                    });
                }
            }
            Ok(false) => {}
            Err(()) => self.review.push(Review {
                decision: "kept-apart".into(),
                rule: rule.into(),
                a: label(&recs[a], names),
                b: label(&recs[b], names),
                reason: "would join two servers that one source lists separately".into(),
            }),
        }
    }

    /// Pass 1: records that name the same package.
    fn by_packages(&mut self, infos: &[&RegistryInfo]) {
        let mut by_pkg: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (i, inf) in infos.iter().enumerate() {
            for p in &inf.packages {
                by_pkg.entry(format!("{}:{}", p.registry_type, p.identifier).to_lowercase()).or_default().push(i);
            }
        }
        for ids in by_pkg.values() {
            for w in ids.windows(2) {
                self.join(w[0], w[1], "package", false);
            }
        }
    }

    /// Pass 2: repositories (unique within each source, else the names must agree too).
    fn by_repositories(&mut self, repo_keys: &[Option<String>], name_keys: &[String]) {
        let recs = self.recs;
        let mut by_repo: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, k) in repo_keys.iter().enumerate() {
            if let Some(k) = k {
                by_repo.entry(k).or_default().push(i);
            }
        }
        for ids in by_repo.values() {
            let mut per_source: BTreeMap<usize, usize> = BTreeMap::new();
            for &i in ids {
                *per_source.entry(recs[i].source).or_default() += 1;
            }
            let monorepo = per_source.values().any(|&c| c > 1);
            for (x, &a) in ids.iter().enumerate() {
                for &b in &ids[x + 1..] {
                    if recs[a].source == recs[b].source || (monorepo && name_keys[a] != name_keys[b]) {
                        continue;
                    }
                    self.join(a, b, "repository", false);
                }
            }
        }
    }

    /// Pass 3: names (doubtful), unless both sides name different repositories.
    fn by_names(&mut self, repo_keys: &[Option<String>], name_keys: &[String]) {
        let (recs, names) = (self.recs, self.names);
        let mut by_name: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, k) in name_keys.iter().enumerate() {
            if !k.is_empty() {
                by_name.entry(k).or_default().push(i);
            }
        }
        for ids in by_name.values() {
            for (x, &a) in ids.iter().enumerate() {
                for &b in &ids[x + 1..] {
                    if recs[a].source == recs[b].source || self.dsu.find(a) == self.dsu.find(b) {
                        continue;
                    }
                    if let (Some(ra), Some(rb)) = (&repo_keys[a], &repo_keys[b])
                        && ra != rb
                    {
                        self.review.push(Review {
                            decision: "kept-apart".into(),
                            rule: "name".into(),
                            a: label(&recs[a], names),
                            b: label(&recs[b], names),
                            reason: format!("same normalised name but different repositories ({ra} vs {rb})"),
                        });
                        continue;
                    }
                    self.join(a, b, "name", true);
                }
            }
        }
    }
}

/// Merge catalogs; `inputs` in priority order (first wins a field).
pub fn merge(inputs: &[SourceCatalog]) -> Merged {
    let names: Vec<String> = inputs.iter().map(|i| i.source.clone()).collect();
    let mut recs: Vec<Rec> = Vec::new();
    for (si, input) in inputs.iter().enumerate() {
        for s in &input.catalog.servers {
            let at = s
                .registry
                .as_ref()
                .and_then(|r| r.sources.get(&input.source).or_else(|| r.sources.values().next()))
                .map(|r| r.fetched_at.clone())
                .unwrap_or_default();
            recs.push(Rec { source: si, server: s, at });
        }
    }
    let n = recs.len();
    let mut g = Grouping {
        recs: &recs,
        names: &names,
        dsu: Dsu { parent: (0..n).collect(), sources: recs.iter().map(|r| BTreeSet::from([r.source])).collect() },
        review: Vec::new(),
        merged_by: BTreeMap::new(),
    };

    let empty = RegistryInfo::default();
    let infos: Vec<&RegistryInfo> = recs.iter().map(|r| r.server.registry.as_deref().unwrap_or(&empty)).collect();
    let repo_keys: Vec<Option<String>> =
        infos.iter().map(|i| i.repository.as_deref().and_then(normalise_repo)).collect();
    let name_keys: Vec<String> = recs.iter().map(|r| normalise_name(&r.server.name)).collect();
    g.by_packages(&infos);
    g.by_repositories(&repo_keys, &name_keys);
    g.by_names(&repo_keys, &name_keys);
    let Grouping { mut dsu, mut review, merged_by, .. } = g;

    // Build one server per group.
    let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for i in 0..n {
        let r = dsu.find(i);
        groups.entry(r).or_default().push(i);
    }
    let mut conflicts = Vec::new();
    let mut servers = Vec::with_capacity(groups.len());
    for members in groups.values() {
        let mut m: Vec<usize> = members.clone();
        m.sort_by_key(|&i| recs[i].source);
        servers.push(build(&m, &recs, &infos, &names, &mut conflicts));
    }
    // Distinct groups may still carry the same display name.
    let mut count: HashMap<String, usize> = HashMap::new();
    for s in &servers {
        *count.entry(s.name.clone()).or_default() += 1;
    }
    for s in &mut servers {
        if count[&s.name] > 1 {
            let tag = s
                .registry
                .as_ref()
                .and_then(|r| r.sources.iter().next().map(|(k, v)| format!("{k}:{}", v.id)))
                .unwrap_or_default();
            s.name = format!("{} ({tag})", s.name);
            let name = s.name.clone();
            for t in &mut s.tools {
                t.id = tool_id(&name, &t.name);
            }
        }
    }
    let mut catalog = Catalog { servers };
    catalog.sort();
    conflicts.sort_by(|a, b| (&a.server, &a.field, &a.source).cmp(&(&b.server, &b.field, &b.source)));
    review.sort_by(|a, b| (&a.a, &a.b, &a.rule).cmp(&(&b.a, &b.b, &b.rule)));
    review.dedup();
    let summary = MergeSummary {
        inputs: inputs.iter().map(|i| (i.source.clone(), i.catalog.servers.len())).collect(),
        servers: catalog.servers.len(),
        tools: catalog.tool_count(),
        merged_by,
        conflicts: conflicts.len(),
        review: review.len(),
    };
    Merged { catalog, conflicts, review, summary }
}

fn display(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Choose the first non-empty claim (members are in priority order) and list conflicts.
#[allow(clippy::too_many_arguments)] // one private helper; a struct would only rename them
fn choose(
    field: &str,
    claims: Vec<(usize, Value)>,
    recs: &[Rec],
    names: &[String],
    prov: &mut BTreeMap<String, Vec<FieldClaim>>,
    conflicts: &mut Vec<Conflict>,
    server: &str,
    norm: &dyn Fn(&Value) -> String,
) -> Option<Value> {
    let claims: Vec<(usize, Value)> = claims.into_iter().filter(|(_, v)| !is_empty(v)).collect();
    let chosen = claims.first().map(|(_, v)| v.clone());
    let distinct: BTreeSet<String> = claims.iter().map(|(_, v)| norm(v)).collect();
    let mut out = Vec::new();
    for (k, (i, v)) in claims.iter().enumerate() {
        out.push(FieldClaim {
            source: names[recs[*i].source].clone(),
            at: recs[*i].at.clone(),
            value: v.clone(),
            chosen: k == 0,
        });
        if distinct.len() > 1 {
            conflicts.push(Conflict {
                server: server.to_string(),
                field: field.to_string(),
                source: names[recs[*i].source].clone(),
                value: crate::registry::pages::truncate(&display(v), 300),
                chosen: k == 0,
            });
        }
    }
    if !out.is_empty() {
        prov.insert(field.to_string(), out);
    }
    chosen
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.trim().is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

fn build(
    m: &[usize],
    recs: &[Rec],
    infos: &[&RegistryInfo],
    names: &[String],
    conflicts: &mut Vec<Conflict>,
) -> Server {
    let first = recs[m[0]].server;
    if m.len() == 1 {
        // Seen by one source only: nothing to choose between.
        return first.clone();
    }
    let server_name = first.name.clone();
    let mut prov = BTreeMap::new();
    let text = |v: &Value| display(v).trim().to_lowercase();
    let mut pick = |field: &str, f: &dyn Fn(usize) -> Value, norm: &dyn Fn(&Value) -> String| {
        let claims: Vec<(usize, Value)> = m.iter().map(|&i| (i, f(i))).collect();
        choose(field, claims, recs, names, &mut prov, conflicts, &server_name, norm)
    };
    let description = pick("description", &|i| json!(recs[i].server.description), &text);
    let url = pick("url", &|i| json!(recs[i].server.url), &text);
    let license = pick("license", &|i| json!(recs[i].server.license), &text);
    let repository = pick("repository", &|i| json!(infos[i].repository), &|v| {
        v.as_str().and_then(normalise_repo).unwrap_or_default()
    });
    let canon = |v: &Value| {
        let mut a: Vec<String> = v.as_array().map(|a| a.iter().map(|x| x.to_string()).collect()).unwrap_or_default();
        a.sort();
        a.join(",")
    };
    let packages = pick("packages", &|i| json!(infos[i].packages), &canon);
    let remotes = pick("remotes", &|i| json!(infos[i].remotes), &canon);

    let mut info = member_info(m, recs, infos, names);
    info.repository = repository.and_then(|v| v.as_str().map(str::to_string));
    info.packages = packages.and_then(|v| serde_json::from_value(v).ok()).unwrap_or_default();
    info.remotes = remotes.and_then(|v| serde_json::from_value(v).ok()).unwrap_or_default();

    // Tools: union by name, the most recently fetched source wins a tool listed twice.
    let with_tools: Vec<usize> = m.iter().copied().filter(|&i| infos[i].tools_from.is_some()).collect();
    let mut by_recency = with_tools.clone();
    by_recency.sort_by(|&a, &b| recs[b].at.cmp(&recs[a].at).then(recs[a].source.cmp(&recs[b].source)));
    let mut tools: BTreeMap<String, Tool> = BTreeMap::new();
    for &i in &by_recency {
        for t in &recs[i].server.tools {
            tools.entry(t.name.clone()).or_insert_with(|| t.clone());
        }
    }
    let tools: Vec<Tool> = tools
        .into_values()
        .map(|mut t| {
            t.id = tool_id(&server_name, &t.name);
            t
        })
        .collect();
    info.tools_from = match by_recency.as_slice() {
        [] => None,
        [only] => infos[*only].tools_from.clone(),
        many => Some(format!(
            "union of {}; most recent wins: {}",
            many.iter().map(|&i| infos[i].tools_from.clone().unwrap_or_default()).collect::<Vec<_>>().join(", "),
            names[recs[many[0]].source]
        )),
    };
    if by_recency.len() > 1 {
        tools_provenance(&by_recency, recs, names, &server_name, &mut prov, conflicts);
    }
    info.provenance = prov;
    // Categories are mapped afterwards, over the merged source categories.
    let categories = vec![];
    Server {
        name: server_name,
        description: description.map(|v| display(&v)).unwrap_or_default(),
        summary: first.summary.clone(),
        url: url.map(|v| display(&v)).unwrap_or_default(),
        categories,
        license: license.and_then(|v| v.as_str().map(str::to_string)),
        tools,
        registry: Some(Box::new(info)),
    }
}

/// The registry record of a merged server before its chosen fields: every member's
/// sources and extra fields (the first member's wins), its categories tagged with the source.
fn member_info(m: &[usize], recs: &[Rec], infos: &[&RegistryInfo], names: &[String]) -> RegistryInfo {
    let mut info = RegistryInfo::default();
    for &i in m {
        for (k, v) in &infos[i].sources {
            info.sources.insert(k.clone(), v.clone());
        }
        for c in &infos[i].source_categories {
            let tagged = format!("{}:{c}", names[recs[i].source]);
            if !info.source_categories.contains(&tagged) {
                info.source_categories.push(tagged);
            }
        }
        for (k, v) in &infos[i].extra {
            info.extra.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    info
}

/// The provenance of a merged server's tool list (each source's tool names, most recent
/// first, which wins) and a conflict row per source when the lists differ.
fn tools_provenance(
    by_recency: &[usize],
    recs: &[Rec],
    names: &[String],
    server_name: &str,
    prov: &mut BTreeMap<String, Vec<FieldClaim>>,
    conflicts: &mut Vec<Conflict>,
) {
    let sets: Vec<BTreeSet<&str>> =
        by_recency.iter().map(|&i| recs[i].server.tools.iter().map(|t| t.name.as_str()).collect()).collect();
    let differ = sets.windows(2).any(|w| w[0] != w[1]);
    let mut claims = Vec::new();
    for (k, &i) in by_recency.iter().enumerate() {
        let names_v: Vec<&str> = sets[k].iter().copied().collect();
        claims.push(FieldClaim {
            source: names[recs[i].source].clone(),
            at: recs[i].at.clone(),
            value: json!(names_v),
            chosen: k == 0,
        });
        if differ {
            conflicts.push(Conflict {
                server: server_name.to_string(),
                field: "tools".into(),
                source: names[recs[i].source].clone(),
                value: names_v.join(" "),
                chosen: k == 0,
            });
        }
    }
    prov.insert("tools".into(), claims);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repositories_normalise() {
        for u in [
            "https://github.com/Acme/Weather.git",
            "git@github.com:acme/weather",
            "http://www.github.com/acme/weather/",
        ] {
            assert_eq!(normalise_repo(u).as_deref(), Some("github.com/acme/weather"), "{u}");
        }
        assert_eq!(
            normalise_repo("https://github.com/mcp/servers/tree/main/src/time").as_deref(),
            Some("github.com/mcp/servers/src/time")
        );
        assert_eq!(normalise_repo("not a url"), None);
    }

    #[test]
    fn names_normalise() {
        assert_eq!(normalise_name("io.github.acme/weather-mcp"), "weather");
        assert_eq!(normalise_name("Weather MCP Server"), "weather");
        assert_eq!(normalise_name("@acme/weather"), "weather");
        assert_eq!(normalise_name("mcp"), "mcp");
    }
}
