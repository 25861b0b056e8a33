//! Dotenv files (sops `stores/dotenv`): `KEY=value` lines (a `\n` in a value is written `\\n`), `#`
//! comments, empty lines dropped. The metadata is flattened into `sops_…` entries (sops
//! `stores/flatten.go`: `__map_KEY` and `__list_N` separators), unflattened here.

use crate::error::{SopsError, malformed, not_sops};
use crate::tree::{Node, go_float};

#[derive(Debug)]
pub(crate) enum Line {
    Comment(String),
    Pair(String, String),
}

/// The entries of a dotenv file, and its `sops_` entries unflattened into a metadata map.
pub(crate) fn parse(bytes: &[u8]) -> Result<(Vec<Line>, Option<Node>), SopsError> {
    let text = std::str::from_utf8(bytes).map_err(|_| malformed("the dotenv file is not UTF-8"))?;
    let mut lines = Vec::new();
    let mut meta: Option<Node> = None;
    for (i, line) in text.split('\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        if let Some(c) = line.strip_prefix('#') {
            lines.push(Line::Comment(c.to_string()));
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| malformed(format!("dotenv line {} has no '='", i + 1)))?;
        let value = value.replace("\\n", "\n");
        if let Some(flat) = key.strip_prefix("sops_") {
            place(
                meta.get_or_insert(Node::Map(Vec::new())),
                &tokens(flat)?,
                Node::Str(value),
            )?;
        } else {
            lines.push(Line::Pair(key.to_string(), value));
        }
    }
    Ok((lines, meta))
}

/// Cheap detection: `sops_mac=` and `sops_lastmodified=` lines.
pub(crate) fn is_encrypted(bytes: &[u8]) -> bool {
    let lines = || bytes.split(|b| *b == b'\n');
    lines().any(|l| l.starts_with(b"sops_mac=")) && lines().any(|l| l.starts_with(b"sops_lastmodified="))
}

pub(crate) fn emit(lines: &[(Option<String>, Node)]) -> Vec<u8> {
    let mut out = String::new();
    for (key, value) in lines {
        match (key, value) {
            (None, Node::Str(c)) => {
                out.push('#');
                out.push_str(c);
            }
            (Some(k), v) => {
                out.push_str(k);
                out.push('=');
                out.push_str(&match v {
                    Node::Str(s) => s.replace('\n', "\\n"),
                    Node::Int(i) => i.to_string(),
                    Node::Bool(b) => b.to_string(),
                    Node::Float(f) => go_float(*f),
                    _ => String::new(),
                });
            }
            (None, _) => continue,
        }
        out.push('\n');
    }
    out.into_bytes()
}

#[derive(Debug, PartialEq)]
enum Token {
    Key(String),
    Index(usize),
}

const MAP_SEP: &str = "__map_";
const LIST_SEP: &str = "__list_";

/// sops `tokenize`: `age__list_0__map_enc` → `age`, `[0]`, `enc`.
fn tokens(flat: &str) -> Result<Vec<Token>, SopsError> {
    let mut out = Vec::new();
    let mut rest = flat;
    let mut current = Token::Key(String::new());
    loop {
        let next = [
            rest.find(MAP_SEP).map(|p| (p, true)),
            rest.find(LIST_SEP).map(|p| (p, false)),
        ]
        .into_iter()
        .flatten()
        .min_by_key(|(p, _)| *p);
        let (head, tail) = match next {
            Some((p, _)) => (&rest[..p], Some(&rest[p..])),
            None => (rest, None),
        };
        out.push(match current {
            Token::Key(_) => Token::Key(head.to_string()),
            Token::Index(_) => Token::Index(
                head.parse()
                    .map_err(|_| not_sops(format!("sops_{flat}: {head:?} is not a list index")))?,
            ),
        });
        let Some(tail) = tail else { break };
        if let Some(t) = tail.strip_prefix(MAP_SEP) {
            current = Token::Key(String::new());
            rest = t;
        } else {
            current = Token::Index(0);
            rest = tail.strip_prefix(LIST_SEP).unwrap_or(tail);
        }
    }
    Ok(out)
}

fn place(root: &mut Node, path: &[Token], value: Node) -> Result<(), SopsError> {
    let Some((first, rest)) = path.split_first() else {
        *root = value;
        return Ok(());
    };
    if matches!(root, Node::Null) {
        *root = match first {
            Token::Key(_) => Node::Map(Vec::new()),
            Token::Index(_) => Node::Seq(Vec::new()),
        };
    }
    match (first, root) {
        (Token::Key(k), Node::Map(items)) => {
            let pos = match items.iter().position(|(ik, _)| ik == k) {
                Some(p) => p,
                None => {
                    items.push((k.clone(), Node::Null));
                    items.len() - 1
                }
            };
            place(&mut items[pos].1, rest, value)
        }
        (Token::Index(i), Node::Seq(items)) => {
            if *i > 1024 {
                return Err(not_sops("a flattened sops list index is too large"));
            }
            if items.len() <= *i {
                items.resize(*i + 1, Node::Null);
            }
            place(&mut items[*i], rest, value)
        }
        _ => Err(not_sops("the flattened sops_ entries mix maps and lists")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unflattens_metadata() {
        let text = "A=1\nsops_age__list_0__map_recipient=age1x\nsops_age__list_0__map_enc=x\\ny\nsops_mac=M\n#c\n";
        let (lines, meta) = parse(text.as_bytes()).expect("parse");
        assert_eq!(lines.len(), 2);
        let meta = meta.expect("meta");
        let Some(Node::Seq(age)) = meta.get("age") else {
            panic!("age list")
        };
        assert_eq!(age[0].get("enc"), Some(&Node::Str("x\ny".into())));
        assert_eq!(meta.get("mac"), Some(&Node::Str("M".into())));
        assert_eq!(
            tokens("a__list_1__map_b_c").expect("tokens"),
            vec![Token::Key("a".into()), Token::Index(1), Token::Key("b_c".into())]
        );
    }
}
