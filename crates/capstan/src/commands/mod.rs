//! One module per top-level subcommand.

pub mod account;
pub mod app;
pub mod appset;
pub mod appset_generate;
pub mod bootstrap;
pub mod cluster;
pub mod controller;
pub mod controller_status;
pub mod crds;
pub mod install;
pub mod local;
pub mod login;
pub mod plan;
pub mod project;
pub mod promote;
pub mod promotion_table;
pub mod server;

/// Parse a flag given in seconds: a plain number (`300`, as Argo CD's CLI takes it) or a number
/// with a unit, `s`, `m` or `h` (`90s`, `5m`, `1h`, as kubectl takes it). Written here rather than
/// with `humantime` (which the controller uses for Argo CD's retry durations): these four forms of
/// whole seconds are all the flags accept, and humantime's wider grammar (`1.5m`, `5 m`, `5ms`) would
/// have to be refused again after it.
pub fn seconds(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let not_a_duration =
        || format!("{text:?} is not a duration: use seconds (300) or a number with s, m or h (90s, 5m, 1h)");
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, ""),
    };
    let scale = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => return Err(not_a_duration()),
    };
    let value: u64 = number.parse().map_err(|_| not_a_duration())?;
    value
        .checked_mul(scale)
        .ok_or_else(|| format!("{text:?} is too long a duration"))
}

/// The caller's login name, for the operations and promotions the CLI records: `$USER`, else
/// `$LOGNAME` (set by login and sudo; `USER` is missing in some service and container shells),
/// else `unknown`.
pub fn login_name() -> String {
    ["USER", "LOGNAME"]
        .iter()
        .filter_map(|v| std::env::var(v).ok())
        .find(|v| !v.trim().is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// `$CAPSTAN_CACHE`, or `~/.cache/capstan`.
pub fn default_cache() -> std::path::PathBuf {
    match std::env::var_os("CAPSTAN_CACHE").filter(|v| !v.is_empty()) {
        Some(dir) => std::path::PathBuf::from(dir),
        None => {
            std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into())).join(".cache/capstan")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::seconds;

    #[test]
    fn durations_are_seconds_or_a_number_with_a_unit() {
        assert_eq!(seconds("300"), Ok(300));
        assert_eq!(seconds("90s"), Ok(90));
        assert_eq!(seconds("5m"), Ok(300));
        assert_eq!(seconds("1h"), Ok(3600));
        for bad in ["", "m", "5 m", "1.5m", "-3", "10d", "5ms"] {
            let err = seconds(bad).expect_err(bad);
            assert!(err.contains("not a duration"), "{bad}: {err}");
        }
        assert!(seconds(&format!("{}h", u64::MAX)).is_err());
    }
}
