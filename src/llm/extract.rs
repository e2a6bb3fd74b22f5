//! Getting JSON out of a model's text: drop `<think>…</think>` blocks, then take the whole
//! text if it is JSON, else the first fenced ```json block (or any fenced block) that parses,
//! else the first balanced `{…}` or `[…]` that parses.

use serde_json::Value;

/// Remove reasoning blocks (`<think>…</think>`; an unclosed one runs to the end).
pub fn strip_think(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("<think>") {
        out.push_str(&rest[..start]);
        match rest[start..].find("</think>") {
            Some(end) => rest = &rest[start + end + "</think>".len()..],
            None => {
                rest = "";
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The call object that the text opens with (bare, or in its first fenced block), read up to its
/// `name` and `arguments` (or `parameters`), whether or not the object is complete: small
/// models go on after the call, making up its result in the same object (`"result_id": …,
/// "items": [`) until their completion limit cuts it, and a cut object is no JSON (the first
/// balanced value in it is the arguments, which are no call). The call ends where both are
/// read, as it would have with a stop sequence; what follows is not read. `None` when the text
/// does not open with an object or a member before both is cut or malformed.
///
/// Qwen2.5's chat template lists the tools inside `<tools>` tags and shows a call's shape
/// between doubled braces in some renderings, and the 1.5B model writes its calls that way
/// (`<tools>\n{{"name": "search_incidents", "arguments": {…}}}\n</tools>`: every call it made
/// in the demo's incident dialogue). Neither the opening tag nor a doubled brace can start
/// JSON, so reading through them takes nothing that was not written as a call.
pub fn leading_call(text: &str) -> Option<Value> {
    let trimmed = past_echoed_tools(text).trim_start();
    let trimmed = trimmed.strip_prefix("<tools>").map_or(trimmed, str::trim_start);
    // The object opens the text, or the first fenced block (after a line such as "Here is
    // the call:"); an object inside prose is not a call.
    let body = match trimmed.starts_with('{') {
        true => trimmed,
        false => trimmed[trimmed.find("```")? + 3..].split_once('\n')?.1.trim_start(),
    };
    let mut rest = body.strip_prefix("{{").or_else(|| body.strip_prefix('{'))?;
    let mut members = serde_json::Map::new();
    loop {
        let mut keys = serde_json::Deserializer::from_str(rest).into_iter::<String>();
        let key = keys.next()?.ok()?;
        rest = rest[keys.byte_offset()..].trim_start().strip_prefix(':')?;
        let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
        let value = values.next()?.ok()?;
        rest = rest[values.byte_offset()..].trim_start();
        // A number the text ends with may be cut (`12` of `123`).
        if value.is_number() && rest.is_empty() {
            return None;
        }
        members.insert(key, value);
        let named = members.get("name").is_some_and(Value::is_string);
        if named && (members.contains_key("arguments") || members.contains_key("parameters")) {
            return Some(Value::Object(members));
        }
        rest = rest.strip_prefix(',')?;
    }
}

/// The text after a closed `<tools>…</tools>` block that holds tool definitions and nothing
/// else (a prose line may come before it), the text itself when it has none. Qwen2.5's
/// template lists the tools that way, and the 1.5B echoes its tool's definition in the tags
/// before writing the call (twice in the demo's eval, 2026-12-07: `<tools>\n{"type":
/// "function", "function": {…, "parameters": …}}\n</tools>\n{{"name": …, "arguments": …}}}`).
/// A definition has `parameters` and no `arguments`, so no call with its `arguments` is
/// skipped (a `{"name", "parameters"}` object, which [`leading_call`] reads as a call
/// elsewhere, counts as a definition inside the tags that list definitions).
fn past_echoed_tools(text: &str) -> &str {
    let Some(open) = text.find("<tools>") else { return text };
    let body = &text[open + "<tools>".len()..];
    let Some(close) = body.find("</tools>") else { return text };
    let mut any = false;
    for v in serde_json::Deserializer::from_str(&body[..close]).into_iter::<Value>() {
        let Ok(v) = v else { return text };
        let f = v.get("function").unwrap_or(&v);
        if !(f["name"].is_string() && f.get("parameters").is_some() && f.get("arguments").is_none()) {
            return text;
        }
        any = true;
    }
    if any { &body[close + "</tools>".len()..] } else { text }
}

/// Whether an agent turn's text so far holds a whole tool call written as text, as
/// [`crate::agent::text_tool_calls`] reads one: a [`leading_call`] (its `name` and
/// `arguments` read), outside Qwen's `<tool_call>` blocks (a model may write several of
/// those, each a call of the turn). The loop reads nothing after such a call, so a streamed
/// turn can end there ([`crate::llm::TEXT_CALL_STOPS`]).
pub fn text_call_complete(text: &str) -> bool {
    let text = strip_think(text);
    !text.contains("<tool_call>") && leading_call(&text).is_some()
}

/// The JSON value in a model answer, or why there is none.
pub fn extract_json(text: &str) -> Result<Value, String> {
    let text = strip_think(text);
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err("the answer is empty (no JSON value)".into());
    }
    if let Ok(v) = serde_json::from_str::<Value>(trimmed) {
        return Ok(v);
    }
    if let Some(v) = fenced(trimmed) {
        return Ok(v);
    }
    if let Some(v) = first_balanced(trimmed) {
        return Ok(v);
    }
    let shown: String = trimmed.chars().take(120).collect();
    Err(format!("no JSON value found in the answer (it starts with {shown:?})"))
}

fn fenced(text: &str) -> Option<Value> {
    let mut rest = text;
    let mut blocks = Vec::new();
    while let Some(start) = rest.find("```") {
        let after = &rest[start + 3..];
        let (lang, body_start) = match after.find('\n') {
            Some(nl) => (after[..nl].trim(), nl + 1),
            None => return None,
        };
        let body = &after[body_start..];
        let Some(end) = body.find("```") else { break };
        blocks.push((lang.eq_ignore_ascii_case("json"), &body[..end]));
        rest = &body[end + 3..];
    }
    // Prefer blocks labelled json, then any block.
    blocks.sort_by_key(|(is_json, _)| !*is_json);
    blocks.into_iter().find_map(|(_, b)| serde_json::from_str(b.trim()).ok())
}

/// The first `{…}` or `[…]` whose brackets balance (outside strings) and that parses.
fn first_balanced(text: &str) -> Option<Value> {
    let bytes = text.as_bytes();
    for (start, &b) in bytes.iter().enumerate() {
        if b != b'{' && b != b'[' {
            continue;
        }
        if let Ok(end) = closing(&text[start..])
            && let Ok(v) = serde_json::from_str(&text[start..=start + end])
        {
            return Some(v);
        }
    }
    None
}

/// Where the JSON value that `text` opens with (`{` or `[`) closes: the byte index of its
/// closing bracket, strings skipped; else the nesting depth at the end of the text and
/// whether it ends inside a string (a value cut short).
pub(crate) fn closing(text: &str) -> Result<usize, (i32, bool)> {
    let mut depth = 0i32;
    let mut in_str = false;
    let mut escaped = false;
    for (i, &c) in text.as_bytes().iter().enumerate() {
        if in_str {
            match c {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            b'"' => in_str = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth -= 1;
                if depth == 0 {
                    return Ok(i);
                }
            }
            _ => {}
        }
    }
    Err((depth, in_str))
}

/// A phrase of [`LOOP_WORDS`] words that `text` repeats three times or more, as a small
/// model stuck in a decoding loop writes (case and punctuation ignored). `None` for text
/// that a person might write, where such a repeat is rare.
pub fn looped(text: &str) -> Option<String> {
    let words: Vec<String> = text
        .split_whitespace()
        .map(|w| w.chars().filter(|c| c.is_alphanumeric()).flat_map(char::to_lowercase).collect::<String>())
        .filter(|w| !w.is_empty())
        .collect();
    let mut seen: std::collections::HashMap<&[String], usize> = std::collections::HashMap::new();
    for gram in words.windows(LOOP_WORDS) {
        let n = seen.entry(gram).or_default();
        *n += 1;
        if *n == 3 {
            return Some(gram.join(" "));
        }
    }
    None
}

/// A check for typed answers (`typed_checked`): `what` (e.g. "the query") must not loop.
pub fn check_no_loop(text: &str, what: &str) -> Result<(), String> {
    match looped(text) {
        Some(p) => Err(format!("{what} repeats \"{p}\" three times or more; write each point once")),
        None => Ok(()),
    }
}

/// Words in a phrase [`looped`] looks for.
pub const LOOP_WORDS: usize = 6;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_text_call_is_whole_once_its_name_and_arguments_are_read() {
        let call = "{\"name\": \"get_oncall\", \"arguments\": {\"team\": \"db\"}";
        // Each prefix of the call is not whole yet; the call is, with or without what follows.
        for end in 0..call.len() {
            assert!(!text_call_complete(&call[..end]), "{:?}", &call[..end]);
        }
        assert!(text_call_complete(call));
        assert!(text_call_complete(&format!("{call}, \"result_id\": \"r-1\", \"items\": [")));
        assert!(text_call_complete(&format!("Here is the call:\n```json\n{call}")));
        assert!(text_call_complete(&format!("<think>which tool</think>{call}")));
        // Arguments before the name: whole only when the name is read.
        assert!(!text_call_complete("{\"arguments\": {\"team\": \"db\"}, \"name\": \"get_o"));
        assert!(text_call_complete("{\"arguments\": {\"team\": \"db\"}, \"name\": \"get_oncall\""));
        // Qwen's blocks may hold several calls of one turn; prose and a list of calls are no call
        // the text opens with (a list is read whole, when it ends).
        assert!(!text_call_complete(&format!("<tool_call>\n{call}}}\n</tool_call>\n")));
        assert!(!text_call_complete(&format!("I will call it: {call}")));
        assert!(!text_call_complete(&format!("[{call}}}, ")));
        assert!(!text_call_complete("<think>{\"name\": \"a\", \"arguments\": {}}"));
    }

    #[test]
    fn a_call_in_tools_tags_or_between_doubled_braces_is_read_as_the_call() {
        // As the demo's 1.5B wrote its first call of the incident dialogue (eval, 2026-12-07).
        let echoed = "<tools>\n{{\"name\": \"search_incidents\", \"arguments\": {\"query\": \"notifications errors\", \
                      \"status\": \"open\"}}}\n</tools>";
        let call =
            json!({"name": "search_incidents", "arguments": {"query": "notifications errors", "status": "open"}});
        assert_eq!(leading_call(echoed), Some(call.clone()));
        // Whole once its arguments close, not before.
        let whole = echoed.find("}}}").unwrap() + 1;
        for end in 0..whole {
            assert!(!text_call_complete(&echoed[..end]), "{:?}", &echoed[..end]);
        }
        assert!(text_call_complete(&echoed[..whole]));
        assert_eq!(leading_call("{{\"name\": \"a\", \"arguments\": {}}}"), Some(json!({"name": "a", "arguments": {}})));
        assert_eq!(
            leading_call("<tools>{\"name\": \"a\", \"arguments\": {}}</tools>"),
            Some(json!({"name": "a", "arguments": {}}))
        );
        // The tag around prose, or a doubled brace around what is no call, is still no call.
        assert_eq!(leading_call("<tools>I cannot do that.</tools>"), None);
        assert_eq!(leading_call("{{\"answer\": 3}}"), None);
        assert_eq!(leading_call("Here: <tools>{\"name\": \"a\", \"arguments\": {}}</tools>"), None);
    }

    #[test]
    fn a_call_after_the_echoed_definition_of_its_tool_is_read() {
        // As the demo's 1.5B wrote two first turns of the real sessions (eval, 2026-12-07).
        let def = "{\"type\": \"function\", \"function\": {\"name\": \"list_deployments\", \"description\": \
                   \"Recent deployments.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"service\": \
                   {\"type\": \"string\"}}, \"required\": [\"service\"]}}}";
        let call = "{{\"name\": \"list_deployments\", \"arguments\": {\"service\": \"payments\"}}}";
        let expected = json!({"name": "list_deployments", "arguments": {"service": "payments"}});
        let bare = format!("<tools>\n{def}\n</tools>\n{call}");
        let after_prose =
            format!("To answer this, I need to call `list_deployments`.\n\n<tools>\n{def}\n</tools>\n\n{call}");
        for text in [&bare, &after_prose] {
            assert_eq!(leading_call(text), Some(expected.clone()), "{text}");
            // Whole once the call's arguments close, not before (nor at the definition).
            let whole = text.rfind("}}}").unwrap() + 1;
            for end in 0..whole {
                assert!(!text_call_complete(&text[..end]), "{:?}", &text[..end]);
            }
            assert!(text_call_complete(&text[..whole]));
        }
        // The definition alone is no call; nor is a block that holds a call among definitions
        // (its call is not skipped), nor prose after the block.
        assert_eq!(leading_call(&format!("<tools>\n{def}\n</tools>")), None);
        assert_eq!(
            leading_call(&format!("<tools>\n{def}\n{{\"name\": \"a\", \"arguments\": {{}}}}\n</tools>\nDone.")),
            None
        );
        assert_eq!(leading_call(&format!("<tools>\n{def}\n</tools>\nI cannot call it.")), None);
    }

    #[test]
    fn extracts_from_the_usual_shapes() {
        assert_eq!(extract_json(" {\"a\": 1} ").unwrap(), json!({"a": 1}));
        assert_eq!(extract_json("<think>maybe {\"a\": 0}</think>\n{\"a\": 2}").unwrap(), json!({"a": 2}));
        assert_eq!(extract_json("Sure:\n```json\n{\"a\": 3}\n```\nDone.").unwrap(), json!({"a": 3}));
        assert_eq!(extract_json("```\n[1, 2]\n```").unwrap(), json!([1, 2]));
        assert_eq!(extract_json("The answer is {\"a\": \"}{\", \"b\": [1]} ok").unwrap(), json!({"a": "}{", "b": [1]}));
        assert_eq!(extract_json("noise {broken} then [3]").unwrap(), json!([3]));
        assert!(extract_json("<think>only thinking").is_err());
        assert!(extract_json("{\"a\": ").is_err());
    }

    #[test]
    fn strip_think_handles_several_blocks() {
        assert_eq!(strip_think("a<think>x</think>b<think>y</think>c"), "abc");
    }

    #[test]
    fn looped_finds_a_phrase_written_three_times() {
        let q = "Find the versions of inventory deployed recently? then roll it back? tell me the versions of \
                 inventory deployed recently? then roll it back? tell me the versions of inventory deployed recently? then";
        assert_eq!(looped(q).as_deref(), Some("the versions of inventory deployed recently"));
        // Twice is not a loop, nor are short repeats.
        assert_eq!(looped("List the open alerts of inventory, then list the open alerts of checkout."), None);
        assert_eq!(looped("ok ok ok ok ok"), None);
        assert_eq!(looped("a b c d e f A, B c d e f a b c. d e f"), Some("a b c d e f".into()));
    }
}
