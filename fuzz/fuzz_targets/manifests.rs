//! Repository files as manifests: any bytes, parsed as the directory renderer parses a YAML stream
//! and a JSON file. Must never panic, hang or exhaust memory (the parser's budget bounds it).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = capstan_render::parse_manifests(text, "fuzz.yaml", false);
        let _ = capstan_render::parse_manifests(text, "fuzz.json", true);
    }
});
