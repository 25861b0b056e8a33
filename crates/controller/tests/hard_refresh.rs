//! End to end: `capstan.dev/refresh: hard` makes the controller render an Application again instead
//! of answering from the render cache; `normal` does not. Its own test binary, so the process-wide
//! render-cache counters count this test's renders only (also under `cargo test`); the control plane
//! is the run's shared one (the renders are this process's controller's, whatever else the cluster
//! holds).

mod support;

use std::time::Duration;

use capstan_metrics::CacheLabels;
use support::*;

const CONFIG: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {color: blue}\n";

/// Render-cache lookups so far that found `result` (`hit` or `miss`).
fn lookups(result: &str) -> u64 {
    capstan_metrics::global()
        .render_cache
        .get_or_create(&CacheLabels { result: result.into() })
        .get()
}

fn reconciled_at(app: &capstan_api::Application) -> Option<String> {
    app.status.as_ref().and_then(|s| s.reconciled_at.clone())
}

/// Ask for a refresh of `kind` and wait until the controller has cleared the request and recorded a
/// new comparison.
async fn refresh(env: &Env, name: &str, kind: &str) -> anyhow::Result<()> {
    let before = reconciled_at(&env.app(name).await?);
    env.annotate(name, "capstan.dev/refresh", kind).await?;
    env.wait_app(name, &format!("{kind} refresh handled"), Duration::from_secs(60), |a| {
        let pending = a
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|m| m.contains_key("capstan.dev/refresh"));
        !pending && reconciled_at(a) != before
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hard_refresh_renders_again_and_a_normal_one_uses_the_render_cache() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("config")?;
    let sha = env
        .git
        .commit("config", "main", &[("cfg/settings.yaml", Some(CONFIG))], "settings")?;
    env.create_app(app("cfg", &env.git.git_url("config"), "cfg", "refresh-demo", false))
        .await?;
    env.wait_app("cfg", "compared at the commit", Duration::from_secs(60), |a| {
        a.status
            .as_ref()
            .and_then(|s| s.sync.as_ref())
            .is_some_and(|s| s.revision == sha)
            && reconciled_at(a).is_some()
    })
    .await?;
    let misses = lookups("miss");
    assert!(misses >= 1, "the first comparison rendered");

    // A normal refresh asks Git again but renders the same commit from the cache.
    let hits = lookups("hit");
    refresh(&env, "cfg", "normal").await?;
    assert_eq!(
        lookups("miss"),
        misses,
        "a normal refresh is answered from the render cache"
    );
    assert!(lookups("hit") > hits, "the normal refresh compared (from the cache)");

    // A hard refresh renders again.
    refresh(&env, "cfg", "hard").await?;
    let after_hard = lookups("miss");
    assert!(
        after_hard > misses,
        "a hard refresh must miss the render cache ({after_hard} misses, {misses} before)"
    );

    // Its result went back into the cache: the next normal refresh hits it.
    refresh(&env, "cfg", "normal").await?;
    assert_eq!(lookups("miss"), after_hard, "the hard refresh's render was cached");
    Ok(())
}
