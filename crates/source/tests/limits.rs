//! What one repository may cost: its size, the size of a commit's tree, and the checkouts kept on
//! disk — against a real git server.

use std::time::Duration;

use capstan_source::{Credentials, Limits, RepoCache, SizeLimit, SourceError};
use capstan_testkit::GitServer;

fn cache(dir: &std::path::Path, limits: Limits) -> RepoCache {
    RepoCache::new(dir, Duration::from_secs(30), Duration::from_secs(10)).with_limits(limits)
}

/// `len` bytes of text that compresses poorly (so git's packs are about as large).
fn noise(len: usize, seed: u64) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut state = seed | 1;
    (0..len)
        .map(|i| {
            if i % 77 == 76 {
                return '\n';
            }
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ALPHABET[(state % 64) as usize] as char
        })
        .collect()
}

const MIB: u64 = 1 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repository_over_the_size_limit_is_refused_and_dropped_from_the_cache() -> anyhow::Result<()> {
    let server = GitServer::start().await?;
    server.create_repo("big")?;
    server.commit("big", "main", &[("blob.txt", Some(&noise(3 * MIB as usize, 7)))], "big")?;
    let url = server.git_url("big");
    let none = Credentials::none();

    // The same repository is fine under the default limits: what fails below is the limit.
    let roomy = tempfile::tempdir()?;
    cache(roomy.path(), Limits::default())
        .resolve(&url, "main", &none, false)
        .await?;

    let dir = tempfile::tempdir()?;
    let limits = Limits {
        max_repository_bytes: MIB,
        ..Limits::default()
    };
    let small = cache(dir.path(), limits);
    let err = small.resolve(&url, "main", &none, false).await.expect_err("too large");
    assert!(
        matches!(
            err,
            SourceError::TooLarge {
                what: SizeLimit::Repository,
                ..
            }
        ),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains(&url) && message.contains("limit of 1 MiB"),
        "{message}"
    );
    let left: u64 = walk(&dir.path().join("repos"));
    assert!(left < MIB, "the oversized fetch is not kept: {left} bytes left");

    // It stays refused, and a small repository in the same cache is unaffected.
    let again = small
        .resolve(&url, "main", &none, false)
        .await
        .expect_err("still too large");
    assert!(matches!(again, SourceError::TooLarge { .. }), "{again:?}");
    server.create_repo("small")?;
    let sha = server.commit("small", "main", &[("a.yaml", Some("a: 1\n"))], "small")?;
    let small_url = server.git_url("small");
    assert_eq!(small.resolve(&small_url, "main", &none, false).await?.sha, sha);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_tree_is_over_the_limit_is_not_checked_out() -> anyhow::Result<()> {
    let server = GitServer::start().await?;
    server.create_repo("apps")?;
    let big = server.commit(
        "apps",
        "main",
        &[("blob.txt", Some(&noise(2 * MIB as usize, 9)))],
        "big",
    )?;
    let url = server.git_url("apps");
    let none = Credentials::none();
    let dir = tempfile::tempdir()?;
    let limits = Limits {
        max_checkout_bytes: MIB,
        ..Limits::default()
    };
    let cache = cache(dir.path(), limits);
    assert_eq!(cache.resolve(&url, "main", &none, false).await?.sha, big);
    let err = cache.checkout(&url, &big).await.expect_err("too large");
    assert!(
        matches!(
            err,
            SourceError::TooLarge {
                what: SizeLimit::Checkout,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("tree of the commit"), "{err}");
    assert_eq!(cache.checkouts_on_disk(&url), 0);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("checkouts"))?
        .flatten()
        .flat_map(|repo| std::fs::read_dir(repo.path()).into_iter().flatten().flatten())
        .map(|e| e.file_name())
        .collect();
    assert!(leftovers.is_empty(), "nothing half-extracted is left: {leftovers:?}");

    // A later commit within the limit checks out.
    let fine = server.commit("apps", "main", &[("blob.txt", None), ("a.yaml", Some("a: 1\n"))], "fix")?;
    assert_eq!(cache.resolve(&url, "main", &none, true).await?.sha, fine);
    let tree = cache.checkout(&url, &fine).await?;
    assert_eq!(std::fs::read_to_string(tree.join("a.yaml"))?, "a: 1\n");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_recently_used_checkouts_are_evicted_but_never_while_held() -> anyhow::Result<()> {
    let server = GitServer::start().await?;
    server.create_repo("apps")?;
    let mut shas = Vec::new();
    for i in 0..4 {
        let body = format!("v: {i}\n");
        shas.push(server.commit("apps", "main", &[("cm.yaml", Some(&body))], "c")?);
    }
    let url = server.git_url("apps");
    let none = Credentials::none();
    let dir = tempfile::tempdir()?;
    let limits = Limits {
        max_checkouts: 2,
        ..Limits::default()
    };
    let cache = cache(dir.path(), limits);
    cache.resolve(&url, "main", &none, false).await?;

    let held = cache.checkout(&url, &shas[0]).await?;
    let second = cache.checkout(&url, &shas[1]).await?.to_path_buf();
    let third = cache.checkout(&url, &shas[2]).await?.to_path_buf();
    assert!(
        !second.exists(),
        "the least recently used checkout nobody holds goes first"
    );
    let fourth = cache.checkout(&url, &shas[3]).await?;
    assert!(!third.exists());
    assert_eq!(
        std::fs::read_to_string(held.join("cm.yaml"))?,
        "v: 0\n",
        "a held checkout survives however old"
    );
    assert_eq!(std::fs::read_to_string(fourth.join("cm.yaml"))?, "v: 3\n");
    assert_eq!(cache.checkouts_on_disk(&url), 2);

    // Released, it is the oldest and goes when another commit is checked out again.
    let first = held.to_path_buf();
    drop(held);
    drop(fourth);
    let again = cache.checkout(&url, &shas[1]).await?;
    assert_eq!(std::fs::read_to_string(again.join("cm.yaml"))?, "v: 1\n");
    assert!(!first.exists());
    assert_eq!(cache.checkouts_on_disk(&url), 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkouts_left_by_an_earlier_run_are_evicted_first() -> anyhow::Result<()> {
    let server = GitServer::start().await?;
    server.create_repo("apps")?;
    let mut shas = Vec::new();
    for i in 0..3 {
        let body = format!("v: {i}\n");
        shas.push(server.commit("apps", "main", &[("cm.yaml", Some(&body))], "c")?);
    }
    let url = server.git_url("apps");
    let none = Credentials::none();
    let dir = tempfile::tempdir()?;
    let earlier = cache(dir.path(), Limits::default());
    earlier.resolve(&url, "main", &none, false).await?;
    let old: Vec<_> = [
        earlier.checkout(&url, &shas[0]).await?.to_path_buf(),
        earlier.checkout(&url, &shas[1]).await?.to_path_buf(),
    ]
    .to_vec();
    drop(earlier);

    let limits = Limits {
        max_checkouts: 1,
        ..Limits::default()
    };
    let later = cache(dir.path(), limits);
    later.resolve(&url, "main", &none, false).await?;
    let tree = later.checkout(&url, &shas[2]).await?;
    assert!(old.iter().all(|p| !p.exists()), "{old:?}");
    assert_eq!(std::fs::read_to_string(tree.join("cm.yaml"))?, "v: 2\n");
    assert_eq!(later.checkouts_on_disk(&url), 1);
    Ok(())
}

fn walk(dir: &std::path::Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        total += if meta.is_dir() { walk(&entry.path()) } else { meta.len() };
    }
    total
}
