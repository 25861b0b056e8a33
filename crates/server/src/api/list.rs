//! `GET /api/applications`: the Application list, filtered on the server and paginated with
//! Kubernetes' `limit` and `continue`, answered from the server's watch cache.
//!
//! Pages are in name order and keyed on the name (each page starts after the last name of the one
//! before), so every Application that exists throughout a walk through the pages appears on exactly
//! one page, in order, however the others change meanwhile. The `continue` token ([`token`]) names
//! that last name and the filters it was made for, signed with a key every replica derives from the
//! server's Secret. Filters: project, cluster, destination namespace, sync and health status, label
//! selectors ([`selector`]) and a search in names. Without `limit` the whole filtered list is one
//! answer, as before pagination existed (and as Kubernetes does).

pub mod selector;
pub mod token;

use std::collections::HashMap;
use std::sync::Arc;

use aide::OperationInput;
use aide::generate::GenContext;
use aide::openapi::Operation;
use axum::Json;
use axum::extract::{FromRequestParts, Query, State as AxState};
use axum::http::StatusCode;
use axum::http::request::Parts;
use capstan_api::Application;
use kube::ResourceExt;
use schemars::JsonSchema;
use serde::Deserialize;

use super::access::{cluster_of, project_of};
use super::apps::summary;
use super::model::{AppSummaryList, ListMeta};
use crate::auth::rbac::Role;
use crate::auth::{Auth, SESSION_KEY};
use crate::error::ApiError;
use crate::state::State;
use selector::Selector;

/// The largest page a client may ask for.
pub const MAX_LIMIT: usize = 1000;

/// The query of `GET /api/applications`, as the OpenAPI document describes it (the handler reads
/// the query itself, see [`ListRequest`], to allow a repeated `label` and to answer every mistake
/// with a JSON 400 naming the parameter).
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct ListQuery {
    /// Only this project.
    pub project: Option<String>,
    /// Only this destination cluster (name, or `in-cluster`).
    pub cluster: Option<String>,
    /// Only this destination namespace.
    pub namespace: Option<String>,
    /// Only this sync status.
    pub sync: Option<String>,
    /// Only this health status.
    pub health: Option<String>,
    /// Label selector as `kubectl -l` takes it (`team=a,!legacy`, `tier in (web,api)`); may be
    /// repeated, every expression must match.
    pub label: Option<String>,
    /// Names containing this text.
    pub search: Option<String>,
    /// At most this many items (1 to 1000); without it, every matching Application.
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<u32>,
    /// The `metadata.continue` of the previous page, sent with the same filters.
    #[serde(rename = "continue")]
    pub continue_: Option<String>,
}

/// What a list request keeps to: the Applications it matches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filters {
    project: Option<String>,
    cluster: Option<String>,
    namespace: Option<String>,
    sync: Option<String>,
    health: Option<String>,
    labels: Selector,
    search: Option<String>,
}

impl Filters {
    /// The filters written out in one fixed form: equal filters give the same text.
    pub fn canonical(&self) -> String {
        let o = |v: &Option<String>| v.clone().unwrap_or_default();
        format!(
            "project={}\ncluster={}\nnamespace={}\nsync={}\nhealth={}\nlabel={}\nsearch={}",
            o(&self.project),
            o(&self.cluster),
            o(&self.namespace),
            o(&self.sync),
            o(&self.health),
            self.labels.canonical(),
            o(&self.search),
        )
    }

    /// Whether `app` passes every filter (read from the Application, without building a summary).
    pub fn matches(&self, app: &Application) -> bool {
        let eq = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        let status = app.status.as_ref();
        let sync = status
            .and_then(|s| s.sync.as_ref())
            .map(|s| s.status)
            .unwrap_or_default();
        let health = status
            .and_then(|s| s.health.as_ref())
            .map(|h| h.status)
            .unwrap_or_default();
        eq(&self.project, project_of(app))
            && eq(&self.namespace, &app.spec.destination.namespace)
            && eq(&self.sync, sync.as_str())
            && eq(&self.health, health.as_str())
            && self.search.as_deref().is_none_or(|q| name_of(app).contains(q))
            && self.labels.matches(app.labels())
            && (self.cluster.is_none() || eq(&self.cluster, &cluster_of(app)))
    }
}

/// A list request, read from the query: filters, page size and where the page starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListRequest {
    /// The filters.
    pub filters: Filters,
    /// The page size; None for everything.
    pub limit: Option<usize>,
    /// The `continue` token, if the request sent one.
    pub continue_: Option<String>,
}

/// Why a list query is refused; each names the parameter.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum QueryError {
    /// Not a query string.
    #[error("the query string cannot be read: {0}")]
    Malformed(String),
    /// A parameter other than `label` given twice.
    #[error("{0} is given more than once (only label may be repeated)")]
    Repeated(&'static str),
    /// `limit` is not a whole number in range.
    #[error("limit must be a whole number from 1 to {MAX_LIMIT}, not {0:?}")]
    Limit(String),
    /// `limit` over the maximum.
    #[error("limit {0} is over the maximum of {MAX_LIMIT}; page through the list with continue")]
    LimitTooLarge(u64),
    /// A bad label selector.
    #[error("label selector {text:?} {error}")]
    Label {
        /// The selector as sent.
        text: String,
        /// What is wrong with it.
        error: selector::SelectorError,
    },
}

impl ListRequest {
    /// The request of `query` (the part of the URL after `?`).
    pub fn parse(query: &str) -> Result<ListRequest, QueryError> {
        let pairs: Vec<(String, String)> =
            serde_urlencoded::from_str(query).map_err(|e| QueryError::Malformed(e.to_string()))?;
        let mut req = ListRequest::default();
        let mut labels = Vec::new();
        let mut seen: Vec<&'static str> = Vec::new();
        for (k, v) in &pairs {
            let name: &'static str = match k.as_str() {
                "label" => {
                    labels.push(v.as_str());
                    continue;
                }
                "project" => "project",
                "cluster" => "cluster",
                "namespace" => "namespace",
                "sync" => "sync",
                "health" => "health",
                "search" => "search",
                "limit" => "limit",
                "continue" => "continue",
                _ => continue, // unknown parameters are ignored, as they always were
            };
            if seen.contains(&name) {
                return Err(QueryError::Repeated(name));
            }
            seen.push(name);
            let value = Some(v.clone()).filter(|v| !v.is_empty());
            let f = &mut req.filters;
            match name {
                "project" => f.project = value,
                "cluster" => f.cluster = value,
                "namespace" => f.namespace = value,
                "sync" => f.sync = value,
                "health" => f.health = value,
                "search" => f.search = value.map(|q| q.to_lowercase()),
                "continue" => req.continue_ = value,
                _ => req.limit = value.map(|v| limit(&v)).transpose()?,
            }
        }
        req.filters.labels = Selector::parse(labels.iter().copied()).map_err(|error| QueryError::Label {
            text: labels.join(","),
            error,
        })?;
        Ok(req)
    }
}

fn limit(v: &str) -> Result<usize, QueryError> {
    let n: u64 = v.trim().parse().map_err(|_| QueryError::Limit(v.to_string()))?;
    match n {
        0 => Err(QueryError::Limit(v.to_string())),
        n if n > MAX_LIMIT as u64 => Err(QueryError::LimitTooLarge(n)),
        n => Ok(n as usize),
    }
}

impl<S: Send + Sync> FromRequestParts<S> for ListRequest {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        ListRequest::parse(parts.uri.query().unwrap_or_default()).map_err(|e| ApiError::bad_request(e.to_string()))
    }
}

impl OperationInput for ListRequest {
    fn operation_input(ctx: &mut GenContext, operation: &mut Operation) {
        Query::<ListQuery>::operation_input(ctx, operation);
    }
}

/// The name of `app` (every stored object has one).
fn name_of(app: &Application) -> &str {
    app.metadata.name.as_deref().unwrap_or_default()
}

/// The key continue tokens are signed with, from the server's Secret.
fn signing_key(state: &State) -> Result<ring::hmac::Key, ApiError> {
    state
        .secret_value(SESSION_KEY)
        .map(|k| token::signing_key(&k))
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the server's Secret has no session key yet, so no continue token can be made or checked",
            )
        })
}

/// `GET /api/applications`.
pub async fn list(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    req: ListRequest,
) -> Result<Json<AppSummaryList>, ApiError> {
    let digest = token::filters_digest(&req.filters.canonical());
    let after = match &req.continue_ {
        Some(t) => Some(
            token::decode(&signing_key(&state)?, &digest, t)
                .map_err(|e| ApiError::bad_request(format!("continue token {e}")))?,
        ),
        None => None,
    };
    let policy = state.policy();
    let mut roles: HashMap<String, Role> = HashMap::new();
    let mut matched: Vec<(Arc<Application>, Role)> = state
        .apps
        .state()
        .into_iter()
        .filter(|app| after.as_deref().is_none_or(|a| name_of(app) > a))
        .filter(|app| req.filters.matches(app))
        .filter_map(|app| {
            let project = project_of(&app);
            let role = match roles.get(project) {
                Some(r) => *r,
                None => {
                    let r = policy.role(&auth.principal, project);
                    roles.insert(project.to_string(), r);
                    r
                }
            };
            (role >= Role::ReadOnly).then_some((app, role))
        })
        .collect();
    let take = req.limit.unwrap_or(matched.len()).min(matched.len());
    // Only the page needs to be in order: the rest is counted, not sent.
    if take < matched.len() && take > 0 {
        matched.select_nth_unstable_by(take - 1, |a, b| name_of(&a.0).cmp(name_of(&b.0)));
    }
    let (page, rest) = matched.split_at_mut(take);
    page.sort_unstable_by(|a, b| name_of(&a.0).cmp(name_of(&b.0)));
    let items: Vec<_> = page.iter().map(|(app, role)| summary(app, *role)).collect();
    let metadata = match (rest.len(), items.last()) {
        (0, _) | (_, None) => ListMeta::default(),
        (remaining, Some(last)) => ListMeta {
            continue_: token::encode(&signing_key(&state)?, &digest, &last.name),
            remaining_item_count: Some(remaining),
        },
    };
    Ok(Json(AppSummaryList { metadata, items }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_is_read_with_every_filter() {
        let r = ListRequest::parse(
            "project=p&cluster=in-cluster&namespace=ns&sync=Synced&health=Healthy&label=team%3Dt3&label=env&search=Web&limit=50&continue=abc",
        )
        .expect("parses");
        assert_eq!(r.limit, Some(50));
        assert_eq!(r.continue_.as_deref(), Some("abc"));
        assert_eq!(r.filters.search.as_deref(), Some("web"));
        assert_eq!(r.filters.labels, Selector::parse(["env,team=t3"]).expect("parses"));
        // Empty values are absent ones; unknown parameters are ignored.
        let r = ListRequest::parse("limit=&continue=&project=&other=1").expect("parses");
        assert_eq!(r, ListRequest::default());
    }

    #[test]
    fn bad_limits_are_refused_naming_the_parameter() {
        assert_eq!(ListRequest::parse("limit=1").map(|r| r.limit), Ok(Some(1)));
        assert_eq!(ListRequest::parse("limit=1000").map(|r| r.limit), Ok(Some(1000)));
        for (q, want) in [
            ("limit=0", "limit must be a whole number from 1 to 1000, not \"0\""),
            ("limit=-5", "limit must be a whole number from 1 to 1000, not \"-5\""),
            ("limit=ten", "limit must be a whole number from 1 to 1000, not \"ten\""),
            ("limit=1.5", "limit must be a whole number from 1 to 1000, not \"1.5\""),
            ("limit=1001", "limit 1001 is over the maximum of 1000"),
            ("limit=100000", "limit 100000 is over the maximum of 1000"),
            ("limit=99999999999999999999999", "limit must be a whole number"),
            ("limit=1&limit=2", "limit is given more than once"),
            ("label=a%20b", "label selector \"a b\" cannot read"),
        ] {
            let err = ListRequest::parse(q).map(|_| ()).map_err(|e| e.to_string());
            assert!(err.as_ref().is_err_and(|e| e.starts_with(want)), "{q}: {err:?}");
        }
    }

    #[test]
    fn equal_filters_have_one_canonical_form_and_others_differ() {
        let a = ListRequest::parse("label=b%3D1,a&search=X&limit=5").expect("parses");
        let b = ListRequest::parse("search=x&label=a&label=b%3D1&limit=500&continue=t").expect("parses");
        assert_eq!(a.filters.canonical(), b.filters.canonical());
        for other in [
            "",
            "search=y",
            "label=a",
            "project=x",
            "health=Healthy",
            "sync=Synced",
            "cluster=c",
            "namespace=n",
        ] {
            let c = ListRequest::parse(other).expect("parses");
            assert_ne!(a.filters.canonical(), c.filters.canonical(), "{other}");
        }
    }
}
