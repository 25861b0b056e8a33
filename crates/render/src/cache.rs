//! The render cache and its single flight, on [`moka`]: rendered results by key (revision, path,
//! parameters, tool identity), at most a fixed number of them, the least recently used evicted first.
//!
//! Callers that ask for one key at once wait for one render and share its result or its error
//! (`moka`'s `or_try_insert_with` coalesces them, and a caller that gives up hands the render to the
//! next waiter); an error is not cached, so a later caller renders again.
//!
//! Every key belongs to a scope (repository, path, Application, namespace) and carries the scope's
//! generation. Invalidating a scope (a hard refresh) drops its entries and bumps its generation: a
//! render that started before still answers the callers that asked before, and stores its result
//! under the old generation, where no later caller looks (it leaves with the least recently used):
//! nothing computed before an invalidation is served to a caller that asks after it. The generations
//! are kept for every scope ever invalidated (one number per Application path hard-refreshed).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use moka::policy::EvictionPolicy;

use crate::error::RenderError;
use crate::rendered::Rendered;

/// A result and the scope it belongs to.
#[derive(Debug)]
struct Stored {
    scope: String,
    rendered: Rendered,
}

pub(crate) struct Cache {
    entries: moka::future::Cache<String, Arc<Stored>>,
    generations: Mutex<HashMap<String, u64>>,
    hits: AtomicU64,
    misses: AtomicU64,
    rendering: Arc<AtomicUsize>,
}

/// Counts a render under way until dropped (a caller that gives up drops it too).
struct Rendering(Arc<AtomicUsize>);

impl Rendering {
    fn start(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Rendering(count.clone())
    }
}

impl Drop for Rendering {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Cache {
    /// A cache of at most `capacity` results.
    pub(crate) fn new(capacity: u64) -> Self {
        Cache {
            entries: moka::future::Cache::builder()
                .max_capacity(capacity)
                .eviction_policy(EvictionPolicy::lru())
                .support_invalidation_closures()
                .build(),
            generations: Mutex::default(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            rendering: Arc::default(),
        }
    }

    /// The result for `key` of `scope`: cached, rendered meanwhile by another caller, or rendered now
    /// by `render` (stored when it succeeds). Returns whether it was cached or shared (a hit) and the
    /// result; an error of a render other callers waited for reaches each of them as
    /// [`RenderError::Shared`].
    pub(crate) async fn get_or_render<F>(
        &self,
        key: &str,
        scope: &str,
        render: F,
    ) -> (bool, Result<Rendered, RenderError>)
    where
        F: Future<Output = Result<Rendered, RenderError>>,
    {
        let generation = self.generation(scope);
        let full_key = serde_json::json!([generation, scope, key]).to_string();
        let rendering = &self.rendering;
        let scope = scope.to_string();
        let init = async move {
            let _rendering = Rendering::start(rendering);
            render.await.map(|rendered| Arc::new(Stored { scope, rendered }))
        };
        match self.entries.entry(full_key).or_try_insert_with(init).await {
            Ok(entry) => {
                let hit = !entry.is_fresh();
                let counter = if hit { &self.hits } else { &self.misses };
                counter.fetch_add(1, Ordering::Relaxed);
                (hit, Ok(entry.into_value().rendered.clone()))
            }
            Err(shared) => {
                self.misses.fetch_add(1, Ordering::Relaxed);
                // The error itself when nothing else holds it any more, otherwise shared (its
                // message is the same; `RenderError::root` reaches the error in both cases).
                (false, Err(Arc::try_unwrap(shared).unwrap_or_else(RenderError::Shared)))
            }
        }
    }

    /// Drop every entry of `scope` and start its next generation. Returns how many were dropped.
    pub(crate) fn invalidate(&self, scope: &str) -> usize {
        *self
            .generations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(scope.to_string())
            .or_default() += 1;
        let dropped = self.entries.iter().filter(|(_, stored)| stored.scope == scope).count();
        let scope = scope.to_string();
        // Only fails when the cache was built without invalidation closures, which `new` enables.
        if let Err(err) = self
            .entries
            .invalidate_entries_if(move |_, stored| stored.scope == scope)
        {
            tracing::warn!(%err, "render cache: cannot drop entries (they expire with their generation)");
        }
        dropped
    }

    /// Hits (callers served a stored or shared result) and misses (callers whose render ran, or
    /// who shared a failed one) so far.
    pub(crate) fn stats(&self) -> (u64, u64) {
        (self.hits.load(Ordering::Relaxed), self.misses.load(Ordering::Relaxed))
    }

    /// Results stored (approximate while `moka` catches up on evictions).
    pub(crate) fn len(&self) -> u64 {
        self.entries.entry_count()
    }

    /// Renders under way (a render callers gave up on is no longer counted).
    pub(crate) fn rendering(&self) -> usize {
        self.rendering.load(Ordering::SeqCst)
    }

    fn generation(&self, scope: &str) -> u64 {
        self.generations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(scope)
            .copied()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::Tool;

    fn rendered(n: usize) -> Rendered {
        Rendered {
            objects: vec![serde_json::json!({ "n": n })],
            tool: Tool::Directory,
        }
    }

    async fn get(cache: &Cache, key: &str, scope: &str, n: usize) -> (bool, Rendered) {
        let (hit, result) = cache.get_or_render(key, scope, async move { Ok(rendered(n)) }).await;
        (hit, result.expect("renders"))
    }

    #[tokio::test]
    async fn caches_and_counts() {
        let cache = Cache::new(8);
        assert_eq!(get(&cache, "a", "s", 1).await, (false, rendered(1)));
        assert_eq!(
            get(&cache, "a", "s", 2).await,
            (true, rendered(1)),
            "served from the cache"
        );
        assert_eq!(get(&cache, "b", "s", 3).await, (false, rendered(3)));
        assert_eq!(cache.stats(), (1, 2));
    }

    #[tokio::test]
    async fn errors_are_not_cached() {
        let cache = Cache::new(8);
        let (_, failed) = cache
            .get_or_render("a", "s", async { Err(RenderError::Task("broken".into())) })
            .await;
        let failed = failed.expect_err("the render failed");
        assert!(matches!(failed.root(), RenderError::Task(_)), "{failed:?}");
        assert_eq!(failed.to_string(), "render task failed: broken");
        assert_eq!(get(&cache, "a", "s", 1).await, (false, rendered(1)), "rendered again");
    }

    #[tokio::test]
    async fn evicts_beyond_capacity() {
        let cache = Cache::new(2);
        for (i, key) in ["a", "b", "c", "d"].iter().enumerate() {
            get(&cache, key, "s", i).await;
        }
        cache.entries.run_pending_tasks().await;
        assert_eq!(cache.len(), 2);
    }

    #[tokio::test]
    async fn invalidation_drops_only_its_scope() {
        let cache = Cache::new(8);
        get(&cache, "a1", "a", 1).await;
        get(&cache, "b1", "b", 2).await;
        get(&cache, "a2", "a", 3).await;
        assert_eq!(cache.invalidate("a"), 2);
        assert_eq!(
            get(&cache, "a1", "a", 10).await,
            (false, rendered(10)),
            "rendered again"
        );
        assert_eq!(
            get(&cache, "b1", "b", 20).await,
            (true, rendered(2)),
            "another scope kept"
        );
        cache.entries.run_pending_tasks().await;
        assert_eq!(cache.invalidate("b"), 1);
    }

    #[tokio::test]
    async fn a_render_started_before_an_invalidation_is_not_served_after_it() {
        let cache = Arc::new(Cache::new(8));
        let (started, release) = (
            Arc::new(tokio::sync::Notify::new()),
            Arc::new(tokio::sync::Notify::new()),
        );
        let slow = tokio::spawn({
            let (cache, started, release) = (cache.clone(), started.clone(), release.clone());
            async move {
                cache
                    .get_or_render("k", "a", async move {
                        started.notify_one();
                        release.notified().await;
                        Ok(rendered(1))
                    })
                    .await
            }
        });
        started.notified().await;
        cache.invalidate("a");
        release.notify_one();
        let (_, old) = slow.await.expect("joins");
        assert_eq!(old.expect("renders"), rendered(1), "its own caller gets it");
        assert_eq!(
            get(&cache, "k", "a", 2).await,
            (false, rendered(2)),
            "later callers render again"
        );
    }

    #[tokio::test]
    async fn callers_of_one_key_share_one_render() {
        let cache = Cache::new(8);
        let runs = AtomicUsize::new(0);
        let results = futures::future::join_all((0..10).map(|_| {
            cache.get_or_render("k", "s", async {
                runs.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                Ok(rendered(7))
            })
        }))
        .await;
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert!(results.into_iter().all(|(_, r)| r.is_ok_and(|r| r == rendered(7))));
        assert_eq!(cache.rendering(), 0);
    }
}
