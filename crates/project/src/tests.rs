use super::*;

fn repos(patterns: &[&str]) -> AppProjectSpec {
    AppProjectSpec {
        source_repos: patterns.iter().map(|p| p.to_string()).collect(),
        ..Default::default()
    }
}

fn dest(server: &str, name: &str, namespace: &str) -> ProjectDestination {
    ProjectDestination {
        server: server.into(),
        name: name.into(),
        namespace: namespace.into(),
    }
}

fn dests(entries: Vec<ProjectDestination>) -> AppProjectSpec {
    AppProjectSpec {
        destinations: entries,
        ..Default::default()
    }
}

fn gk(group: &str, kind: &str) -> GroupKind {
    GroupKind {
        group: group.into(),
        kind: kind.into(),
    }
}

// ---------- Violation ----------

#[test]
fn violation_displays_project_message_and_rule() {
    let v = Violation {
        project: "p".into(),
        rule: "sourceRepos".into(),
        message: "nope".into(),
    };
    assert_eq!(v.to_string(), "project \"p\": nope (rule: sourceRepos)");
    let err: &dyn std::error::Error = &v;
    assert_eq!(err.to_string(), v.to_string());
}

// ---------- sourceRepos ----------

#[test]
fn source_exact_url_allowed_and_other_refused() {
    let spec = repos(&["https://github.com/org/apps"]);
    assert_eq!(check_source("team", &spec, "https://github.com/org/apps"), Ok(()));
    let err = check_source("team", &spec, "https://github.com/org/other").unwrap_err();
    assert_eq!(err.project, "team");
    assert_eq!(err.rule, "sourceRepos");
    assert!(err.message.contains("\"https://github.com/org/other\""), "{err}");
    assert!(
        err.message.contains("\"https://github.com/org/apps\""),
        "lists allowed patterns: {err}"
    );
}

#[test]
fn source_normalisation_ignores_trailing_slash_dot_git_and_case() {
    let spec = repos(&["https://GitHub.com/org/apps.git"]);
    for url in [
        "https://github.com/org/apps",
        "https://github.com/org/apps/",
        "https://github.com/org/apps.git",
        "https://GITHUB.COM/org/apps.git/",
        "  https://github.com/org/apps  ",
    ] {
        assert_eq!(check_source("p", &spec, url), Ok(()), "{url}");
    }
    assert!(check_source("p", &spec, "https://github.com/org/apps-extra").is_err());
    assert!(check_source("p", &spec, "https://gitlab.com/org/apps").is_err());
}

#[test]
fn source_ssh_forms_are_the_same_repository() {
    let spec = repos(&["git@github.com:org/apps.git"]);
    assert_eq!(check_source("p", &spec, "ssh://git@github.com/org/apps"), Ok(()));
    assert_eq!(check_source("p", &spec, "git@github.com:org/apps"), Ok(()));
    assert!(check_source("p", &spec, "git@github.com:org/other").is_err());
    let spec = repos(&["ssh://git@github.com/org/*"]);
    assert_eq!(check_source("p", &spec, "git@github.com:org/apps.git"), Ok(()));
}

#[test]
fn source_star_alone_allows_anything() {
    let spec = repos(&["*"]);
    for url in [
        "https://github.com/org/apps",
        "git@host:a/b/c",
        "file:///tmp/repo",
        "ssh://git@127.0.0.1:2222/x",
    ] {
        assert_eq!(check_source("p", &spec, url), Ok(()), "{url}");
    }
}

#[test]
fn source_star_stays_in_one_segment_double_star_crosses() {
    let spec = repos(&["https://github.com/org/*"]);
    assert_eq!(check_source("p", &spec, "https://github.com/org/apps"), Ok(()));
    assert!(check_source("p", &spec, "https://github.com/org/group/apps").is_err());
    assert!(check_source("p", &spec, "https://github.com/other/apps").is_err());
    let spec = repos(&["https://gitlab.com/org/**"]);
    assert_eq!(
        check_source("p", &spec, "https://gitlab.com/org/group/sub/apps"),
        Ok(())
    );
    assert!(check_source("p", &spec, "https://gitlab.com/other/apps").is_err());
}

#[test]
fn source_empty_list_allows_nothing() {
    let err = check_source("locked", &repos(&[]), "https://github.com/org/apps").unwrap_err();
    assert_eq!(err.rule, "sourceRepos");
    assert!(err.message.contains("empty"), "{err}");
    assert!(err.to_string().starts_with("project \"locked\": "), "{err}");
}

#[test]
fn source_negation_denies_even_when_an_allow_entry_matches() {
    let spec = repos(&["!https://github.com/org/secret", "!https://gitlab.com/group/**", "*"]);
    assert_eq!(check_source("p", &spec, "https://github.com/org/apps"), Ok(()));
    let err = check_source("p", &spec, "https://github.com/org/secret.git").unwrap_err();
    assert!(err.message.contains("refused"), "{err}");
    assert!(
        err.message.contains("!https://github.com/org/secret"),
        "names the deny entry: {err}"
    );
    // Denies are case-insensitive too: the same repository spelled differently is still refused.
    assert!(check_source("p", &spec, "https://GITHUB.com/ORG/Secret/").is_err());
    assert!(check_source("p", &spec, "https://gitlab.com/group/sub/repo").is_err());
    // Order does not matter: a deny after the allow still refuses.
    let spec = repos(&["*", "!https://github.com/org/secret"]);
    assert!(check_source("p", &spec, "https://github.com/org/secret").is_err());
}

#[test]
fn source_only_deny_entries_allow_nothing() {
    let spec = repos(&["!https://github.com/org/secret"]);
    let err = check_source("p", &spec, "https://github.com/org/apps").unwrap_err();
    assert!(err.message.contains("only deny entries"), "{err}");
}

#[test]
fn source_invalid_glob_never_allows_and_fails_closed_when_denying() {
    let spec = repos(&["https://github.com/org/[abc"]);
    assert!(check_source("p", &spec, "https://github.com/org/a").is_err());
    let spec = repos(&["!https://github.com/[x", "*"]);
    let err = check_source("p", &spec, "https://github.com/org/apps").unwrap_err();
    assert!(err.message.contains("not a valid glob"), "{err}");
}

// ---------- destinations ----------

#[test]
fn destination_server_and_namespace_must_both_match() {
    let spec = dests(vec![dest("https://prod.example.com", "", "team-*")]);
    assert_eq!(
        check_destination("p", &spec, "https://prod.example.com", "", "team-a"),
        Ok(())
    );
    let err = check_destination("p", &spec, "https://prod.example.com", "", "kube-system").unwrap_err();
    assert_eq!(err.rule, "destinations");
    assert!(err.message.contains("namespace \"kube-system\""), "{err}");
    assert!(
        err.message.contains("server: \"https://prod.example.com\""),
        "lists allowed entries: {err}"
    );
    assert!(check_destination("p", &spec, "https://staging.example.com", "", "team-a").is_err());
}

#[test]
fn destination_server_glob_crosses_slashes() {
    let spec = dests(vec![dest("https://*.example.com*", "", "*")]);
    assert_eq!(
        check_destination("p", &spec, "https://prod.example.com:6443/k8s/clusters/c-1", "", "ns"),
        Ok(())
    );
    assert!(check_destination("p", &spec, "https://prod.other.org", "", "ns").is_err());
}

#[test]
fn destination_by_name_matches_the_cluster_name() {
    let spec = dests(vec![dest("", "edge-*", "apps")]);
    assert_eq!(check_destination("p", &spec, "", "edge-1", "apps"), Ok(()));
    // The caller knows both; the entry sets only name, so name decides.
    assert_eq!(
        check_destination("p", &spec, "https://10.0.0.1:6443", "edge-1", "apps"),
        Ok(())
    );
    assert!(check_destination("p", &spec, "https://10.0.0.1:6443", "core-1", "apps").is_err());
    // A server-only destination never matches a name-only entry.
    assert!(check_destination("p", &spec, "https://edge-1", "", "apps").is_err());
}

#[test]
fn destination_entry_by_server_matches_when_app_names_the_cluster_and_caller_knows_its_server() {
    let spec = dests(vec![dest("https://kubernetes.default.svc", "", "*")]);
    assert_eq!(
        check_destination("p", &spec, "https://kubernetes.default.svc", "in-cluster", "x"),
        Ok(())
    );
    assert!(check_destination("p", &spec, "", "in-cluster", "x").is_err());
}

#[test]
fn destination_empty_list_allows_nothing() {
    let err = check_destination(
        "p",
        &dests(vec![]),
        "https://kubernetes.default.svc",
        "in-cluster",
        "default",
    )
    .unwrap_err();
    assert_eq!(err.rule, "destinations");
    assert!(err.message.contains("empty"), "{err}");
}

#[test]
fn destination_namespace_negation_denies() {
    let spec = dests(vec![dest("*", "", "!kube-system"), dest("*", "", "*")]);
    assert_eq!(check_destination("p", &spec, "https://c1", "", "default"), Ok(()));
    let err = check_destination("p", &spec, "https://c1", "", "kube-system").unwrap_err();
    assert!(err.message.contains("refused"), "{err}");
    assert!(err.message.contains("!kube-system"), "{err}");
}

#[test]
fn destination_server_negation_denies() {
    let spec = dests(vec![dest("!https://prod.*", "", "*"), dest("*", "", "*")]);
    assert_eq!(
        check_destination("p", &spec, "https://staging.example.com", "", "apps"),
        Ok(())
    );
    assert!(check_destination("p", &spec, "https://prod.example.com", "", "apps").is_err());
}

#[test]
fn destination_deny_entry_is_scoped_by_its_other_fields() {
    // kube-system is refused on prod only.
    let spec = dests(vec![dest("https://prod", "", "!kube-system"), dest("*", "", "*")]);
    assert!(check_destination("p", &spec, "https://prod", "", "kube-system").is_err());
    assert_eq!(
        check_destination("p", &spec, "https://staging", "", "kube-system"),
        Ok(())
    );
    assert_eq!(check_destination("p", &spec, "https://prod", "", "apps"), Ok(()));
}

#[test]
fn destination_only_deny_entries_allow_nothing() {
    let spec = dests(vec![dest("*", "", "!kube-system")]);
    let err = check_destination("p", &spec, "https://c1", "", "default").unwrap_err();
    assert!(err.message.contains("only deny entries"), "{err}");
}

#[test]
fn destination_entry_without_namespace_only_allows_cluster_scoped_apps() {
    let spec = dests(vec![dest("*", "", "")]);
    assert_eq!(check_destination("p", &spec, "https://c1", "", ""), Ok(()));
    assert!(check_destination("p", &spec, "https://c1", "", "default").is_err());
}

// ---------- kinds ----------

#[test]
fn cluster_scoped_kinds_need_the_whitelist() {
    let spec = AppProjectSpec::default();
    let err = check_resource(
        "team",
        &spec,
        "rbac.authorization.k8s.io",
        "ClusterRole",
        false,
        "ClusterRole/admin-extra",
    )
    .unwrap_err();
    assert_eq!(err.rule, "clusterResourceWhitelist");
    assert_eq!(
        err.message,
        "ClusterRole/admin-extra: cluster-scoped kind rbac.authorization.k8s.io/ClusterRole is not in the \
         project's clusterResourceWhitelist"
    );
    assert_eq!(
        err.to_string(),
        "project \"team\": ClusterRole/admin-extra: cluster-scoped kind rbac.authorization.k8s.io/ClusterRole \
         is not in the project's clusterResourceWhitelist (rule: clusterResourceWhitelist)"
    );

    let spec = AppProjectSpec {
        cluster_resource_whitelist: vec![gk("", "Namespace")],
        ..Default::default()
    };
    assert_eq!(
        check_resource("team", &spec, "", "Namespace", false, "Namespace/apps"),
        Ok(())
    );
    let err = check_resource(
        "team",
        &spec,
        "rbac.authorization.k8s.io",
        "ClusterRole",
        false,
        "ClusterRole/x",
    )
    .unwrap_err();
    assert_eq!(err.rule, "clusterResourceWhitelist");
    // The core group is "" and only "" matches it.
    assert!(check_resource("team", &spec, "example.com", "Namespace", false, "Namespace/x").is_err());
}

#[test]
fn cluster_whitelist_globs_on_group_and_kind() {
    let spec = AppProjectSpec {
        cluster_resource_whitelist: vec![gk("rbac.authorization.k8s.io", "Cluster*"), gk("*.example.com", "*")],
        ..Default::default()
    };
    assert_eq!(
        check_resource("p", &spec, "rbac.authorization.k8s.io", "ClusterRole", false, "x"),
        Ok(())
    );
    assert_eq!(
        check_resource(
            "p",
            &spec,
            "rbac.authorization.k8s.io",
            "ClusterRoleBinding",
            false,
            "x"
        ),
        Ok(())
    );
    assert_eq!(
        check_resource("p", &spec, "widgets.example.com", "Widget", false, "x"),
        Ok(())
    );
    assert!(check_resource("p", &spec, "", "Namespace", false, "x").is_err());
    // Kinds are case-sensitive, as in Kubernetes.
    assert!(check_resource("p", &spec, "rbac.authorization.k8s.io", "clusterrole", false, "x").is_err());
}

#[test]
fn cluster_blacklist_refuses_even_whitelisted_kinds() {
    let spec = AppProjectSpec {
        cluster_resource_whitelist: vec![gk("*", "*")],
        cluster_resource_blacklist: vec![gk("", "Namespace")],
        ..Default::default()
    };
    assert_eq!(
        check_resource("p", &spec, "rbac.authorization.k8s.io", "ClusterRole", false, "x"),
        Ok(())
    );
    let err = check_resource("p", &spec, "", "Namespace", false, "Namespace/prod").unwrap_err();
    assert_eq!(err.rule, "clusterResourceBlacklist");
    assert!(
        err.message
            .starts_with("Namespace/prod: cluster-scoped kind Namespace is in the project's clusterResourceBlacklist"),
        "{err}"
    );
}

#[test]
fn namespaced_kinds_allowed_by_default() {
    let spec = AppProjectSpec::default();
    assert_eq!(
        check_resource("p", &spec, "apps", "Deployment", true, "Deployment/web"),
        Ok(())
    );
    assert_eq!(
        check_resource("p", &spec, "", "ConfigMap", true, "ConfigMap/cfg"),
        Ok(())
    );
}

#[test]
fn namespaced_whitelist_when_set_restricts() {
    let spec = AppProjectSpec {
        namespace_resource_whitelist: vec![gk("apps", "*"), gk("", "ConfigMap")],
        ..Default::default()
    };
    assert_eq!(
        check_resource("p", &spec, "apps", "Deployment", true, "Deployment/web"),
        Ok(())
    );
    assert_eq!(
        check_resource("p", &spec, "", "ConfigMap", true, "ConfigMap/cfg"),
        Ok(())
    );
    let err = check_resource("p", &spec, "", "Secret", true, "Secret/creds").unwrap_err();
    assert_eq!(err.rule, "namespaceResourceWhitelist");
    assert_eq!(
        err.message,
        "Secret/creds: namespaced kind Secret is not in the project's namespaceResourceWhitelist"
    );
}

#[test]
fn namespaced_blacklist_refuses() {
    let spec = AppProjectSpec {
        namespace_resource_blacklist: vec![gk("", "ResourceQuota"), gk("networking.k8s.io", "Network*")],
        ..Default::default()
    };
    assert_eq!(
        check_resource("p", &spec, "apps", "Deployment", true, "Deployment/web"),
        Ok(())
    );
    let err = check_resource("p", &spec, "", "ResourceQuota", true, "ResourceQuota/q").unwrap_err();
    assert_eq!(err.rule, "namespaceResourceBlacklist");
    assert!(err.message.contains("ResourceQuota/q"), "{err}");
    let err = check_resource(
        "p",
        &spec,
        "networking.k8s.io",
        "NetworkPolicy",
        true,
        "NetworkPolicy/deny",
    )
    .unwrap_err();
    assert!(err.message.contains("networking.k8s.io/NetworkPolicy"), "{err}");
}

#[test]
fn scope_decides_which_lists_apply() {
    // A namespaced blacklist does not touch cluster-scoped kinds, nor the cluster whitelist namespaced.
    let spec = AppProjectSpec {
        cluster_resource_whitelist: vec![gk("", "Namespace")],
        namespace_resource_blacklist: vec![gk("", "Namespace")],
        ..Default::default()
    };
    assert_eq!(
        check_resource("p", &spec, "", "Namespace", false, "Namespace/x"),
        Ok(())
    );
    assert!(check_resource("p", &spec, "", "Namespace", true, "Namespace/x").is_err());
    assert_eq!(
        check_resource("p", &spec, "apps", "Deployment", true, "Deployment/web"),
        Ok(())
    );
}

#[test]
fn invalid_blacklist_glob_fails_closed() {
    let spec = AppProjectSpec {
        namespace_resource_blacklist: vec![gk("", "[Secret")],
        ..Default::default()
    };
    let err = check_resource("p", &spec, "apps", "Deployment", true, "Deployment/web").unwrap_err();
    assert!(err.message.contains("not a valid glob"), "{err}");
}

// ---------- the implicit default project ----------

#[test]
fn allow_all_allows_everything() {
    let spec = allow_all();
    for url in [
        "https://github.com/org/apps",
        "git@github.com:a/b/c.git",
        "file:///srv/git/repo",
    ] {
        assert_eq!(check_source("default", &spec, url), Ok(()), "{url}");
    }
    assert_eq!(
        check_destination("default", &spec, "https://kubernetes.default.svc", "", "default"),
        Ok(())
    );
    assert_eq!(check_destination("default", &spec, "", "in-cluster", "apps"), Ok(()));
    assert_eq!(check_destination("default", &spec, "https://x", "x", ""), Ok(()));
    assert_eq!(
        check_resource("default", &spec, "", "Namespace", false, "Namespace/x"),
        Ok(())
    );
    assert_eq!(
        check_resource("default", &spec, "rbac.authorization.k8s.io", "ClusterRole", false, "x"),
        Ok(())
    );
    assert_eq!(
        check_resource("default", &spec, "apps", "Deployment", true, "x"),
        Ok(())
    );
    assert_eq!(check_resource("default", &spec, "", "Secret", true, "x"), Ok(()));
}

#[test]
fn capstan_territory_needs_an_explicit_grant() {
    use capstan_api::project::{AppProjectSpec, GroupKind, ProjectDestination};
    let wide = AppProjectSpec {
        source_repos: vec!["*".into()],
        destinations: vec![ProjectDestination {
            server: "*".into(),
            name: String::new(),
            namespace: "*".into(),
        }],
        namespace_resource_whitelist: vec![GroupKind {
            group: "*".into(),
            kind: "*".into(),
        }],
        ..Default::default()
    };
    // Wildcards do not grant Capstan's kinds or namespace.
    let err = check_capstan_grant(
        "team-a",
        &wide,
        "capstan",
        &Subject {
            group: "capstan.dev",
            kind: "Application",
            namespaced: true,
            namespace: "capstan",
            object: "Application/x",
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("capstan.dev/Application"), "{err}");
    let err = check_capstan_grant(
        "team-a",
        &wide,
        "capstan",
        &Subject {
            group: "",
            kind: "ConfigMap",
            namespaced: true,
            namespace: "capstan",
            object: "ConfigMap/capstan-rbac",
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("namespace \"capstan\""), "{err}");
    // Other namespaces and kinds are not concerned.
    assert!(
        check_capstan_grant(
            "team-a",
            &wide,
            "capstan",
            &Subject {
                group: "",
                kind: "ConfigMap",
                namespaced: true,
                namespace: "team-a",
                object: "ConfigMap/x"
            }
        )
        .is_ok()
    );
    // Named literally, they are granted.
    let mut explicit = wide.clone();
    explicit.destinations.push(ProjectDestination {
        server: "*".into(),
        name: String::new(),
        namespace: "capstan".into(),
    });
    explicit.namespace_resource_whitelist.push(GroupKind {
        group: "capstan.dev".into(),
        kind: "Application".into(),
    });
    assert!(
        check_capstan_grant(
            "platform",
            &explicit,
            "capstan",
            &Subject {
                group: "capstan.dev",
                kind: "Application",
                namespaced: true,
                namespace: "capstan",
                object: "Application/x"
            }
        )
        .is_ok()
    );
    assert!(
        check_capstan_grant(
            "platform",
            &explicit,
            "capstan",
            &Subject {
                group: "capstan.dev",
                kind: "AppProject",
                namespaced: true,
                namespace: "capstan",
                object: "AppProject/x"
            }
        )
        .is_err(),
        "only the kinds named"
    );
    assert!(is_implicit_default("default", &allow_all()));
    assert!(!is_implicit_default("team-a", &allow_all()));
    assert!(!is_implicit_default("default", &wide));
}
