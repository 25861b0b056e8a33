//! Who made a commit, when, and what its message says, read from the Git cache (what the web UI's
//! Application header shows for the deployed revision, as Argo CD's revision metadata).

/// A commit's author, date and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitInfo {
    /// `Name <email>`.
    pub author: String,
    /// Author date, RFC 3339.
    pub date: String,
    /// The whole message (subject, blank line, body), trailing newlines removed.
    pub message: String,
}

/// The `git show -s --format=` that [`parse`] reads: author, date and message separated by NUL.
pub(crate) const FORMAT: &str = "--format=%an <%ae>%x00%aI%x00%B";

/// Read `git show -s` output made with [`FORMAT`].
pub(crate) fn parse(out: &[u8]) -> Option<CommitInfo> {
    let text = String::from_utf8_lossy(out);
    let mut parts = text.splitn(3, '\0');
    let author = parts.next()?.trim().to_string();
    let date = parts.next()?.trim().to_string();
    let message = parts.next()?.trim_end().to_string();
    Some(CommitInfo { author, date, message })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn author_date_and_message_are_split_on_nul() {
        let info =
            parse(b"Ada <ada@example.test>\x002026-11-27T20:00:00+00:00\x00Fix it\n\nBecause.\n\n").expect("parsed");
        assert_eq!(info.author, "Ada <ada@example.test>");
        assert_eq!(info.date, "2026-11-27T20:00:00+00:00");
        assert_eq!(info.message, "Fix it\n\nBecause.");
        assert_eq!(parse(b"no separators"), None);
    }
}
