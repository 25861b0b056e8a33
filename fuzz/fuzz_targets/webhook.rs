//! Webhook payloads: any body as a push event of every provider, then matched against a
//! repository URL. Must never panic.
#![no_main]

use capstan_server::webhook::{self, Provider};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for (provider, event) in [
        (Provider::GitHub, "push"),
        (Provider::GitLab, "Push Hook"),
        (Provider::Gitea, "push"),
        (Provider::Bitbucket, "repo:push"),
    ] {
        if let Ok(push) = webhook::parse(provider, event, data) {
            let _ = webhook::same_repo(&push, "https://git.example.com/org/app.git");
            let _ = webhook::touches_revision(&push, "main");
            let _ = webhook::touches_paths(&push, "apps/web", Some("."));
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let push = webhook::Push {
            repo_urls: vec![text.to_string()],
            ..webhook::Push::default()
        };
        let _ = webhook::same_repo(&push, "https://git.example.com/org/app.git");
    }
});
