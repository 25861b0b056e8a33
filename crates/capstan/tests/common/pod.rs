//! Running `capstan` exactly as a Pod would, without a kubelet: a service account directory (`token`,
//! `ca.crt`, `namespace`) bound at `/var/run/secrets/kubernetes.io/serviceaccount` in a private mount
//! namespace (`unshare -m`: only the child sees it), `KUBERNETES_SERVICE_HOST=127.0.0.1` and
//! `KUBERNETES_SERVICE_PORT` of the test plane, an empty `HOME`, no kubeconfig, nothing else of the
//! test's environment. Either the test's `capstan` binary on the host's file system ([`Root::Host`]),
//! or the image's own root file system ([`Root::Image`], extracted from the registry with `crane
//! export`): bound read-only (as `readOnlyRootFilesystem`), `emptyDir`-like tmpfs mounts at `/tmp` and
//! `/var/cache/capstan`, entered with `chroot` as user 65532.
//!
//! Tokens are real: `kubectl create token` (the TokenRequest API) for the installed ServiceAccounts,
//! bound to a Secret so that deleting the Secret revokes them; an expired one is a real token re-signed
//! with the plane's own service-account key after moving its expiry into the past.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::{kubectl, text};

/// The mount point of a Pod's service account.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// What the kubelet would mount: `token`, `ca.crt`, `namespace`. The test rewrites `token` as the
/// kubelet does when it rotates it (a new file renamed over the old one).
pub struct ServiceAccountFiles {
    dir: tempfile::TempDir,
}

impl ServiceAccountFiles {
    /// The directory with the plane's CA and `namespace`, and no token yet.
    pub fn new(ca_pem: &str, namespace: &str) -> ServiceAccountFiles {
        let dir = tempfile::Builder::new()
            .prefix("capstan-serviceaccount-")
            .tempdir()
            .expect("a temporary directory");
        std::fs::write(dir.path().join("ca.crt"), ca_pem).expect("writing ca.crt");
        std::fs::write(dir.path().join("namespace"), namespace).expect("writing namespace");
        set_mode(dir.path(), 0o755);
        set_mode(&dir.path().join("ca.crt"), 0o644);
        set_mode(&dir.path().join("namespace"), 0o644);
        ServiceAccountFiles { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Write `token` (readable by the Pod's user, as the kubelet's default mode 0644), replacing the
    /// file in one rename.
    pub fn write_token(&self, token: &str) {
        let tmp = self.dir.path().join(".token.new");
        std::fs::write(&tmp, token).expect("writing the token");
        set_mode(&tmp, 0o644);
        std::fs::rename(&tmp, self.dir.path().join("token")).expect("renaming the token into place");
    }

    pub fn remove_token(&self) {
        let _ = std::fs::remove_file(self.dir.path().join("token"));
    }
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// A token of ServiceAccount `account` in `namespace` from the TokenRequest API, valid for an hour and
/// bound to the Secret `bound_secret` of that namespace (created here if missing): deleting the
/// Secret revokes the token.
pub fn token(kubeconfig: &str, namespace: &str, account: &str, bound_secret: &str) -> String {
    let exists = kubectl(kubeconfig, &["-n", namespace, "get", "secret", bound_secret]);
    if !exists.status.success() {
        let out = kubectl(
            kubeconfig,
            &["-n", namespace, "create", "secret", "generic", bound_secret],
        );
        assert!(out.status.success(), "{}", text(&out));
    }
    let uid = kubectl(
        kubeconfig,
        &[
            "-n",
            namespace,
            "get",
            "secret",
            bound_secret,
            "-o",
            "jsonpath={.metadata.uid}",
        ],
    );
    assert!(uid.status.success(), "{}", text(&uid));
    let uid = String::from_utf8_lossy(&uid.stdout).trim().to_string();
    let out = kubectl(
        kubeconfig,
        &[
            "-n",
            namespace,
            "create",
            "token",
            account,
            "--duration",
            "1h",
            "--bound-object-kind",
            "Secret",
            "--bound-object-name",
            bound_secret,
            "--bound-object-uid",
            &uid,
        ],
    );
    assert!(out.status.success(), "kubectl create token: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `token` with its expiry an hour in the past, signed again with the plane's service-account key
/// (`pki/sa.key` of `plane_dir`, the key the API server verifies with): a real token of the account,
/// refused only because it has expired.
pub fn expired(token: &str, plane_dir: &Path) -> String {
    use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
    let mut parts = token.split('.');
    let (Some(header), Some(payload)) = (parts.next(), parts.next()) else {
        panic!("a JWT: {token}");
    };
    let mut claims: serde_json::Value =
        serde_json::from_slice(&base64url::decode(payload)).expect("the token's claims are JSON");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    claims["iat"] = (now - 7200).into();
    claims["nbf"] = (now - 7200).into();
    claims["exp"] = (now - 3600).into();
    let header_json: serde_json::Value =
        serde_json::from_slice(&base64url::decode(header)).expect("the token's header is JSON");
    assert_eq!(
        header_json["alg"], "ES256",
        "the test plane signs with an ECDSA P-256 key"
    );
    let signed = format!("{header}.{}", base64url::encode(claims.to_string().as_bytes()));
    let pem = std::fs::read_to_string(plane_dir.join("pki/sa.key")).expect("the plane's pki/sa.key");
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = base64url::decode_standard(&body);
    let rng = ring::rand::SystemRandom::new();
    let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &der, &rng).expect("a PKCS#8 P-256 key");
    let signature = key.sign(&rng, signed.as_bytes()).expect("signing");
    format!("{signed}.{}", base64url::encode(signature.as_ref()))
}

/// Where the Pod's files come from.
pub enum Root {
    /// The host's file system: the test's own `capstan` binary, and helm and kustomize from the
    /// tool cache (linked into `$CAPSTAN_CACHE/bin`, where Capstan looks first).
    Host,
    /// An image's root file system extracted into this directory.
    Image(PathBuf),
}

/// Start `capstan ARGS` as a Pod of the plane whose API server listens on 127.0.0.1:`port` would,
/// with its standard error in `log`; [`Root::Host`] keeps its `HOME` and cache (its `emptyDir`) under
/// `scratch`. The caller kills it (only this child, by its own handle).
pub fn start(root: &Root, sa: &ServiceAccountFiles, port: u16, args: &[&str], scratch: &Path, log: &Path) -> Child {
    let log = std::fs::File::create(log).expect("creating the log");
    let env = |home: &str, cache: &str| {
        vec![
            "env".to_string(),
            "-i".to_string(),
            "KUBERNETES_SERVICE_HOST=127.0.0.1".to_string(),
            format!("KUBERNETES_SERVICE_PORT={port}"),
            format!("HOME={home}"),
            format!("CAPSTAN_CACHE={cache}"),
            "PATH=/usr/local/bin:/usr/bin:/bin".to_string(),
        ]
    };
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c"]);
    match root {
        Root::Host => {
            // /run (where /var/run leads) is a fresh tmpfs in the child's namespace only, holding
            // nothing but the service account's mount point.
            let home = scratch;
            let cache = home.join("cache");
            std::fs::create_dir_all(cache.join("bin")).expect("creating the cache");
            for tool in ["helm", "kustomize"] {
                let found = capstan_playground::binaries::find(tool).expect("helm and kustomize from scripts/setup.sh");
                std::os::unix::fs::symlink(found, cache.join("bin").join(tool)).expect("linking a tool");
            }
            let empty_home = home.join("home");
            std::fs::create_dir_all(&empty_home).expect("creating HOME");
            cmd.arg(
                r#"set -e
mount -t tmpfs -o mode=0755,size=1m capstan-pod-run /run
mkdir -p /run/secrets/kubernetes.io/serviceaccount
mount --bind "$1" /run/secrets/kubernetes.io/serviceaccount
shift
exec "$@""#,
            )
            .arg("pod")
            .arg(sa.path())
            .args(env(&empty_home.to_string_lossy(), &cache.to_string_lossy()))
            .arg(env!("CARGO_BIN_EXE_capstan"));
        }
        Root::Image(dir) => {
            for mount_point in [
                "run/secrets/kubernetes.io/serviceaccount",
                "tmp",
                "var/cache/capstan",
                "proc",
                "dev",
            ] {
                std::fs::create_dir_all(dir.join(mount_point)).expect("creating a mount point");
            }
            cmd.arg(
                r#"set -e
root=$1 sa=$2
shift 2
mount --bind "$root" "$root"
mount -o remount,bind,ro "$root"
mount -t tmpfs -o mode=1777,size=1g capstan-pod-tmp "$root/tmp"
mount -t tmpfs -o mode=0755,uid=65532,gid=65532,size=4g capstan-pod-cache "$root/var/cache/capstan"
mount --bind "$sa" "$root/run/secrets/kubernetes.io/serviceaccount"
mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
exec "$@""#,
            )
            .arg("pod")
            .arg(dir)
            .arg(sa.path())
            .args(env("/var/cache/capstan", "/var/cache/capstan"))
            .args(["/usr/sbin/chroot", "--userspec=65532:65532"])
            .arg(dir)
            .arg("/usr/local/bin/capstan");
        }
    }
    cmd.args(args)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("the log"))
        .stderr(log)
        .spawn()
        .expect("starting unshare")
}

/// The port of an API server URL (`https://127.0.0.1:PORT`).
pub fn port_of(server: &str) -> u16 {
    server
        .rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .unwrap_or_else(|| panic!("a port in {server}"))
}

/// Base64 without a crate: URL-safe unpadded (JWT) and standard (PEM).
mod base64url {
    const URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

    pub fn encode(bytes: &[u8]) -> String {
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
            for i in 0..=chunk.len() {
                out.push(URL[((n >> (18 - 6 * i)) & 63) as usize] as char);
            }
        }
        out
    }

    fn value(c: u8) -> Option<u32> {
        match c {
            b'A'..=b'Z' => Some(u32::from(c - b'A')),
            b'a'..=b'z' => Some(u32::from(c - b'a') + 26),
            b'0'..=b'9' => Some(u32::from(c - b'0') + 52),
            b'-' | b'+' => Some(62),
            b'_' | b'/' => Some(63),
            _ => None,
        }
    }

    pub fn decode(text: &str) -> Vec<u8> {
        let digits: Vec<u32> = text.bytes().filter_map(value).collect();
        let mut out = Vec::new();
        for chunk in digits.chunks(4) {
            let n = chunk.iter().enumerate().fold(0u32, |n, (i, d)| n | (d << (18 - 6 * i)));
            for i in 0..chunk.len().saturating_sub(1) {
                out.push((n >> (16 - 8 * i)) as u8);
            }
        }
        out
    }

    /// Standard alphabet with padding ('=' is skipped).
    pub fn decode_standard(text: &str) -> Vec<u8> {
        decode(text)
    }
}
