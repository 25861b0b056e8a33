//! Surgical edits of YAML and JSON files: the scalar value of an existing key is replaced in place
//! (only its bytes change: comments, key order, indentation and the other values stay byte for byte),
//! and a Kustomize `images:` entry gets its `newTag`.
//!
//! Parsing is saphyr-parser's (the parser under serde-saphyr, already in the build), whose events
//! carry source spans; the walk to the key and the splice are written here. yaml-edit (a rowan
//! syntax tree) was considered: it is a large new dependency, and the refusals and quoting rules
//! below would still have to be written on top of it. The JSON crates keep no source spans, so JSON
//! is parsed by the same YAML parser (JSON is YAML 1.2 flow style).
//!
//! Whatever the editor cannot change safely (flow style in YAML, anchors and aliases, tags,
//! multi-line scalars, several documents) is refused, and every edit is checked by parsing the
//! result again: the document must equal the old one with only the requested value changed.

use saphyr_parser::{Event, Parser, ScalarStyle, Span};
use serde_json::Value;

use crate::request::{Change, KeyPath, Segment};
use crate::{WriteError, scalar};

/// Nesting deeper than this is refused (the tree is built recursively).
const MAX_DEPTH: usize = 200;

/// Apply `change` to `text`, the contents of the file at `path` (JSON if it ends with `.json`, else
/// YAML). `None` when the file already holds the requested value.
pub fn apply(path: &str, text: &str, change: &Change) -> Result<Option<String>, WriteError> {
    let json = path.to_ascii_lowercase().ends_with(".json");
    match change {
        Change::SetKey { key, value } => set_key(text, key, value, json).map_err(|r| r.into_error(path, key)),
        Change::KustomizeImage { name, new_tag } => {
            let key = KeyPath(vec![Segment::Key("images".into())]);
            let shown = format!("images[name={name}].newTag");
            kustomize_image(text, name, new_tag, json).map_err(|r| match r {
                Refusal::Missing(None) => WriteError::MissingKey {
                    path: path.into(),
                    key: shown,
                },
                r => r.into_error(path, &key),
            })
        }
        // Not an edit of a file's text: the writer creates the file ([`crate::paths::create`]).
        Change::CreateFile { .. } => Ok(None),
    }
}

/// Why an edit was not made, before the file's path is known to the message.
#[derive(Debug)]
enum Refusal {
    /// The key (or, if given, this part of it) does not exist.
    Missing(Option<String>),
    /// The edit is refused.
    Cannot(String),
}

impl Refusal {
    fn into_error(self, path: &str, key: &KeyPath) -> WriteError {
        match self {
            Refusal::Missing(shown) => WriteError::MissingKey {
                path: path.into(),
                key: shown.unwrap_or_else(|| key.to_string()),
            },
            Refusal::Cannot(reason) => WriteError::CannotEdit {
                path: path.into(),
                key: key.to_string(),
                reason,
            },
        }
    }
}

fn cannot<T>(reason: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal::Cannot(reason.into()))
}

/// A node of the document with its byte range in the source.
#[derive(Debug)]
struct Node {
    kind: Kind,
    start: usize,
    end: usize,
    anchored: bool,
    tagged: bool,
}

#[derive(Debug)]
enum Kind {
    Scalar { value: String, style: ScalarStyle },
    Seq { items: Vec<Node>, flow: bool },
    Map { entries: Vec<(Node, Node)>, flow: bool },
    Alias,
}

/// The one document of `text` as a tree.
fn parse(text: &str) -> Result<Node, Refusal> {
    let events: Vec<(Event, Span)> = Parser::new_from_str(text)
        .collect::<Result<_, _>>()
        .map_err(|e| Refusal::Cannot(format!("the file is not valid YAML/JSON: {e}")))?;
    // Parser positions count characters; slicing needs bytes.
    let offsets: Vec<usize> = text.char_indices().map(|(i, _)| i).chain([text.len()]).collect();
    let mut builder = Builder {
        events: &events,
        next: 0,
        text,
        offsets: &offsets,
    };
    let mut root = None;
    while let Some((event, _)) = builder.events.get(builder.next) {
        builder.next += 1;
        if let Event::DocumentStart(_) = event {
            if root.is_some() {
                return cannot("the file holds several YAML documents");
            }
            root = Some(builder.node(0)?);
        }
    }
    // An empty file has no keys.
    root.ok_or(Refusal::Missing(None))
}

struct Builder<'e, 'i> {
    events: &'e [(Event<'i>, Span)],
    next: usize,
    text: &'e str,
    offsets: &'e [usize],
}

impl Builder<'_, '_> {
    fn byte(&self, char_index: usize) -> usize {
        self.offsets.get(char_index).copied().unwrap_or(self.text.len())
    }

    fn node(&mut self, depth: usize) -> Result<Node, Refusal> {
        if depth > MAX_DEPTH {
            return cannot(format!("nesting deeper than {MAX_DEPTH} levels"));
        }
        let Some((event, span)) = self.events.get(self.next) else {
            return cannot("unexpected end of the document");
        };
        self.next += 1;
        let (start, end) = (self.byte(span.start.index()), self.byte(span.end.index()));
        let opens = |c: char| self.text.get(start..).is_some_and(|t| t.starts_with(c));
        let (kind, anchor, tagged) = match event {
            Event::Scalar(value, style, anchor, tag) => (
                Kind::Scalar {
                    value: value.to_string(),
                    style: *style,
                },
                *anchor,
                tag.is_some(),
            ),
            Event::Alias(_) => (Kind::Alias, 0, false),
            Event::SequenceStart(anchor, tag) => {
                let flow = opens('[');
                let mut items = Vec::new();
                while !self.at_end(|e| matches!(e, Event::SequenceEnd)) {
                    items.push(self.node(depth + 1)?);
                }
                (Kind::Seq { items, flow }, *anchor, tag.is_some())
            }
            Event::MappingStart(anchor, tag) => {
                let flow = opens('{');
                let mut entries = Vec::new();
                while !self.at_end(|e| matches!(e, Event::MappingEnd)) {
                    let key = self.node(depth + 1)?;
                    let value = self.node(depth + 1)?;
                    entries.push((key, value));
                }
                (Kind::Map { entries, flow }, *anchor, tag.is_some())
            }
            other => return cannot(format!("unexpected YAML event {other:?}")),
        };
        // The parser's span of a quoted scalar followed by a comment (`tag: "1.0" # c`) runs on over
        // the comment; the scalar ends at its closing quote.
        let end = match (&kind, self.text.get(start..end)) {
            (Kind::Scalar { style, .. }, Some(source)) => start + quoted_len(source, *style).unwrap_or(source.len()),
            _ => end,
        };
        Ok(Node {
            kind,
            start,
            end,
            anchored: anchor != 0,
            tagged,
        })
    }

    /// Whether the next event ends the current collection (and consume it if so).
    fn at_end(&mut self, is_end: impl Fn(&Event) -> bool) -> bool {
        let end = self.events.get(self.next).is_none_or(|(e, _)| is_end(e));
        if end {
            self.next += 1;
        }
        end
    }
}

/// Check that a collection on the way to the key can be edited inside.
fn check_container(node: &Node, json: bool) -> Result<(), Refusal> {
    match &node.kind {
        Kind::Alias => cannot("the path goes through an alias (*name)"),
        _ if node.anchored => cannot("the path goes through an anchored node (&name); its aliases would change too"),
        _ if node.tagged => cannot("the path goes through a tagged node"),
        Kind::Seq { flow: true, .. } | Kind::Map { flow: true, .. } if !json => {
            cannot("flow style ({...} or [...]) is not edited")
        }
        _ => Ok(()),
    }
}

/// The value of `key` in the mapping `node`.
fn lookup<'a>(node: &'a Node, key: &str) -> Result<Option<&'a Node>, Refusal> {
    let Kind::Map { entries, .. } = &node.kind else {
        return Ok(None);
    };
    let mut found = entries
        .iter()
        .filter(|(k, _)| matches!(&k.kind, Kind::Scalar { value, .. } if value == key));
    match (found.next(), found.next()) {
        (Some(_), Some(_)) => cannot(format!("the key {key:?} appears twice")),
        (first, _) => Ok(first.map(|(_, v)| v)),
    }
}

/// The node at `key`.
fn find<'a>(root: &'a Node, key: &KeyPath, json: bool) -> Result<&'a Node, Refusal> {
    let mut node = root;
    for segment in key.segments() {
        check_container(node, json)?;
        let next = match (segment, &node.kind) {
            (Segment::Key(k), _) => lookup(node, k)?,
            (Segment::Index(i), Kind::Seq { items, .. }) => items.get(*i),
            (Segment::Index(_), _) => None,
        };
        node = next.ok_or(Refusal::Missing(None))?;
    }
    Ok(node)
}

/// The length of the quoted scalar `source` starts with, if `source` is one followed only by blanks
/// and a comment (`"1.0" # c`).
fn quoted_len(source: &str, style: ScalarStyle) -> Option<usize> {
    let quote = match style {
        ScalarStyle::DoubleQuoted => '"',
        ScalarStyle::SingleQuoted => '\'',
        _ => return None,
    };
    let mut chars = source.char_indices().peekable();
    if chars.next()?.1 != quote {
        return None;
    }
    let mut len = None;
    while let Some((i, c)) = chars.next() {
        if quote == '"' && c == '\\' {
            chars.next();
        } else if c == quote {
            if quote == '\'' && chars.peek().is_some_and(|(_, n)| *n == '\'') {
                chars.next();
                continue;
            }
            len = Some(i + 1);
            break;
        }
    }
    let len = len?;
    let rest = &source[len..];
    let comment = rest.starts_with([' ', '\t']) && rest.trim_start_matches([' ', '\t']).starts_with('#');
    comment.then_some(len)
}

/// The replacement for the scalar `node` (None if it already holds `new`).
fn replacement(text: &str, node: &Node, new: &str, json: bool) -> Result<Option<String>, Refusal> {
    let (value, style) = match &node.kind {
        Kind::Scalar { value, style } => (value, *style),
        Kind::Alias => return cannot("the value is an alias (*name)"),
        _ => return cannot("the value is a mapping or a sequence, not a scalar"),
    };
    if node.anchored {
        return cannot("the value is anchored (&name); its aliases would change too");
    }
    if node.tagged {
        return cannot("the value has a tag (!tag)");
    }
    let source = text.get(node.start..node.end).unwrap_or("");
    if matches!(style, ScalarStyle::Literal | ScalarStyle::Folded) || source.contains(['\n', '\r']) {
        return cannot("multi-line scalars are not edited");
    }
    let delimited = |q: char| source.len() >= 2 && source.starts_with(q) && source.ends_with(q);
    let span_ok = match style {
        ScalarStyle::Plain => source == value,
        ScalarStyle::SingleQuoted => delimited('\''),
        ScalarStyle::DoubleQuoted => delimited('"'),
        _ => false,
    };
    if !span_ok {
        return cannot("the value's place in the file could not be located exactly");
    }
    if !json {
        let is_string = style != ScalarStyle::Plain || !scalar::plain_may_be_typed(value);
        return Ok((value != new || !is_string).then(|| scalar::render(new, style)));
    }
    match style {
        ScalarStyle::DoubleQuoted => Ok((value != new).then(|| scalar::double_quoted(new))),
        ScalarStyle::Plain => {
            let old: Option<Value> = serde_json::from_str(value).ok();
            let same_kind = match (old, serde_json::from_str::<Value>(new)) {
                (Some(Value::Number(_)), Ok(Value::Number(_))) | (Some(Value::Bool(_)), Ok(Value::Bool(_))) => {
                    new.trim() == new
                }
                _ => false,
            };
            if !same_kind {
                return cannot(format!(
                    "the JSON value {value} is not a string, and {new:?} is not one of its kind"
                ));
            }
            Ok((value != new).then(|| new.to_string()))
        }
        _ => cannot("not a JSON value"),
    }
}

fn set_key(text: &str, key: &KeyPath, new: &str, json: bool) -> Result<Option<String>, Refusal> {
    let root = parse(text)?;
    let node = find(&root, key, json)?;
    let Some(written) = replacement(text, node, new, json)? else {
        return Ok(None);
    };
    let out = format!("{}{written}{}", &text[..node.start], &text[node.end..]);
    verify(text, &out, json, |doc| set_in(doc, key.segments(), &written, json))?;
    Ok(Some(out))
}

fn kustomize_image(text: &str, name: &str, new_tag: &str, json: bool) -> Result<Option<String>, Refusal> {
    if json {
        return cannot("Kustomize image edits need a YAML kustomization");
    }
    let root = parse(text)?;
    check_container(&root, false)?;
    let images = lookup(&root, "images")?.ok_or(Refusal::Missing(Some("images".into())))?;
    check_container(images, false)?;
    let Kind::Seq { items, .. } = &images.kind else {
        return cannot("`images` is not a sequence");
    };
    let matches_name = |item: &Node| {
        lookup(item, "name")
            .ok()
            .flatten()
            .is_some_and(|n| matches!(&n.kind, Kind::Scalar { value, .. } if value == name))
    };
    let Some(index) = items.iter().position(matches_name) else {
        return Err(Refusal::Missing(None));
    };
    let item = &items[index];
    check_container(item, false)?;
    let tag_path = KeyPath(vec![
        Segment::Key("images".into()),
        Segment::Index(index),
        Segment::Key("newTag".into()),
    ]);
    if lookup(item, "newTag")?.is_some() {
        return set_key(text, &tag_path, new_tag, false);
    }
    // Add `newTag:` on the line after `name:`, indented like `name`.
    let Kind::Map { entries, .. } = &item.kind else {
        return cannot("the images entry is not a mapping");
    };
    let Some((name_key, name_value)) = entries
        .iter()
        .find(|(k, _)| matches!(&k.kind, Kind::Scalar { value, .. } if value == "name"))
    else {
        return Err(Refusal::Missing(None));
    };
    if text[name_value.start..name_value.end].contains('\n') {
        return cannot("the image name spans several lines");
    }
    let line_start = text[..name_key.start].rfind('\n').map_or(0, |i| i + 1);
    let indent = text[line_start..name_key.start].chars().count();
    let newline = if text.contains("\r\n") { "\r\n" } else { "\n" };
    let written = scalar::render(new_tag, ScalarStyle::Plain);
    let line = format!("{}newTag: {written}{newline}", " ".repeat(indent));
    let out = match text[name_value.end..].find('\n') {
        Some(i) => {
            let at = name_value.end + i + 1;
            format!("{}{line}{}", &text[..at], &text[at..])
        }
        None => format!("{text}{newline}{line}"),
    };
    verify(text, &out, false, |doc| {
        let entry = doc
            .get_mut("images")
            .and_then(|i| i.get_mut(index))
            .and_then(Value::as_object_mut);
        entry
            .map(|e| e.insert("newTag".into(), Value::String(new_tag.into())))
            .is_some()
    })?;
    Ok(Some(out))
}

/// The document `text` holds, as data.
fn load(text: &str, json: bool) -> Result<Value, String> {
    if json {
        serde_json::from_str(text).map_err(|e| e.to_string())
    } else {
        serde_saphyr::from_str(text).map_err(|e| e.to_string())
    }
}

/// Check that `after` holds the document `before` holds with the change `expect` makes to it.
fn verify(before: &str, after: &str, json: bool, expect: impl FnOnce(&mut Value) -> bool) -> Result<(), Refusal> {
    let mut expected = load(before, json).map_err(|e| Refusal::Cannot(format!("the file cannot be read: {e}")))?;
    if !expect(&mut expected) {
        return cannot("the key could not be located in the parsed document");
    }
    match load(after, json) {
        Ok(actual) if actual == expected => Ok(()),
        _ => cannot("the edited file would not hold exactly the old document with this one value changed"),
    }
}

/// Set the value at `path` in `doc` to what the scalar `written` reads as.
fn set_in(doc: &mut Value, path: &[Segment], written: &str, json: bool) -> bool {
    let Ok(value) = load(written, json) else {
        return false;
    };
    let mut node = doc;
    for segment in path {
        let next = match segment {
            Segment::Key(k) => node.get_mut(k.as_str()),
            Segment::Index(i) => node.get_mut(*i),
        };
        let Some(next) = next else {
            return false;
        };
        node = next;
    }
    *node = value;
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(path: &str, text: &str, key: &str, value: &str) -> Result<Option<String>, WriteError> {
        let change = Change::SetKey {
            key: key.parse().unwrap(),
            value: value.into(),
        };
        apply(path, text, &change)
    }

    fn cannot_edit(result: Result<Option<String>, WriteError>) -> String {
        match result {
            Err(WriteError::CannotEdit { reason, .. }) => reason,
            other => panic!("expected CannotEdit, got {other:?}"),
        }
    }

    const VALUES: &str = "# Default values\nreplicaCount: 2  # keep two\n\nimage:\n  repository: nginx   # upstream\n  tag: \"1.25.3\"\n  pullPolicy: IfNotPresent\nservice:\n  port: 80\n  name: 'web'\n";

    #[test]
    fn only_the_value_changes() {
        let out = set("values.yaml", VALUES, "image.tag", "1.26.0").unwrap().unwrap();
        assert_eq!(out, VALUES.replace("\"1.25.3\"", "\"1.26.0\""));
        let out = set("values.yaml", VALUES, "image.repository", "registry.example/nginx")
            .unwrap()
            .unwrap();
        assert_eq!(out, VALUES.replace("nginx   #", "registry.example/nginx   #"));
        let out = set("values.yaml", VALUES, "service.name", "it's").unwrap().unwrap();
        assert_eq!(out, VALUES.replace("'web'", "'it''s'"));
        assert_eq!(set("values.yaml", VALUES, "image.tag", "1.25.3").unwrap(), None);
        assert_eq!(set("values.yaml", VALUES, "service.name", "web").unwrap(), None);
    }

    #[test]
    fn strings_that_would_read_as_numbers_are_quoted() {
        let out = set("v.yaml", "tag: v1  # c\n", "tag", "1.10").unwrap().unwrap();
        assert_eq!(out, "tag: \"1.10\"  # c\n");
        // An unquoted number holding a tag becomes a quoted string, even with the same digits.
        let out = set("v.yaml", "tag: 1.10\n", "tag", "1.10").unwrap().unwrap();
        assert_eq!(out, "tag: \"1.10\"\n");
        let out = set("v.yaml", "tag: '1.9'\n", "tag", "1.10").unwrap().unwrap();
        assert_eq!(out, "tag: '1.10'\n");
        // Quoted values followed by a comment.
        let out = set("v.yaml", "tag: \"1.4.2\" # promoted\nx: 1\n", "tag", "1.5.0")
            .unwrap()
            .unwrap();
        assert_eq!(out, "tag: \"1.5.0\" # promoted\nx: 1\n");
        let out = set("v.yaml", "tag: '1.4.2'\t# promoted\n", "tag", "1.5.0")
            .unwrap()
            .unwrap();
        assert_eq!(out, "tag: '1.5.0'\t# promoted\n");
        let out = set("v.yaml", "a: \"x\\\"y\" # \"q\"\nb: 'it''s' # 'q'\n", "a", "z")
            .unwrap()
            .unwrap();
        assert_eq!(out, "a: \"z\" # \"q\"\nb: 'it''s' # 'q'\n");
        let out = set("v.yaml", "a: \"x\\\"y\" # \"q\"\nb: 'it''s' # 'q'\n", "b", "no")
            .unwrap()
            .unwrap();
        assert_eq!(out, "a: \"x\\\"y\" # \"q\"\nb: 'no' # 'q'\n");
    }

    #[test]
    fn sequences_of_mappings_by_index() {
        let text = "images:\n  - name: a  # first\n    newTag: \"1\"\n  - name: b\n    newTag: v2\nother: x\n";
        let out = set("k.yaml", text, "images[1].newTag", "v3").unwrap().unwrap();
        assert_eq!(out, text.replace("v2", "v3"));
        assert!(matches!(
            set("k.yaml", text, "images[2].newTag", "v3"),
            Err(WriteError::MissingKey { key, .. }) if key == "images[2].newTag"
        ));
    }

    #[test]
    fn missing_keys_are_not_created() {
        for key in ["image.digest", "nope", "image.tag.x", "image[0]"] {
            assert!(
                matches!(set("v.yaml", VALUES, key, "x"), Err(WriteError::MissingKey { ref path, .. }) if path == "v.yaml"),
                "{key}"
            );
        }
    }

    #[test]
    fn unsafe_constructs_are_refused() {
        assert!(cannot_edit(set("v.yaml", "image: {tag: v1}\n", "image.tag", "v2")).contains("flow"));
        assert!(cannot_edit(set("v.yaml", "tags: [a, b]\n", "tags[0]", "c")).contains("flow"));
        let anchors = "base: &b\n  tag: v1\nother: *b\n";
        assert!(cannot_edit(set("v.yaml", anchors, "base.tag", "v2")).contains("anchor"));
        assert!(cannot_edit(set("v.yaml", "a: &x v1\nb: *x\n", "a", "v2")).contains("anchor"));
        assert!(cannot_edit(set("v.yaml", "a: &x v1\nb: *x\n", "b", "v2")).contains("alias"));
        assert!(cannot_edit(set("v.yaml", "a: |\n  line\n", "a", "v2")).contains("multi-line"));
        assert!(cannot_edit(set("v.yaml", "a: \"x\n  y\"\n", "a", "v2")).contains("multi-line"));
        assert!(cannot_edit(set("v.yaml", "a: 1\n---\nb: 2\n", "a", "v2")).contains("several"));
        assert!(cannot_edit(set("v.yaml", "a:\n  b: 1\n", "a", "v2")).contains("not a scalar"));
        assert!(cannot_edit(set("v.yaml", "a: !custom v1\n", "a", "v2")).contains("tag"));
        assert!(cannot_edit(set("v.yaml", "a: [\n", "a", "v2")).contains("not valid"));
        assert!(matches!(
            set("v.yaml", "", "a", "v2"),
            Err(WriteError::MissingKey { .. })
        ));
        assert!(matches!(
            set("v.yaml", "# only a comment\n", "a", "v2"),
            Err(WriteError::MissingKey { .. })
        ));
    }

    #[test]
    fn unicode_before_the_value_is_counted_in_bytes() {
        let text = "# café ☕\nname: ünïcode\ntag: v1\n";
        let out = set("v.yaml", text, "tag", "v2").unwrap().unwrap();
        assert_eq!(out, text.replace("v1", "v2"));
    }

    #[test]
    fn json_keeps_its_formatting() {
        let text = "{\n    \"imageTag\": \"1.4.2\",\n    \"targetRevision\":   \"main\",\n  \"replicas\": 2\n}\n";
        let out = set("config.json", text, "imageTag", "1.5.0").unwrap().unwrap();
        assert_eq!(out, text.replace("1.4.2", "1.5.0"));
        let out = set("config.json", text, "imageTag", "say \"hi\"").unwrap().unwrap();
        assert_eq!(out, text.replace("\"1.4.2\"", r#""say \"hi\"""#));
        let out = set("config.json", text, "replicas", "3").unwrap().unwrap();
        assert_eq!(out, text.replace(": 2", ": 3"));
        assert!(cannot_edit(set("config.json", text, "replicas", "three")).contains("not a string"));
        assert_eq!(set("config.json", text, "imageTag", "1.4.2").unwrap(), None);
        let compact = r#"{"a":{"b":["x","y"]}}"#;
        assert_eq!(
            set("c.json", compact, "a.b[1]", "z").unwrap().unwrap(),
            r#"{"a":{"b":["x","z"]}}"#
        );
    }

    #[test]
    fn kustomize_images() {
        let text = "resources:\n  - deploy.yaml\nimages:\n  - name: nginx\n    newTag: 1.25.3 # pinned\n  - name: ghcr.io/org/app  # ours\n    newName: ghcr.io/org/app2\n";
        let change = |name: &str, tag: &str| Change::KustomizeImage {
            name: name.into(),
            new_tag: tag.into(),
        };
        let out = apply("kustomization.yaml", text, &change("nginx", "1.26.0"))
            .unwrap()
            .unwrap();
        assert_eq!(out, text.replace("1.25.3", "1.26.0"));
        let out = apply("kustomization.yaml", text, &change("ghcr.io/org/app", "v2"))
            .unwrap()
            .unwrap();
        assert_eq!(out, text.replace("# ours\n", "# ours\n    newTag: v2\n"));
        let out = apply("kustomization.yaml", text, &change("ghcr.io/org/app", "2.0"))
            .unwrap()
            .unwrap();
        assert!(out.contains("    newTag: \"2.0\"\n"), "{out}");
        assert!(matches!(
            apply("kustomization.yaml", text, &change("redis", "7")),
            Err(WriteError::MissingKey { key, .. }) if key == "images[name=redis].newTag"
        ));
        assert!(matches!(
            apply("kustomization.yaml", "resources: []\n", &change("redis", "7")),
            Err(WriteError::MissingKey { key, .. }) if key == "images"
        ));
    }
}
