//! Notifications: telling people what happened to their Applications, once per change.
//!
//! - [`event`]: the state changes of an Application (a finished sync, a failed one, Degraded health,
//!   a new revision deployed, a policy's denial, a promotion to it), each with a fingerprint that
//!   changes only when the state does; pure.
//! - [`record`]: the annotation `capstan.dev/notified` on an Application that records, per channel
//!   and trigger, the fingerprint last sent, and which events are due now (a channel or trigger seen
//!   for the first time is recorded without sending: subscribing does not replay history); pure.
//! - [`payload`]: what each kind of destination is sent — Capstan's signed JSON schema, Slack and
//!   Teams messages, commit statuses for GitHub-, GitLab- and Gitea-style APIs; pure.
//! - [`deliver`]: sending one payload with Capstan's HTTP client: a time limit per attempt, bounded
//!   retries with backoff for what may pass later (5xx, 429, timeouts, refused connections), no
//!   redirect followed, errors that never quote the destination's URL.
//!
//! The controller decides when (it owns the Application watch, the shards and the channels' status):
//! see `capstan-controller`'s `notifications` module.

pub mod deliver;
pub mod event;
pub mod payload;
pub mod record;

pub use event::{Event, PromotedField, Promotion, facts, promotion_facts};
