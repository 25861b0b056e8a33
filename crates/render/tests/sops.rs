//! SOPS files decrypted at render time (`spec.decryption`), encrypted by the real `sops`: a plain
//! directory, Helm value files (the chart's own and `$ref` ones) and Kustomize `secretGenerator` env
//! files render decrypted; the checkout keeps its encrypted files; a wrong key, a tampered file and a
//! file with a forged `sops` entry are refused naming the file, never a value or key.

mod common;

use std::sync::Arc;

use capstan_render::{Decryption, RefSource, RenderError};
use capstan_testkit::sops::{AgeKey, encrypt};
use common::*;

const SECRET: &str = "hunter2-s3cr3t-plaintext";

fn decryption(keys: &[&AgeKey]) -> Decryption {
    let text: String = keys.iter().map(|k| k.identity.as_str()).collect();
    Decryption {
        identities: Arc::new(capstan_sops::Identities::parse(&text).expect("the test fixture")),
        id: keys.iter().map(|k| k.recipient.as_str()).collect::<Vec<_>>().join(","),
    }
}

async fn render_decrypted(
    repo: &Repo,
    src: &capstan_api::application::ApplicationSource,
    d: &Decryption,
) -> Result<capstan_render::Rendered, RenderError> {
    let mut req = request(repo, src);
    req.decryption = Some(d);
    renderer().render(&req, REVISION).await
}

fn secret_manifest() -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\ntype: Opaque\nstringData:\n  password: {SECRET}\n  user: app\n"
    )
}

#[tokio::test]
async fn a_directory_secret_encrypted_with_sops_renders_decrypted() {
    let key = AgeKey::generate();
    let repo = Repo::new();
    let encrypted = encrypt(
        "secret.yaml",
        &secret_manifest(),
        &[&key],
        &["--encrypted-regex", "^(data|stringData)$"],
    )
    .unwrap();
    assert!(!encrypted.contains(SECRET));
    repo.file("app/secret.yaml", &encrypted)
        .file("app/cm.yaml", &configmap("plain"));
    let rendered = render_decrypted(&repo, &source("app"), &decryption(&[&key]))
        .await
        .unwrap();
    let secret = find(&rendered, "Secret", "db");
    assert_eq!(secret["stringData"]["password"], SECRET);
    assert!(secret.get("sops").is_none(), "the metadata is gone");
    find(&rendered, "ConfigMap", "plain");
    assert_eq!(
        repo.read("app/secret.yaml"),
        encrypted,
        "the checkout keeps the encrypted file"
    );
}

#[tokio::test]
async fn helm_value_files_encrypted_with_sops_render_decrypted_including_ref_sources() {
    let key = AgeKey::generate();
    let repo = Repo::new();
    repo.file("chart/Chart.yaml", "apiVersion: v2\nname: svc\nversion: 0.1.0\n")
        .file("chart/values.yaml", "password: none\napiKey: none\n")
        .file(
            "chart/templates/secret.yaml",
            "apiVersion: v1\nkind: Secret\nmetadata: {name: svc}\nstringData:\n  password: {{ .Values.password | quote }}\n  apiKey: {{ .Values.apiKey | quote }}\n",
        )
        .file(
            "chart/secrets.yaml",
            &encrypt("secrets.yaml", &format!("password: {SECRET}\n"), &[&key], &[]).unwrap(),
        );
    let values = Repo::new();
    values.file(
        "prod/secrets.yaml",
        &encrypt("secrets.yaml", "apiKey: from-the-ref-source\n", &[&key], &[]).unwrap(),
    );
    let mut src = source("chart");
    src.helm = Some(capstan_api::application::ApplicationSourceHelm {
        value_files: vec!["secrets.yaml".into(), "$values/prod/secrets.yaml".into()],
        ..Default::default()
    });
    let refs = [RefSource {
        name: "values",
        root: &values.root,
        revision: "1111111111111111111111111111111111111111",
    }];
    let d = decryption(&[&key]);
    let mut req = request(&repo, &src);
    req.refs = &refs;
    req.decryption = Some(&d);
    let rendered = renderer().render(&req, REVISION).await.unwrap();
    let secret = find(&rendered, "Secret", "svc");
    assert_eq!(secret["stringData"]["password"], SECRET);
    assert_eq!(secret["stringData"]["apiKey"], "from-the-ref-source");
}

#[tokio::test]
async fn a_kustomize_secret_generator_env_file_encrypted_with_sops_renders_decrypted() {
    let key = AgeKey::generate();
    let repo = Repo::new();
    repo.file(
        "app/kustomization.yaml",
        "secretGenerator:\n- name: creds\n  envs:\n  - creds.env\ngeneratorOptions:\n  disableNameSuffixHash: true\n",
    )
    .file(
        "app/creds.env",
        &encrypt("creds.env", &format!("PASSWORD={SECRET}\nUSER=app\n"), &[&key], &[]).unwrap(),
    );
    let rendered = render_decrypted(&repo, &source("app"), &decryption(&[&key]))
        .await
        .unwrap();
    let secret = find(&rendered, "Secret", "creds");
    let password = secret["data"]["PASSWORD"].as_str().unwrap();
    use base64::Engine;
    let decoded = base64::engine::general_purpose::STANDARD.decode(password).unwrap();
    assert_eq!(String::from_utf8(decoded).unwrap(), SECRET);
    assert!(
        secret["data"].get("sops_mac").is_none(),
        "no SOPS metadata key reaches the Secret"
    );
}

#[tokio::test]
async fn wrong_keys_tampered_files_and_forged_sops_entries_are_refused_naming_the_file() {
    let key = AgeKey::generate();
    let other = AgeKey::generate();
    let encrypted = encrypt(
        "secret.yaml",
        &secret_manifest(),
        &[&key],
        &["--encrypted-regex", "^stringData$"],
    )
    .unwrap();

    // A key the file was not encrypted for.
    let repo = Repo::new();
    repo.file("app/secret.yaml", &encrypted);
    let err = render_decrypted(&repo, &source("app"), &decryption(&[&other]))
        .await
        .unwrap_err();
    assert!(matches!(err.root(), RenderError::Decrypt { .. }), "{err}");
    let message = format!("{err} {err:?}");
    assert!(
        message.contains("app/secret.yaml") && message.contains(&key.recipient),
        "{message}"
    );
    assert!(
        !message.contains("AGE-SECRET-KEY") && !message.contains(SECRET),
        "{message}"
    );

    // A value changed in the file (the unencrypted name, covered by the MAC).
    assert!(encrypted.contains("name: db"), "{encrypted}");
    let repo = Repo::new();
    repo.file("app/secret.yaml", &encrypted.replace("name: db", "name: other"));
    let err = render_decrypted(&repo, &source("app"), &decryption(&[&key]))
        .await
        .unwrap_err();
    assert!(matches!(err.root(), RenderError::Decrypt { .. }), "{err}");
    assert!(err.to_string().contains("MAC"), "{err}");

    // Not a SOPS file, but a top-level `sops` entry.
    let repo = Repo::new();
    repo.file(
        "app/secret.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\nsops:\n  version: 3.9.0\n",
    );
    let err = render_decrypted(&repo, &source("app"), &decryption(&[&key]))
        .await
        .unwrap_err();
    assert!(matches!(err.root(), RenderError::Decrypt { .. }), "{err}");
    assert!(err.to_string().contains("app/secret.yaml"), "{err}");
}
