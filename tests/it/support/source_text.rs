//! Rust source text with comments, string and char literals blanked, shared by the two
//! source-text checks (`src/import_graph.rs` and `tests/it/function_length.rs`) so both
//! read code the same way.

/// The source with comments, string and char literals blanked to spaces (newlines kept), so
/// braces and `fn` are only found in code.
pub fn code_only(src: &str) -> Vec<u8> {
    let s = src.as_bytes();
    let mut out = s.to_vec();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for b in &mut out[from..to] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
    };
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        let prev = if i > 0 { s[i - 1] } else { b' ' };
        if c == b'/' && s.get(i + 1) == Some(&b'/') {
            let end = s[i..].iter().position(|&b| b == b'\n').map_or(s.len(), |p| i + p);
            blank(&mut out, i, end);
            i = end;
        } else if c == b'/' && s.get(i + 1) == Some(&b'*') {
            // Block comments nest in Rust.
            let (mut depth, mut j) = (1, i + 2);
            while j < s.len() && depth > 0 {
                if s[j] == b'/' && s.get(j + 1) == Some(&b'*') {
                    depth += 1;
                    j += 2;
                } else if s[j] == b'*' && s.get(j + 1) == Some(&b'/') {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if c == b'r'
            && (!ident(prev) || (prev == b'b' && (i < 2 || !ident(s[i - 2]))))
            && matches!(s.get(i + 1), Some(b'"' | b'#'))
        {
            // A raw string `r#"…"#`: it ends at a quote followed by as many `#`.
            let hashes = s[i + 1..].iter().take_while(|&&b| b == b'#').count();
            if s.get(i + 1 + hashes) != Some(&b'"') {
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
            let body = i + 2 + hashes;
            let end = s[body..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(s.len(), |p| body + p + close.len());
            blank(&mut out, i, end);
            i = end;
        } else if c == b'"' {
            let mut j = i + 1;
            while j < s.len() && s[j] != b'"' {
                j += if s[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i, (j + 1).min(s.len()));
            i = j + 1;
        } else if c == b'\'' {
            // A char literal (`'x'`, `'\n'`, `'{'`); otherwise a lifetime or label.
            if s.get(i + 1) == Some(&b'\\') {
                let mut j = i + 2;
                while j < s.len() && s[j] != b'\'' {
                    j += 1;
                }
                blank(&mut out, i, (j + 1).min(s.len()));
                i = j + 1;
            } else {
                let width = src[i + 1..].chars().next().map_or(1, char::len_utf8);
                if s.get(i + 1 + width) == Some(&b'\'') {
                    blank(&mut out, i, i + 2 + width);
                    i += 2 + width;
                } else {
                    i += 1;
                }
            }
        } else {
            i += 1;
        }
    }
    out
}
