//! Wire types of the published benchmark formats we read and write: ETOM (level files, EFS
//! sets, registry snapshot) and FinMCP (samples and their OpenAI-style messages).
//!
//! Why one module: registry import, `score`, `efs finalize`/`efs compare` and the coming
//! release export all meet these shapes, and each used to know them its own way. Only the
//! serde types live here; what a stage builds from them (score's `Item`, the catalog) stays
//! with the stage, so this module depends on nothing of ours but the tool-id helpers.
//!
//! Round trip: parsing a published file and serialising it back gives the same JSON value
//! (fields a type does not name are kept in `extra`; absent and `null` stay distinct where
//! the published files use both). Tests check this on the shared example files.

pub mod etom;
pub mod finmcp;

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

/// A record id as the published files write it: a number (`"query_id": 1`) or a string.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged, expecting = "a number or a string")]
pub enum RecordId {
    Number(serde_json::Number),
    Text(String),
}

impl fmt::Display for RecordId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordId::Number(n) => write!(f, "{n}"),
            RecordId::Text(s) => f.write_str(s),
        }
    }
}

/// For `Option<Option<T>>` fields: a present `null` becomes `Some(None)`, an absent key stays
/// `None` (with `#[serde(default)]`), so both serialise back as they were.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_ids_keep_their_json_type() {
        for text in ["1", "\"L1-7\"", "12345678901234"] {
            let id: RecordId = serde_json::from_str(text).unwrap();
            assert_eq!(serde_json::to_string(&id).unwrap(), text);
        }
        assert_eq!(serde_json::from_str::<RecordId>("3").unwrap().to_string(), "3");
        let e = serde_json::from_str::<RecordId>("[1]").unwrap_err().to_string();
        assert!(e.contains("a number or a string"), "{e}");
    }
}
