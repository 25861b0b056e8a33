//! Which provider sent an event (from its headers), and whether its signature or token is right.

use super::*;

// --- Providers ------------------------------------------------------------------------------

#[test]
fn each_provider_is_detected_from_the_headers_it_really_sends() {
    let github = headers(&[
        ("User-Agent", "GitHub-Hookshot/044aadd"),
        ("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958"),
        ("X-GitHub-Event", "push"),
        ("X-GitHub-Hook-ID", "292430182"),
        ("X-Hub-Signature", "sha1=7d38cdd689735b008b3c702edd92eea23791c5f6"),
        (
            "X-Hub-Signature-256",
            "sha256=d57c68ca6f92289e6987922ff26938930f6e66a2d161ef06abdf1859230aa23c",
        ),
    ]);
    assert_eq!(provider(&github), Some((Provider::GitHub, "push".to_string())));

    // Gitea and Forgejo also send X-GitHub-Event (and X-Gogs-Event): they must not pass for GitHub.
    let body = bytes(&gitea_payload());
    assert_eq!(
        provider(&gitea_headers("push", &body)),
        Some((Provider::Gitea, "push".to_string()))
    );
    let forgejo = headers(&[
        ("X-GitHub-Event", "push"),
        ("X-Gogs-Event", "push"),
        ("X-Forgejo-Event", "push"),
        ("X-Forgejo-Signature", &sign(&body)),
    ]);
    assert_eq!(provider(&forgejo), Some((Provider::Gitea, "push".to_string())));
    // Forgejo's own header alone is enough.
    let forgejo_only = headers(&[("X-Forgejo-Event", "push")]);
    assert_eq!(provider(&forgejo_only), Some((Provider::Gitea, "push".to_string())));

    let gitlab = headers(&[
        ("X-Gitlab-Event", "Tag Push Hook"),
        ("X-Gitlab-Token", "s3cret"),
        ("X-Gitlab-Instance", "https://gitlab.example"),
        ("X-Gitlab-Event-UUID", "13792a34-cac6-4fda-95a8-c58e00a3954e"),
    ]);
    assert_eq!(provider(&gitlab), Some((Provider::GitLab, "Tag Push Hook".to_string())));

    let bitbucket_cloud = headers(&[
        ("X-Event-Key", "repo:push"),
        ("X-Hook-UUID", "cb7a7b2e-8a4d-4f1f-9b0e-5e7b3b7f3c59"),
        ("X-Request-UUID", "b2b8f3c6-27c6-4b4e-8f0e-3a1d2c3b4a5f"),
        ("X-Attempt-Number", "1"),
    ]);
    assert_eq!(
        provider(&bitbucket_cloud),
        Some((Provider::Bitbucket, "repo:push".to_string()))
    );
    let bitbucket_server = headers(&[
        ("X-Event-Key", "repo:refs_changed"),
        ("X-Request-Id", "a2c1f3b4-1f2e-4d3c-9b8a-7f6e5d4c3b2a"),
    ]);
    assert_eq!(
        provider(&bitbucket_server),
        Some((Provider::Bitbucket, "repo:refs_changed".to_string()))
    );

    // Something else (no provider header at all).
    let other = headers(&[("Content-Type", "application/json"), ("User-Agent", "curl/8.5.0")]);
    assert_eq!(provider(&other), None);
    assert_eq!(provider(&HeaderMap::new()), None);
}

// --- Signatures -----------------------------------------------------------------------------

#[test]
fn github_signature_must_be_an_hmac_sha256_of_the_exact_body() {
    let body = bytes(&github_main_push());
    let good = format!("sha256={}", sign(&body));
    let unauthorized = Err(WebhookError::Unauthorized("github"));

    let h = headers(&[("X-GitHub-Event", "push"), ("X-Hub-Signature-256", &good)]);
    assert_eq!(verify(Provider::GitHub, &h, &body, SECRET), Ok(()));

    // Signed with another secret.
    let other_secret = format!("sha256={}", hmac_hex("not the secret", &body));
    let h = headers(&[("X-Hub-Signature-256", &other_secret)]);
    assert_eq!(verify(Provider::GitHub, &h, &body, SECRET), unauthorized);

    // A valid signature of another body (the payload was tampered with).
    let mut tampered = github_main_push();
    tampered["ref"] = json!("refs/heads/release");
    let h = headers(&[("X-Hub-Signature-256", &good)]);
    assert_eq!(verify(Provider::GitHub, &h, &bytes(&tampered), SECRET), unauthorized);

    // No signature at all.
    let h = headers(&[("X-GitHub-Event", "push")]);
    assert_eq!(verify(Provider::GitHub, &h, &body, SECRET), unauthorized);

    // The legacy SHA-1 header alone is not enough.
    let h = headers(&[("X-Hub-Signature", "sha1=7d38cdd689735b008b3c702edd92eea23791c5f6")]);
    assert_eq!(verify(Provider::GitHub, &h, &body, SECRET), unauthorized);

    // The right hex without its `sha256=` prefix, a truncated one, an empty one, and one not hex.
    let bare = sign(&body);
    for sig in [
        bare.clone(),
        format!("sha256={}", &bare[..62]),
        "sha256=".to_string(),
        "sha256=zz".to_string(),
    ] {
        let h = headers(&[("X-Hub-Signature-256", &sig)]);
        assert_eq!(verify(Provider::GitHub, &h, &body, SECRET), unauthorized, "{sig}");
    }
}

#[test]
fn gitea_and_forgejo_signatures_are_bare_hex_hmacs() {
    let body = bytes(&gitea_payload());
    let unauthorized = Err(WebhookError::Unauthorized("gitea"));

    assert_eq!(
        verify(Provider::Gitea, &gitea_headers("push", &body), &body, SECRET),
        Ok(())
    );
    let forgejo = headers(&[("X-Forgejo-Event", "push"), ("X-Forgejo-Signature", &sign(&body))]);
    assert_eq!(verify(Provider::Gitea, &forgejo, &body, SECRET), Ok(()));

    let wrong = headers(&[
        ("X-Gitea-Event", "push"),
        ("X-Gitea-Signature", &hmac_hex("not the secret", &body)),
    ]);
    assert_eq!(verify(Provider::Gitea, &wrong, &body, SECRET), unauthorized);
    assert_eq!(
        verify(Provider::Gitea, &gitea_headers("push", &body), b"{}", SECRET),
        unauthorized,
        "signature of another body"
    );
    let missing = headers(&[("X-Gitea-Event", "push"), ("X-GitHub-Event", "push")]);
    assert_eq!(verify(Provider::Gitea, &missing, &body, SECRET), unauthorized);
}

#[test]
fn bitbucket_signature_is_an_x_hub_signature_hmac_sha256() {
    for payload in [bitbucket_cloud_push(), bitbucket_server_push()] {
        let body = bytes(&payload);
        let good = format!("sha256={}", sign(&body));
        // Bitbucket Cloud and Server both send `X-Hub-Signature: sha256=<hex>`.
        let h = headers(&[("X-Event-Key", "repo:push"), ("X-Hub-Signature", &good)]);
        assert_eq!(verify(Provider::Bitbucket, &h, &body, SECRET), Ok(()));
        assert_eq!(
            verify(Provider::Bitbucket, &h, b"{\"push\":{}}", SECRET),
            Err(WebhookError::Unauthorized("bitbucket"))
        );
        let wrong = headers(&[(
            "X-Hub-Signature",
            &format!("sha256={}", hmac_hex("not the secret", &body)),
        )]);
        assert_eq!(
            verify(Provider::Bitbucket, &wrong, &body, SECRET),
            Err(WebhookError::Unauthorized("bitbucket"))
        );
        assert_eq!(
            verify(
                Provider::Bitbucket,
                &headers(&[("X-Event-Key", "repo:push")]),
                &body,
                SECRET
            ),
            Err(WebhookError::Unauthorized("bitbucket"))
        );
    }
}

#[test]
fn gitlab_token_must_equal_the_secret() {
    let body = bytes(&gitlab_push());
    let token = std::str::from_utf8(SECRET).unwrap();
    let h = headers(&[("X-Gitlab-Event", "Push Hook"), ("X-Gitlab-Token", token)]);
    assert_eq!(verify(Provider::GitLab, &h, &body, SECRET), Ok(()));

    let longer = format!("{token}!");
    let hmac = sign(&body);
    for wrong in [
        &token[..token.len() - 1],
        longer.as_str(),
        "",
        "it's a secret to everybody",
        hmac.as_str(),
    ] {
        let h = headers(&[("X-Gitlab-Event", "Push Hook"), ("X-Gitlab-Token", wrong)]);
        assert_eq!(
            verify(Provider::GitLab, &h, &body, SECRET),
            Err(WebhookError::Unauthorized("gitlab")),
            "{wrong:?}"
        );
    }
    // GitLab does not sign: an HMAC header instead of the token is refused.
    let h = headers(&[
        ("X-Gitlab-Event", "Push Hook"),
        ("X-Hub-Signature-256", &format!("sha256={hmac}")),
    ]);
    assert_eq!(
        verify(Provider::GitLab, &h, &body, SECRET),
        Err(WebhookError::Unauthorized("gitlab"))
    );
}

#[test]
fn without_a_configured_secret_every_provider_is_refused_unless_unsigned_events_are_allowed() {
    for p in [Provider::GitHub, Provider::Gitea, Provider::GitLab, Provider::Bitbucket] {
        // By default a secret is mandatory, and the refusal says how to configure one.
        let err = must_verify(p, false, false, false).unwrap_err();
        assert_eq!(err, WebhookError::NoSecret(p.as_str()));
        let message = err.to_string();
        assert!(
            message.contains(&format!("webhook.{}.secret", p.as_str())) && message.contains("--webhook-allow-unsigned"),
            "{message}"
        );
        // Only the explicit opt-out accepts unsigned events, and only while no provider has a secret.
        assert_eq!(must_verify(p, false, false, true), Ok(false), "{p:?}");
        assert_eq!(
            must_verify(p, false, true, true),
            Err(WebhookError::NoSecretWhileOthersHave(p.as_str())),
            "{p:?}"
        );
        // With a secret, the signature is always checked.
        assert_eq!(must_verify(p, true, true, false), Ok(true));
        assert_eq!(must_verify(p, true, true, true), Ok(true));
    }
}
