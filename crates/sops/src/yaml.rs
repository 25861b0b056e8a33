//! YAML files (sops `stores/yaml`): every document of the stream is a branch; the `sops` metadata lives
//! in the first one and is removed from all. The plaintext is written back as block YAML with keys in
//! their original order; strings that could be read as another type are double-quoted.

use crate::error::{SopsError, malformed};
use crate::tree::Node;

/// The documents of a YAML stream.
pub(crate) fn parse(bytes: &[u8]) -> Result<Vec<Node>, SopsError> {
    let text = std::str::from_utf8(bytes).map_err(|_| malformed("the YAML file is not UTF-8"))?;
    // sops reads YAML with go-yaml v3: only `true`/`false` are booleans (`yes`, `on`, `y` are strings).
    let mut options = serde_saphyr::Options::default();
    options.strict_booleans = true;
    let docs: Vec<Node> = serde_saphyr::from_multiple_with_options(text, options)
        .map_err(|e| malformed(format!("YAML: {}", first_line(&e.to_string()))))?;
    Ok(docs)
}

/// Parser messages may render a snippet of the input after their first line; only that first line
/// (position and cause) is kept, so values stay out of errors.
fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or_default().chars().take(200).collect()
}

/// Writes documents as a YAML stream.
pub(crate) fn emit(docs: &[Node]) -> Vec<u8> {
    let mut out = String::new();
    for (i, doc) in docs.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        match doc {
            Node::Map(items) if !items.is_empty() => map(&mut out, items, 0, false),
            Node::Seq(items) if !items.is_empty() => seq(&mut out, items, 0),
            other => {
                out.push_str(&scalar_or_empty(other));
                out.push('\n');
            }
        }
    }
    out.into_bytes()
}

fn indent(out: &mut String, n: usize) {
    out.extend(std::iter::repeat_n(' ', n));
}

/// A block map at `level`; with `inline_first`, the first key continues the current line (`- key:`).
fn map(out: &mut String, items: &[(String, Node)], level: usize, inline_first: bool) {
    for (i, (k, v)) in items.iter().enumerate() {
        if !(inline_first && i == 0) {
            indent(out, level);
        }
        out.push_str(&string(k));
        out.push(':');
        value(out, v, level);
    }
}

fn seq(out: &mut String, items: &[Node], level: usize) {
    for item in items {
        indent(out, level);
        out.push('-');
        match item {
            Node::Map(m) if !m.is_empty() => {
                out.push(' ');
                map(out, m, level + 2, true);
            }
            Node::Seq(s) if !s.is_empty() => {
                out.push('\n');
                seq(out, s, level + 2);
            }
            other => {
                out.push(' ');
                out.push_str(&scalar_or_empty(other));
                out.push('\n');
            }
        }
    }
}

/// The value after `key:` at `level`.
fn value(out: &mut String, v: &Node, level: usize) {
    match v {
        Node::Map(m) if !m.is_empty() => {
            out.push('\n');
            map(out, m, level + 2, false);
        }
        Node::Seq(s) if !s.is_empty() => {
            out.push('\n');
            seq(out, s, level + 2);
        }
        other => {
            out.push(' ');
            out.push_str(&scalar_or_empty(other));
            out.push('\n');
        }
    }
}

fn scalar_or_empty(n: &Node) -> String {
    match n {
        Node::Null => "null".into(),
        Node::Bool(b) => b.to_string(),
        Node::Int(i) => i.to_string(),
        Node::Float(f) if f.is_nan() => ".nan".into(),
        Node::Float(f) if f.is_infinite() => if *f > 0.0 { ".inf" } else { "-.inf" }.into(),
        Node::Float(f) => format!("{f:?}"),
        Node::Str(s) => string(s),
        Node::Map(_) => "{}".into(),
        Node::Seq(_) => "[]".into(),
    }
}

/// Words YAML 1.1 or 1.2 readers may take for booleans or null.
const RESERVED: [&str; 12] = [
    "true", "false", "yes", "no", "y", "n", "on", "off", "null", "~", "nan", "inf",
];

/// A string as a plain scalar when it is unambiguous, double-quoted (JSON escapes are YAML escapes) else.
fn string(s: &str) -> String {
    let plain = s
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '/' || c == '_')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/'))
        && !RESERVED.contains(&s.to_ascii_lowercase().as_str());
    if plain {
        s.to_string()
    } else {
        serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_true_and_false_are_booleans() {
        let docs = parse(b"a: yes\nb: on\nc: y\nd: true\n").expect("parse");
        let Node::Map(items) = &docs[0] else { panic!("map") };
        assert_eq!(items[0].1, Node::Str("yes".into()));
        assert_eq!(items[2].1, Node::Str("y".into()));
        assert_eq!(items[3].1, Node::Bool(true));
        let out = String::from_utf8(emit(&docs)).expect("utf-8");
        assert!(out.starts_with("a: \"yes\"\n"), "{out}");
    }

    #[test]
    fn emits_in_order_and_reparses_to_the_same_tree() {
        let text = "b: 1\na:\n  - x: 1\n    y: [1, 2]\n  - \"yes\"\n  - 1.5\n  - 2.0\n  - null\n  - ''\nc: \"multi\\nline: #x\"\nd: {}\ne: []\nf: true\n";
        let docs = parse(text.as_bytes()).expect("parse");
        let out = emit(&docs);
        let again = parse(&out).expect("reparse");
        assert_eq!(docs, again, "{}", String::from_utf8_lossy(&out));
        assert!(String::from_utf8_lossy(&out).starts_with("b: 1\na:\n"));
    }
}
