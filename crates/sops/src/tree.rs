//! The format-neutral tree SOPS works on: ordered maps, sequences and typed scalars, with the same
//! scalar kinds as SOPS' Go tree (string, int, float, bool, null). Order is kept as in the file.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

/// One node of a SOPS tree.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<(String, Node)>),
}

impl Node {
    pub(crate) fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Map(items) => items.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Node::Null => "null",
            Node::Bool(_) => "bool",
            Node::Int(_) => "int",
            Node::Float(_) => "float",
            Node::Str(_) => "string",
            Node::Seq(_) => "list",
            Node::Map(_) => "map",
        }
    }
}

/// The bytes SOPS feeds the MAC for a scalar (Go `sops.ToBytes`): booleans as `True`/`False`, floats in
/// Go's shortest `'f'` form. `None` for non-scalars.
pub(crate) fn mac_bytes(node: &Node) -> Option<Vec<u8>> {
    match node {
        Node::Str(s) => Some(s.as_bytes().to_vec()),
        Node::Int(i) => Some(i.to_string().into_bytes()),
        Node::Float(f) => Some(go_float(*f).into_bytes()),
        Node::Bool(true) => Some(b"True".to_vec()),
        Node::Bool(false) => Some(b"False".to_vec()),
        _ => None,
    }
}

/// Go's `strconv.FormatFloat(f, 'f', -1, 64)`: shortest round-trip digits, never an exponent.
pub(crate) fn go_float(f: f64) -> String {
    if f.is_nan() {
        "NaN".to_string()
    } else if f.is_infinite() {
        if f > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else {
        // Rust's Display for f64 is the shortest round-trip form without exponent, like Go's 'f', -1.
        format!("{f}")
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a YAML or JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Int(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
        // Like SOPS' JSON store: an int when it fits int64, a float otherwise.
        Ok(i64::try_from(v).map(Node::Int).unwrap_or(Node::Float(v as f64)))
    }
    fn visit_i128<E>(self, v: i128) -> Result<Node, E> {
        Ok(i64::try_from(v).map(Node::Int).unwrap_or(Node::Float(v as f64)))
    }
    fn visit_u128<E>(self, v: u128) -> Result<Node, E> {
        Ok(i64::try_from(v).map(Node::Int).unwrap_or(Node::Float(v as f64)))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Str(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Node, E> {
        Ok(Node::Str(v))
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Node, E> {
        String::from_utf8(v.to_vec())
            .map(Node::Str)
            .map_err(|_| E::custom("binary values are not supported"))
    }
    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Node>()? {
            items.push(item);
        }
        Ok(Node::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut items: Vec<(String, Node)> = Vec::new();
        while let Some(key) = map.next_key::<Node>()? {
            let key = match key {
                Node::Str(s) => s,
                Node::Int(i) => i.to_string(),
                Node::Bool(b) => b.to_string(),
                Node::Float(f) => go_float(f),
                other => {
                    return Err(de::Error::custom(format!(
                        "a {} map key: only string keys are supported",
                        other.kind()
                    )));
                }
            };
            let value = map.next_value::<Node>()?;
            if items.iter().any(|(k, _)| *k == key) {
                return Err(de::Error::custom(format!("duplicate key {key:?}")));
            }
            items.push((key, value));
        }
        Ok(Node::Map(items))
    }
}

impl Serialize for Node {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Node::Null => s.serialize_unit(),
            Node::Bool(b) => s.serialize_bool(*b),
            Node::Int(i) => s.serialize_i64(*i),
            Node::Float(f) => s.serialize_f64(*f),
            Node::Str(v) => s.serialize_str(v),
            Node::Seq(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Node::Map(items) => {
                let mut map = s.serialize_map(Some(items.len()))?;
                for (k, v) in items {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_and_bools_are_stringified_like_go() {
        assert_eq!(mac_bytes(&Node::Float(1.5)), Some(b"1.5".to_vec()));
        assert_eq!(mac_bytes(&Node::Float(1.0)), Some(b"1".to_vec()));
        assert_eq!(mac_bytes(&Node::Float(1e21)), Some(b"1000000000000000000000".to_vec()));
        assert_eq!(mac_bytes(&Node::Float(0.000001)), Some(b"0.000001".to_vec()));
        assert_eq!(mac_bytes(&Node::Bool(true)), Some(b"True".to_vec()));
        assert_eq!(mac_bytes(&Node::Int(-3)), Some(b"-3".to_vec()));
        assert_eq!(mac_bytes(&Node::Null), None);
    }

    #[test]
    fn json_keeps_key_order() {
        let n: Node = serde_json::from_str(r#"{"b":1,"a":[true,2.5,"x",null]}"#).expect("json");
        let Node::Map(items) = &n else { panic!("map") };
        assert_eq!(items[0].0, "b");
        assert_eq!(items[1].0, "a");
        assert_eq!(
            serde_json::to_string(&n).expect("json"),
            r#"{"b":1,"a":[true,2.5,"x",null]}"#
        );
    }
}
