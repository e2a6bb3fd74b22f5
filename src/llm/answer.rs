//! What a typed LLM call sends and what it accepts, as one value: the answer's JSON Schema
//! and the check beyond it ([`Answer`]).
//!
//! The rule: a schema never allows what its check refuses. A server with grammar-constrained
//! decoding (llama.cpp, vLLM, SGLang) writes any answer the schema allows, often at its
//! edges (an index of 0, an empty list, a string where an object was meant), so every bound
//! the check enforces is stated in the schema: indices as `minimum`/`maximum` (or one
//! `enum` per position, [`Answer::numbered`]), counts as `minItems`/`maxItems`, ids as
//! `enum`. What a schema cannot say (a looping text, a blank string) is checked, and an
//! answer the check refuses is re-asked with the reason like a schema error — never turned
//! into a rejection of the item after the call.
//!
//! Stages build their answers with the helpers here; `typed_calls` (tests only, at the
//! crate root: it names every family) lists every typed call of the code base, so a
//! property test can generate answers at each schema's edges and assert its check accepts
//! them.

use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{bound_strings, schema_name, schema_of};

/// The check of an answer beyond its schema.
pub type Check<T> = Arc<dyn Fn(&T) -> Result<(), String> + Send + Sync>;

/// A typed call's answer: name and JSON Schema (sent as `response_format` and stated in the
/// prompt) and the check beyond the schema (refusals are re-asked with their message).
pub struct Answer<T> {
    pub name: String,
    /// Shared, not copied: an answer type's own schema is made once ([`Answer::of`]), and a
    /// batch role's calls, all in flight at once, each held a copy while they waited. The
    /// helpers below change a call's own copy (`Arc::make_mut`).
    pub schema: Arc<Value>,
    /// The request's sampling seed instead of the role's ([`Answer::with_seed`]).
    pub seed: Option<u64>,
    /// The request's sampling temperature instead of the role's ([`Answer::with_temperature`]).
    pub temperature: Option<f64>,
    /// The schema is the answer type's own, the same for every item of a stage
    /// ([`Answer::of`]): its instruction can go with the prompt's fixed part (see
    /// [`super::LlmClient::ask`]).
    pub fixed: bool,
    check: Check<T>,
}

impl<T> Clone for Answer<T> {
    fn clone(&self) -> Self {
        Answer {
            name: self.name.clone(),
            schema: self.schema.clone(),
            seed: self.seed,
            temperature: self.temperature,
            fixed: self.fixed,
            check: self.check.clone(),
        }
    }
}

impl<T: DeserializeOwned + schemars::JsonSchema + 'static> Answer<T> {
    /// `T`'s own schema ([`schema_of`]) and no check.
    pub fn of() -> Answer<T> {
        let (name, schema) = (schema_name::<T>(), own_schema::<T>());
        Answer { name, schema, seed: None, temperature: None, fixed: true, check: Arc::new(|_: &T| Ok(())) }
    }
}

/// `T`'s schema ([`schema_of`], whose strings are bounded already), made once per type:
/// schemars ran for every call before, and a stage makes an answer per call.
fn own_schema<T: schemars::JsonSchema + 'static>() -> Arc<Value> {
    // One map for every `T` (a generic function's static is not made per type).
    static SCHEMAS: LazyLock<Mutex<HashMap<TypeId, Arc<Value>>>> = LazyLock::new(Default::default);
    let mut schemas = SCHEMAS.lock().unwrap_or_else(|p| p.into_inner());
    schemas.entry(TypeId::of::<T>()).or_insert_with(|| Arc::new(schema_of::<T>())).clone()
}

impl<T: DeserializeOwned + 'static> Answer<T> {
    /// A schema built at run time; `T` must deserialise from what it allows. Its strings are
    /// bounded as in [`schema_of`].
    pub fn new(name: &str, mut schema: Value) -> Answer<T> {
        bound_strings(&mut schema, None);
        let schema = Arc::new(schema);
        Answer {
            name: name.to_string(),
            schema,
            seed: None,
            temperature: None,
            fixed: false,
            check: Arc::new(|_: &T| Ok(())),
        }
    }

    /// A schema built at run time that is nevertheless the same for every item of the stage
    /// (built from the config or the catalog, not from the item): its instruction joins the
    /// prompt's fixed part as an answer type's own does ([`Answer::of`]), so a server with
    /// prefix caching processes it once. The prereview's rubric is about half of its prompt.
    pub fn same_for_every_item(mut self) -> Answer<T> {
        self.fixed = true;
        self
    }

    /// Ask with the sampling `seed` instead of the role's (`None`: the role's): a second,
    /// independent answer to the same prompt (the seed is part of the request hash, so the
    /// ledger cache does not return the first answer). Like [`super::LlmClient::chat_seeded`].
    pub fn with_seed(mut self, seed: Option<u64>) -> Answer<T> {
        self.seed = seed;
        self
    }

    /// Ask at the sampling `temperature` instead of the role's (`None`: the role's): with
    /// [`Answer::with_seed`], a second answer that is not the greedy first one again.
    pub fn with_temperature(mut self, temperature: Option<f64>) -> Answer<T> {
        self.temperature = temperature;
        self
    }

    /// Adds a check (after the ones already there).
    pub fn check(self, f: impl Fn(&T) -> Result<(), String> + Send + Sync + 'static) -> Answer<T> {
        let before = self.check;
        Answer { check: Arc::new(move |v: &T| before(v).and_then(|()| f(v))), ..self }
    }

    /// The list property `list` holds at most `max` items (at least one), so a small model
    /// that keeps adding items ends in a valid answer.
    pub fn max_items(mut self, list: &str, max: usize) -> Answer<T> {
        Arc::make_mut(&mut self.schema)["properties"][list]["maxItems"] = json!(max.max(1));
        self
    }

    /// The list property `list` holds at least `min` items (see [`Answer::max_items`]). Its
    /// check is the caller's: a list shorter than this must be refused there too.
    pub fn min_items(mut self, list: &str, min: usize) -> Answer<T> {
        Arc::make_mut(&mut self.schema)["properties"][list]["minItems"] = json!(min);
        self
    }

    /// The strings of list property `list` are not empty (`minLength: 1`); as with
    /// [`Answer::non_blank`], the caller's check refuses a blank one.
    pub fn non_blank_items(mut self, list: &str) -> Answer<T> {
        Arc::make_mut(&mut self.schema)["properties"][list]["items"]["minLength"] = json!(1);
        self
    }

    /// The string property `field` (of the answer object) is not empty: `minLength: 1`, and
    /// the check refuses a blank text (which a schema cannot say without a `pattern`, which
    /// grammar builders handle unevenly). `get` reads the field.
    pub fn non_blank(mut self, field: &str, get: fn(&T) -> &str) -> Answer<T> {
        Arc::make_mut(&mut self.schema)["properties"][field]["minLength"] = json!(1);
        let field = field.to_string();
        self.check(
            move |v| {
                if get(v).trim().is_empty() { Err(format!("`{field}` is blank; write it out")) } else { Ok(()) }
            },
        )
    }

    /// The list property `list` has exactly one entry per number 1..=`n`, in order, each
    /// naming its number in the integer property `index` (candidates, turns): `prefixItems`
    /// whose entry k allows only k (`enum: [k]`, `minimum`/`maximum` k), `minItems` =
    /// `maxItems` = `n`. The check (for servers that ignore the schema) accepts any order,
    /// each number once; `get` reads the numbers of an answer; `noun` names them in the
    /// re-ask ("candidate", "turn").
    pub fn numbered(
        mut self,
        list: &str,
        index: &str,
        n: usize,
        noun: &'static str,
        get: fn(&T) -> Vec<u64>,
    ) -> Answer<T> {
        let item = resolve(&self.schema, &self.schema["properties"][list]["items"]).clone();
        let entries: Vec<Value> = (1..=n)
            .map(|k| {
                let mut e = item.clone();
                let mut p = e["properties"][index].take();
                if let Some(o) = p.as_object_mut() {
                    o.remove("format");
                }
                p["type"] = json!("integer");
                p["enum"] = json!([k]);
                p["minimum"] = json!(k);
                p["maximum"] = json!(k);
                e["properties"][index] = p;
                e
            })
            .collect();
        let description = self.schema["properties"][list]
            .get("description")
            .cloned()
            .unwrap_or_else(|| json!(format!("One entry per {noun}, in order.")));
        Arc::make_mut(&mut self.schema)["properties"][list] = json!({"type": "array", "description": description,
            "prefixItems": entries, "minItems": n, "maxItems": n});
        // `n` may differ from item to item (the turns of a dialogue).
        self.fixed = false;
        self.check(move |v| check_numbered(&get(v), n, noun))
    }
}

impl<T: DeserializeOwned> Answer<T> {
    /// Schema-check, deserialise and check an answer value (what the client does with an
    /// extracted answer; the property tests call it directly).
    pub fn accepts(&self, value: &Value) -> Result<T, String> {
        let validator =
            jsonschema::validator_for(&self.schema).map_err(|e| format!("the schema is not usable: {e}"))?;
        let v = super::validate_value::<T>(value.clone(), &validator)?;
        (self.check)(&v)?;
        Ok(v)
    }
}

impl<T> Answer<T> {
    /// Run the check alone (the client validates against the schema itself).
    pub(crate) fn run_check(&self, v: &T) -> Result<(), String> {
        (self.check)(v)
    }
}

/// Follows a local `$ref` (`#/$defs/X`) to its schema; any other schema is returned as is.
fn resolve<'a>(root: &'a Value, s: &'a Value) -> &'a Value {
    match s.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix("#/")) {
        Some(path) => path.split('/').fold(root, |v, k| &v[k]),
        None => s,
    }
}

/// Every number of 1..=`n` exactly once (see [`Answer::numbered`]).
pub fn check_numbered(got: &[u64], n: usize, noun: &str) -> Result<(), String> {
    let mut seen = vec![false; n];
    for &i in got {
        if i == 0 || i as usize > n {
            return Err(format!("`{noun}` {i} is not one of the {noun}s 1..={n}"));
        }
        if std::mem::replace(&mut seen[i as usize - 1], true) {
            return Err(format!("{noun} {i} is judged twice"));
        }
    }
    let missing: Vec<String> =
        seen.iter().enumerate().filter(|(_, s)| !**s).map(|(i, _)| (i + 1).to_string()).collect();
    if !missing.is_empty() {
        return Err(format!("{noun}s {} are not judged; give one verdict per {noun}", missing.join(", ")));
    }
    Ok(())
}

/// A check over a raw JSON answer (what a site's typed check does once it deserialises).
#[cfg(test)]
pub type RawCheck = Box<dyn Fn(&Value) -> Result<(), String>>;

/// One typed call of the code base as the property test sees it (tests only; listed in
/// `typed_calls`): where it is, what it asks, its schema and its acceptance (schema, shape
/// and check).
#[cfg(test)]
pub struct Site {
    pub file: &'static str,
    pub what: String,
    pub schema: Value,
    pub accepts: RawCheck,
}

#[cfg(test)]
impl<T: DeserializeOwned + 'static> Answer<T> {
    /// This answer as a [`Site`] of `file`.
    pub fn site(self, file: &'static str, what: impl Into<String>) -> Site {
        let schema = Value::clone(&self.schema);
        Site { file, what: what.into(), schema, accepts: Box::new(move |v| self.accepts(v).map(|_| ())) }
    }
}
