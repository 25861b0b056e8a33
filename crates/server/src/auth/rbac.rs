//! Roles per project: the policy in the ConfigMap `capstan-rbac` (key `policy.yaml`), who may do
//! what, and the cache of the parsed policy ([`PolicyCache`], one parse per ConfigMap
//! resourceVersion). The server enforces the roles on every request.
//!
//! Grants name local accounts (and their API tokens) by their account name, and single sign-on users
//! as `sso:NAME`: account names cannot contain `:`, so an SSO user never gets a local account's grants
//! whatever its name, and the built-in `admin` is only ever the local account.

use std::sync::{Arc, Mutex};

use serde::Deserialize;

/// Name of the policy ConfigMap.
pub const CONFIGMAP: &str = "capstan-rbac";
/// Key of the policy in it.
pub const KEY: &str = "policy.yaml";
/// The built-in account that is admin of every project.
pub const ADMIN: &str = "admin";

/// What a principal may do in a project, weakest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Nothing.
    #[default]
    None,
    /// Read Applications and everything about them.
    ReadOnly,
    /// Also sync, refresh, roll back and terminate.
    Sync,
    /// Also run resource actions on the Application's objects (restart a Deployment, StatefulSet or
    /// DaemonSet, suspend or resume a CronJob): `POST /api/applications/{name}/actions`.
    Action,
    /// Also promote: change a later environment's file to an earlier one's values
    /// (`POST /api/promotions`, checked against the target environment's Application).
    Promote,
    /// Also delete.
    Admin,
}

/// One grant: a role in some projects for some users and groups.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    /// The role granted.
    pub role: Role,
    /// Project names or globs (`*` for all).
    #[serde(default)]
    pub projects: Vec<String>,
    /// User names: local account names, `sso:NAME` for single sign-on users.
    #[serde(default)]
    pub users: Vec<String>,
    /// Group names.
    #[serde(default)]
    pub groups: Vec<String>,
}

/// The whole policy.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Role of every authenticated user in every project without a grant.
    #[serde(default)]
    pub default: Role,
    /// Grants.
    #[serde(default)]
    pub grants: Vec<Grant>,
}

/// Prefix naming single sign-on users in grants.
pub const SSO_PREFIX: &str = "sso:";

/// How a principal authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// A local account's password (session cookie).
    Local,
    /// An API token of a local account.
    Token,
    /// Single sign-on (OpenID Connect): never a local account, whatever its name.
    Sso,
}

/// Who is asking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// User name (local account, or the OIDC user name claim).
    pub name: String,
    /// Groups.
    pub groups: Vec<String>,
    /// How the principal authenticated.
    pub source: Source,
}

impl Principal {
    /// The name grants use: the account name for local accounts and their tokens, `sso:NAME` for
    /// single sign-on users.
    pub fn grant_name(&self) -> String {
        match self.source {
            Source::Local | Source::Token => self.name.clone(),
            Source::Sso => format!("{SSO_PREFIX}{}", self.name),
        }
    }

    /// Whether this is the built-in admin account (its password or one of its tokens).
    pub fn is_admin(&self) -> bool {
        self.name == ADMIN && self.source != Source::Sso
    }
}

/// Why `policy.yaml` cannot be used; the message names the ConfigMap and key.
#[derive(Debug, thiserror::Error)]
#[error("{map}/{key}: {0}", map = CONFIGMAP, key = KEY)]
pub struct PolicyError(#[source] serde_saphyr::Error);

impl Policy {
    /// Parse `policy.yaml`; errors name the problem.
    pub fn parse(text: &str) -> Result<Policy, PolicyError> {
        if text.trim().is_empty() {
            return Ok(Policy::default());
        }
        serde_saphyr::from_str(text).map_err(PolicyError)
    }

    /// The role of `who` in `project`.
    pub fn role(&self, who: &Principal, project: &str) -> Role {
        if who.is_admin() {
            return Role::Admin;
        }
        let project = if project.is_empty() { "default" } else { project };
        let name = who.grant_name();
        self.grants
            .iter()
            .filter(|g| g.users.contains(&name) || g.groups.iter().any(|g| who.groups.contains(g)))
            .filter(|g| g.projects.iter().any(|p| glob_match(p, project)))
            .map(|g| g.role)
            .fold(self.default, Ord::max)
    }
}

/// The parsed policy, parsed again only when the ConfigMap's resourceVersion changes.
#[derive(Debug, Default)]
pub struct PolicyCache {
    cached: Mutex<Option<(Option<String>, Arc<Policy>)>>,
}

impl PolicyCache {
    /// The policy of the ConfigMap at `version` (`None`: no ConfigMap); `text` is called to read
    /// it only when that version has not been parsed yet. An unreadable policy grants nothing beyond
    /// the admin account (and says why in the log, once per version).
    pub fn get(&self, version: Option<&str>, text: impl FnOnce() -> String) -> Arc<Policy> {
        let mut cached = self.cached.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((v, policy)) = cached.as_ref()
            && v.as_deref() == version
        {
            return policy.clone();
        }
        let policy = Arc::new(Policy::parse(&text()).unwrap_or_else(|err| {
            tracing::warn!(%err, "invalid RBAC policy: only the admin account has access");
            Policy::default()
        }));
        *cached = Some((version.map(str::to_string), policy.clone()));
        policy
    }
}

fn glob_match(pattern: &str, name: &str) -> bool {
    globset::Glob::new(pattern)
        .map(|g| g.compile_matcher().is_match(name))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(name: &str, groups: &[&str]) -> Principal {
        Principal {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            source: Source::Local,
        }
    }

    const POLICY: &str = "
default: read-only
grants:
  - role: sync
    projects: [team-*]
    users: [dev]
  - role: admin
    projects: [team-a]
    groups: [a-leads]
";

    #[test]
    fn grants_apply_to_their_users_groups_and_projects_only() {
        let p = Policy::parse(POLICY).unwrap();
        assert_eq!(p.role(&who("dev", &[]), "team-b"), Role::Sync);
        assert_eq!(p.role(&who("dev", &[]), "default"), Role::ReadOnly);
        assert_eq!(p.role(&who("eve", &["a-leads"]), "team-a"), Role::Admin);
        assert_eq!(p.role(&who("eve", &["a-leads"]), "team-b"), Role::ReadOnly);
        assert_eq!(p.role(&who("admin", &[]), "anything"), Role::Admin);
        let sso_admin = Principal {
            source: Source::Sso,
            ..who("admin", &[])
        };
        assert_eq!(
            p.role(&sso_admin, "anything"),
            Role::ReadOnly,
            "an SSO user named admin is not admin"
        );
    }

    #[test]
    fn promote_includes_sync_and_admin_includes_promote() {
        let p = Policy::parse("grants:\n  - {role: promote, projects: ['*'], users: [ops]}\n").unwrap();
        let ops = p.role(&who("ops", &[]), "services");
        assert_eq!(ops, Role::Promote);
        assert!(ops >= Role::Sync && ops < Role::Admin);
        assert!(p.role(&who("admin", &[]), "services") >= Role::Promote);
    }

    #[test]
    fn without_a_policy_only_admin_may_do_anything() {
        let p = Policy::parse("").unwrap();
        assert_eq!(p.role(&who("dev", &[]), "default"), Role::None);
        assert_eq!(p.role(&who("admin", &[]), "default"), Role::Admin);
    }

    #[test]
    fn a_bad_policy_is_an_error_naming_the_configmap() {
        let err = Policy::parse("grants: [{role: owner}]").unwrap_err().to_string();
        assert!(err.contains("capstan-rbac/policy.yaml"), "{err}");
        assert!(Policy::parse("grantz: []").is_err());
    }

    #[test]
    fn sso_users_get_only_grants_naming_them_as_sso_users() {
        let p = Policy::parse(
            "grants:\n  - {role: admin, projects: ['*'], users: [dev]}\n  - {role: read-only, projects: ['*'], users: ['sso:alice']}\n",
        )
        .unwrap();
        let sso = |name: &str| Principal {
            source: Source::Sso,
            ..who(name, &[])
        };
        assert_eq!(
            p.role(&sso("dev"), "a"),
            Role::None,
            "an SSO user named like a local account"
        );
        assert_eq!(p.role(&sso("admin"), "a"), Role::None, "an SSO user named admin");
        assert_eq!(p.role(&sso("alice"), "a"), Role::ReadOnly);
        assert_eq!(
            p.role(&who("alice", &[]), "a"),
            Role::None,
            "a local alice is not sso:alice"
        );
        assert_eq!(p.role(&who("dev", &[]), "a"), Role::Admin);
        let token = Principal {
            source: Source::Token,
            ..who("dev", &[])
        };
        assert_eq!(p.role(&token, "a"), Role::Admin, "a token acts as its account");
        let admin_token = Principal {
            source: Source::Token,
            ..who("admin", &[])
        };
        assert!(admin_token.is_admin());
        assert!(!sso("admin").is_admin());
    }

    #[test]
    fn the_policy_is_parsed_once_per_resource_version() {
        let cache = PolicyCache::default();
        let mut parses = 0;
        let first = cache.get(Some("1"), || {
            parses += 1;
            POLICY.to_string()
        });
        let again = cache.get(Some("1"), || {
            parses += 1;
            POLICY.to_string()
        });
        assert!(Arc::ptr_eq(&first, &again), "same version, same parsed policy");
        assert_eq!(parses, 1);
        let changed = cache.get(Some("2"), || "default: admin\n".to_string());
        assert!(!Arc::ptr_eq(&first, &changed));
        assert_eq!(changed.default, Role::Admin);
        let gone = cache.get(None, String::new);
        assert_eq!(gone.default, Role::None, "no ConfigMap, no grants");
        assert!(Arc::ptr_eq(&gone, &cache.get(None, || unreachable!("cached"))));
    }
}
