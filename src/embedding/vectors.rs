//! Vectors with their index: `index.json` and `vectors.f32` (row-major little-endian `f32`,
//! every row L2-normalised).

use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

pub const VECTORS_FILE: &str = "vectors.f32";
pub const INDEX_FILE: &str = "index.json";

/// One row of `index.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct IndexRow {
    pub row: usize,
    pub id: String,
    pub text_sha256: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Index {
    pub model_id: String,
    pub model_sha256: String,
    pub dim: usize,
    pub count: usize,
    pub tools: Vec<IndexRow>,
}

/// Vectors with their index, in memory.
#[derive(Debug, Clone)]
pub struct Vectors {
    pub index: Index,
    pub data: Vec<f32>,
}

impl Vectors {
    pub fn len(&self) -> usize {
        self.index.count
    }

    pub fn is_empty(&self) -> bool {
        self.index.count == 0
    }

    pub fn dim(&self) -> usize {
        self.index.dim
    }

    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.index.dim..(i + 1) * self.index.dim]
    }

    pub fn ids(&self) -> Vec<&str> {
        self.index.tools.iter().map(|t| t.id.as_str()).collect()
    }

    pub fn from_bytes(index: &[u8], vectors: &[u8]) -> Result<Self> {
        let index: Index = serde_json::from_slice(index).context("the embedding index is not valid")?;
        if vectors.len() != index.count * index.dim * 4 {
            bail!(
                "`{VECTORS_FILE}` holds {} bytes, but the index says {} vectors of {} floats",
                vectors.len(),
                index.count,
                index.dim
            );
        }
        let data = vectors.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        Ok(Self { index, data })
    }

    /// Read `index.json` and `vectors.f32` from a folder.
    pub fn load(dir: &Path) -> Result<Self> {
        let i = std::fs::read(dir.join(INDEX_FILE))
            .with_context(|| format!("cannot read `{}`", dir.join(INDEX_FILE).display()))?;
        let v = std::fs::read(dir.join(VECTORS_FILE))
            .with_context(|| format!("cannot read `{}`", dir.join(VECTORS_FILE).display()))?;
        Self::from_bytes(&i, &v).with_context(|| format!("in `{}`", dir.display()))
    }

    pub fn vector_bytes(&self) -> Vec<u8> {
        self.data.iter().flat_map(|x| x.to_le_bytes()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_round_trip_and_size_is_checked() {
        let index = Index {
            model_id: "m".into(),
            model_sha256: "h".into(),
            dim: 2,
            count: 2,
            tools: vec![
                IndexRow { row: 0, id: "a".into(), text_sha256: "x".into() },
                IndexRow { row: 1, id: "b".into(), text_sha256: "y".into() },
            ],
        };
        let v = Vectors { index: index.clone(), data: vec![1.0, 0.0, 0.6, 0.8] };
        let bytes = v.vector_bytes();
        let back = Vectors::from_bytes(&serde_json::to_vec(&index).unwrap(), &bytes).unwrap();
        assert_eq!(back.row(1), &[0.6, 0.8]);
        assert!(Vectors::from_bytes(&serde_json::to_vec(&index).unwrap(), &bytes[..12]).is_err());
    }
}
