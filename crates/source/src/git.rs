//! Running `git` safely: confined by the kernel ([`capstan_sandbox`]: it reads and writes only the
//! repository it works on and its credential files, executes only git's own programs and ssh, and
//! connects only to the repository's TCP port, and only for the commands that talk to the remote),
//! an isolated configuration, credentials in the environment, no redirects followed with
//! credentials, a timeout, and redacted error messages.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use base64::Engine;

use capstan_api::repo_url::{RepoUrl, Scheme, UrlError};
use capstan_sandbox::{Confinement, Limits, ProcessGroup};

use crate::{Credentials, Result, SourceError};

/// Remove credentials from `text`: `scheme://user:password@host` becomes `scheme://user:***@host`,
/// and every given secret value is replaced.
pub fn redact(text: &str, secrets: &[&str]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c.is_whitespace() || c == '/' || c == '\'' || c == '"')
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(at) => {
                let userinfo = &authority[..at];
                let user = userinfo.split(':').next().unwrap_or("");
                let http = head.ends_with("http://") || head.ends_with("https://");
                if userinfo.contains(':') {
                    out.push_str(user);
                    out.push_str(":***");
                } else if http {
                    // `https://TOKEN@host`: over HTTP a lone user name is often a token.
                    out.push_str("***");
                } else {
                    out.push_str(userinfo); // ssh://git@host: a user name, not a secret
                }
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    for secret in secrets.iter().filter(|s| s.len() >= 4) {
        out = out.replace(secret, "***");
    }
    out
}

/// Whether `url` is a Git repository URL Capstan accepts: [`RepoUrl::parse`] accepts it (nothing that
/// makes two spellings name one repository or hides the host: no `.`, `..` or empty path segments,
/// percent-encoded dots, slashes or backslashes, query, fragment, backslashes, whitespace, control
/// characters, password, or anything but a user name before the host; nothing starting with `-`),
/// and Git is given it as written, so also:
/// - a transport Git speaks, spelled as Git reads it: `https://`, `http://`, `ssh://`, `git://`,
///   scp-like `user@host:path`; `file://` and absolute paths only when `allow_local`;
/// - no user in `git://` URLs (the daemon has no users; credentials belong in a repository Secret);
/// - no default port written out in `https://` and `http://` URLs.
pub fn check_url(url: &str, allow_local: bool) -> Result<RepoUrl> {
    let refuse = |why: &dyn std::fmt::Display| SourceError::UnsupportedUrl(format!("{}: {why}", redact(url, &[])));
    let transports = "use https://, http://, ssh://, git@host:path or git://";
    let parsed = RepoUrl::parse(url).map_err(|e| match e {
        UrlError::NotAUrl | UrlError::Scheme(_) => refuse(&transports),
        e => refuse(&e),
    })?;
    if url != parsed.as_str() {
        return Err(refuse(
            &"whitespace, control characters and backslashes are not allowed",
        ));
    }
    if parsed.scheme() == Scheme::File && !allow_local {
        return Err(refuse(
            &"local repositories (file:// and paths) are disabled; an operator can enable them with \
              --allow-local-repositories",
        ));
    }
    // Git chooses its transport by the scheme as written: `HTTPS://` or `oci://` are not Git's.
    let written_scheme = url.split_once("://").map(|(scheme, _)| scheme);
    if !matches!(written_scheme, None | Some("https" | "http" | "ssh" | "git" | "file")) {
        return Err(refuse(&transports));
    }
    if parsed.scheme() == Scheme::Git && parsed.user().is_some() {
        return Err(refuse(
            &"user information in the URL is not allowed; put credentials in a repository Secret",
        ));
    }
    if parsed.has_explicit_default_port() && matches!(parsed.scheme(), Scheme::Https | Scheme::Http) {
        return Err(refuse(&"leave out the default port"));
    }
    Ok(parsed)
}

/// One git invocation against `url`.
pub struct GitCommand<'a> {
    /// The repository's URL.
    pub url: &'a str,
    /// Its credentials (given to git through a helper, never on the command line).
    pub credentials: &'a Credentials,
    /// How long git may take.
    pub timeout: Duration,
    /// What git is asked to do, for messages (`fetch`, `ls-remote`, …).
    pub operation: &'a str,
    /// Whether the `file` transport is allowed.
    pub allow_local: bool,
}

/// ssh as git runs it: no configuration file, no agent, only the identities Capstan passes.
const SSH_BASE: &str = "ssh -F /dev/null -o BatchMode=yes -o IdentitiesOnly=yes -o IdentityAgent=none \
                        -o ForwardAgent=no -o ClearAllForwardings=yes -o PermitLocalCommand=no";

impl GitCommand<'_> {
    /// Run `git ARGS` in `dir`; returns stdout.
    pub async fn run(&self, dir: Option<&Path>, args: &[&str]) -> Result<Vec<u8>> {
        let (child, _guard) = self.spawn(dir, args)?;
        let output = match tokio::time::timeout(self.timeout, child.wait_with_output()).await {
            Ok(out) => out.map_err(SourceError::io(format!("waiting for git ({})", self.operation)))?,
            Err(_) => return Err(self.timed_out()),
        };
        self.check(&output.status, &output.stderr)?;
        Ok(output.stdout)
    }

    /// The error for a git run that took longer than the limit.
    pub fn timed_out(&self) -> SourceError {
        SourceError::Timeout {
            operation: self.operation.into(),
            url: redact(self.url, &self.credentials.secrets()),
            seconds: self.timeout.as_secs(),
        }
    }

    /// `Ok` if git succeeded, else an error with git's own message (redacted).
    pub fn check(&self, status: &std::process::ExitStatus, stderr: &[u8]) -> Result<()> {
        if status.success() {
            return Ok(());
        }
        let secrets = self.credentials.secrets();
        let stderr = String::from_utf8_lossy(stderr);
        let message = explain_ssh_failure(&stderr, self.credentials).unwrap_or_else(|| {
            stderr
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with("hint:"))
                .collect::<Vec<_>>()
                .join("; ")
        });
        Err(SourceError::Git {
            operation: self.operation.into(),
            url: redact(self.url, &secrets),
            message: redact(if message.is_empty() { "git failed" } else { &message }, &secrets),
        })
    }

    /// Start `git ARGS` in `dir` with stdout and stderr piped, confined: it may write only beneath
    /// `dir`. The guard returned with the child holds its key and CA files and its process group: it
    /// must live as long as the child, and kills whatever git started when dropped.
    pub fn spawn(&self, dir: Option<&Path>, args: &[&str]) -> Result<(tokio::process::Child, GitGuard)> {
        let scratch = scratch_dir(self.credentials)?;
        let program = find_program("git");
        let mut cmd = tokio::process::Command::new(&program);
        // Nothing of the controller's environment reaches git or ssh (no SSH agent, no cloud or proxy
        // settings, no GIT_* overrides): only what is set here.
        cmd.env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", std::env::temp_dir().join("capstan-git-home-unused"))
            .env(
                "GIT_ALLOW_PROTOCOL",
                if self.allow_local {
                    "https:http:ssh:git:file"
                } else {
                    "https:http:ssh:git"
                },
            )
            .env("GIT_PROTOCOL_FROM_USER", "0")
            .env("GIT_NO_REPLACE_OBJECTS", "1")
            .env("GIT_CONFIG_SYSTEM", "/dev/null");
        cmd.args(args)
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_ASKPASS", "/bin/false")
            .env("SSH_ASKPASS", "/bin/false")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(dir) = dir {
            cmd.current_dir(dir);
        }
        // No redirect is followed: credentials (a header, or a key for this host) must never reach
        // another host or port, and a moved repository is the operator's to re-register.
        let mut config: Vec<(String, String)> = vec![
            ("credential.helper".into(), String::new()),
            ("http.followRedirects".into(), "false".into()),
        ];
        if let (Some(user), Some(password)) = (&self.credentials.username, &self.credentials.password) {
            let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            config.push(("http.extraHeader".into(), format!("Authorization: Basic {token}")));
        } else if let Some(password) = &self.credentials.password {
            config.push(("http.extraHeader".into(), format!("Authorization: Bearer {password}")));
        }
        if self.credentials.insecure {
            config.push(("http.sslVerify".into(), "false".into()));
        } else if let (Some(dir), Some(_)) = (&scratch, &self.credentials.tls_ca) {
            // The bundle replaces git's default one, so it holds the system's roots too. The
            // environment variable, not http.sslCAInfo: an inherited GIT_SSL_CAINFO would win over it.
            cmd.env("GIT_SSL_CAINFO", dir.path().join(CA_FILE));
        }
        // GIT_CONFIG_COUNT passes configuration without putting secrets on the command line.
        cmd.env("GIT_CONFIG_COUNT", config.len().to_string());
        for (i, (key, value)) in config.iter().enumerate() {
            cmd.env(format!("GIT_CONFIG_KEY_{i}"), key)
                .env(format!("GIT_CONFIG_VALUE_{i}"), value);
        }
        if let Some(dir) = scratch.as_ref().filter(|_| uses_ssh_files(self.credentials)) {
            cmd.env("GIT_SSH_COMMAND", ssh_command(dir.path(), self.credentials));
        } else {
            cmd.env("GIT_SSH_COMMAND", format!("{SSH_BASE} -o StrictHostKeyChecking=yes"));
        }
        self.confinement(program, dir, args, scratch.as_ref().map(|s| s.path()))
            .apply(&mut cmd)?;
        let child = cmd.spawn().map_err(|e| SourceError::Git {
            operation: self.operation.into(),
            url: redact(self.url, &self.credentials.secrets()),
            message: format!("cannot run git: {e} (is git installed? run scripts/setup.sh)"),
        })?;
        let group = ProcessGroup::of(child.id());
        Ok((
            child,
            GitGuard {
                _group: group,
                _scratch: scratch,
            },
        ))
    }

    /// What this git run may touch: write beneath `dir` (the bare cache or a work checkout), read its
    /// credential files, run git's own programs and ssh, and — for the commands that talk to the
    /// remote — connect to the repository's port. A local repository (`file://`, allowed by the
    /// operator) may be read.
    fn confinement(&self, program: PathBuf, dir: Option<&Path>, args: &[&str], files: Option<&Path>) -> Confinement {
        let mut c = Confinement::new(program)
            .exec("/usr/lib/git-core")
            .exec("/usr/libexec/git-core")
            .exec(find_program("ssh"))
            .limits(Limits::for_tool(self.timeout.as_secs().max(1)));
        if let Some(dir) = dir {
            c = c.write(dir);
        }
        if let Some(files) = files {
            c = c.read(files);
        }
        let remote = args
            .first()
            .is_some_and(|a| ["fetch", "ls-remote", "clone", "push", "pull"].contains(a));
        if remote {
            match remote_endpoint(self.url) {
                Endpoint::Tcp(port) => c = c.connect_tcp(port),
                // git starts `git-upload-pack '<path>'` for a local repository through the shell.
                Endpoint::Local(path) => c = c.read(path).exec(find_program("sh")),
            }
            // git starts `GIT_SSH_COMMAND` (Capstan's own, with its fixed options) through the shell.
            if is_ssh(self.url) {
                c = c.exec(find_program("sh"));
            }
        }
        c
    }
}

/// Whether git reaches `url` over ssh.
fn is_ssh(url: &str) -> bool {
    match url.split_once("://") {
        // `ssh://`, and git's aliases `git+ssh://` and `ssh+git://`.
        Some((scheme, _)) => scheme.to_ascii_lowercase().contains("ssh"),
        None => !url.starts_with('/'),
    }
}

/// Keeps a git run's credential files and process group for as long as the run.
pub struct GitGuard {
    _group: ProcessGroup,
    _scratch: Option<tempfile::TempDir>,
}

/// Where git reaches a repository.
#[derive(Debug, PartialEq, Eq)]
enum Endpoint {
    /// A TCP port (the host is the URL's; the kernel filters by port).
    Tcp(u16),
    /// A local path (`file://`, only with the operator's permission).
    Local(PathBuf),
}

/// The endpoint of a URL that [`check_url`] accepted: an explicit port, else the scheme's default;
/// scp-like `user@host:path` is ssh.
fn remote_endpoint(url: &str) -> Endpoint {
    let Some((scheme, rest)) = url.split_once("://") else {
        if url.starts_with('/') {
            return Endpoint::Local(PathBuf::from(url));
        }
        return Endpoint::Tcp(22);
    };
    let scheme = scheme.to_ascii_lowercase();
    if scheme == "file" {
        return Endpoint::Local(PathBuf::from(rest));
    }
    let authority = rest.split('/').next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let explicit = match host_port.rsplit_once(':') {
        // An IPv6 literal without a port ends with `]`.
        Some((_, port)) if !port.ends_with(']') => port.parse().ok(),
        _ => None,
    };
    let default = match scheme.as_str() {
        "https" => 443,
        "http" => 80,
        "git" => 9418,
        _ => 22,
    };
    Endpoint::Tcp(explicit.unwrap_or(default))
}

/// The first executable `name` on the fixed `PATH` tools run with, canonical (the kernel checks the
/// file it runs); `name` itself when there is none (spawning then reports it).
pub(crate) fn find_program(name: &str) -> PathBuf {
    ["/usr/local/bin", "/usr/bin", "/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
        .and_then(|p| std::fs::canonicalize(p).ok())
        .unwrap_or_else(|| PathBuf::from(name))
}

/// Name of the CA bundle in the scratch directory.
const CA_FILE: &str = "ca.pem";
/// Where Debian (and most distributions) keep the system's CA bundle.
const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The CA bundle git would use without ours: the one the environment names, else the system's.
fn system_ca_bundle() -> String {
    ["GIT_SSL_CAINFO", "SSL_CERT_FILE"]
        .iter()
        .filter_map(std::env::var_os)
        .map(std::path::PathBuf::from)
        .chain(std::iter::once(SYSTEM_CA_BUNDLE.into()))
        .find_map(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_default()
}

fn uses_ssh_files(creds: &Credentials) -> bool {
    creds.ssh_private_key.is_some() || creds.known_hosts.is_some()
}

/// A private directory for the files git and ssh must read credentials from (key, `known_hosts`, CA
/// bundle), or None when there are none.
/// A directory (mode 0700, removed on drop) for the key, `known_hosts` and CA bundle of one git run.
fn scratch_dir(creds: &Credentials) -> Result<Option<tempfile::TempDir>> {
    if !uses_ssh_files(creds) && creds.tls_ca.is_none() {
        return Ok(None);
    }
    let dir = tempfile::Builder::new()
        .prefix("capstan-git-")
        .tempdir()
        .map_err(SourceError::io("creating a directory for credentials"))?;
    if let Some(key) = &creds.ssh_private_key {
        let key = normalize_key(key);
        write_private(dir.path(), "id", &key).map_err(SourceError::io("writing the ssh key"))?;
    }
    if let Some(hosts) = &creds.known_hosts {
        write_private(dir.path(), "known_hosts", hosts).map_err(SourceError::io("writing known_hosts"))?;
    }
    if let Some(ca) = &creds.tls_ca {
        let mut bundle = system_ca_bundle();
        bundle.push('\n');
        bundle.push_str(ca.trim());
        bundle.push('\n');
        write_private(dir.path(), CA_FILE, &bundle).map_err(SourceError::io("writing the CA certificates"))?;
    }
    Ok(Some(dir))
}

/// A private key as OpenSSH will load it: `\n` line endings (a key pasted into a Secret on Windows has
/// `\r\n`, which OpenSSH refuses with "error in libcrypto"), no surrounding blank space, one final
/// newline.
fn normalize_key(key: &str) -> String {
    let mut key = key.replace("\r\n", "\n").trim().to_string();
    key.push('\n');
    key
}

/// A clear message for the SSH failures users can fix in the repository credentials, instead of
/// ssh's output (which names the temporary files Capstan passed to ssh and suggests commands that do
/// not apply). None for anything else.
fn explain_ssh_failure(stderr: &str, creds: &Credentials) -> Option<String> {
    let lines: Vec<&str> = stderr.lines().map(str::trim).collect();
    if stderr.contains("Host key verification failed") {
        let changed = lines.iter().find_map(|l| {
            l.strip_prefix("Host key for ")
                .and_then(|r| r.strip_suffix(" has changed and you have requested strict checking."))
        });
        let unknown = lines.iter().find_map(|l| {
            let rest = l.strip_prefix("No ")?;
            let (_, host) = rest.split_once(" host key is known for ")?;
            host.strip_suffix(" and you have requested strict checking.")
        });
        let fingerprint = lines
            .iter()
            .find(|l| l.starts_with("SHA256:"))
            .map(|f| f.trim_end_matches('.'));
        return Some(match (changed, unknown) {
            (Some(host), _) => format!(
                "SSH host key verification failed: the host key of {host} does not match the known_hosts of the \
                 repository credentials{} (a changed server key, or someone in between); Capstan refused to connect",
                fingerprint
                    .map(|f| format!(" (the server sent {f})"))
                    .unwrap_or_default()
            ),
            (None, Some(host)) => format!(
                "SSH host key verification failed: no host key for {host} in the known_hosts of the repository \
                 credentials{}; add the server's key line to known_hosts (e.g. from `ssh-keyscan`)",
                if creds.known_hosts.is_none() {
                    " (none given)"
                } else {
                    ""
                }
            ),
            (None, None) => "SSH host key verification failed: the server's host key is not in, or does not match, \
                             the known_hosts of the repository credentials"
                .to_string(),
        });
    }
    if let Some(denied) = lines.iter().find(|l| l.contains("Permission denied (publickey")) {
        let cause = if lines.iter().any(|l| l.starts_with("Load key ")) {
            "the private key of the repository credentials could not be loaded (not an unencrypted OpenSSH or PEM \
             private key?)"
        } else if creds.ssh_private_key.is_none() {
            "the repository credentials have no SSH private key"
        } else {
            "the server does not accept the private key of the repository credentials"
        };
        return Some(format!("SSH authentication failed: {cause} ({denied})"));
    }
    None
}

fn ssh_command(dir: &Path, creds: &Credentials) -> String {
    let mut cmd = String::from(SSH_BASE);
    if creds.ssh_private_key.is_some() {
        cmd.push_str(&format!(" -i '{}'", dir.join("id").display()));
    }
    if creds.insecure {
        cmd.push_str(" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null");
    } else {
        let known = if creds.known_hosts.is_some() {
            dir.join("known_hosts")
        } else {
            "/dev/null".into()
        };
        cmd.push_str(&format!(
            " -o StrictHostKeyChecking=yes -o UserKnownHostsFile='{}'",
            known.display()
        ));
    }
    cmd
}

/// A private temporary directory (mode 0700, files 0600), removed on drop.
///
/// Write `contents` to a new file `name` in `dir`, readable by the owner only (keys, CA bundles).
fn write_private(dir: &Path, name: &str, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dir.join(name))?;
    f.write_all(contents.as_bytes())
}

/// Whether `s` is a full (40 hex digits) commit SHA.
pub fn is_full_sha(s: &str) -> bool {
    s.len() == 40 && s.chars().all(|c| c.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_follow_the_url() {
        assert_eq!(remote_endpoint("https://h/r.git"), Endpoint::Tcp(443));
        assert_eq!(remote_endpoint("http://127.0.0.1:8080/r"), Endpoint::Tcp(8080));
        assert_eq!(remote_endpoint("ssh://git@h:2222/r"), Endpoint::Tcp(2222));
        assert_eq!(remote_endpoint("git@h:org/r"), Endpoint::Tcp(22));
        assert_eq!(remote_endpoint("git://[::1]/r"), Endpoint::Tcp(9418));
        assert_eq!(remote_endpoint("git://[::1]:9999/r"), Endpoint::Tcp(9999));
        assert_eq!(remote_endpoint("file:///srv/r"), Endpoint::Local("/srv/r".into()));
        assert_eq!(remote_endpoint("/srv/r"), Endpoint::Local("/srv/r".into()));
    }

    #[test]
    fn redacts_userinfo_and_secret_values() {
        assert_eq!(
            redact(
                "fatal: unable to access 'https://bot:tok3n@git.example/r.git/': 403",
                &[]
            ),
            "fatal: unable to access 'https://bot:***@git.example/r.git/': 403"
        );
        assert_eq!(redact("ssh://git@host/r.git", &[]), "ssh://git@host/r.git");
        assert_eq!(
            redact("https://ghp_abcdef123@host/r.git", &[]),
            "https://***@host/r.git"
        );
        assert_eq!(redact("the password is hunter22", &["hunter22"]), "the password is ***");
        assert_eq!(redact("no urls here", &[]), "no urls here");
    }

    #[test]
    fn keys_get_unix_line_endings_and_one_final_newline() {
        assert_eq!(
            normalize_key("\n-----BEGIN OPENSSH PRIVATE KEY-----\r\nabc\r\n-----END OPENSSH PRIVATE KEY-----"),
            "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----\n"
        );
    }

    #[test]
    fn explains_ssh_failures_without_ssh_noise() {
        let changed = "@@@@@@@\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n\
            The fingerprint for the ED25519 key sent by the remote host is\nSHA256:8BAvBUZo.\n\
            Add correct host key in /tmp/capstan-ssh-1/known_hosts to get rid of this message.\n\
            Host key for [127.0.0.1]:2222 has changed and you have requested strict checking.\n\
            Host key verification failed.\nfatal: Could not read from remote repository.\n";
        let creds = Credentials {
            ssh_private_key: Some("k".into()),
            known_hosts: Some("h".into()),
            ..Default::default()
        };
        let m = explain_ssh_failure(changed, &creds).expect("explained");
        assert!(m.contains("[127.0.0.1]:2222 does not match the known_hosts"), "{m}");
        assert!(m.contains("SHA256:8BAvBUZo"), "{m}");
        assert!(!m.contains("/tmp/"), "{m}");

        let unknown = "No ED25519 host key is known for git.example and you have requested strict checking.\n\
            Host key verification failed.\n";
        let m = explain_ssh_failure(unknown, &Credentials::none()).expect("explained");
        assert!(
            m.contains("no host key for git.example") && m.contains("(none given)"),
            "{m}"
        );

        let denied = "git@h: Permission denied (publickey).\nfatal: Could not read from remote repository.\n";
        let m = explain_ssh_failure(denied, &creds).expect("explained");
        assert!(
            m.starts_with("SSH authentication failed: the server does not accept"),
            "{m}"
        );
        assert!(m.contains("git@h: Permission denied (publickey)."), "{m}");
        let m = explain_ssh_failure(&format!("Load key \"/tmp/x/id\": error in libcrypto\n{denied}"), &creds).unwrap();
        assert!(m.contains("could not be loaded") && !m.contains("/tmp/"), "{m}");

        assert_eq!(explain_ssh_failure("fatal: repository not found\n", &creds), None);
    }

    #[test]
    fn accepts_the_supported_transports_only() {
        for ok in [
            "https://h/r.git",
            "http://127.0.0.1:1/r.git",
            "ssh://git@h/r",
            "git@h:org/r.git",
            "git://h/r",
            "https://h/org/team/r.git/",
            "https://git.example.com:8443/org/r.git",
            "ssh://git@[::1]:2222/r.git",
            "git@github.com:org/r.git",
            "https://org@dev.azure.com/org/proj/_git/repo",
        ] {
            assert!(check_url(ok, false).is_ok(), "{ok}");
        }
        assert!(check_url("file:///tmp/r", true).is_ok());
        assert!(check_url("/tmp/r", true).is_ok());
        for bad in [
            "ftp://h/r",
            "--upload-pack=evil",
            "r.git",
            "ext::sh -c touch% /tmp/pwned",
            "fd::3",
        ] {
            assert!(check_url(bad, true).is_err(), "{bad}");
        }
    }

    #[test]
    fn local_repositories_need_the_operator() {
        for local in ["file:///tmp/r", "file://localhost/tmp/r", "/tmp/r"] {
            let err = check_url(local, false).expect_err(local).to_string();
            assert!(err.contains("--allow-local-repositories"), "{err}");
        }
        // Git ignores any other host of a file:// URL: a second spelling, refused even when allowed.
        assert!(check_url("file://host/tmp/r", true).is_err());
    }

    #[test]
    fn spellings_that_hide_the_repository_or_its_host_are_refused() {
        for bad in [
            "https://git.example/team-b/../team-a/secret.git",
            "https://git.example/team-b/./r.git",
            "https://git.example/team-b//r.git",
            "https://git.example/team-b/%2e%2e/team-a/r.git",
            "https://git.example/team-b%2f..%2fteam-a/r.git",
            "https://git.example/team-b/r.git?x=/../../team-a",
            "https://git.example/team-b/r.git#frag",
            "https://user:pw@git.example/team-b/r.git",
            "https://git.example:443/team-b/r.git",
            "https://git.example./team-b/r.git",
            "git://x@git.example/r",
            "ssh://user:pw@git.example/r",
            "ssh://-oProxyCommand=touch%20x@h/r",
            "-oProxyCommand=x@h:r",
            "https://git.example/r.git\\..\\x",
            "https://git.example/r .git",
            "https:///r.git",
            "../.@.@.:",
            "./x@h:r",
            "a/b@host:r",
            "git@-h:r",
            "git@h:",
            "https://h..evil/r",
            "https://[zz]/r",
            "https://h:99999999/r",
        ] {
            assert!(check_url(bad, true).is_err(), "{bad}");
        }
    }
}
