//! Roles per project: the policy in the ConfigMap `capstan-rbac` (key `policy.yaml`) and who may do
//! what. Pure functions; the server enforces them on every request.

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
    /// User names.
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

/// Who is asking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// User name (local account, or the OIDC subject).
    pub name: String,
    /// Groups.
    pub groups: Vec<String>,
    /// Whether the user logged in through single sign-on: such a user is never the built-in admin
    /// account, whatever its name.
    pub sso: bool,
}

impl Policy {
    /// Parse `policy.yaml`; errors name the problem.
    pub fn parse(text: &str) -> Result<Policy, String> {
        if text.trim().is_empty() {
            return Ok(Policy::default());
        }
        serde_saphyr::from_str(text).map_err(|e| format!("{CONFIGMAP}/{KEY}: {e}"))
    }

    /// The role of `who` in `project`.
    pub fn role(&self, who: &Principal, project: &str) -> Role {
        if who.name == ADMIN && !who.sso {
            return Role::Admin;
        }
        let project = if project.is_empty() { "default" } else { project };
        self.grants
            .iter()
            .filter(|g| g.users.contains(&who.name) || g.groups.iter().any(|g| who.groups.contains(g)))
            .filter(|g| g.projects.iter().any(|p| glob_match(p, project)))
            .map(|g| g.role)
            .fold(self.default, Ord::max)
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
            sso: false,
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
            sso: true,
            ..who("admin", &[])
        };
        assert_eq!(
            p.role(&sso_admin, "anything"),
            Role::ReadOnly,
            "an SSO user named admin is not admin"
        );
    }

    #[test]
    fn without_a_policy_only_admin_may_do_anything() {
        let p = Policy::parse("").unwrap();
        assert_eq!(p.role(&who("dev", &[]), "default"), Role::None);
        assert_eq!(p.role(&who("admin", &[]), "default"), Role::Admin);
    }

    #[test]
    fn a_bad_policy_is_an_error_naming_the_configmap() {
        let err = Policy::parse("grants: [{role: owner}]").unwrap_err();
        assert!(err.contains("capstan-rbac/policy.yaml"), "{err}");
        assert!(Policy::parse("grantz: []").is_err());
    }
}
