use super::*;

#[test]
fn urls_are_compared_without_scheme_credentials_and_suffix() {
    assert_eq!(
        normalize_url("https://user:pw@Example.com/Org/Repo.git/"),
        "example.com/org/repo"
    );
    assert_eq!(normalize_url("git@example.com:org/repo.git"), "example.com/org/repo");
}
