//! A client that acts as another Kubernetes user (the API server's impersonation: every request
//! carries `Impersonate-User`), sharing the connections, credentials and request counting of the
//! client it is made from. The API server checks that the original client may impersonate that
//! user, then authorises each request as the user, so what the user may not do is refused there.
//!
//! Written as a tower service around [`kube::Client::send`] rather than a second client built from
//! a `kube::Config` with `auth_info.impersonate` set: a `Client` does not keep its `Config`, and a
//! second client would open its own connections to every destination for every account.

use http::{HeaderName, HeaderValue};

/// The header that names the user a request acts as.
const IMPERSONATE_USER: HeaderName = HeaderName::from_static("impersonate-user");

/// Why no impersonating client could be made.
#[derive(Debug, thiserror::Error)]
#[error("cannot act as user {user:?}: {source}")]
pub struct ImpersonationError {
    /// The user asked for.
    pub user: String,
    /// Why it cannot be a header value.
    #[source]
    pub source: http::header::InvalidHeaderValue,
}

/// A client acting as `user` (for a ServiceAccount, `system:serviceaccount:NAMESPACE:NAME`) over
/// `client`'s connections. Any impersonation header a request already carries (`Impersonate-Group`,
/// `-Uid`, `-Extra-*`) is removed. `client` itself must not impersonate (a kubeconfig's `as`): its
/// own headers are added after these, and the API server would see both.
pub fn impersonating(client: &kube::Client, user: &str) -> Result<kube::Client, ImpersonationError> {
    let value = HeaderValue::from_str(user).map_err(|source| ImpersonationError {
        user: user.to_string(),
        source,
    })?;
    let inner = client.clone();
    let service = tower::service_fn(move |mut request: http::Request<kube::client::Body>| {
        let inner = inner.clone();
        let value = value.clone();
        async move {
            let headers = request.headers_mut();
            let others: Vec<HeaderName> = headers
                .keys()
                .filter(|k| k.as_str().starts_with("impersonate-"))
                .cloned()
                .collect();
            for name in others {
                headers.remove(name);
            }
            headers.insert(IMPERSONATE_USER, value);
            inner.send(request).await
        }
    });
    Ok(kube::Client::new(service, client.default_namespace().to_string()))
}
