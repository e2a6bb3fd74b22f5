//! Is a tool's input schema valid JSON Schema? The sandbox (and any MCP client that
//! validates arguments) refuses every call to a tool whose schema does not compile, so
//! registry import reports such tools (`import_report.json`, kind `invalid-input-schema`)
//! and filter rules can drop them (`invalid_input_schema = true`). One check for both,
//! the same one the sandbox uses, so the three never disagree.

use serde_json::Value;

use super::Note;
use crate::model::Catalog;

/// Why `schema` is not a usable JSON Schema, or `None` when it is.
pub fn input_schema_problem(schema: &Value) -> Option<String> {
    jsonschema::validator_for(schema).err().map(|e| e.to_string())
}

/// One note per tool of `catalog` whose input schema is invalid, in catalog order.
pub fn invalid_schema_notes(catalog: &Catalog) -> Vec<Note> {
    catalog
        .tools()
        .filter_map(|(_, t)| {
            input_schema_problem(&t.input_schema).map(|why| Note {
                location: t.id.clone(),
                kind: "invalid-input-schema",
                message: format!(
                    "the input schema is not valid JSON Schema ({why}); every call to the tool would be refused"
                ),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn compiling_schemas_pass_and_broken_ones_say_why() {
        assert_eq!(input_schema_problem(&json!({"type": "object", "properties": {"q": {"type": "string"}}})), None);
        assert_eq!(input_schema_problem(&json!({})), None);
        let why = input_schema_problem(&json!({"type": "object", "properties": {"q": {"type": "strin"}}})).unwrap();
        assert!(why.contains("strin"), "{why}");
        assert!(input_schema_problem(&json!({"type": "object", "required": "q"})).is_some());
        assert!(input_schema_problem(&Value::Null).is_some());
    }
}
