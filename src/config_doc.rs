//! `benchgen config reference`: every key of the pipeline config with its type, default and
//! meaning, as the Markdown between the markers of `docs/config.md`. Each section lists its
//! keys beside its settings type (`Section::KEYS`), and `tests/it/config_doc.rs` holds the
//! lists to the types: every field described, every default the one a key left out gets,
//! every list of choices the one serde accepts, every required key refused when missing.
//!
//! This file names no other module of the crate (`settings.rs` and every family name it).

use serde::Serialize;

/// One row of a section's key list: a key, or a table whose keys follow it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Key {
    /// Dotted path inside the section (`roles.<role>.model`); a `<…>` segment is a name the
    /// config chooses (one table per name).
    pub path: &'static str,
    pub kind: Kind,
    /// The value's TOML type as shown: `string`, `path`, `integer`, `number`, `bool`,
    /// `list of …`, `table of …`, or its choices (`"etom" | "glama"`). Empty for a table.
    pub ty: &'static str,
    /// What leaving the key out means.
    pub absent: Absent,
    /// What the key does, in a line.
    pub meaning: &'static str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A key with a value.
    Value,
    /// A table (`[section.path]`).
    Table,
    /// A list of tables (`[[section.path]]`).
    Tables,
}

/// What a key left out means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Absent {
    /// The same as this TOML value.
    Is(&'static str),
    /// The config must give it.
    Required,
    /// No value; the meaning says what that does.
    Unset,
    /// Worked out from other settings, as the text says.
    Derived(&'static str),
}

impl Key {
    /// A key that, left out, is the same as the TOML value `default`.
    pub const fn new(path: &'static str, ty: &'static str, default: &'static str, meaning: &'static str) -> Self {
        Key { path, kind: Kind::Value, ty, absent: Absent::Is(default), meaning }
    }

    /// A key the config must give.
    pub const fn required(path: &'static str, ty: &'static str, meaning: &'static str) -> Self {
        Key { path, kind: Kind::Value, ty, absent: Absent::Required, meaning }
    }

    /// A key with no value when left out.
    pub const fn unset(path: &'static str, ty: &'static str, meaning: &'static str) -> Self {
        Key { path, kind: Kind::Value, ty, absent: Absent::Unset, meaning }
    }

    /// A key whose default is worked out from other settings (`default` says how).
    pub const fn derived(path: &'static str, ty: &'static str, default: &'static str, meaning: &'static str) -> Self {
        Key { path, kind: Kind::Value, ty, absent: Absent::Derived(default), meaning }
    }

    /// A table whose keys follow.
    pub const fn table(path: &'static str, meaning: &'static str) -> Self {
        Key { path, kind: Kind::Table, ty: "", absent: Absent::Unset, meaning }
    }

    /// A list of tables, each with the keys that follow.
    pub const fn tables(path: &'static str, meaning: &'static str) -> Self {
        Key { path, kind: Kind::Tables, ty: "", absent: Absent::Unset, meaning }
    }

    /// The path of the table the row sits in (`""`: the section's own).
    pub fn parent(&self) -> &'static str {
        self.path.rsplit_once('.').map_or("", |(parent, _)| parent)
    }

    /// The last segment of the path.
    pub fn name(&self) -> &'static str {
        self.path.rsplit_once('.').map_or(self.path, |(_, name)| name)
    }
}

/// A config section as `benchgen config reference` shows it.
#[derive(Debug, Serialize)]
pub struct SectionDoc {
    pub name: &'static str,
    /// Absent, it is read with its defaults (else its stages are left out of `run`).
    pub always: bool,
    /// Empty: not described yet.
    pub keys: &'static [Key],
}

/// The Markdown of `docs/config.md` between its markers: per section a heading, what its
/// absence means, and one table of keys for the section and for each of its tables.
pub fn markdown(sections: &[SectionDoc]) -> String {
    let mut s = String::new();
    for sec in sections {
        s.push_str(&format!("### `[{}]`\n\n", sec.name));
        s.push_str(if sec.always {
            "Optional: absent, it is read with the defaults below.\n\n"
        } else {
            "Optional: without it, the stages it configures are not part of `benchgen run`.\n\n"
        });
        if sec.keys.is_empty() {
            s.push_str("Its keys are not listed here yet: see the page the table above links.\n\n");
            continue;
        }
        key_table(&mut s, "", sec.keys);
        for t in sec.keys.iter().filter(|k| k.kind != Kind::Value) {
            let (open, close) = if t.kind == Kind::Tables { ("[[", "]]") } else { ("[", "]") };
            s.push_str(&format!("#### `{open}{}.{}{close}`\n\n{}\n\n", sec.name, t.path, t.meaning));
            key_table(&mut s, t.path, sec.keys);
        }
    }
    s
}

/// The rows of the keys that sit directly in the table at `path`, if any.
fn key_table(s: &mut String, path: &str, keys: &[Key]) {
    let rows: Vec<&Key> = keys.iter().filter(|k| k.kind == Kind::Value && k.parent() == path).collect();
    if rows.is_empty() {
        return;
    }
    s.push_str("| key | type | default | meaning |\n|---|---|---|---|\n");
    for k in rows {
        let default = match k.absent {
            Absent::Is(value) => format!("`{value}`"),
            Absent::Required => "required".to_string(),
            Absent::Unset => "unset".to_string(),
            Absent::Derived(text) => text.to_string(),
        };
        s.push_str(&format!("| `{}` | {} | {} | {} |\n", k.name(), cell(k.ty), cell(&default), cell(k.meaning)));
    }
    s.push('\n');
}

/// Text for a table cell: a `|`, even inside code, would end the cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}
