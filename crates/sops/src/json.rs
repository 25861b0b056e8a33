//! JSON files (sops `stores/json`), and SOPS' binary format: a JSON object whose `data` string holds the
//! whole original file. Numbers are ints when they fit `i64`, floats otherwise, as SOPS reads them.

use crate::error::{SopsError, malformed};
use crate::tree::Node;

pub(crate) fn parse(bytes: &[u8]) -> Result<Node, SopsError> {
    serde_json::from_slice(bytes).map_err(|e| {
        // serde_json's messages name a position and a category, never the input.
        malformed(format!("JSON: {e}"))
    })
}

pub(crate) fn emit(doc: &Node) -> Result<Vec<u8>, SopsError> {
    let mut out = serde_json::to_vec_pretty(doc).map_err(|e| malformed(format!("JSON: {e}")))?;
    out.push(b'\n');
    Ok(out)
}

/// The original file of a decrypted binary-format tree.
pub(crate) fn binary_data(doc: &Node) -> Result<Vec<u8>, SopsError> {
    match doc.get("data") {
        Some(Node::Str(s)) => Ok(s.clone().into_bytes()),
        Some(other) => Err(malformed(format!(
            "the binary file's data is a {}, not a string",
            other.kind()
        ))),
        None => Err(malformed("the binary file has no data entry")),
    }
}
