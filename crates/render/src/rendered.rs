//! [`Rendered`]: what a render gives, the objects and the tool that made them.

use serde_json::Value;

use crate::kind::Tool;

/// The objects a source renders to, in the order the files or the tool produced them.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// The Kubernetes objects, `List`s flattened, Helm hooks mapped (see [`crate::hooks`]).
    pub objects: Vec<Value>,
    /// The tool used.
    pub tool: Tool,
}
