//! OpenAI function names for tool ids.
//!
//! OpenAI requires `^[a-zA-Z0-9_-]{1,64}$`; tool ids are `server::tool` with any
//! characters. The mapping is deterministic for a given tool set and reversible:
//! `::` becomes `__`, every other disallowed character `_`; a name that is then longer
//! than 64 characters, or that two ids would share, is cut to 55 characters and
//! suffixed with `_` and 8 hex digits of the id's sha256.

use std::collections::{BTreeMap, HashMap};

use sha2::{Digest, Sha256};

#[derive(Debug, Clone, Default)]
pub struct ToolNames {
    to_name: BTreeMap<String, String>,
    to_id: HashMap<String, String>,
}

fn base(id: &str) -> String {
    id.replace("::", "__")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' })
        .collect()
}

fn hashed(id: &str) -> String {
    let b = base(id);
    let cut: String = b.chars().take(55).collect();
    let h = hex::encode(&Sha256::digest(id.as_bytes())[..4]);
    format!("{cut}_{h}")
}

pub fn is_valid_openai_name(n: &str) -> bool {
    (1..=64).contains(&n.len()) && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

impl ToolNames {
    pub fn new<'a>(ids: impl IntoIterator<Item = &'a str>) -> Self {
        let mut ids: Vec<&str> = ids.into_iter().collect();
        ids.sort_unstable();
        ids.dedup();
        let mut count: HashMap<String, usize> = HashMap::new();
        for id in &ids {
            *count.entry(base(id)).or_default() += 1;
        }
        let mut to_name = BTreeMap::new();
        let mut to_id = HashMap::new();
        for id in ids {
            let b = base(id);
            let name = if b.is_empty() || b.len() > 64 || count[&b] > 1 { hashed(id) } else { b };
            to_id.insert(name.clone(), id.to_string());
            to_name.insert(id.to_string(), name);
        }
        Self { to_name, to_id }
    }

    pub fn name(&self, id: &str) -> Option<&str> {
        self.to_name.get(id).map(String::as_str)
    }

    pub fn id(&self, name: &str) -> Option<&str> {
        self.to_id.get(name).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_valid_reversible_and_deterministic() {
        let long = format!("{}::{}", "S".repeat(40), "t".repeat(40));
        let ids = ["calc::add", "Basic Memory::read_content", "a-b::c", "a_b::c", "a b::c", long.as_str(), "ü::x"];
        let n = ToolNames::new(ids);
        for id in ids {
            let name = n.name(id).unwrap();
            assert!(is_valid_openai_name(name), "{id} -> {name}");
            assert_eq!(n.id(name), Some(id));
        }
        assert_eq!(n.name("calc::add"), Some("calc__add"));
        assert_eq!(n.name("Basic Memory::read_content"), Some("Basic_Memory__read_content"));
        // `a_b::c` and `a b::c` collide on `a_b__c`: both get hashed names.
        assert_ne!(n.name("a_b::c"), n.name("a b::c"));
        assert!(n.name("a b::c").unwrap().starts_with("a_b__c_"));
        let again = ToolNames::new(ids.iter().rev().copied());
        for id in ids {
            assert_eq!(n.name(id), again.name(id));
        }
    }
}
