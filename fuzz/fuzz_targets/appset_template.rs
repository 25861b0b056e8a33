//! ApplicationSet templating: a template text and parameter values taken from the input (split on
//! NUL bytes), substituted strictly and leniently. Must never panic; a strict substitution that
//! succeeds leaves no `{{name}}` of a known parameter behind.
#![no_main]

use capstan_appset::Params;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut parts = text.split('\0');
    let template = parts.next().unwrap_or_default();
    let mut params = Params::new();
    let mut rest = parts;
    while let (Some(k), Some(v)) = (rest.next(), rest.next()) {
        params.insert(k.to_string(), v.to_string());
    }
    let _ = capstan_appset::template::substitute(template, &params, true);
    let _ = capstan_appset::template::substitute(template, &params, false);
    let mut value = serde_json::json!({"metadata": {"name": template}, "spec": [template, {"k": template}]});
    capstan_appset::template::substitute_lenient(&mut value, &params);
});
