//! Blanking what the architecture checks must not read: comments, the contents of string and
//! character literals, and ranges such as test module bodies. Every byte offset and newline
//! stays where it was, so positions found in one text hold in the others.

use super::source::is_ident;

/// Replaces the bytes of `range` (whole characters) with spaces, keeping newlines.
pub fn blank(text: &mut String, range: std::ops::Range<usize>) {
    let mut bytes = std::mem::take(text).into_bytes();
    for byte in &mut bytes[range] {
        if *byte != b'\n' {
            *byte = b' ';
        }
    }
    *text = String::from_utf8(bytes).expect("a range between ASCII braces");
}

/// The text with comments blanked (`code`), and with string and char literal contents
/// blanked as well (`skeleton`). Both keep every byte offset and newline of `text`.
pub fn without_comments(text: &str) -> (String, String) {
    let bytes = text.as_bytes();
    let mut code = bytes.to_vec();
    let mut skeleton = bytes.to_vec();
    let blank_both = |from: usize, to: usize, code: &mut Vec<u8>, skeleton: &mut Vec<u8>| {
        for position in from..to {
            if bytes[position] != b'\n' {
                code[position] = b' ';
                skeleton[position] = b' ';
            }
        }
    };
    let blank_literal = |from: usize, to: usize, skeleton: &mut Vec<u8>| {
        for position in from..to {
            if bytes[position] != b'\n' {
                skeleton[position] = b' ';
            }
        }
    };
    let mut index = 0;
    while index < bytes.len() {
        let rest = &bytes[index..];
        let previous_is_ident = index > 0 && is_ident(bytes[index - 1]);
        if rest.starts_with(b"//") {
            let end = index + rest.iter().position(|b| *b == b'\n').unwrap_or(rest.len());
            blank_both(index, end, &mut code, &mut skeleton);
            index = end;
        } else if rest.starts_with(b"/*") {
            let mut depth = 0;
            let mut end = index;
            while end < bytes.len() {
                if bytes[end..].starts_with(b"/*") {
                    depth += 1;
                    end += 2;
                } else if bytes[end..].starts_with(b"*/") {
                    depth -= 1;
                    end += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    end += 1;
                }
            }
            blank_both(index, end, &mut code, &mut skeleton);
            index = end;
        } else if !previous_is_ident && raw_string_start(rest).is_some() {
            let (prefix, hashes) = raw_string_start(rest).unwrap();
            let closing: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let body = index + prefix;
            let end = bytes[body..]
                .windows(closing.len())
                .position(|window| window == closing.as_slice())
                .map_or(bytes.len(), |at| body + at);
            blank_literal(body, end, &mut skeleton);
            index = end + closing.len();
        } else if rest[0] == b'"' {
            let mut end = index + 1;
            while end < bytes.len() && bytes[end] != b'"' {
                end += if bytes[end] == b'\\' { 2 } else { 1 };
            }
            blank_literal(index + 1, end.min(bytes.len()), &mut skeleton);
            index = end + 1;
        } else if rest[0] == b'\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            let end = match rest.get(1) {
                Some(b'\\') => rest
                    .iter()
                    .skip(2)
                    .position(|b| *b == b'\'')
                    .map(|at| index + 2 + at),
                Some(_) => {
                    let width = std::str::from_utf8(&rest[1..rest.len().min(5)])
                        .map_or(1, |s| s.chars().next().map_or(1, char::len_utf8));
                    (rest.get(1 + width) == Some(&b'\'')).then_some(index + 1 + width)
                }
                None => None,
            };
            match end {
                Some(end) => {
                    blank_literal(index + 1, end, &mut skeleton);
                    index = end + 1;
                }
                None => index += 1,
            }
        } else {
            index += 1;
        }
    }
    let code = String::from_utf8(code).expect("blanking keeps whole characters");
    let skeleton = String::from_utf8(skeleton).expect("blanking keeps whole characters");
    (code, skeleton)
}

/// `r"`, `r#"`, `br"`, … at the start of `rest`: (bytes before the body, number of `#`).
fn raw_string_start(rest: &[u8]) -> Option<(usize, usize)> {
    let after_b = rest.strip_prefix(b"b").unwrap_or(rest);
    let after_r = after_b.strip_prefix(b"r")?;
    let hashes = after_r.iter().take_while(|b| **b == b'#').count();
    (after_r.get(hashes) == Some(&b'"')).then(|| (rest.len() - after_r.len() + hashes + 1, hashes))
}
