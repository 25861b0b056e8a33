//! AppProject rule checks: may an Application of a project use this repository, deploy to this
//! cluster and namespace, create this kind of object?
//!
//! Everything here is a pure function over an [`AppProjectSpec`]; the caller (the controller, at sync
//! time) fetches the project and asks. The semantics are Argo CD's (`AppProject.IsSourcePermitted`,
//! `IsDestinationPermitted`, `IsGroupKindPermitted`) as its documentation states them:
//!
//! - **sourceRepos** are globs over normalised repository URLs ([`RepoUrl::identity`], and the same
//!   normalisation of the glob by [`normalize_pattern`]: lower-cased, no default port, trailing `/`
//!   or `.git`, and `git@host:path` written as `ssh://git@host/path`). A URL with more than one
//!   reading (`..`, percent-encoded `.` or `/`, a backslash…) is refused before any rule sees it
//!   ([`RepoUrl::parse`]), whatever the kind of repository. `*` alone allows any repository; elsewhere `*`
//!   stays within one path segment and `/**` crosses segments. An entry starting with `!` denies. A
//!   repository is permitted when an allow entry matches it and no deny entry does. An empty list
//!   permits nothing.
//! - **destinations** are globs on the cluster (the entry's `server` on the server URL, its `name` on
//!   the cluster name; the caller passes both when it knows them and either set field may match) and
//!   on the namespace. An entry with a `!` on any field is a deny entry: it refuses what its fields'
//!   (un-negated) globs all match. A destination is permitted when an allow entry matches it and no
//!   deny entry does. An empty list permits nothing.
//! - **kinds**: a cluster-scoped object must be in `clusterResourceWhitelist` (empty: no
//!   cluster-scoped kind at all) and not in `clusterResourceBlacklist`; a namespaced object must be in
//!   `namespaceResourceWhitelist` when that is non-empty and not in `namespaceResourceBlacklist`.
//!   Group `""` is the core group; group and kind are globs.
//!
//! - **destinationServiceAccounts**: the ServiceAccount a sync acts as on a destination
//!   ([`sync_account`]); with entries and none matching, no sync runs.
//!
//! - **writes** (ImageUpdaters and PromotionPipelines, beyond Argo CD): the repository must be in
//!   `sourceRepos` and one `sourceRepoPaths` entry must match it, the file and the branch pushed to
//!   ([`check_write`]).
//!
//! What a project name stands for when no AppProject carries it (the implicit `default`, allowing
//! everything or — with `--deny-implicit-default-project` — nothing) is decided in one place,
//! [`resolve`], for every component.
//!
//! A pattern that is not a valid glob never allows anything; in a deny entry or a blacklist it
//! refuses everything it is asked about (fail closed), with a message naming the bad pattern.
//!
//! Beyond Argo CD, **Capstan's own namespace and `capstan.dev` kinds need an explicit grant**
//! ([`check_capstan_grant`]): wildcards never give them. An object in Capstan's namespace needs a
//! `destinations` entry naming that namespace literally; a `capstan.dev` kind needs a whitelist
//! entry naming the group `capstan.dev` literally. Only the implicit `default` project (no
//! AppProject named default exists, and the operator has not made it deny-all) is exempt.

pub mod sync_account;
pub mod windows;

pub use sync_account::{SyncAccount, sync_account};

use capstan_api::project::{AppProjectSpec, GroupKind, ProjectDestination, RepoPaths};
use capstan_api::repo_url::{RepoUrl, normalize_pattern};
use globset::GlobBuilder;

/// A project rule an Application's sync would break.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("project \"{project}\": {message} (rule: {rule})")]
pub struct Violation {
    /// The AppProject's name.
    pub project: String,
    /// The rule broken, by its field name: `sourceRepos`, `destinations`,
    /// `clusterResourceWhitelist`, `clusterResourceBlacklist`, `namespaceResourceWhitelist` or
    /// `namespaceResourceBlacklist`.
    pub rule: String,
    /// What was refused and why, for a human.
    pub message: String,
}

impl Violation {
    fn new(project: &str, rule: &str, message: String) -> Self {
        Violation {
            project: project.to_string(),
            rule: rule.to_string(),
            message,
        }
    }
}

const SOURCE_REPOS: &str = "sourceRepos";
const DESTINATIONS: &str = "destinations";
const CLUSTER_WHITELIST: &str = "clusterResourceWhitelist";
const CLUSTER_BLACKLIST: &str = "clusterResourceBlacklist";
const NAMESPACE_WHITELIST: &str = "namespaceResourceWhitelist";
const NAMESPACE_BLACKLIST: &str = "namespaceResourceBlacklist";
const DECRYPTION_SECRETS: &str = "decryptionSecrets";
const SECRET_STORES: &str = "secretStores";
const SECRET_STORE_PATHS: &str = "secretStorePaths";
const SOURCE_REPO_PATHS: &str = "sourceRepoPaths";

/// The implicit `default` project when no AppProject named default exists: allows everything.
pub fn allow_all() -> AppProjectSpec {
    AppProjectSpec {
        description: "Implicit default project: allows every repository, destination and kind".into(),
        source_repos: vec!["*".into()],
        destinations: vec![ProjectDestination {
            server: "*".into(),
            name: "*".into(),
            namespace: "*".into(),
        }],
        cluster_resource_whitelist: vec![GroupKind {
            group: "*".into(),
            kind: "*".into(),
        }],
        cluster_resource_blacklist: Vec::new(),
        namespace_resource_whitelist: Vec::new(),
        namespace_resource_blacklist: Vec::new(),
        decryption_secrets: vec!["*".into()],
        secret_stores: vec!["*".into()],
        secret_store_paths: Vec::new(),
        source_repo_paths: vec![RepoPaths {
            repo: "*".into(),
            paths: vec!["**".into()],
            branches: vec!["*".into()],
        }],
        ..Default::default()
    }
}

/// Which rules a project name stands for, once the caller has looked the AppProject up: the one
/// place that decides what a missing project means, for every component (the Application and
/// ApplicationSet controllers, the image updater, the server and the CLI). `found` is the stored
/// AppProject's spec, if one exists. `""` is `default`.
///
/// - an AppProject that exists: its own rules;
/// - no AppProject named `default`: the implicit `default` project, which allows everything
///   ([`allow_all`], as in Argo CD) — or nothing at all when the operator turned it off
///   (`--deny-implicit-default-project`, `deny_implicit_default`);
/// - any other missing project: [`UnknownProject`].
pub fn resolve(
    name: &str,
    found: Option<AppProjectSpec>,
    deny_implicit_default: bool,
) -> Result<(String, AppProjectSpec), UnknownProject> {
    let name = if name.is_empty() {
        capstan_api::project::DEFAULT_PROJECT
    } else {
        name
    };
    match found {
        Some(spec) => Ok((name.to_string(), spec)),
        // Empty lists permit nothing.
        None if name == capstan_api::project::DEFAULT_PROJECT && deny_implicit_default => {
            Ok((name.to_string(), AppProjectSpec::default()))
        }
        None if name == capstan_api::project::DEFAULT_PROJECT => Ok((name.to_string(), allow_all())),
        None => Err(UnknownProject { name: name.to_string() }),
    }
}

/// A project name no AppProject carries.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("AppProject \"{name}\" does not exist")]
pub struct UnknownProject {
    /// The name asked for.
    pub name: String,
}

/// One object a rule is asked about.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    /// API group (`""` for core).
    pub group: &'a str,
    /// Kind.
    pub kind: &'a str,
    /// Whether the kind is namespaced.
    pub namespaced: bool,
    /// The object's namespace (empty for cluster-scoped objects).
    pub namespace: &'a str,
    /// How to name it in a message (`Kind/name`).
    pub object: &'a str,
}

/// The group of Capstan's own kinds.
pub const CAPSTAN_GROUP: &str = "capstan.dev";

/// Whether `name`/`spec` is the implicit `default` project ([`allow_all`]).
pub fn is_implicit_default(name: &str, spec: &AppProjectSpec) -> bool {
    name == capstan_api::project::DEFAULT_PROJECT && *spec == allow_all()
}

/// The stricter rule for Capstan's own territory: an object of a `capstan.dev` kind (an
/// Application, an AppProject, an ApplicationSet) or any object in `capstan_namespace` (where
/// repository and cluster credentials, the RBAC policy and every project live) is permitted only by
/// entries that name them literally. `namespace` is the object's namespace (empty for cluster-scoped
/// objects).
pub fn check_capstan_grant(
    project_name: &str,
    spec: &AppProjectSpec,
    capstan_namespace: &str,
    subject: &Subject<'_>,
) -> Result<(), Violation> {
    let Subject {
        group,
        kind,
        namespaced,
        namespace,
        object,
    } = *subject;
    if group == CAPSTAN_GROUP {
        let whitelist = if namespaced {
            &spec.namespace_resource_whitelist
        } else {
            &spec.cluster_resource_whitelist
        };
        let granted = whitelist
            .iter()
            .any(|item| item.group == CAPSTAN_GROUP && glob_match(&item.kind, kind, false).unwrap_or(false));
        if !granted {
            let rule = if namespaced {
                NAMESPACE_WHITELIST
            } else {
                CLUSTER_WHITELIST
            };
            return Err(Violation::new(
                project_name,
                rule,
                format!(
                    "{object}: kind {CAPSTAN_GROUP}/{kind} is Capstan's own and needs a {rule} entry naming the \
                     group {CAPSTAN_GROUP:?} explicitly (a wildcard does not grant it)"
                ),
            ));
        }
    }
    if namespaced && !capstan_namespace.is_empty() && namespace == capstan_namespace {
        let granted = spec
            .destinations
            .iter()
            .any(|d| d.namespace == capstan_namespace && !d.server.starts_with('!') && !d.name.starts_with('!'));
        if !granted {
            return Err(Violation::new(
                project_name,
                DESTINATIONS,
                format!(
                    "{object}: namespace {capstan_namespace:?} is Capstan's own (credentials, projects, the RBAC \
                     policy) and needs a destinations entry naming it explicitly (a wildcard does not grant it)"
                ),
            ));
        }
    }
    Ok(())
}

/// Whether the project's Applications may decrypt with the decryption Secret `name`
/// (`decryptionSecrets`: exact names, or `*`).
pub fn check_decryption_secret(project_name: &str, spec: &AppProjectSpec, name: &str) -> Result<(), Violation> {
    check_named(
        project_name,
        DECRYPTION_SECRETS,
        &spec.decryption_secrets,
        "decryption Secret",
        name,
    )
}

/// Whether the project's Applications may read values from the secret store `name`
/// (`secretStores`: exact names, or `*`).
pub fn check_secret_store(project_name: &str, spec: &AppProjectSpec, name: &str) -> Result<(), Violation> {
    check_named(project_name, SECRET_STORES, &spec.secret_stores, "secret store", name)
}

/// Whether the project's Applications may read the secret at `location` (`mount/path`) of the store
/// `store`: when `secretStorePaths` has entries for the store, one of their globs must match (`*`
/// within a segment, `**` across); a store without entries is limited by `secretStores` alone.
pub fn check_secret_path(
    project_name: &str,
    spec: &AppProjectSpec,
    store: &str,
    location: &str,
) -> Result<(), Violation> {
    let entries: Vec<_> = spec
        .secret_store_paths
        .iter()
        .filter(|e| e.store == store || e.store == "*")
        .collect();
    if entries.is_empty() {
        return Ok(());
    }
    let violation = |message: String| Violation::new(project_name, SECRET_STORE_PATHS, message);
    let mut listed = Vec::new();
    for pattern in entries.iter().flat_map(|e| &e.paths) {
        // Not `glob_match`: its `*` alone means anything, where here `*` stays within one segment.
        let matched = GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
            .map(|g| g.compile_matcher().is_match(location));
        match matched {
            Ok(true) => return Ok(()),
            Ok(false) => listed.push(pattern.as_str()),
            Err(e) => {
                return Err(violation(format!(
                    "the pattern {pattern:?} for secret store \"{store}\" does not parse: {e}"
                )));
            }
        }
    }
    let listed = if listed.is_empty() {
        "it lists no path".to_string()
    } else {
        format!("it permits {}", listed.join(", "))
    };
    Err(violation(format!(
        "secret \"{location}\" of store \"{store}\" is not permitted by the project's {SECRET_STORE_PATHS} ({listed})"
    )))
}

fn check_named(project_name: &str, field: &str, list: &[String], what: &str, name: &str) -> Result<(), Violation> {
    if list.iter().any(|entry| entry == "*" || entry == name) {
        return Ok(());
    }
    let listed = if list.is_empty() {
        "the list is empty".to_string()
    } else {
        format!("it lists {}", list.join(", "))
    };
    Err(Violation::new(
        project_name,
        field,
        format!("{what} \"{name}\" is not permitted by the project's {field} ({listed})"),
    ))
}

/// May an Application of this project use the repository at `repo_url`?
pub fn check_source(project_name: &str, spec: &AppProjectSpec, repo_url: &str) -> Result<(), Violation> {
    let violation = |message: String| Violation::new(project_name, SOURCE_REPOS, message);
    let repo = match RepoUrl::parse(repo_url) {
        Ok(repo) => repo,
        Err(reason) => {
            return Err(violation(format!(
                "repository \"{}\" is refused before any sourceRepos rule: {reason}",
                repo_url.chars().take(200).collect::<String>()
            )));
        }
    };
    if spec.source_repos.is_empty() {
        return Err(violation(format!(
            "repository \"{repo_url}\" is not permitted: the project's sourceRepos list is empty"
        )));
    }
    let mut allowed = false;
    for entry in &spec.source_repos {
        let (deny, pattern) = split_negation(entry);
        let pattern = normalize_pattern(pattern);
        match repo_glob_match(&pattern, repo.identity()) {
            Ok(true) if deny => {
                return Err(violation(format!(
                    "repository \"{repo_url}\" is refused by the project's sourceRepos entry \"{entry}\""
                )));
            }
            Ok(true) => allowed = true,
            Ok(false) => {}
            Err(err) if deny => {
                return Err(violation(format!(
                    "the project's sourceRepos entry \"{entry}\" is not a valid glob ({err}); \
                     refusing repository \"{repo_url}\""
                )));
            }
            Err(_) => {}
        }
    }
    if allowed {
        return Ok(());
    }
    let allow: Vec<String> = spec
        .source_repos
        .iter()
        .filter(|e| !e.starts_with('!'))
        .map(|e| format!("\"{e}\""))
        .collect();
    Err(violation(if allow.is_empty() {
        format!(
            "repository \"{repo_url}\" is not permitted: the project's sourceRepos has only deny entries \
             (a `!` entry refuses, it never allows)"
        )
    } else {
        format!(
            "repository \"{repo_url}\" is not permitted; the project's sourceRepos allow {}",
            allow.join(", ")
        )
    }))
}

/// May an Application of this project deploy to this cluster and namespace? `server` and `name` are
/// the destination cluster's URL and name; pass both when known (either may be empty).
pub fn check_destination(
    project_name: &str,
    spec: &AppProjectSpec,
    server: &str,
    name: &str,
    namespace: &str,
) -> Result<(), Violation> {
    let violation = |message: String| Violation::new(project_name, DESTINATIONS, message);
    let target = describe_target(server, name, namespace);
    if spec.destinations.is_empty() {
        return Err(violation(format!(
            "destination {target} is not permitted: the project's destinations list is empty"
        )));
    }
    let mut allowed = false;
    for entry in &spec.destinations {
        let deny = [&entry.server, &entry.name, &entry.namespace]
            .iter()
            .any(|f| f.starts_with('!'));
        match destination_entry_matches(entry, server, name, namespace) {
            Ok(true) if deny => {
                return Err(violation(format!(
                    "destination {target} is refused by the project's destinations entry {}",
                    describe_entry(entry)
                )));
            }
            Ok(true) => allowed = true,
            Ok(false) => {}
            Err(err) if deny => {
                return Err(violation(format!(
                    "the project's destinations entry {} has an invalid glob ({err}); refusing destination {target}",
                    describe_entry(entry)
                )));
            }
            Err(_) => {}
        }
    }
    if allowed {
        return Ok(());
    }
    let allow: Vec<String> = spec
        .destinations
        .iter()
        .filter(|e| ![&e.server, &e.name, &e.namespace].iter().any(|f| f.starts_with('!')))
        .map(describe_entry)
        .collect();
    Err(violation(if allow.is_empty() {
        format!(
            "destination {target} is not permitted: the project's destinations has only deny entries \
             (an entry with `!` refuses, it never allows)"
        )
    } else {
        format!(
            "destination {target} is not permitted; the project allows {}",
            allow.join(", ")
        )
    }))
}

/// May an Application of this project create or update an object of this group and kind? `object`
/// names it in the message (e.g. `ClusterRole/admin-extra`); `namespaced` says whether the kind is
/// namespaced (as the cluster's discovery says) or cluster-scoped.
pub fn check_resource(
    project_name: &str,
    spec: &AppProjectSpec,
    group: &str,
    kind: &str,
    namespaced: bool,
    object: &str,
) -> Result<(), Violation> {
    let gk = if group.is_empty() {
        kind.to_string()
    } else {
        format!("{group}/{kind}")
    };
    let (scope, whitelist, whitelist_rule, blacklist, blacklist_rule) = if namespaced {
        (
            "namespaced",
            &spec.namespace_resource_whitelist,
            NAMESPACE_WHITELIST,
            &spec.namespace_resource_blacklist,
            NAMESPACE_BLACKLIST,
        )
    } else {
        (
            "cluster-scoped",
            &spec.cluster_resource_whitelist,
            CLUSTER_WHITELIST,
            &spec.cluster_resource_blacklist,
            CLUSTER_BLACKLIST,
        )
    };
    // An empty namespaced whitelist allows every namespaced kind; an empty cluster-scoped one allows
    // none.
    let whitelisted = (namespaced && whitelist.is_empty())
        || whitelist
            .iter()
            .any(|item| group_kind_matches(item, group, kind).unwrap_or(false));
    if !whitelisted {
        return Err(Violation::new(
            project_name,
            whitelist_rule,
            format!("{object}: {scope} kind {gk} is not in the project's {whitelist_rule}"),
        ));
    }
    for item in blacklist {
        match group_kind_matches(item, group, kind) {
            Ok(false) => {}
            Ok(true) => {
                return Err(Violation::new(
                    project_name,
                    blacklist_rule,
                    format!(
                        "{object}: {scope} kind {gk} is in the project's {blacklist_rule} (entry group \"{}\", kind \"{}\")",
                        item.group, item.kind
                    ),
                ));
            }
            Err(err) => {
                return Err(Violation::new(
                    project_name,
                    blacklist_rule,
                    format!(
                        "{object}: the project's {blacklist_rule} entry group \"{}\", kind \"{}\" is not a valid glob ({err}); refusing {scope} kind {gk}",
                        item.group, item.kind
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// A file an ImageUpdater or a PromotionPipeline would commit to.
#[derive(Debug, Clone, Copy)]
pub struct WriteTarget<'a> {
    /// The repository.
    pub repo_url: &'a str,
    /// The file, relative to the repository root.
    pub path: &'a str,
    /// The branch the commit is pushed to.
    pub branch: &'a str,
}

/// May an ImageUpdater or a PromotionPipeline of this project commit to this file on this branch?
/// The repository must be permitted by `sourceRepos` ([`check_source`]) and one `sourceRepoPaths`
/// entry must match it, the path and the branch. The path must be a plain relative path (no `.`,
/// `..` or empty segment, no leading `/`, no backslash), so that a glob matches what is written.
pub fn check_write(project_name: &str, spec: &AppProjectSpec, target: &WriteTarget<'_>) -> Result<(), Violation> {
    let WriteTarget { repo_url, path, branch } = *target;
    check_source(project_name, spec, repo_url)?;
    let violation = |message: String| Violation::new(project_name, SOURCE_REPO_PATHS, message);
    if let Some(why) = unusual_path(path) {
        return Err(violation(format!(
            "file \"{path}\" of repository \"{repo_url}\" is refused: {why}"
        )));
    }
    // check_source accepted the URL, so it parses.
    let Ok(repo) = RepoUrl::parse(repo_url) else {
        return Err(violation(format!("repository \"{repo_url}\" is not a repository URL")));
    };
    let permitted = spec.source_repo_paths.iter().any(|entry| {
        let repo_matches = !entry.repo.starts_with('!')
            && repo_glob_match(&normalize_pattern(&entry.repo), repo.identity()).unwrap_or(false);
        repo_matches
            && entry.paths.iter().any(|p| glob_match(p, path, true).unwrap_or(false))
            && entry
                .branches
                .iter()
                .any(|b| glob_match(b, branch, true).unwrap_or(false))
    });
    if permitted {
        return Ok(());
    }
    let listed = if spec.source_repo_paths.is_empty() {
        "the list is empty".to_string()
    } else {
        let entries: Vec<String> = spec
            .source_repo_paths
            .iter()
            .map(|e| {
                format!(
                    "{{repo: \"{}\", paths: [{}], branches: [{}]}}",
                    e.repo,
                    e.paths.join(", "),
                    e.branches.join(", ")
                )
            })
            .collect();
        format!("it allows {}", entries.join(", "))
    };
    Err(violation(format!(
        "file \"{path}\" on branch \"{branch}\" of repository \"{repo_url}\" may not be written by the \
         project's ImageUpdaters and PromotionPipelines: no sourceRepoPaths entry matches ({listed})"
    )))
}

/// Why `path` is not a plain relative path, if it is not.
fn unusual_path(path: &str) -> Option<&'static str> {
    if path.is_empty() {
        return Some("the path is empty");
    }
    if path.starts_with('/') {
        return Some("the path is absolute");
    }
    if path.contains('\\') {
        return Some("the path contains a backslash");
    }
    if path.split('/').any(|s| s.is_empty() || s == "." || s == "..") {
        return Some("the path has an empty, `.` or `..` segment");
    }
    None
}

/// `("!x", …)` → `(true, "x")`.
fn split_negation(pattern: &str) -> (bool, &str) {
    match pattern.strip_prefix('!') {
        Some(rest) => (true, rest),
        None => (false, pattern),
    }
}

/// A glob match; `literal_separator` keeps `*` within one `/`-separated segment.
fn glob_match(pattern: &str, value: &str, literal_separator: bool) -> Result<bool, globset::Error> {
    if pattern == "*" {
        return Ok(true);
    }
    let glob = GlobBuilder::new(pattern).literal_separator(literal_separator).build()?;
    Ok(glob.compile_matcher().is_match(value))
}

/// Repository URL globs: `*` within a path segment, except that `*` alone is any repository.
fn repo_glob_match(pattern: &str, repo: &str) -> Result<bool, globset::Error> {
    glob_match(pattern, repo, true)
}

/// Does a destinations entry's (un-negated) globs all match? The cluster part matches when the entry's
/// `server` glob matches `server` or its `name` glob matches `name` (fields the entry leaves empty, or
/// the caller does not know, never match).
fn destination_entry_matches(
    entry: &ProjectDestination,
    server: &str,
    name: &str,
    namespace: &str,
) -> Result<bool, globset::Error> {
    let field = |pattern: &str, value: &str| -> Result<bool, globset::Error> {
        if pattern.is_empty() || value.is_empty() {
            return Ok(false);
        }
        glob_match(split_negation(pattern).1, value, false)
    };
    // Evaluate every glob so that an invalid one is reported even when another field decides.
    let server_matched = field(&entry.server, server)?;
    let name_matched = field(&entry.name, name)?;
    let (_, ns_pattern) = split_negation(&entry.namespace);
    let namespace_matched = glob_match(ns_pattern, namespace, false)?;
    Ok((server_matched || name_matched) && namespace_matched)
}

fn group_kind_matches(item: &GroupKind, group: &str, kind: &str) -> Result<bool, globset::Error> {
    Ok(glob_match(&item.kind, kind, false)? && glob_match(&item.group, group, false)?)
}

fn describe_target(server: &str, name: &str, namespace: &str) -> String {
    let mut parts = Vec::new();
    if !server.is_empty() {
        parts.push(format!("server \"{server}\""));
    }
    if !name.is_empty() {
        parts.push(format!("cluster \"{name}\""));
    }
    if parts.is_empty() {
        parts.push("(no cluster)".to_string());
    }
    parts.push(format!("namespace \"{namespace}\""));
    parts.join(" ")
}

fn describe_entry(entry: &ProjectDestination) -> String {
    let mut parts = Vec::new();
    if !entry.server.is_empty() {
        parts.push(format!("server: \"{}\"", entry.server));
    }
    if !entry.name.is_empty() {
        parts.push(format!("name: \"{}\"", entry.name));
    }
    parts.push(format!("namespace: \"{}\"", entry.namespace));
    format!("{{{}}}", parts.join(", "))
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod named_tests {
    use super::*;

    fn team_a_writes() -> AppProjectSpec {
        AppProjectSpec {
            source_repos: vec!["https://git.example/*".into()],
            source_repo_paths: vec![RepoPaths {
                repo: "https://git.example/services-root".into(),
                paths: vec!["services/team-a/**".into(), "team-a.yaml".into()],
                branches: vec!["main".into(), "image-updates/*".into()],
            }],
            ..Default::default()
        }
    }

    fn write<'a>(repo_url: &'a str, path: &'a str, branch: &'a str) -> WriteTarget<'a> {
        WriteTarget { repo_url, path, branch }
    }

    #[test]
    fn writes_need_a_source_repo_paths_entry_for_repository_path_and_branch() {
        let spec = team_a_writes();
        let root = "https://git.example/services-root.git";
        for (path, branch) in [
            ("services/team-a/web/staging.yaml", "main"),
            ("services/team-a/x.yaml", "image-updates/web"),
            ("team-a.yaml", "main"),
        ] {
            assert!(
                check_write("team-a", &spec, &write(root, path, branch)).is_ok(),
                "{path} {branch}"
            );
        }
        for (repo, path, branch, needle) in [
            (root, "services/team-b/web/staging.yaml", "main", "sourceRepoPaths"),
            (root, "services/team-a/web.yaml", "production", "sourceRepoPaths"),
            (root, "services/team-a/web.yaml", "image-updates/a/b", "sourceRepoPaths"),
            (root, "services/team-a/../team-b/web.yaml", "main", "`..`"),
            (root, "services/team-a//web.yaml", "main", "empty"),
            (root, "./services/team-a/web.yaml", "main", "`.`"),
            (root, "/services/team-a/web.yaml", "main", "absolute"),
            (root, "services\\team-a/web.yaml", "main", "backslash"),
            (
                "https://git.example/other",
                "services/team-a/web.yaml",
                "main",
                "sourceRepoPaths",
            ),
            (
                "https://elsewhere.example/services-root",
                "services/team-a/web.yaml",
                "main",
                "sourceRepos",
            ),
        ] {
            let err = check_write("team-a", &spec, &write(repo, path, branch)).unwrap_err();
            assert!(err.to_string().contains(needle), "{repo} {path} {branch}: {err}");
        }
        let err = check_write(
            "team-a",
            &AppProjectSpec {
                source_repos: vec!["*".into()],
                ..Default::default()
            },
            &write(root, "a.yaml", "main"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("the list is empty"), "{err}");
        assert!(check_write("default", &allow_all(), &write(root, "any/where.yaml", "any/branch")).is_ok());
    }

    #[test]
    fn secret_store_paths_limit_the_stores_they_name() {
        let spec = AppProjectSpec {
            secret_stores: vec!["*".into()],
            secret_store_paths: vec![capstan_api::project::SecretStorePaths {
                store: "shared".into(),
                paths: vec!["secret/team-a/**".into(), "kv/team-a-*".into()],
            }],
            ..Default::default()
        };
        assert!(check_secret_path("team-a", &spec, "shared", "secret/team-a/db").is_ok());
        assert!(check_secret_path("team-a", &spec, "shared", "secret/team-a/x/y").is_ok());
        assert!(check_secret_path("team-a", &spec, "shared", "kv/team-a-app").is_ok());
        // `*` stays within one segment.
        let err = check_secret_path("team-a", &spec, "shared", "kv/team-a-app/deeper").unwrap_err();
        assert!(err.to_string().contains("secretStorePaths"), "{err}");
        let err = check_secret_path("team-a", &spec, "shared", "secret/team-b/db")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"secret/team-b/db\"") && err.contains("\"shared\"") && err.contains("secret/team-a/**"),
            "{err}"
        );
        // `*` alone stays within one segment; an entry for `*` limits every store.
        let every = AppProjectSpec {
            secret_store_paths: vec![capstan_api::project::SecretStorePaths {
                store: "*".into(),
                paths: vec!["*".into()],
            }],
            ..Default::default()
        };
        assert!(check_secret_path("team-a", &every, "any", "secret").is_ok());
        assert!(check_secret_path("team-a", &every, "any", "secret/deeper").is_err());
        // A store without entries is limited by secretStores alone.
        assert!(check_secret_path("team-a", &spec, "own", "secret/anything").is_ok());
        // An entry without paths permits none of the store's secrets.
        let none = AppProjectSpec {
            secret_store_paths: vec![capstan_api::project::SecretStorePaths {
                store: "shared".into(),
                paths: vec![],
            }],
            ..Default::default()
        };
        let err = check_secret_path("team-a", &none, "shared", "secret/a").unwrap_err();
        assert!(err.to_string().contains("lists no path"), "{err}");
    }

    #[test]
    fn a_missing_project_is_the_implicit_default_only_by_name() {
        assert_eq!(resolve("", None, false), Ok(("default".into(), allow_all())));
        assert_eq!(
            resolve("default", None, true),
            Ok(("default".into(), AppProjectSpec::default()))
        );
        let own = team_a_writes();
        assert_eq!(resolve("default", Some(own.clone()), true), Ok(("default".into(), own)));
        assert_eq!(
            resolve("team-a", None, false),
            Err(UnknownProject { name: "team-a".into() })
        );
    }

    #[test]
    fn decryption_secrets_and_stores_are_listed_by_name() {
        let mut spec = AppProjectSpec::default();
        let err = check_secret_store("team-a", &spec, "vault").unwrap_err().to_string();
        assert!(
            err.contains("secretStores") && err.contains("\"vault\"") && err.contains("empty"),
            "{err}"
        );
        spec.secret_stores = vec!["team-a-bao".into()];
        spec.decryption_secrets = vec!["team-a-age".into()];
        assert!(check_secret_store("team-a", &spec, "team-a-bao").is_ok());
        let err = check_secret_store("team-a", &spec, "team-b-bao")
            .unwrap_err()
            .to_string();
        assert!(err.contains("team-b-bao") && err.contains("team-a-bao"), "{err}");
        assert!(check_decryption_secret("team-a", &spec, "team-a-age").is_ok());
        assert!(check_decryption_secret("team-a", &spec, "team-b-age").is_err());
        assert!(check_decryption_secret("default", &allow_all(), "anything").is_ok());
    }
}
