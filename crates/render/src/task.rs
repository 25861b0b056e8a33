//! [`blocking`]: filesystem work of a render run off the async executor.

use crate::error::RenderError;

/// Run blocking filesystem work off the async executor.
pub(crate) async fn blocking<T, F>(f: F) -> Result<T, RenderError>
where
    F: FnOnce() -> Result<T, RenderError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| RenderError::Task(e.to_string()))?
}
