//! One promotion: the checks, the values read (the source's file at the source Application's synced
//! revision, the target's file at the branch head), one commit through [`GitWriter`] setting each
//! field that differs, and the entry appended to the pipeline's history.

use std::time::Duration;

use capstan_api::promotion::{FieldChange, PromotionRecord};
use capstan_api::{Application, PromotionPipeline};
use capstan_gitwrite::{Change, Edit, GitWriter, WriteOutcome, WriteRequest, WriterConfig};
use kube::Api;
use kube::api::ListParams;
use tracing::info;

use crate::read::Reader;
use crate::{PromoteError, check, history, values};

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
        }
    }

    /// Check, read, commit, record.
    pub async fn promote(&self, request: &PromoteRequest) -> Result<Outcome, PromoteError> {
        let pipeline = find_pipeline(&self.client, &self.namespace, request.pipeline.as_deref()).await?;
        let name = pipeline.metadata.name.clone().unwrap_or_default();
        let spec = &pipeline.spec;
        let (service, from, to) = (&request.service, &request.from, &request.to);
        check::check_names(spec, service, from, to)?;
        let reason = request.reason.trim();
        if request.force && reason.is_empty() {
            return Err(PromoteError::BadRequest("--force needs a --reason".into()));
        }
        if request.user.trim().is_empty() {
            return Err(PromoteError::BadRequest("the promoting user is unknown".into()));
        }
        check::check_order(spec, from, to, request.force)?;
        let apps: Api<Application> = Api::namespaced(self.client.clone(), &self.namespace);
        let source_app = spec.application(service, from);
        let source = apps
            .get_opt(&source_app)
            .await
            .map_err(PromoteError::kube(format!("reading Application {source_app}")))?
            .ok_or_else(|| PromoteError::NotFound(format!("Application {source_app:?}")))?;
        let revision = check::check_source(&source, request.force)?;
        let forced = request.force
            && (check::check_source(&source, false).is_err() || check::check_order(spec, from, to, false).is_err());

        let credentials = capstan_cluster::repository::for_repo(&self.client, &self.namespace, &spec.repo_url)
            .await
            .unwrap_or_default();
        let reader = Reader {
            url: spec.repo_url.clone(),
            credentials: credentials.clone(),
            timeout: self.timeout,
            allow_local: self.allow_local,
        };
        let (source_path, target_path) = (spec.file(service, from), spec.file(service, to));
        let source_revision = revision.as_deref().unwrap_or(spec.branch());
        let source_file = reader
            .read(&source_path, source_revision, spec.branch())
            .await
            .map_err(|err| match err {
                PromoteError::NotFound(_) => PromoteError::NotFound(format!(
                    "{source_app}'s synced revision {source_revision} in {} (does it deploy from another repository?)",
                    spec.repo_url
                )),
                err => err,
            })?;
        let target_file = reader.read(&target_path, spec.branch(), spec.branch()).await?;
        let mut changes = Vec::new();
        let mut edits = Vec::new();
        for field in spec.fields() {
            let new = values::scalar(&source_path, &source_file.text, &field)?;
            let old = values::scalar(&target_path, &target_file.text, &field)?;
            if new != old {
                let key = field
                    .parse()
                    .map_err(|e| PromoteError::BadRequest(format!("field {field:?}: {e}")))?;
                edits.push(Edit {
                    path: target_path.clone(),
                    change: Change::SetKey {
                        key,
                        value: new.clone(),
                    },
                });
                changes.push(FieldChange { field, old, new });
            }
        }
        if changes.is_empty() {
            info!(pipeline = %name, %service, %from, %to, "nothing to promote: the target has the source's values");
            return Ok(Outcome::Unchanged { pipeline: name });
        }
        let message = message(service, from, to, &changes, &request.user, forced.then_some(reason));
        let mut config = WriterConfig::new(request.user.trim(), email(&request.user, &self.email_domain));
        config.allow_local = self.allow_local;
        config.timeout = self.timeout;
        let outcome = GitWriter::new(config)
            .commit(WriteRequest {
                repo_url: spec.repo_url.clone(),
                credentials,
                branch: spec.branch().to_string(),
                push_branch: None,
                message,
                edits,
            })
            .await?;
        let WriteOutcome::Committed { sha, .. } = outcome else {
            return Ok(Outcome::Unchanged { pipeline: name });
        };
        info!(pipeline = %name, %service, %from, %to, commit = %sha, forced, "promoted");
        let record = PromotionRecord {
            service: service.clone(),
            from: from.clone(),
            to: to.clone(),
            changes,
            commit: sha,
            source_revision: source_file.commit,
            user: request.user.clone(),
            time: format!("{:.0}", k8s_openapi::jiff::Timestamp::now()),
            forced,
            reason: if forced { reason.to_string() } else { String::new() },
        };
        history::append(&self.client, &self.namespace, &name, record.clone()).await?;
        // The target's Application gets the new values through its ApplicationSet's Git generator:
        // both look at Git now rather than at their next poll.
        capstan_kube::refresh_readers(&self.client, &self.namespace, &spec.repo_url).await;
        Ok(Outcome::Promoted {
            pipeline: name,
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
fn email(user: &str, domain: &str) -> String {
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
