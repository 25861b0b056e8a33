//! Issue 27, against a real control plane and a real git server: a PromotionPipeline belongs to an
//! AppProject, which says which files of which repositories, on which branches, its promotions may
//! commit, and whose Applications it promotes between. A pipeline of team A cannot write team B's
//! file of a shared repository, a branch team A may not write, or promote between team B's
//! Applications; a pipeline without a project is refused by the API server. Team A's own promotion
//! is committed.

use capstan_api::{AppProject, Application, PromotionPipeline};
use capstan_promote::{ErrorKind, Outcome, PromoteError, PromoteRequest, Promoter};
use capstan_testkit::git::{PASSWORD, USER};
use capstan_testkit::{GitServer, TestCluster, run_git};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

/// Server-side apply `body` (a JSON object with `metadata.name`) through `api`.
macro_rules! apply {
    ($api:expr, $body:expr $(,)?) => {{
        let body: Value = $body;
        let name = body["metadata"]["name"].as_str().unwrap_or_default().to_string();
        $api.patch(&name, &PatchParams::apply("test").force(), &Patch::Apply(&body))
            .await
    }};
}

fn pipeline(ns: &str, name: &str, project: Option<&str>, repo: &str, branch: &str, application: &str) -> Value {
    let mut spec = json!({
        "repoURL": repo, "branch": branch, "path": "services/{service}/{env}.yaml",
        "application": application, "fields": ["imageTag"],
        "environments": [{"name": "staging"}, {"name": "production"}],
    });
    if let Some(project) = project {
        spec["project"] = json!(project);
    }
    json!({"apiVersion": "capstan.dev/v1alpha1", "kind": "PromotionPipeline",
           "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

fn request(pipeline: &str, service: &str) -> PromoteRequest {
    PromoteRequest {
        pipeline: Some(pipeline.into()),
        service: service.into(),
        from: "staging".into(),
        to: "production".into(),
        // The Applications are not deployed here: the project decides before their state.
        force: true,
        reason: "test".into(),
        user: "ops".into(),
        expected_source_revision: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_promotes_only_within_its_project() -> anyhow::Result<()> {
    capstan_testkit::init_logging();
    // The run's shared plane, in a Capstan namespace of this test's own.
    let cluster = TestCluster::shared().await?;
    let client = cluster.client().await?;
    capstan_testkit::capstan::install(&client).await?;
    let ns = capstan_testkit::capstan::unique_namespace();
    capstan_testkit::capstan::create_namespace(&client, &ns).await?;
    let git = GitServer::start().await?;
    git.create_repo("shared")?;
    let tag = |t: &str| format!("imageTag: \"{t}\"\n");
    git.commit(
        "shared",
        "main",
        &[
            ("services/web/staging.yaml", Some(tag("2.0.0").as_str())),
            ("services/web/production.yaml", Some(tag("1.0.0").as_str())),
            ("services/api/staging.yaml", Some(tag("2.0.0").as_str())),
            ("services/api/production.yaml", Some(tag("1.0.0").as_str())),
        ],
        "two teams",
    )?;
    let repo = git.http_url("shared");
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "shared", "namespace": ns, "labels": {"capstan.dev/secret-type": "repository"}},
        "stringData": {"url": repo, "username": USER, "password": PASSWORD},
    }))?;
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&Default::default(), &secret)
        .await?;
    let projects: Api<AppProject> = Api::namespaced(client.clone(), &ns);
    for (team, service) in [("team-a", "web"), ("team-b", "api")] {
        apply!(
            projects,
            json!({"apiVersion": "capstan.dev/v1alpha1", "kind": "AppProject",
                   "metadata": {"name": team, "namespace": ns},
                   "spec": {"sourceRepos": [repo], "destinations": [{"server": "*", "namespace": team}],
                            "sourceRepoPaths": [{"repo": repo, "paths": [format!("services/{service}/**")],
                                                 "branches": ["main"]}]}}),
        )?;
    }
    let apps: Api<Application> = Api::namespaced(client.clone(), &ns);
    for (team, service) in [("team-a", "web"), ("team-b", "api")] {
        for env in ["staging", "production"] {
            apply!(
                apps,
                json!({"apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
                       "metadata": {"name": format!("{service}-{env}"), "namespace": ns},
                       "spec": {"project": team,
                                "source": {"repoURL": repo, "targetRevision": "main", "path": format!("services/{service}")},
                                "destination": {"server": "https://kubernetes.default.svc", "namespace": team}}}),
            )?;
        }
    }
    let pipelines: Api<PromotionPipeline> = Api::namespaced(client.clone(), &ns);
    apply!(
        pipelines,
        pipeline(&ns, "team-a", Some("team-a"), &repo, "main", "{service}-{env}")
    )?;
    apply!(
        pipelines,
        pipeline(
            &ns,
            "team-a-release",
            Some("team-a"),
            &repo,
            "release",
            "{service}-{env}"
        )
    )?;
    // Team A's project, team A's file, team B's Applications.
    apply!(
        pipelines,
        pipeline(&ns, "team-a-borrowed", Some("team-a"), &repo, "main", "api-{env}")
    )?;

    let promoter = Promoter::new(client.clone(), &ns);
    let bare = git.repo_path("shared");
    let before = run_git(&bare, &["rev-parse", "main"])?;
    let refused = |err: &PromoteError, needles: &[&str]| {
        assert_eq!(err.kind(), ErrorKind::Forbidden, "{err}");
        let message = err.to_string();
        for needle in needles {
            assert!(message.contains(needle), "{needle:?} in {message}");
        }
    };
    // Team B's file in the shared repository.
    let err = promoter.promote(&request("team-a", "api")).await.unwrap_err();
    refused(
        &err,
        &["services/api/production.yaml", "project \"team-a\"", "sourceRepoPaths"],
    );
    // A branch team A may not write.
    let err = promoter.promote(&request("team-a-release", "web")).await.unwrap_err();
    refused(&err, &["branch \"release\"", "sourceRepoPaths"]);
    // Team B's Applications under team A's project.
    let err = promoter.promote(&request("team-a-borrowed", "web")).await.unwrap_err();
    refused(&err, &["Application api-staging belongs to project \"team-b\""]);
    // The dry run refuses the same way.
    let err = promoter.plan(&request("team-a", "api")).await.unwrap_err();
    refused(&err, &["sourceRepoPaths"]);
    assert_eq!(run_git(&bare, &["rev-parse", "main"])?, before, "nothing committed");
    assert!(
        run_git(&bare, &["rev-parse", "--verify", "--quiet", "refs/heads/release"]).is_err(),
        "no release branch"
    );

    // A pipeline naming no project is refused by the API server (the CRD requires it).
    let anonymous = apply!(
        pipelines,
        pipeline(&ns, "anonymous", None, &repo, "main", "{service}-{env}")
    );
    assert!(
        matches!(&anonymous, Err(kube::Error::Api(e)) if e.code == 422 && e.message.contains("project")),
        "{anonymous:?}"
    );

    // Team A's own promotion is committed.
    let outcome = promoter.promote(&request("team-a", "web")).await?;
    assert!(matches!(outcome, Outcome::Promoted { .. }), "{outcome:?}");
    assert_eq!(
        run_git(&bare, &["show", "main:services/web/production.yaml"])?,
        tag("2.0.0").trim_end()
    );
    assert_eq!(
        run_git(&bare, &["show", "main:services/api/production.yaml"])?,
        tag("1.0.0").trim_end(),
        "team B's file untouched"
    );
    Ok(())
}
