//! One promotion: its [plan](crate::plan) (the checks, the values read, the fields that differ), one
//! commit through [`GitWriter`] setting each field that differs, and the entry appended to the
//! pipeline's history.

use std::time::Duration;

use capstan_api::PromotionPipeline;
use capstan_api::promotion::{FieldChange, PromotionRecord};
use capstan_gitwrite::{GitWriter, WriteOutcome, WriteRequest, WriterConfig};
use kube::Api;
use kube::api::ListParams;
use tracing::info;

use crate::{PromoteError, history};

/// What to promote, and who asks.
#[derive(Debug, Clone, Default)]
pub struct PromoteRequest {
    /// The pipeline (optional when exactly one exists).
    pub pipeline: Option<String>,
    /// The service.
    pub service: String,
    /// The source environment.
    pub from: String,
    /// The target environment.
    pub to: String,
    /// Override a failing check (needs `reason`).
    pub force: bool,
    /// Why the checks were overridden.
    pub reason: String,
    /// Who promotes: the commit's author and the history's user.
    pub user: String,
    /// The source revision a preview showed: the promotion is refused if the source Application
    /// has moved since, so what is committed is what was confirmed.
    pub expected_source_revision: Option<String>,
}

/// What a promotion did.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The target already had the source's values: nothing was committed.
    Unchanged {
        /// The pipeline used.
        pipeline: String,
    },
    /// One commit was pushed.
    Promoted {
        /// The pipeline used.
        pipeline: String,
        /// The history entry recorded.
        record: Box<PromotionRecord>,
    },
}

/// Makes promotions in the pipelines of one namespace.
#[derive(Clone)]
pub struct Promoter {
    /// The cluster.
    pub client: kube::Client,
    /// Capstan's namespace (pipelines, Applications, repository Secrets).
    pub namespace: String,
    /// Whether `file://` repositories may be used (tests).
    pub allow_local: bool,
    /// Limit for each git command.
    pub timeout: Duration,
    /// Domain of the commit author's e-mail (`USER@DOMAIN`).
    pub email_domain: String,
    /// Without an AppProject named `default`, the `default` project permits nothing (the operator's
    /// `--deny-implicit-default-project`).
    pub deny_implicit_default: bool,
}

impl Promoter {
    /// A promoter for `namespace` with the defaults (60 s per git command, `capstan.invalid`).
    pub fn new(client: kube::Client, namespace: impl Into<String>) -> Self {
        Promoter {
            client,
            namespace: namespace.into(),
            allow_local: false,
            timeout: Duration::from_secs(60),
            email_domain: "capstan.invalid".into(),
            deny_implicit_default: false,
        }
    }

    /// Check, read, commit, record: [`Promoter::plan`], refused while an overridable check fails
    /// without `force`, then one commit of the planned edits.
    pub async fn promote(&self, request: &PromoteRequest) -> Result<Outcome, PromoteError> {
        let reason = request.reason.trim();
        if request.force && reason.is_empty() {
            return Err(PromoteError::BadRequest("--force needs a --reason".into()));
        }
        if request.user.trim().is_empty() {
            return Err(PromoteError::BadRequest("the promoting user is unknown".into()));
        }
        // Without force a failing check refuses before anything is read from Git.
        let mut plan = self.plan_checked(request, !request.force).await?;
        if let Some(expected) = request.expected_source_revision.as_deref().filter(|e| !e.is_empty())
            && expected != plan.source_revision
        {
            return Err(PromoteError::SourceMoved {
                app: plan.source_app,
                expected: expected.to_string(),
                now: plan.source_revision,
            });
        }
        let forced = match plan.check_failure.take() {
            Some(failure) if !request.force => return Err(failure),
            Some(_) => true,
            None => false,
        };
        let (name, service, from, to) = (&plan.pipeline, &request.service, &request.from, &request.to);
        if plan.changes.is_empty() {
            info!(pipeline = %name, %service, %from, %to, "nothing to promote: the target has the source's values");
            return Ok(Outcome::Unchanged {
                pipeline: plan.pipeline,
            });
        }
        let message = message(
            service,
            from,
            to,
            &plan.changes,
            &request.user,
            forced.then_some(reason),
        );
        let mut config = WriterConfig::new(request.user.trim(), email(&request.user, &self.email_domain));
        config.allow_local = self.allow_local;
        config.timeout = self.timeout;
        let outcome = GitWriter::new(config)
            .commit(WriteRequest {
                repo_url: plan.spec.repo_url.clone(),
                credentials: plan.credentials.clone(),
                branch: plan.spec.branch().to_string(),
                push_branch: None,
                message,
                edits: std::mem::take(&mut plan.edits),
            })
            .await?;
        let WriteOutcome::Committed { sha, .. } = outcome else {
            return Ok(Outcome::Unchanged {
                pipeline: plan.pipeline,
            });
        };
        info!(pipeline = %name, %service, %from, %to, commit = %sha, forced, "promoted");
        let record = PromotionRecord {
            service: service.clone(),
            from: from.clone(),
            to: to.clone(),
            changes: plan.changes,
            commit: sha,
            source_revision: plan.source_revision,
            user: request.user.clone(),
            time: format!("{:.0}", k8s_openapi::jiff::Timestamp::now()),
            forced,
            reason: if forced { reason.to_string() } else { String::new() },
        };
        // The target's Application gets the new values through its ApplicationSet's Git generator:
        // both look at Git now rather than at their next poll (first: the commit is made, whatever
        // happens to the history entry).
        // The writer accepted the URL, so it parses.
        if let Ok(url) = capstan_api::RepoUrl::parse(&plan.spec.repo_url) {
            capstan_kube::refresh_readers(&self.client, &self.namespace, &url).await;
        }
        history::append(&self.client, &self.namespace, &plan.pipeline, record.clone()).await?;
        Ok(Outcome::Promoted {
            pipeline: plan.pipeline,
            record: Box::new(record),
        })
    }
}

/// The pipeline `name`, or the only one when no name is given.
pub async fn find_pipeline(
    client: &kube::Client,
    namespace: &str,
    name: Option<&str>,
) -> Result<PromotionPipeline, PromoteError> {
    let api: Api<PromotionPipeline> = Api::namespaced(client.clone(), namespace);
    if let Some(name) = name.filter(|n| !n.is_empty()) {
        return api
            .get_opt(name)
            .await
            .map_err(PromoteError::kube(format!("reading PromotionPipeline {name}")))?
            .ok_or_else(|| PromoteError::NotFound(format!("PromotionPipeline {name:?}")));
    }
    let mut all = api
        .list(&ListParams::default())
        .await
        .map_err(PromoteError::kube("listing PromotionPipelines"))?
        .items;
    match all.len() {
        1 => Ok(all.remove(0)),
        0 => Err(PromoteError::NotFound("a PromotionPipeline".into())),
        n => Err(PromoteError::BadRequest(format!(
            "{n} PromotionPipelines exist: name one (--pipeline)"
        ))),
    }
}

/// `Promote SERVICE FROM → TO: imageTag 1.4.2 → 1.5.0, …` and, when forced, who and why.
fn message(service: &str, from: &str, to: &str, changes: &[FieldChange], user: &str, forced: Option<&str>) -> String {
    let list: Vec<String> = changes
        .iter()
        .map(|c| format!("{} {} → {}", c.field, c.old, c.new))
        .collect();
    let mut message = format!("Promote {service} {from} → {to}: {}", list.join(", "));
    if let Some(reason) = forced {
        message.push_str(&format!("\n\nForced by {user}: {reason}"));
    }
    message
}

/// `USER@DOMAIN`, the user's name reduced to what an e-mail's local part safely holds.
pub(crate) fn email(user: &str, domain: &str) -> String {
    let local: String = user
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("{local}@{domain}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_list_the_changes_and_the_reason() {
        let changes = vec![FieldChange {
            field: "imageTag".into(),
            old: "1.4.2".into(),
            new: "1.5.0".into(),
        }];
        assert_eq!(
            message("payments", "staging", "production", &changes, "alice", None),
            "Promote payments staging → production: imageTag 1.4.2 → 1.5.0"
        );
        let forced = message("payments", "staging", "production", &changes, "alice", Some("hotfix"));
        assert!(forced.ends_with("\n\nForced by alice: hotfix"), "{forced}");
        assert_eq!(email("sso user<x>", "capstan.invalid"), "sso-user-x-@capstan.invalid");
    }
}
