//! A client that refuses to send a write once this replica's ownership has lapsed: every request
//! other than GET, HEAD and OPTIONS is checked at the moment it would leave, so a replica that was
//! frozen or cut off (its member Lease expired; others may have taken over) writes nothing more,
//! even from a reconcile that was already running. Reads, watches included, go through. Every
//! request names the replica in its `User-Agent` (`capstan-controller/VERSION (replica ID)`), so
//! the API server's audit log says which replica wrote what.
//!
//! A tower service around [`kube::Client::send`], like `capstan_kube::impersonating`, sharing the
//! client's connections.

use std::time::Instant;

use http::Method;
use http::header::{HeaderValue, USER_AGENT};

use crate::identity::ReplicaId;
use crate::ownership::Ownership;

/// The write a fenced client refused.
#[derive(Debug, thiserror::Error)]
#[error("replica {replica} no longer holds its Lease: {method} {path} refused (another replica may own this work now)")]
pub struct Fenced {
    /// This replica.
    pub replica: String,
    /// The request's method.
    pub method: Method,
    /// The request's path.
    pub path: String,
}

/// `client`, refusing writes while `ownership` is not valid.
pub fn fenced(client: &kube::Client, ownership: Ownership) -> kube::Client {
    let id = ownership.id().clone();
    wrap(client, &id, Some(ownership))
}

/// `client` naming replica `id` in its `User-Agent`, without a fence (the coordinator's own).
pub fn named(client: &kube::Client, id: &ReplicaId) -> kube::Client {
    wrap(client, id, None)
}

fn wrap(client: &kube::Client, id: &ReplicaId, fence: Option<Ownership>) -> kube::Client {
    let inner = client.clone();
    let agent = HeaderValue::from_str(&format!(
        "capstan-controller/{} (replica {id})",
        env!("CARGO_PKG_VERSION")
    ))
    .ok();
    let replica = id.to_string();
    let service = tower::service_fn(move |mut request: http::Request<kube::client::Body>| {
        let inner = inner.clone();
        let fence = fence.clone();
        let replica = replica.clone();
        if let Some(agent) = &agent {
            request.headers_mut().entry(USER_AGENT).or_insert_with(|| agent.clone());
        }
        async move {
            let method = request.method().clone();
            let safe = method == Method::GET || method == Method::HEAD || method == Method::OPTIONS;
            let refused = |path: String| {
                let refused = Fenced {
                    replica: replica.clone(),
                    method: method.clone(),
                    path,
                };
                tracing::warn!(%refused, "write refused");
                Box::new(refused) as Box<dyn std::error::Error + Send + Sync>
            };
            let deadline = match (&fence, safe) {
                (Some(f), false) => {
                    let lapses = f.lapses();
                    match f.term() {
                        (Some(until), term) if Instant::now() < until => Some((f, until, term, lapses)),
                        _ => return Err(refused(request.uri().path().to_string())),
                    }
                }
                _ => None,
            };
            let path = request.uri().path().to_string();
            let sent = inner.send(request);
            match deadline {
                // A write still unanswered when ownership ends is abandoned (the API server may
                // yet apply it: only a request already sent can land late).
                // Ownership renewed meanwhile extends the wait: what ends it is ownership ending,
                // not the validity known when the request went out (on a slow API server a write
                // sent just before a renewal would be abandoned, and its sync failed, for nothing).
                // Renewed, not regained: a lapse ends the wait at once and for good.
                Some((f, mut until, term, mut lapses)) => {
                    tokio::pin!(sent);
                    loop {
                        tokio::select! {
                            answer = &mut sent => {
                                break answer.map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>);
                            }
                            _ = lapses.changed() => break Err(refused(path)),
                            () = tokio::time::sleep_until(until.into()) => match f.term() {
                                (Some(later), now) if now == term && Instant::now() < later => until = later,
                                _ => break Err(refused(path)),
                            },
                        }
                    }
                }
                None => sent
                    .await
                    .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>),
            }
        }
    });
    kube::Client::new(service, client.default_namespace().to_string())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kube::api::{Api, PostParams};

    use super::*;

    /// A client whose every request is answered `201` with an empty ConfigMap after `delay`: the
    /// fence's timing alone is under test here (tests/ and the controller's run it against a real
    /// API server).
    fn slow_client(delay: Duration) -> kube::Client {
        let service = tower::service_fn(move |_request: http::Request<kube::client::Body>| async move {
            tokio::time::sleep(delay).await;
            let body = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"default"}}"#;
            http::Response::builder()
                .status(201)
                .header("content-type", "application/json")
                .body(kube::client::Body::from(body.to_vec()))
        });
        kube::Client::new(service, "default")
    }

    async fn write(client: kube::Client) -> Result<(), kube::Error> {
        let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::default_namespaced(client);
        api.create(&PostParams::default(), &Default::default())
            .await
            .map(|_| ())
    }

    #[tokio::test]
    async fn a_write_outliving_the_validity_it_was_sent_under_lands_when_ownership_was_renewed() {
        // Wide margins: the renewal (at 50 ms) comes long before the first validity ends (1 s),
        // and the answer (1.5 s) after it, even on a loaded machine.
        let ownership = Ownership::new(ReplicaId::new("fence-test").expect("a valid identity"));
        ownership
            .set_valid_until(Instant::now() + Duration::from_secs(1))
            .expect("nothing in flight");
        let client = fenced(&slow_client(Duration::from_millis(1500)), ownership.clone());
        let renewer = {
            let ownership = ownership.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                ownership
                    .set_valid_until(Instant::now() + Duration::from_secs(4))
                    .expect("nothing in flight");
            }
        };
        let (written, ()) = tokio::join!(write(client), renewer);
        assert!(written.is_ok(), "{written:?}");
    }

    #[tokio::test]
    async fn a_write_sent_before_a_lapse_is_abandoned_at_once_even_when_ownership_is_regained() {
        let ownership = Ownership::new(ReplicaId::new("fence-test").expect("a valid identity"));
        ownership
            .set_valid_until(Instant::now() + Duration::from_secs(1))
            .expect("nothing in flight");
        let client = fenced(&slow_client(Duration::from_millis(2000)), ownership.clone());
        let relapse = {
            let ownership = ownership.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(30)).await;
                ownership.lapse();
                ownership
                    .set_valid_until(Instant::now() + Duration::from_secs(2))
                    .expect("nothing in flight");
            }
        };
        let started = Instant::now();
        let (written, ()) = tokio::join!(write(client), relapse);
        let err = written.expect_err("abandoned");
        assert!(err.to_string().contains("no longer holds its Lease"), "{err}");
        // At the lapse, not at the end of the validity it was sent under (1 s) nor at the answer.
        assert!(
            started.elapsed() < Duration::from_millis(700),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn a_write_unanswered_when_ownership_ends_is_abandoned_and_none_is_sent_after() {
        let ownership = Ownership::new(ReplicaId::new("fence-test").expect("a valid identity"));
        ownership
            .set_valid_until(Instant::now() + Duration::from_millis(100))
            .expect("nothing in flight");
        let client = fenced(&slow_client(Duration::from_millis(400)), ownership.clone());
        let started = Instant::now();
        let written = write(client.clone()).await;
        let err = written.expect_err("abandoned");
        assert!(err.to_string().contains("no longer holds its Lease"), "{err}");
        assert!(
            started.elapsed() < Duration::from_millis(350),
            "{:?}",
            started.elapsed()
        );
        let refused = write(client).await.expect_err("refused");
        assert!(refused.to_string().contains("no longer holds its Lease"), "{refused}");
    }
}
