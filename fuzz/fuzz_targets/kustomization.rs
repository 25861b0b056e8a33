//! A kustomization file's text, read as the renderer reads it before Kustomize runs: must never
//! panic or hang, and whatever it accepts holds only Kustomize's fields spelled exactly, in one
//! document.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if capstan_render::check_kustomization(text, "fuzz/kustomization.yaml").is_ok() {
            // Accepted: a second reading agrees (the check is a pure function of the text).
            assert!(capstan_render::check_kustomization(text, "again").is_ok());
        }
    }
});
