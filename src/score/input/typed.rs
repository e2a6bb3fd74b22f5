//! Typed, single-pass readers for the large score inputs: ETOM level files and ETOM
//! orchestrator-style prediction lines are deserialised straight from the bytes into small
//! typed records (text borrowed from the input where it has no escapes), not into a
//! `serde_json::Value` tree first.
//!
//! The published formats are loose, so the records stay lenient: a field of the wrong type
//! becomes a problem noted on its record (reported with file, record and field by the
//! loaders), never a failed parse. Only bad JSON fails the parse, and, in the corrected mode
//! (`strict`), a key given twice in any object, fields we skip included (the error names the
//! key, line and column, as [`crate::json`] does). The compat modes read a repeated key as
//! Python's `json.load` does: the last value wins.

use std::borrow::Cow;

use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::json::{Check, Key, Strict, skip_value};

/// A JSON value as the typed readers keep it: text borrowed from the input when it has no
/// escapes, anything else as a `Value`.
#[derive(Debug, Clone, PartialEq)]
pub enum Fv<'a> {
    Str(Cow<'a, str>),
    Other(Value),
}

impl Fv<'_> {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Fv::Str(s) => Some(s),
            Fv::Other(_) => None,
        }
    }

    pub fn to_value(&self) -> Value {
        match self {
            Fv::Str(s) => Value::String(s.to_string()),
            Fv::Other(v) => v.clone(),
        }
    }

    pub fn into_value(self) -> Value {
        match self {
            Fv::Str(s) => Value::String(s.into_owned()),
            Fv::Other(v) => v,
        }
    }

    /// `a string`, `a number`, … as [`crate::error::json_type_name`] names them.
    pub fn type_name(&self) -> &'static str {
        match self {
            Fv::Str(_) => "a string",
            Fv::Other(v) => crate::error::json_type_name(v),
        }
    }
}

/// The error serde gives when `v` is not a `T` (e.g. "invalid type: integer `5`, expected a
/// string"), so messages read as they did when these fields were deserialised from a `Value`.
pub fn type_error<T: serde::de::DeserializeOwned>(v: &Fv) -> Option<String> {
    let v = v.to_value();
    T::deserialize(&v).err().map(|e| e.to_string())
}

/// Reads one value as an [`Fv`].
#[derive(Clone, Copy)]
pub struct FvSeed {
    pub strict: bool,
}

impl<'de> DeserializeSeed<'de> for FvSeed {
    type Value = Fv<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Fv<'de>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for FvSeed {
    type Value = Fv<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Fv<'de>, E> {
        Ok(Fv::Str(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Fv<'de>, E> {
        Ok(Fv::Str(Cow::Owned(v.to_string())))
    }
    fn visit_string<E>(self, v: String) -> Result<Fv<'de>, E> {
        Ok(Fv::Str(Cow::Owned(v)))
    }
    fn visit_bool<E>(self, v: bool) -> Result<Fv<'de>, E> {
        Ok(Fv::Other(Value::Bool(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Fv<'de>, E> {
        Ok(Fv::Other(Value::from(v)))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Fv<'de>, E> {
        Ok(Fv::Other(Value::from(v)))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Fv<'de>, E> {
        Ok(Fv::Other(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)))
    }
    fn visit_unit<E>(self) -> Result<Fv<'de>, E> {
        Ok(Fv::Other(Value::Null))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Fv<'de>, A::Error> {
        let d = SeqAccessDeserializer::new(seq);
        Ok(Fv::Other(if self.strict { Strict.deserialize(d)? } else { serde::Deserialize::deserialize(d)? }))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Fv<'de>, A::Error> {
        let d = MapAccessDeserializer::new(map);
        Ok(Fv::Other(if self.strict { Strict.deserialize(d)? } else { serde::Deserialize::deserialize(d)? }))
    }
}

/// Store a field's value: a second occurrence is an error in strict mode, else the last wins.
fn set<T, E: de::Error>(slot: &mut Option<T>, v: T, key: &str, strict: bool) -> Result<(), E> {
    if strict && slot.is_some() {
        return Err(E::custom(format!("duplicate key `{key}`")));
    }
    *slot = Some(v);
    Ok(())
}

/// Keys of an object already seen, for the duplicate check of fields that are skipped.
#[derive(Default)]
struct Seen<'de>(Vec<Cow<'de, str>>);

impl<'de> Seen<'de> {
    fn check<E: de::Error>(&mut self, k: Cow<'de, str>, strict: bool) -> Result<(), E> {
        if strict {
            if self.0.contains(&k) {
                return Err(E::custom(format!("duplicate key `{k}`")));
            }
            self.0.push(k);
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// ETOM level files

/// One record of a level file.
#[derive(Debug)]
pub enum LevelRecord<'a> {
    /// The record is not an object: its JSON type.
    NotObject(&'static str),
    Query(Query<'a>),
}

/// A level-file query: what scoring reads of it.
#[derive(Debug, Default)]
pub struct Query<'a> {
    pub query_id: Option<Fv<'a>>,
    pub entries: Vec<Entry<'a>>,
    /// The first field that is not of its type, and why (the record is not an ETOM query).
    pub problem: Option<(&'static str, String)>,
}

impl Query<'_> {
    /// The query id as text, or why the record is not an ETOM query: the field ("" for the
    /// record) and the problem.
    pub fn id(&self) -> Result<String, (&'static str, String)> {
        if let Some(p) = &self.problem {
            return Err(p.clone());
        }
        match &self.query_id {
            None => Err(("", "missing field `query_id`".into())),
            Some(Fv::Str(s)) => Ok(s.to_string()),
            Some(Fv::Other(Value::Number(n))) => Ok(n.to_string()),
            Some(other) => Err((
                "query_id",
                format!(
                    "invalid type: {}, expected a number or a string",
                    type_error::<String>(other).map_or_else(String::new, |e| unexpected_of(&e))
                ),
            )),
        }
    }
}

/// The "integer `5`" part of serde's "invalid type: integer `5`, expected …".
fn unexpected_of(msg: &str) -> String {
    msg.strip_prefix("invalid type: ").and_then(|r| r.split(", expected").next()).unwrap_or(msg).to_string()
}

/// One `ground_truth_tools` entry: a row of alternatives (L2, L4) or one member (L1, L3).
// Built and consumed one record at a time while parsing: boxing the large variant would
// add an allocation per ground-truth tool for no memory saved.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Entry<'a> {
    List(Vec<Member<'a>>),
    One(Member<'a>),
}

/// A ground-truth member: a tool object, or any other value (a string may hold JSON, which
/// the published evaluator parses).
#[allow(clippy::large_enum_variant)] // as for `Entry`
#[derive(Debug)]
pub enum Member<'a> {
    Tool(Tool<'a>),
    Other(Fv<'a>),
}

/// The fields of a ground-truth tool object that scoring reads; others are skipped.
#[derive(Debug, Default)]
pub struct Tool<'a> {
    pub tool_id: Option<Fv<'a>>,
    pub server_name: Option<Fv<'a>>,
    pub server: Option<Fv<'a>>,
    pub tool_name: Option<Fv<'a>>,
    /// The description when it is not a string (only its type matters).
    pub bad_description: Option<Fv<'a>>,
    pub dependencies: Option<Deps>,
}

/// A `dependencies` value: a list of indices (the format), or anything else as JSON.
#[derive(Debug, Clone, PartialEq)]
pub enum Deps {
    Ints(Vec<usize>),
    Other(Value),
}

impl Deps {
    pub fn to_value(&self) -> Value {
        match self {
            Deps::Ints(v) => v.iter().map(|&d| Value::from(d)).collect(),
            Deps::Other(v) => v.clone(),
        }
    }
}

/// Reads `dependencies` without building a JSON value for the common list of indices.
#[derive(Clone, Copy)]
struct DepsSeed {
    strict: bool,
}

impl<'de> DeserializeSeed<'de> for DepsSeed {
    type Value = Deps;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Deps, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for DepsSeed {
    type Value = Deps;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("dependencies")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Deps, A::Error> {
        let mut ints = Vec::new();
        let mut other: Option<Vec<Value>> = None;
        while let Some(v) = seq.next_element_seed(FvSeed { strict: self.strict })? {
            match (&mut other, v) {
                (None, Fv::Other(Value::Number(n))) if n.as_u64().is_some_and(|d| usize::try_from(d).is_ok()) => {
                    ints.push(n.as_u64().unwrap_or_default() as usize);
                }
                (None, v) => {
                    let mut all: Vec<Value> = ints.iter().map(|&d| Value::from(d)).collect();
                    all.push(v.into_value());
                    other = Some(all);
                }
                (Some(all), v) => all.push(v.into_value()),
            }
        }
        Ok(match other {
            None => Deps::Ints(ints),
            Some(all) => Deps::Other(Value::Array(all)),
        })
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Deps, A::Error> {
        FvSeed { strict: self.strict }.visit_map(map).map(|v| Deps::Other(v.into_value()))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Deps, E> {
        Ok(Deps::Other(Value::Bool(v)))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Deps, E> {
        Ok(Deps::Other(Value::from(v)))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Deps, E> {
        Ok(Deps::Other(Value::from(v)))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Deps, E> {
        FvSeed { strict: self.strict }.visit_f64(v).map(|v| Deps::Other(v.into_value()))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Deps, E> {
        Ok(Deps::Other(Value::String(v.to_string())))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Deps, E> {
        Ok(Deps::Other(Value::Null))
    }
}

/// Reads a value whose type is all that matters: `None` for any string (escaped or not,
/// nothing copied), else the value.
#[derive(Clone, Copy)]
struct TypeSeed {
    strict: bool,
}

impl<'de> DeserializeSeed<'de> for TypeSeed {
    type Value = Option<Fv<'de>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TypeSeed {
    type Value = Option<Fv<'de>>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        FvSeed { strict: self.strict }.visit_bool(v).map(Some)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        FvSeed { strict: self.strict }.visit_i64(v).map(Some)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        FvSeed { strict: self.strict }.visit_u64(v).map(Some)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        FvSeed { strict: self.strict }.visit_f64(v).map(Some)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        FvSeed { strict: self.strict }.visit_unit().map(Some)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        FvSeed { strict: self.strict }.visit_seq(seq).map(Some)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        FvSeed { strict: self.strict }.visit_map(map).map(Some)
    }
}

/// Parse a level file, handing each record to `each` as soon as it is read (no list of
/// records is built); `Ok(false)` when the top level is not a list. Errors are bad JSON, or
/// (strict) a duplicate key.
pub fn level_file<'a>(
    text: &'a str,
    strict: bool,
    each: &mut dyn FnMut(LevelRecord<'a>),
) -> Result<bool, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let out = TopSeed { strict, each }.deserialize(&mut de)?.is_some();
    de.end()?;
    Ok(out)
}

struct TopSeed<'f, 'de> {
    strict: bool,
    each: &'f mut dyn FnMut(LevelRecord<'de>),
}

impl<'de> DeserializeSeed<'de> for TopSeed<'_, 'de> {
    type Value = Option<()>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TopSeed<'_, 'de> {
    type Value = Option<()>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON list of queries")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while let Some(r) = seq.next_element_seed(RecordSeed { strict: self.strict })? {
            (self.each)(r);
        }
        Ok(Some(()))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        FvSeed { strict: self.strict }.visit_map(map)?;
        Ok(None)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

#[derive(Clone, Copy)]
struct RecordSeed {
    strict: bool,
}

impl<'de> DeserializeSeed<'de> for RecordSeed {
    type Value = LevelRecord<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

/// Visits one value whose JSON type is all that matters when it is not an object.
macro_rules! not_object_visits {
    ($make:expr) => {
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok($make("a boolean"))
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok($make("a number"))
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok($make("a number"))
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok($make("a number"))
        }
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok($make("a string"))
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok($make("null"))
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            if self.strict {
                while seq.next_element_seed(Check)?.is_some() {}
            } else {
                while seq.next_element::<de::IgnoredAny>()?.is_some() {}
            }
            Ok($make("an array"))
        }
    };
}

impl<'de> Visitor<'de> for RecordSeed {
    type Value = LevelRecord<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an ETOM query")
    }
    not_object_visits!(LevelRecord::NotObject);
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let strict = self.strict;
        let mut q = Query::default();
        let mut entries: Option<Vec<Entry<'de>>> = None;
        // `query` and `dependency_visualization`: texts whose type only is checked (`Some(None)`
        // for a text, nothing copied).
        let (mut query, mut count, mut vis): (Option<Option<Fv>>, Option<Fv>, Option<Option<Fv>>) = (None, None, None);
        let mut seen = Seen::default();
        let fv = FvSeed { strict };
        while let Some(Key(k)) = map.next_key::<Key<'de>>()? {
            match &*k {
                "query_id" => {
                    let v = map.next_value_seed(fv)?;
                    set::<_, A::Error>(&mut q.query_id, v, &k, strict)?;
                }
                "ground_truth_tools" => {
                    let v = map.next_value_seed(EntriesSeed { strict })?;
                    let v = match v {
                        Ok(list) => list,
                        Err(bad) => {
                            q.problem.get_or_insert(("ground_truth_tools", bad));
                            Vec::new()
                        }
                    };
                    set::<_, A::Error>(&mut entries, v, &k, strict)?;
                }
                "query" => {
                    let v = map.next_value_seed(TypeSeed { strict })?;
                    set::<_, A::Error>(&mut query, v, &k, strict)?;
                }
                "ground_truth_tools_count" => {
                    let v = map.next_value_seed(fv)?;
                    set::<_, A::Error>(&mut count, v, &k, strict)?;
                }
                "dependency_visualization" => {
                    let v = map.next_value_seed(TypeSeed { strict })?;
                    set::<_, A::Error>(&mut vis, v, &k, strict)?;
                }
                _ => {
                    seen.check::<A::Error>(k, strict)?;
                    skip_value(&mut map, strict)?;
                }
            }
        }
        // The types the published format gives these fields (formats::etom::LevelQuery).
        let (query, vis) = (query.flatten(), vis.flatten());
        let problem = (query.as_ref().and_then(type_error::<String>).map(|e| ("query", e)))
            .or_else(|| count.as_ref().and_then(type_error::<Option<usize>>).map(|e| ("ground_truth_tools_count", e)))
            .or_else(|| vis.as_ref().and_then(type_error::<Option<String>>).map(|e| ("dependency_visualization", e)));
        if q.problem.is_none() {
            q.problem = problem;
        }
        q.entries = entries.unwrap_or_default();
        Ok(LevelRecord::Query(q))
    }
}

/// serde's words for a value of the wrong type ("invalid type: string \"x\", expected a sequence").
fn invalid(unexp: de::Unexpected, exp: &str) -> String {
    format!("invalid type: {unexp}, expected {exp}")
}

/// `ground_truth_tools`: a list of entries, or (`Err`) serde's words for what it is instead.
#[derive(Clone, Copy)]
struct EntriesSeed {
    strict: bool,
}

impl<'de> DeserializeSeed<'de> for EntriesSeed {
    type Value = Result<Vec<Entry<'de>>, String>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for EntriesSeed {
    type Value = Result<Vec<Entry<'de>>, String>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of ground-truth entries")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(4));
        while let Some(e) = seq.next_element_seed(EntrySeed { strict: self.strict })? {
            out.push(e);
        }
        Ok(Ok(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        FvSeed { strict: self.strict }.visit_map(map)?;
        Ok(Err(invalid(de::Unexpected::Map, "a sequence")))
    }
    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Err(invalid(de::Unexpected::Bool(v), "a sequence")))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Err(invalid(de::Unexpected::Signed(v), "a sequence")))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Err(invalid(de::Unexpected::Unsigned(v), "a sequence")))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Err(invalid(de::Unexpected::Float(v), "a sequence")))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Err(invalid(de::Unexpected::Str(v), "a sequence")))
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Err(invalid(de::Unexpected::Unit, "a sequence")))
    }
}

/// One `ground_truth_tools` entry.
#[derive(Clone, Copy)]
struct EntrySeed {
    strict: bool,
}

impl<'de> DeserializeSeed<'de> for EntrySeed {
    type Value = Entry<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Entry<'de>, D::Error> {
        match d.deserialize_any(MemberSeed { strict: self.strict, in_list: false })? {
            Ok(m) => Ok(Entry::One(m)),
            Err(list) => Ok(Entry::List(list)),
        }
    }
}

/// A member; outside a row a list is read as the row (`Err`).
#[derive(Clone, Copy)]
struct MemberSeed {
    strict: bool,
    in_list: bool,
}

impl<'de> DeserializeSeed<'de> for MemberSeed {
    type Value = Member<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Member<'de>, D::Error> {
        match d.deserialize_any(MemberSeed { in_list: true, ..self })? {
            Ok(m) => Ok(m),
            Err(_) => unreachable!("a member inside a row is never read as a row"),
        }
    }
}

impl<'de> Visitor<'de> for MemberSeed {
    type Value = Result<Member<'de>, Vec<Member<'de>>>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a ground-truth tool")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let strict = self.strict;
        let mut t = Tool::default();
        let mut description: Option<Option<Fv>> = None;
        let mut seen = Seen::default();
        let fv = FvSeed { strict };
        while let Some(Key(k)) = map.next_key::<Key<'de>>()? {
            match &*k {
                "tool_name" => set::<_, A::Error>(&mut t.tool_name, map.next_value_seed(fv)?, &k, strict)?,
                "server_name" => set::<_, A::Error>(&mut t.server_name, map.next_value_seed(fv)?, &k, strict)?,
                "server" => set::<_, A::Error>(&mut t.server, map.next_value_seed(fv)?, &k, strict)?,
                "tool_id" => set::<_, A::Error>(&mut t.tool_id, map.next_value_seed(fv)?, &k, strict)?,
                "dependencies" => {
                    set::<_, A::Error>(&mut t.dependencies, map.next_value_seed(DepsSeed { strict })?, &k, strict)?
                }
                "description" => {
                    // Only its type matters: nothing of a text is kept.
                    let v = map.next_value_seed(TypeSeed { strict })?;
                    set::<_, A::Error>(&mut description, v, &k, strict)?;
                }
                _ => {
                    seen.check::<A::Error>(k, strict)?;
                    skip_value(&mut map, strict)?;
                }
            }
        }
        t.bad_description = description.flatten();
        Ok(Ok(Member::Tool(t)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        if self.in_list {
            return FvSeed { strict: self.strict }.visit_seq(seq).map(|v| Ok(Member::Other(v)));
        }
        let mut row = Vec::with_capacity(seq.size_hint().unwrap_or(2));
        while let Some(m) = seq.next_element_seed(MemberSeed { strict: self.strict, in_list: true })? {
            row.push(m);
        }
        Ok(Err(row))
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Ok(Member::Other(Fv::Str(Cow::Borrowed(v)))))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Ok(Member::Other(Fv::Str(Cow::Owned(v.to_string())))))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        FvSeed { strict: self.strict }.visit_bool(v).map(|v| Ok(Member::Other(v)))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        FvSeed { strict: self.strict }.visit_i64(v).map(|v| Ok(Member::Other(v)))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        FvSeed { strict: self.strict }.visit_u64(v).map(|v| Ok(Member::Other(v)))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        FvSeed { strict: self.strict }.visit_f64(v).map(|v| Ok(Member::Other(v)))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        FvSeed { strict: self.strict }.visit_unit().map(|v| Ok(Member::Other(v)))
    }
}

// ---------------------------------------------------------------------------------------
// Prediction lines

/// What the typed reader keeps of a prediction line: enough to score an ETOM
/// orchestrator-style record without building a `Value` tree. Other records go through the
/// general reader.
#[derive(Debug, Default)]
pub struct PredLine<'a> {
    pub id: Option<Fv<'a>>,
    pub prediction: Option<EtomPred<'a>>,
    /// Keys that make the record another format (`messages_pred`, `error`).
    pub finmcp_keys: bool,
    /// The line is not a JSON object.
    pub not_object: bool,
}

/// An ETOM `prediction`: a list of items (JSON strings or objects), or any other value.
#[derive(Debug)]
pub enum EtomPred<'a> {
    List(Vec<Fv<'a>>),
    Other(Fv<'a>),
}

impl EtomPred<'_> {
    /// The `prediction` as a JSON value (for the compat evaluators).
    pub fn into_value(self) -> Value {
        match self {
            EtomPred::List(items) => Value::Array(items.into_iter().map(Fv::into_value).collect()),
            EtomPred::Other(v) => v.into_value(),
        }
    }
}

/// Read a prediction line (a duplicate key is an error when `strict`).
pub fn pred_line(line: &str, strict: bool) -> Result<PredLine<'_>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(line);
    let out = de.deserialize_any(LineV { strict })?;
    de.end()?;
    Ok(out)
}

struct LineV {
    strict: bool,
}

impl<'de> Visitor<'de> for LineV {
    type Value = PredLine<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a prediction record")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let strict = self.strict;
        let mut out = PredLine::default();
        let mut seen = Seen::default();
        while let Some(Key(k)) = map.next_key::<Key<'de>>()? {
            match &*k {
                "id" => set::<_, A::Error>(&mut out.id, map.next_value_seed(FvSeed { strict })?, &k, strict)?,
                "prediction" => {
                    set::<_, A::Error>(&mut out.prediction, map.next_value_seed(PredSeed { strict })?, &k, strict)?
                }
                _ => {
                    out.finmcp_keys |= matches!(&*k, "messages_pred" | "error");
                    seen.check::<A::Error>(k, strict)?;
                    skip_value(&mut map, strict)?;
                }
            }
        }
        Ok(out)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        FvSeed { strict: self.strict }.visit_seq(seq)?;
        Ok(PredLine { not_object: true, ..Default::default() })
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(PredLine { not_object: true, ..Default::default() })
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(PredLine { not_object: true, ..Default::default() })
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(PredLine { not_object: true, ..Default::default() })
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(PredLine { not_object: true, ..Default::default() })
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(PredLine { not_object: true, ..Default::default() })
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(PredLine { not_object: true, ..Default::default() })
    }
}

#[derive(Clone, Copy)]
struct PredSeed {
    strict: bool,
}

impl<'de> DeserializeSeed<'de> for PredSeed {
    type Value = EtomPred<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<EtomPred<'de>, D::Error> {
        match d.deserialize_any(ItemsV { strict: self.strict })? {
            Ok(items) => Ok(EtomPred::List(items)),
            Err(other) => Ok(EtomPred::Other(other)),
        }
    }
}

/// A list of [`Fv`] items, or (`Err`) any other value.
struct ItemsV {
    strict: bool,
}

impl<'de> Visitor<'de> for ItemsV {
    type Value = Result<Vec<Fv<'de>>, Fv<'de>>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a prediction")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(4));
        while let Some(v) = seq.next_element_seed(FvSeed { strict: self.strict })? {
            out.push(v);
        }
        Ok(Ok(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        FvSeed { strict: self.strict }.visit_map(map).map(Err)
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Err(Fv::Str(Cow::Borrowed(v))))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Err(Fv::Str(Cow::Owned(v.to_string()))))
    }
    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Err(Fv::Str(Cow::Owned(v))))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        FvSeed { strict: self.strict }.visit_bool(v).map(Err)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        FvSeed { strict: self.strict }.visit_i64(v).map(Err)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        FvSeed { strict: self.strict }.visit_u64(v).map(Err)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        FvSeed { strict: self.strict }.visit_f64(v).map(Err)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        FvSeed { strict: self.strict }.visit_unit().map(Err)
    }
}

/// An orchestrator's tool selection (`{"server": …, "tool_name": …, …}` in a JSON string),
/// read for the two fields that name the tool, under any key spelling: keys compared
/// lower-cased without non-alphanumerics, the first matching key in the object taken (a
/// repeated key keeps its first place and its last value, as `serde_json` with
/// `preserve_order` reads it).
#[derive(Debug, Default)]
pub struct Selection<'a> {
    pub server: Option<Fv<'a>>,
    pub tool: Option<Fv<'a>>,
}

/// `None` when the text is not a JSON object.
pub fn selection(text: &str) -> Option<Selection<'_>> {
    let mut de = serde_json::Deserializer::from_str(text);
    let out = de.deserialize_any(SelV).ok()?;
    de.end().ok()?;
    out
}

struct SelV;

/// `k` lower-cased without non-alphanumerics equals one of `names` (no allocation).
fn key_is(k: &str, names: &[&str]) -> bool {
    if k.is_ascii() {
        let norm = || k.bytes().filter(u8::is_ascii_alphanumeric).map(|b| b.to_ascii_lowercase());
        return names.iter().any(|n| norm().eq(n.bytes()));
    }
    names.iter().any(|n| k.chars().filter(|c| c.is_alphanumeric()).flat_map(char::to_lowercase).eq(n.chars()))
}

impl<'de> Visitor<'de> for SelV {
    type Value = Option<Selection<'de>>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a tool selection")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = Selection::default();
        let (mut server_key, mut tool_key): (Option<Cow<str>>, Option<Cow<str>>) = (None, None);
        let fv = FvSeed { strict: false };
        while let Some(Key(k)) = map.next_key::<Key<'de>>()? {
            if key_is(&k, &["server", "servername"]) && server_key.as_ref().is_none_or(|s| *s == k) {
                out.server = Some(map.next_value_seed(fv)?);
                server_key = Some(k);
            } else if key_is(&k, &["toolname", "tool", "name"]) && tool_key.as_ref().is_none_or(|s| *s == k) {
                out.tool = Some(map.next_value_seed(fv)?);
                tool_key = Some(k);
            } else {
                map.next_value::<de::IgnoredAny>()?;
            }
        }
        Ok(Some(out))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<de::IgnoredAny>()?.is_some() {}
        Ok(None)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}
