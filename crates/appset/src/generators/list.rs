//! `list`: each element is one parameter set, nested objects and arrays flattened (`a.b`, `a.0`).

use capstan_api::applicationset::ListGenerator;
use serde_json::Value;

use super::ParamSet;
use crate::error::GenerateError;
use crate::params::flatten;

/// The list's elements as parameter sets.
pub(crate) fn generate(g: &ListGenerator, place: &str) -> Result<Vec<ParamSet>, GenerateError> {
    g.elements
        .iter()
        .enumerate()
        .map(|(i, element)| match element {
            Value::Object(_) => Ok(ParamSet {
                params: flatten(element),
                origin: format!("element {i}"),
            }),
            other => Err(GenerateError::InvalidGenerator {
                place: format!("{place}.elements[{i}]"),
                message: format!("an element must be an object of parameters, found {}", json_type(other)),
            }),
        })
        .collect()
}

/// The JSON type of a value, for messages.
pub(crate) fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn elements_become_flattened_sets() {
        let g = ListGenerator {
            elements: vec![
                json!({"cluster": "a", "url": "https://a", "replicas": 2, "image": {"tag": "v1"}}),
                json!({"cluster": "b", "url": "https://b", "values": {"x": "y"}}),
            ],
            template: None,
        };
        let sets = generate(&g, "generators[0].list").unwrap();
        assert_eq!(sets.len(), 2);
        assert_eq!(sets[0].params["cluster"], "a");
        assert_eq!(sets[0].params["replicas"], "2");
        assert_eq!(sets[0].params["image.tag"], "v1");
        assert_eq!(sets[0].origin, "element 0");
        assert_eq!(sets[1].params["values.x"], "y");
    }

    #[test]
    fn non_object_elements_are_errors() {
        let g = ListGenerator {
            elements: vec![json!({"a": "b"}), json!("oops")],
            template: None,
        };
        let err = generate(&g, "generators[2].list").unwrap_err();
        assert_eq!(
            err.to_string(),
            "generators[2].list.elements[1]: an element must be an object of parameters, found a string"
        );
    }
}
