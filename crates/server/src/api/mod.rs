//! The JSON API: the Application list ([`list`]: filters, pages), Applications ([`apps`]; deleting
//! one: [`delete`]), their resource trees ([`tree`]), their Pods' logs ([`logs`]) and resource actions ([`actions`]), ApplicationSets and
//! clusters ([`fleet`]), AppProjects ([`projects`]), promotions between environments ([`promotions`]) and an Application's
//! promotions ([`app_promotions`]), deployed commits ([`revision`]), policies and their verdicts
//! ([`policies`], read-only), plans of a repository's revision ([`plan`]), and the bodies they answer ([`model`]); [`access`] decides who
//! sees which Application, and [`audit`] records what users did in Events.

pub mod access;
pub mod actions;
pub mod app_promotions;
pub mod apps;
pub mod audit;
pub mod delete;
pub mod fleet;
pub mod list;
pub mod logs;
pub mod model;
pub mod plan;
pub mod policies;
pub mod projects;
pub mod promotions;
pub mod revision;
pub mod tree;

use crate::error::ApiError;

/// Refuse a name that cannot be a Kubernetes object name (path parameters are validated before any
/// lookup).
pub fn valid_name(name: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && !name.starts_with(['-', '.']);
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!("invalid name {name:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_validated() {
        assert!(valid_name("guestbook").is_ok());
        assert!(valid_name("a.b-c1").is_ok());
        for bad in ["", "..", "../etc", "A", "a/b", "a%2fb", ".x", &"a".repeat(254)] {
            assert!(valid_name(bad).is_err(), "{bad}");
        }
    }
}
