//! Which ServiceAccount a sync acts as (`AppProject.spec.destinationServiceAccounts`, Argo CD's
//! "destination service accounts"): the first entry whose `server` glob matches the destination
//! cluster's URL and whose `namespace` glob matches the Application's destination namespace names
//! it, as `NAME` (in that namespace, or the Application's own when it names none) or
//! `NAMESPACE:NAME`. A project without entries syncs with Capstan's own account; a project with
//! entries and none matching refuses the sync, as does an entry whose account is not a valid
//! ServiceAccount reference (Argo CD refuses the same characters; Capstan checks the whole shape,
//! since the name becomes an HTTP header and a Kubernetes user name).

use capstan_api::names::{is_dns1123_label, is_dns1123_subdomain};
use capstan_api::project::{AppProjectSpec, DestinationServiceAccount};

use crate::{Violation, glob_match};

const DESTINATION_SERVICE_ACCOUNTS: &str = "destinationServiceAccounts";

/// A ServiceAccount a sync impersonates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncAccount {
    /// Its namespace on the destination cluster.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl SyncAccount {
    /// The Kubernetes user it authenticates as (`system:serviceaccount:NAMESPACE:NAME`), for the
    /// `Impersonate-User` header.
    pub fn username(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }
}

impl std::fmt::Display for SyncAccount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ServiceAccount {}/{}", self.namespace, self.name)
    }
}

/// The account syncs of an Application of this project act as on this destination: `None` when
/// the project names none (Capstan's own account). `server` is the destination cluster's URL,
/// `namespace` the Application's destination namespace (may be empty) and `app_namespace` the
/// Application's own namespace (where a bare `NAME` lives when `namespace` is empty, as in Argo CD).
pub fn sync_account(
    project_name: &str,
    spec: &AppProjectSpec,
    server: &str,
    namespace: &str,
    app_namespace: &str,
) -> Result<Option<SyncAccount>, Violation> {
    if spec.destination_service_accounts.is_empty() {
        return Ok(None);
    }
    let violation = |message: String| Violation::new(project_name, DESTINATION_SERVICE_ACCOUNTS, message);
    for (index, entry) in spec.destination_service_accounts.iter().enumerate() {
        let matched = entry_matches(entry, server, namespace).map_err(|err| {
            violation(format!(
                "entry {index} has an invalid glob ({err}); no sync of the project runs until it is fixed"
            ))
        })?;
        if !matched {
            continue;
        }
        let default_namespace = if namespace.is_empty() { app_namespace } else { namespace };
        return parse(&entry.default_service_account, default_namespace)
            .map(Some)
            .map_err(|why| violation(format!("entry {index}'s defaultServiceAccount {why}")));
    }
    Err(violation(format!(
        "no entry names the ServiceAccount for server \"{server}\" and namespace \"{namespace}\"; \
         a project with destinationServiceAccounts syncs only where one of them matches"
    )))
}

fn entry_matches(entry: &DestinationServiceAccount, server: &str, namespace: &str) -> Result<bool, globset::Error> {
    // Both globs are evaluated, so a bad one is reported even when the other does not match.
    let server_matched = glob_match(&entry.server, server, false)?;
    let namespace_matched = glob_match(&entry.namespace, namespace, false)?;
    Ok(server_matched && namespace_matched)
}

/// `NAME` or `NAMESPACE:NAME`, each as Kubernetes requires it.
fn parse(reference: &str, default_namespace: &str) -> Result<SyncAccount, String> {
    let (namespace, name) = match reference.split_once(':') {
        Some((namespace, name)) => (namespace, name),
        None => (default_namespace, reference),
    };
    if !is_dns1123_label(namespace) {
        return Err(format!(
            "{reference:?} has no valid namespace ({namespace:?} is not a DNS-1123 label)"
        ));
    }
    if !is_dns1123_subdomain(name) {
        return Err(format!(
            "{reference:?} is not `NAME` or `NAMESPACE:NAME` of a ServiceAccount ({name:?} is not a DNS-1123 subdomain)"
        ));
    }
    Ok(SyncAccount {
        namespace: namespace.to_string(),
        name: name.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project(entries: &[(&str, &str, &str)]) -> AppProjectSpec {
        AppProjectSpec {
            destination_service_accounts: entries
                .iter()
                .map(|(server, namespace, account)| DestinationServiceAccount {
                    server: server.to_string(),
                    namespace: namespace.to_string(),
                    default_service_account: account.to_string(),
                })
                .collect(),
            ..Default::default()
        }
    }

    const HUB: &str = "https://kubernetes.default.svc";

    #[test]
    fn no_entries_means_capstans_own_account() {
        assert_eq!(sync_account("p", &project(&[]), HUB, "team-a", "capstan"), Ok(None));
    }

    #[test]
    fn first_matching_entry_wins_and_a_bare_name_lives_in_the_destination_namespace() {
        let p = project(&[
            ("https://other", "*", "nobody"),
            (HUB, "team-*", "deployer"),
            ("*", "*", "fallback"),
        ]);
        let account = sync_account("p", &p, HUB, "team-a", "capstan").unwrap().unwrap();
        assert_eq!(account.namespace, "team-a");
        assert_eq!(account.name, "deployer");
        assert_eq!(account.username(), "system:serviceaccount:team-a:deployer");
        let other = sync_account("p", &p, HUB, "web", "capstan").unwrap().unwrap();
        assert_eq!(other.name, "fallback");
    }

    #[test]
    fn namespace_and_name_and_the_applications_namespace_when_no_destination_namespace() {
        let p = project(&[("*", "*", "ops:deployer")]);
        let account = sync_account("p", &p, HUB, "team-a", "capstan").unwrap().unwrap();
        assert_eq!((account.namespace.as_str(), account.name.as_str()), ("ops", "deployer"));
        let p = project(&[("*", "*", "deployer")]);
        let account = sync_account("p", &p, HUB, "", "apps").unwrap().unwrap();
        assert_eq!(account.namespace, "apps");
    }

    #[test]
    fn no_match_refuses_naming_the_rule() {
        let p = project(&[(HUB, "team-a", "deployer")]);
        let err = sync_account("p", &p, HUB, "team-b", "capstan").unwrap_err();
        assert_eq!(err.rule, "destinationServiceAccounts");
        assert!(err.message.contains("team-b"), "{err}");
        let err = sync_account("p", &p, "https://spoke", "team-a", "capstan").unwrap_err();
        assert!(err.message.contains("https://spoke"), "{err}");
    }

    #[test]
    fn hostile_or_malformed_accounts_are_refused() {
        for bad in [
            "",
            " ",
            "*",
            "a:b:c",
            "Deployer",
            "ns:",
            ":name",
            "ns/name",
            "name\r\nImpersonate-Group: system:masters",
            "ns:name\nx",
            "system:masters",
        ] {
            let p = project(&[("*", "*", bad)]);
            let result = sync_account("p", &p, HUB, "team-a", "capstan");
            // `system:masters` parses as namespace "system", name "masters": a ServiceAccount
            // like any other, not the group (the header names a user, never a group).
            if bad == "system:masters" {
                let account = result.unwrap().unwrap();
                assert_eq!(account.username(), "system:serviceaccount:system:masters");
                continue;
            }
            let err = result.expect_err(bad);
            assert_eq!(err.rule, "destinationServiceAccounts", "{bad:?}");
        }
    }

    #[test]
    fn a_bad_glob_refuses_every_sync_of_the_project() {
        let p = project(&[("[", "*", "deployer")]);
        let err = sync_account("p", &p, HUB, "team-a", "capstan").unwrap_err();
        assert!(err.message.contains("invalid glob"), "{err}");
    }
}
