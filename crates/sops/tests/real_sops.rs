//! Files encrypted by the real sops binary (built by `bash scripts/setup.sh`, step `sops`) decrypt to
//! the original data; tampered, foreign or malformed files are refused without leaking plaintext or keys.

use std::path::{Path, PathBuf};
use std::process::Command;

use age::secrecy::ExposeSecret;
use capstan_sops::{Format, Identities, SopsError, decrypt, is_encrypted};

const SECRET: &str = "s3cr3t-plaintext-value";

fn sops_bin() -> PathBuf {
    let cache = std::env::var_os("CAPSTAN_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/capstan"));
    let bin = cache.join("bin/sops");
    assert!(
        bin.is_file(),
        "{} is missing: run `bash scripts/setup.sh` (step sops) first",
        bin.display()
    );
    bin
}

struct Key {
    text: String,
    recipient: String,
}

fn key() -> Key {
    let id = age::x25519::Identity::generate();
    Key {
        text: format!("# test key\n{}\n", id.to_string().expose_secret()),
        recipient: id.to_public().to_string(),
    }
}

fn ids(keys: &[&Key]) -> Identities {
    Identities::parse(&keys.iter().map(|k| k.text.as_str()).collect::<String>()).expect("identities")
}

/// Encrypts `plain` as file `name` with the real sops for `recipients`, in a clean environment.
fn encrypt(name: &str, plain: &str, recipients: &[&Key], extra: &[&str]) -> Vec<u8> {
    let recipients: Vec<&str> = recipients.iter().map(|k| k.recipient.as_str()).collect();
    let mut args = vec!["--age".to_string(), recipients.join(",")];
    args.extend(extra.iter().map(|s| s.to_string()));
    run_sops(name, plain, None, &args)
}

/// Runs `sops encrypt ARGS FILE` in a fresh directory (HOME too), with an optional `.sops.yaml`.
fn run_sops(name: &str, plain: &str, config: Option<&str>, args: &[String]) -> Vec<u8> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(name);
    std::fs::write(&path, plain).expect("write");
    if let Some(config) = config {
        std::fs::write(dir.path().join(".sops.yaml"), config).expect("write config");
    }
    let out = Command::new(sops_bin())
        .env_clear()
        .env("HOME", dir.path())
        .env("PATH", "/usr/bin:/bin")
        .current_dir(dir.path())
        .arg("--disable-version-check")
        .arg("encrypt")
        .args(args)
        .arg(&path)
        .output()
        .expect("run sops");
    assert!(
        out.status.success(),
        "sops encrypt failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn yaml_value(bytes: &[u8]) -> serde_json::Value {
    serde_saphyr::from_str(std::str::from_utf8(bytes).expect("utf-8")).expect("yaml")
}

fn assert_clean(err: &SopsError, key: &Key) {
    let msg = format!("{err} {err:?}");
    assert!(!msg.contains(SECRET), "error leaks plaintext: {msg}");
    assert!(!msg.contains("AGE-SECRET-KEY"), "error leaks key material: {msg}");
    assert!(
        !msg.contains(key.text.trim_start_matches("# test key\n").trim()),
        "error leaks key: {msg}"
    );
}

const VALUES: &str = "\
# a head comment
zeta: first key
image:
  repository: nginx
  tag: \"1.25\"
replicas: 3
ratio: 0.75
big: 1e3
enabled: true
disabled: false
empty: \"\"
nothing: null
password: s3cr3t-plaintext-value
list:
  - one
  - 2
  - 3.5
  - false
  - nested: map
    other: [1, 2]
multi: |
  line one
  line two: with colon
folded: >-
  folded
  text
note_unencrypted: stays plain
";

#[test]
fn yaml_round_trip() {
    let k = key();
    let enc = encrypt("values.yaml", VALUES, &[&k], &[]);
    let text = String::from_utf8_lossy(&enc);
    assert!(!text.contains(SECRET));
    assert!(text.contains("note_unencrypted: stays plain"));
    assert!(is_encrypted(&enc, Format::Yaml));
    assert!(!is_encrypted(VALUES.as_bytes(), Format::Yaml));
    let plain = decrypt(&enc, Format::Yaml, &ids(&[&k])).expect("decrypt");
    assert_eq!(yaml_value(&plain), yaml_value(VALUES.as_bytes()));
    // Key order is kept.
    let out = String::from_utf8(plain).expect("utf-8");
    let keys: Vec<&str> = out
        .lines()
        .filter(|l| !l.starts_with([' ', '-']))
        .filter_map(|l| l.split(':').next())
        .collect();
    assert_eq!(keys[..4], ["zeta", "image", "replicas", "ratio"]);
}

#[test]
fn yaml_multi_document() {
    let k = key();
    let plain = "a: 1\nb: s3cr3t-plaintext-value\n---\nc: [x, z]\nd: {e: true}\n";
    let enc = encrypt("multi.yaml", plain, &[&k], &[]);
    let out = decrypt(&enc, Format::Yaml, &ids(&[&k])).expect("decrypt");
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(std::str::from_utf8(&out).expect("utf-8")).expect("yaml");
    let want: Vec<serde_json::Value> = serde_saphyr::from_multiple(plain).expect("yaml");
    assert_eq!(docs, want);
}

const SECRET_MANIFEST: &str = "\
apiVersion: v1
kind: Secret
metadata:
  name: db
  labels:
    app: web
type: Opaque
stringData:
  password: s3cr3t-plaintext-value
  port: \"5432\"
data:
  token: c2VjcmV0
";

#[test]
fn kubernetes_secret_with_encrypted_regex() {
    let k = key();
    let enc = encrypt(
        "secret.yaml",
        SECRET_MANIFEST,
        &[&k],
        &["--encrypted-regex", "^(data|stringData)$"],
    );
    let text = String::from_utf8_lossy(&enc);
    assert!(text.contains("name: db") && !text.contains(SECRET));
    let plain = decrypt(&enc, Format::Yaml, &ids(&[&k])).expect("decrypt");
    assert_eq!(yaml_value(&plain), yaml_value(SECRET_MANIFEST.as_bytes()));
    // The MAC covers the unencrypted values too.
    let tampered = text.replace("name: db", "name: other");
    let err = decrypt(tampered.as_bytes(), Format::Yaml, &ids(&[&k])).expect_err("tampered plain value");
    assert!(matches!(err, SopsError::MacMismatch), "{err:?}");
}

#[test]
fn unencrypted_suffix() {
    let k = key();
    let plain = "user_plain: admin\npassword: s3cr3t-plaintext-value\nnested:\n  host_plain: db\n  port: 5432\n";
    let enc = encrypt("s.yaml", plain, &[&k], &["--unencrypted-suffix", "_plain"]);
    assert!(String::from_utf8_lossy(&enc).contains("user_plain: admin"));
    let out = decrypt(&enc, Format::Yaml, &ids(&[&k])).expect("decrypt");
    assert_eq!(yaml_value(&out), yaml_value(plain.as_bytes()));
}

#[test]
fn mac_only_encrypted() {
    let k = key();
    // sops 3.13 has no command-line flag for it: the creation rule sets it.
    let config = format!(
        "creation_rules:\n  - age: {}\n    encrypted_regex: ^(data|stringData)$\n    mac_only_encrypted: true\n",
        k.recipient
    );
    let enc = run_sops("s.yaml", SECRET_MANIFEST, Some(&config), &[]);
    assert!(String::from_utf8_lossy(&enc).contains("mac_only_encrypted: true"));
    let out = decrypt(&enc, Format::Yaml, &ids(&[&k])).expect("decrypt");
    assert_eq!(yaml_value(&out), yaml_value(SECRET_MANIFEST.as_bytes()));
    // Plain values are outside the MAC here, as in sops.
    let changed = String::from_utf8_lossy(&enc).replace("name: db", "name: other");
    decrypt(changed.as_bytes(), Format::Yaml, &ids(&[&k])).expect("plain values are not MAC'd");
}

#[test]
fn json_round_trip_keeps_order() {
    let k = key();
    let plain = r#"{"zeta": "s3cr3t-plaintext-value", "alpha": {"n": 1, "f": 2.5, "b": true, "l": ["x", 3, null]}, "big": 12345678901234}"#;
    let enc = encrypt("c.json", plain, &[&k], &[]);
    assert!(is_encrypted(&enc, Format::Json));
    let out = decrypt(&enc, Format::Json, &ids(&[&k])).expect("decrypt");
    let got: serde_json::Value = serde_json::from_slice(&out).expect("json");
    let want: serde_json::Value = serde_json::from_str(plain).expect("json");
    assert_eq!(got, want);
    let text = String::from_utf8(out).expect("utf-8");
    assert!(text.find("zeta") < text.find("alpha"));
}

#[test]
fn dotenv_round_trip() {
    let k = key();
    let plain =
        "# database\nDB_PASSWORD=s3cr3t-plaintext-value\nDB_PORT=5432\nMULTI=a\\nb\nEMPTY=\nPUBLIC_unencrypted=yes\n";
    let enc = encrypt("app.env", plain, &[&k], &[]);
    assert!(is_encrypted(&enc, Format::Dotenv));
    assert!(!is_encrypted(plain.as_bytes(), Format::Dotenv));
    let out = decrypt(&enc, Format::Dotenv, &ids(&[&k])).expect("decrypt");
    assert_eq!(String::from_utf8(out).expect("utf-8"), plain);
}

#[test]
fn binary_round_trip() {
    let k = key();
    let plain = "any file\nwith s3cr3t-plaintext-value\n";
    let enc = encrypt("blob.txt", plain, &[&k], &[]);
    assert_eq!(Format::from_path("blob.txt"), Format::Binary);
    assert!(is_encrypted(&enc, Format::Binary));
    assert_eq!(
        decrypt(&enc, Format::Binary, &ids(&[&k])).expect("decrypt"),
        plain.as_bytes()
    );
}

#[test]
fn two_recipients_either_identity_decrypts() {
    let (a, b) = (key(), key());
    let enc = encrypt("v.yaml", VALUES, &[&a, &b], &[]);
    for k in [&a, &b] {
        let out = decrypt(&enc, Format::Yaml, &ids(&[k])).expect("decrypt");
        assert_eq!(yaml_value(&out), yaml_value(VALUES.as_bytes()));
    }
}

#[test]
fn wrong_identity_is_no_matching_key() {
    let (k, other) = (key(), key());
    let enc = encrypt("v.yaml", VALUES, &[&k], &[]);
    let err = decrypt(&enc, Format::Yaml, &ids(&[&other])).expect_err("wrong key");
    match &err {
        SopsError::NoMatchingKey { recipients } => assert_eq!(recipients, &vec![k.recipient.clone()]),
        e => panic!("unexpected {e:?}"),
    }
    assert!(err.to_string().contains(&k.recipient));
    assert_clean(&err, &other);
    assert!(!format!("{:?}", ids(&[&other])).contains("AGE-SECRET-KEY"));
}

/// Changes one character of the first `data:` of an `ENC[` value on the line holding `key`.
fn tamper_value(text: &str, key: &str) -> String {
    let line_start = text.find(&format!("{key}: ENC[")).expect("encrypted line");
    let data = line_start + text[line_start..].find("data:").expect("data") + 5;
    let mut bytes = text.as_bytes().to_vec();
    bytes[data] = if bytes[data] == b'A' { b'B' } else { b'A' };
    String::from_utf8(bytes).expect("utf-8")
}

#[test]
fn tampered_value_is_refused() {
    let k = key();
    let enc = String::from_utf8(encrypt("v.yaml", VALUES, &[&k], &[])).expect("utf-8");
    let err = decrypt(tamper_value(&enc, "password").as_bytes(), Format::Yaml, &ids(&[&k])).expect_err("tampered");
    assert!(matches!(err, SopsError::TamperedValue { .. }), "{err:?}");
    assert_clean(&err, &k);
}

#[test]
fn tampered_mac_is_refused() {
    let k = key();
    let enc = String::from_utf8(encrypt("v.yaml", VALUES, &[&k], &[])).expect("utf-8");
    let err = decrypt(tamper_value(&enc, "mac").as_bytes(), Format::Yaml, &ids(&[&k])).expect_err("tampered mac");
    assert!(matches!(err, SopsError::TamperedMac), "{err:?}");
    assert_clean(&err, &k);
    // A changed lastmodified breaks the MAC's additional data.
    let start = enc.find("lastmodified: \"").expect("lastmodified") + 15;
    let mut changed = enc.clone();
    changed.replace_range(start..start + 4, "1999");
    let err = decrypt(changed.as_bytes(), Format::Yaml, &ids(&[&k])).expect_err("changed lastmodified");
    assert!(matches!(err, SopsError::TamperedMac), "{err:?}");
}

#[test]
fn swapped_values_are_refused() {
    let k = key();
    let plain = "a: s3cr3t-plaintext-value\nb: other\n";
    let enc = String::from_utf8(encrypt("v.yaml", plain, &[&k], &[])).expect("utf-8");
    let line = |key: &str| {
        enc.lines()
            .find(|l| l.starts_with(&format!("{key}: ")))
            .expect("line")
            .to_string()
    };
    let (a, b) = (line("a"), line("b"));
    let swapped = enc
        .lines()
        .map(|l| {
            if l == a {
                format!("a: {}", &b[3..])
            } else if l == b {
                format!("b: {}", &a[3..])
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let err = decrypt(swapped.as_bytes(), Format::Yaml, &ids(&[&k])).expect_err("swapped");
    assert!(matches!(err, SopsError::TamperedValue { .. }), "{err:?}");
}

#[test]
fn truncated_value_is_malformed() {
    let k = key();
    let enc = String::from_utf8(encrypt("v.yaml", VALUES, &[&k], &[])).expect("utf-8");
    let start = enc.find("password: ENC[").expect("line");
    let end = start + enc[start..].find('\n').expect("eol");
    let mut cut = enc.clone();
    cut.replace_range(end - 20..end, "");
    let err = decrypt(cut.as_bytes(), Format::Yaml, &ids(&[&k])).expect_err("truncated");
    assert!(matches!(err, SopsError::Malformed { .. }), "{err:?}");
    assert_clean(&err, &k);
}

#[test]
fn garbage_metadata_is_not_sops() {
    let k = key();
    let text = "password: s3cr3t-plaintext-value\nsops:\n  version: 3.9.0\n  lastmodified: \"2024-01-01T00:00:00Z\"\n  age: []\n";
    let err = decrypt(text.as_bytes(), Format::Yaml, &ids(&[&k])).expect_err("no mac");
    match &err {
        SopsError::NotSops { reason } => assert!(reason.contains("sops.mac"), "{reason}"),
        e => panic!("unexpected {e:?}"),
    }
    assert_clean(&err, &k);
    let text = "a: b\nsops: just a string\n";
    let err = decrypt(text.as_bytes(), Format::Yaml, &ids(&[&k])).expect_err("string sops");
    assert!(matches!(err, SopsError::NotSops { .. }), "{err:?}");
    assert!(!is_encrypted(text.as_bytes(), Format::Yaml));
    let err = decrypt(b"a: b\n", Format::Yaml, &ids(&[&k])).expect_err("plain file");
    assert!(matches!(err, SopsError::NotSops { .. }), "{err:?}");
}

#[test]
fn pgp_only_file_is_unsupported() {
    let k = key();
    let enc = String::from_utf8(encrypt("v.yaml", "a: s3cr3t-plaintext-value\n", &[&k], &[])).expect("utf-8");
    // Replace the age block by a pgp one, as a pgp-only file has it.
    let age_start = enc.find("\n    age:\n").expect("age block") + 1;
    let age_end = enc.find("\n    lastmodified:").expect("lastmodified") + 1;
    let mut pgp = enc.clone();
    pgp.replace_range(
        age_start..age_end,
        "    pgp:\n        - created_at: \"2024-01-01T00:00:00Z\"\n          enc: |\n            -----BEGIN PGP MESSAGE-----\n            xx\n            -----END PGP MESSAGE-----\n          fp: 0123456789ABCDEF\n",
    );
    let err = decrypt(pgp.as_bytes(), Format::Yaml, &ids(&[&k])).expect_err("pgp only");
    match &err {
        SopsError::UnsupportedKeyGroup { kinds } => assert!(kinds.contains("pgp"), "{kinds}"),
        e => panic!("unexpected {e:?}\n{pgp}"),
    }
}

#[test]
fn identities_parse_and_debug() {
    let k = key();
    let ids = Identities::parse(&format!("\n# created: today\n{}\n", k.text)).expect("parse");
    assert_eq!(ids.recipients(), vec![k.recipient.clone()]);
    let dbg = format!("{ids:?}");
    assert!(!dbg.contains("AGE-SECRET-KEY") && dbg.contains(&k.recipient), "{dbg}");
    let err = Identities::parse("AGE-SECRET-KEY-1NOTAKEY\n").expect_err("bad key");
    assert!(matches!(err, SopsError::BadIdentity { line: 1 }));
    assert!(!err.to_string().contains("AGE-SECRET-KEY-1NOTAKEY"));
    assert!(matches!(Identities::parse("# nothing\n"), Err(SopsError::NoIdentities)));
}

#[test]
fn format_from_path() {
    assert_eq!(Format::from_path(Path::new("a/values.yaml")), Format::Yaml);
    assert_eq!(Format::from_path("x.yml"), Format::Yaml);
    assert_eq!(Format::from_path("x.json"), Format::Json);
    assert_eq!(Format::from_path("x.env"), Format::Dotenv);
    assert_eq!(Format::from_path("x.ini"), Format::Binary);
}
