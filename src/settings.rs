//! The pipeline config (`pipeline/NAME.toml`), parsed once and checked up front.
//!
//! Paths inside a config are relative to the project root, which is the folder
//! `project.root` names relative to the config file (default `..`, the folder
//! above `pipeline/`). Every section is `deny_unknown_fields`, so a typo is an
//! error naming the file, line and key instead of a silently ignored setting.

use std::any::Any;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::config_doc::{Key, SectionDoc};
use crate::error::{InputError, Problem};

pub const DEFAULT_CONFIG: &str = "pipeline/demo.toml";

/// The config a command uses when none is named (`--config`, `BENCHGEN_CONFIG`):
/// `pipeline/demo.toml` when it exists (benchgen's own repository), else the one
/// `pipeline/*.toml` of the project in the working folder (as `benchgen init` writes it).
/// `None` when there is none; several are an error naming them.
pub fn discover_config() -> Result<Option<PathBuf>> {
    let default = PathBuf::from(DEFAULT_CONFIG);
    if default.exists() {
        return Ok(Some(default));
    }
    let Ok(rd) = std::fs::read_dir("pipeline") else { return Ok(None) };
    let mut found: Vec<PathBuf> =
        rd.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "toml")).collect();
    found.sort();
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => Err(crate::error::hinted(
            format!(
                "`pipeline/` holds {} configs ({}): which one?",
                found.len(),
                found.iter().map(|p| format!("`{}`", p.display())).collect::<Vec<_>>().join(", ")
            ),
            "pass `--config pipeline/NAME.toml` or set BENCHGEN_CONFIG",
        )),
    }
}

/// A top-level config section, declared by the family that owns it next to its settings
/// type and read with [`Settings::section`]. `settings.rs` names no family: the list of
/// sections is handed to [`Settings::read`] by the stage list (`stages::sections`).
pub trait Section: DeserializeOwned + Serialize + std::fmt::Debug + Send + Sync + 'static {
    /// Its table name (`[levels]`).
    const NAME: &'static str;
    /// What [`Settings::section`] gives: `Option<Self>` for a section whose absence turns
    /// its family's stages off, [`Always<Self>`] for one read with its defaults when absent.
    type Value: SectionValue<Self>;
    /// Every key of the section and of its tables, for `benchgen config reference` (the
    /// reference in `docs/config.md`). Empty: not described yet, which
    /// `tests/it/config_doc.rs` allows only for the sections it names.
    const KEYS: &'static [Key] = &[];
    /// A config holding this section with its required keys and an entry for each `<name>`
    /// table and list of tables of [`Self::KEYS`] whose keys have defaults: the tests parse
    /// it with and without each key to check that the default shown is the one the code gives.
    const EXAMPLE: &'static str = "";
    /// Range and cross-section checks of its values, run at load with every other section's
    /// (all problems are reported at once).
    fn check(_value: &Self::Value, _settings: &Settings, _problems: &mut Vec<Problem>) {}
}

/// How a section reads when its table is absent.
pub trait SectionValue<T>: Send + Sync + 'static {
    fn from_parsed(parsed: Option<T>) -> Self;
    /// Whether the stages it configures are part of `run` by default.
    fn is_on(&self) -> bool;
}

impl<T: Send + Sync + 'static> SectionValue<T> for Option<T> {
    fn from_parsed(parsed: Option<T>) -> Self {
        parsed
    }
    fn is_on(&self) -> bool {
        self.is_some()
    }
}

/// An always-present section: its defaults when the table is absent. Derefs to the
/// settings; serialises as them (so a section's hash is the settings' own).
#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct Always<T>(pub T);

impl<T: Default + Send + Sync + 'static> SectionValue<T> for Always<T> {
    fn from_parsed(parsed: Option<T>) -> Self {
        Always(parsed.unwrap_or_default())
    }
    fn is_on(&self) -> bool {
        true
    }
}

impl<T> std::ops::Deref for Always<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

type Parsed = Arc<dyn Any + Send + Sync>;

/// One section of the stage list's [`Settings::read`] list, its type erased.
pub struct SectionDecl {
    name: &'static str,
    parse: fn(&str) -> Result<(Parsed, bool), toml::de::Error>,
    check: fn(&Settings, &mut Vec<Problem>),
    keys: &'static [Key],
    example: &'static str,
    always: fn() -> bool,
    debug: fn(&str) -> std::result::Result<String, String>,
}

impl SectionDecl {
    pub fn of<T: Section>() -> Self {
        Self {
            name: T::NAME,
            parse: parse_section::<T>,
            check: check_section::<T>,
            keys: T::KEYS,
            example: T::EXAMPLE,
            always: always_on::<T>,
            debug: debug_section::<T>,
        }
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Its [`Section::KEYS`].
    pub fn keys(&self) -> &'static [Key] {
        self.keys
    }

    /// Its [`Section::EXAMPLE`].
    pub fn example(&self) -> &'static str {
        self.example
    }

    /// The section as `benchgen config reference` shows it.
    pub fn doc(&self) -> SectionDoc {
        SectionDoc { name: self.name, always: (self.always)(), keys: self.keys }
    }

    /// The section as read from the config `text`, in `Debug` form (every field, those no
    /// hash takes too), or toml's message: the tests compare a key left out with its
    /// documented default by it, and read a table's keys from its unknown-field message.
    pub fn parse_debug(&self, text: &str) -> std::result::Result<String, String> {
        (self.debug)(text)
    }
}

/// Whether the section's stages are part of `run` when its table is absent.
fn always_on<T: Section>() -> bool {
    T::Value::from_parsed(None).is_on()
}

fn debug_section<T: Section>(text: &str) -> std::result::Result<String, String> {
    let only: Only<T> = toml::from_str(text).map_err(|e| e.message().to_string())?;
    Ok(format!("{:?}", only.0))
}

fn parse_section<T: Section>(text: &str) -> Result<(Parsed, bool), toml::de::Error> {
    let only: Only<T> = toml::from_str(text)?;
    let value = T::Value::from_parsed(only.0);
    let on = value.is_on();
    Ok((Arc::new(value), on))
}

fn check_section<T: Section>(settings: &Settings, problems: &mut Vec<Problem>) {
    T::check(settings.section::<T>(), settings, problems);
}

/// The whole document read as one section: the entry named `T::NAME` is deserialised as
/// `T` and every other one skipped. Reading the document text (not a sub-table) keeps toml's
/// spans, so an unknown key or a bad value is reported at its line in the file, as when one
/// struct held every section.
struct Only<T>(Option<T>);

impl<'de, T: Section> Deserialize<'de> for Only<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Section> serde::de::Visitor<'de> for V<T> {
            type Value = Only<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a pipeline config")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> std::result::Result<Only<T>, A::Error> {
                let mut found = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key == T::NAME {
                        found = Some(map.next_value::<T>()?);
                    } else {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
                Ok(Only(found))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// The document's top-level names checked against the known sections, refused as serde's
/// `deny_unknown_fields` refuses them (same message, same span: the key's).
struct KnownSections(&'static [&'static str]);

impl<'de> serde::de::DeserializeSeed<'de> for KnownSections {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        struct V(&'static [&'static str]);
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = ();
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a pipeline config")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
                while map.next_key_seed(KnownKey(self.0))?.is_some() {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
                Ok(())
            }
        }
        d.deserialize_map(V(self.0))
    }
}

struct KnownKey(&'static [&'static str]);

impl<'de> serde::de::DeserializeSeed<'de> for KnownKey {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        struct V(&'static [&'static str]);
        impl serde::de::Visitor<'_> for V {
            type Value = ();
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a section name")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<(), E> {
                if self.0.contains(&v) { Ok(()) } else { Err(E::unknown_field(v, self.0)) }
            }
        }
        d.deserialize_identifier(V(self.0))
    }
}

/// `[project]`, the one section `settings.rs` owns.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectSettings {
    /// A short name for this pipeline (shown in status and reports).
    #[serde(default = "default_name")]
    pub name: String,
    /// Project root relative to the config file's folder.
    #[serde(default = "default_root")]
    pub root: PathBuf,
    /// Artifacts folder relative to the project root.
    #[serde(default = "default_artifacts")]
    pub artifacts: PathBuf,
    /// Seed every random choice derives from.
    #[serde(default)]
    pub seed: u64,
}

impl Default for ProjectSettings {
    fn default() -> Self {
        Self { name: default_name(), root: default_root(), artifacts: default_artifacts(), seed: 0 }
    }
}

impl Section for ProjectSettings {
    const NAME: &'static str = "project";
    type Value = Always<Self>;
    const KEYS: &'static [Key] = &[
        Key::new("name", "string", r#""benchgen""#, "A short name for this pipeline, shown in status and reports."),
        Key::new("root", "path", r#""..""#, "The project root, relative to the config file's folder."),
        Key::new("artifacts", "path", r#""artifacts""#, "The artifacts folder, relative to the project root."),
        Key::new("seed", "integer", "0", "The seed every random choice derives from."),
    ];
}

fn default_name() -> String {
    "benchgen".into()
}
fn default_root() -> PathBuf {
    PathBuf::from("..")
}
fn default_artifacts() -> PathBuf {
    PathBuf::from("artifacts")
}

/// A loaded config and where it came from.
#[derive(Debug, Clone)]
pub struct Settings {
    pub project: ProjectSettings,
    /// The config file's text and its parsed table, as read.
    pub raw: Arc<RawConfig>,
    /// Every section of the list it was read with, parsed once at load (by name).
    sections: Arc<BTreeMap<&'static str, (Parsed, bool)>>,
    pub config_path: PathBuf,
    pub root: PathBuf,
    pub artifacts: PathBuf,
    /// How LLM calls use the ledger cache (`--llm-mode`; not part of any config hash).
    pub llm_mode: LlmMode,
    /// `--batch`: every role whose provider is not `local` runs as `mode = "batch"` (a load
    /// knob, in no config hash).
    pub llm_batch: bool,
    /// How the runner hashes the roles and prompt templates a stage names.
    pub hashes: NameHashes,
    /// Every stage's name in pipeline order (set at load by the stage list, so a stage that
    /// orders its report by stage, as `release`'s lineage does, needs not import the list).
    pub stage_order: Vec<&'static str>,
}

/// How LLM calls use the ledger cache (global `--llm-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LlmMode {
    /// Always call the endpoint; record the exchange, which becomes the cached answer.
    Live,
    /// Answer repeats from the ledger with no network; call the endpoint on a miss.
    #[default]
    Cached,
    /// Answer only from the ledger; a miss is an error naming the request hash.
    Replay,
}

/// How the runner hashes what a stage names outside its own section (LLM roles, prompt
/// templates), for its config hash and manifest. Handed in at load by the stage list, so
/// the runner (`stage.rs`) does not call into `llm`, which itself runs inside stages.
#[derive(Debug, Clone, Copy)]
pub struct NameHashes {
    /// Hash of the answer-changing settings of an LLM role.
    pub role: fn(&Settings, &str) -> Result<String>,
    /// A prompt template: how manifests name it and its text's hash, or why it cannot be read.
    pub prompt: PromptHash,
}

/// [`NameHashes::prompt`]: `(shown, hash)` of a template, or why it cannot be read.
pub type PromptHash = fn(&Settings, &str) -> std::result::Result<(String, String), String>;

/// The config file as read, before any section is interpreted.
#[derive(Debug, Default)]
pub struct RawConfig {
    pub text: String,
    pub table: toml::Table,
}

impl std::fmt::Debug for SectionDecl {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "[{}]", self.name)
    }
}

impl Settings {
    /// Read a pipeline config whose sections are `sections` (all of them, in the order an
    /// unknown section's message lists them; `names` is that list). Every section is parsed
    /// once here; then each section's checks run and every problem is reported at once.
    /// `Settings::load` (in `stages.rs`, which knows the families) passes the stage list's.
    pub fn read(
        path: &Path,
        names: &'static [&'static str],
        sections: &[SectionDecl],
        hashes: NameHashes,
    ) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            crate::error::hinted(
                format!("cannot read pipeline config `{}`: {e}", path.display()),
                "pass `--config pipeline/NAME.toml`, run from the project root, or start a project with `benchgen init`",
            )
        })?;
        let settings = Self::parse(path, text, names, sections, hashes).map_err(|e| config_error(path, &e.1, &e.0))?;
        let mut problems = Vec::new();
        for s in sections {
            (s.check)(&settings, &mut problems);
        }
        if !problems.is_empty() {
            return Err(InputError { file: path.display().to_string(), problems }.into());
        }
        Ok(settings)
    }

    /// Parse `text`: the first error in document order (as one struct of every section
    /// would have met it), with the text it points into.
    fn parse(
        path: &Path,
        text: String,
        names: &'static [&'static str],
        sections: &[SectionDecl],
        hashes: NameHashes,
    ) -> std::result::Result<Self, (toml::de::Error, String)> {
        let mut errors = Vec::new();
        let mut parsed = BTreeMap::new();
        let known = toml::de::Deserializer::parse(&text)
            .and_then(|d| serde::de::DeserializeSeed::deserialize(KnownSections(names), d));
        if let Err(e) = known {
            errors.push(e);
        }
        for s in sections {
            match (s.parse)(&text) {
                Ok(v) => {
                    parsed.insert(s.name, v);
                }
                Err(e) => errors.push(e),
            }
        }
        // A duplicate key or a syntax error is every parse's first error: the same one.
        if let Some(first) = errors.into_iter().min_by_key(|e| e.span().map_or(usize::MAX, |s| s.start)) {
            return Err((first, text));
        }
        let table: toml::Table = match toml::from_str(&text) {
            Ok(t) => t,
            Err(e) => return Err((e, text)),
        };
        let project = match parsed.get(ProjectSettings::NAME).map(|(v, _)| v.downcast_ref::<Always<ProjectSettings>>())
        {
            Some(Some(p)) => p.0.clone(),
            _ => ProjectSettings::default(),
        };
        let config_dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let root = normalize(&config_dir.join(&project.root));
        let artifacts = root.join(&project.artifacts);
        Ok(Self {
            project,
            raw: Arc::new(RawConfig { text, table }),
            sections: Arc::new(parsed),
            config_path: path.to_path_buf(),
            root,
            artifacts,
            llm_mode: Default::default(),
            llm_batch: false,
            hashes,
            stage_order: Vec::new(),
        })
    }

    /// Settings with every default, rooted at the working folder: for commands
    /// that can run without a pipeline config (e.g. `sandbox --catalog FILE`).
    pub fn with_defaults(names: &'static [&'static str], sections: &[SectionDecl], hashes: NameHashes) -> Result<Self> {
        let mut s = Self::parse(Path::new(DEFAULT_CONFIG), String::new(), names, sections, hashes)
            .map_err(|e| anyhow::Error::new(e.0).context("default config"))?;
        s.root = normalize(Path::new("."));
        s.artifacts = s.root.join(&s.project.artifacts);
        Ok(s)
    }

    /// The section `T` (parsed at load): `Option<T>` or [`Always<T>`], as `T` declares.
    pub fn section<T: Section>(&self) -> &T::Value {
        self.sections
            .get(T::NAME)
            .and_then(|(v, _)| v.downcast_ref::<T::Value>())
            .unwrap_or_else(|| panic!("internal: `[{}]` is not in the section list settings were read with", T::NAME))
    }

    /// Whether the stages section `name` configures are part of `run` by default: it is
    /// present, or it is an always-present one.
    pub fn section_on(&self, name: &str) -> bool {
        self.sections.get(name).is_some_and(|(_, on)| *on)
    }

    /// A path from the config, resolved against the project root.
    pub fn resolve(&self, p: &Path) -> PathBuf {
        if p.is_absolute() { p.to_path_buf() } else { self.root.join(p) }
    }

    /// A path shown relative to the project root when it lies inside it (so
    /// manifests and ledgers do not depend on where the clone lives).
    pub fn display_path(&self, p: &Path) -> String {
        let abs = normalize(p);
        match abs.strip_prefix(&self.root) {
            Ok(rel) => rel.to_string_lossy().replace('\\', "/"),
            Err(_) => abs.to_string_lossy().into_owned(),
        }
    }
}

/// A count that must be at least 1 (`top_k = 0` would silently produce nothing).
pub fn check_positive(problems: &mut Vec<Problem>, key: &str, value: usize) {
    if value == 0 {
        problems.push(Problem::new(key, "must be at least 1"));
    }
}

/// A real number that must be finite and within `lo..=hi` (NaN compares false
/// with everything, so it would silently disable a threshold).
pub fn check_range(problems: &mut Vec<Problem>, key: &str, value: f64, lo: f64, hi: f64) {
    if !value.is_finite() {
        problems.push(Problem::new(key, format!("must be a finite number, not {value}")));
    } else if value < lo || value > hi {
        problems.push(Problem::new(key, format!("must be between {lo} and {hi}, not {value}")));
    }
}

/// A config that does not parse, as one problem at its line.
fn config_error(path: &Path, text: &str, e: &toml::de::Error) -> anyhow::Error {
    let location = match e.span() {
        Some(span) => {
            let line = text[..span.start].matches('\n').count() + 1;
            format!("line {line}")
        }
        None => "config".to_string(),
    };
    // toml refuses a key given twice but says only "duplicate key": name it.
    let message = match e.span().and_then(|s| text.get(s)) {
        Some(key) if e.message() == "duplicate key" => format!("duplicate key `{}`", key.trim()),
        _ => e.message().to_string(),
    };
    InputError { file: path.display().to_string(), problems: vec![Problem::new(location, message)] }.into()
}

/// Lexically normalise a path (make it absolute, drop `.` and resolve `..`)
/// without touching the filesystem.
pub fn normalize(p: &Path) -> PathBuf {
    use std::path::Component;
    let abs = if p.is_absolute() { p.to_path_buf() } else { std::env::current_dir().unwrap_or_default().join(p) };
    let mut out = PathBuf::new();
    for c in abs.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Hash of a config section: canonical JSON of the parsed values, so comments
/// and formatting in the TOML do not make a stage stale.
pub fn section_hash<T: Serialize>(section: &T) -> Result<String> {
    let json = serde_json::to_vec(section).context("cannot serialise config section")?;
    Ok(crate::store::sha256_hex(&json))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_str(text: &str) -> Result<Settings> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pipeline/x.toml");
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        Settings::load(&p)
    }

    #[test]
    fn unknown_key_names_line_and_key() {
        let err = load_str("[filter]\ndrop_servers_without_tool = true\n").unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("line 2"), "{msg}");
        assert!(msg.contains("drop_servers_without_tool"), "{msg}");
    }

    #[test]
    fn every_bad_rule_is_reported_at_once() {
        let err = load_str(
            r#"
[[filter.rules]]
id = "a"
target = "tool"
class = "trivial"
reason = "r"
name = ["("]
[[filter.rules]]
id = "a"
target = "server"
class = "meta"
reason = "r"
"#,
        )
        .unwrap_err();
        let e = err.downcast_ref::<InputError>().unwrap();
        assert_eq!(e.problems.len(), 3, "{e}");
    }

    #[test]
    fn root_defaults_to_folder_above_pipeline() {
        let s = load_str("").unwrap();
        assert!(s.artifacts.ends_with("artifacts"));
        assert!(!s.root.ends_with("pipeline"));
    }
}
