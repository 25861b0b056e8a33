//! The CEL environment every policy expression is compiled and run in: the standard library and
//! macros, the strings extension, the Kubernetes libraries of [`crate::library`], and the cost
//! charge of [`crate::cost`].

use std::sync::{Arc, LazyLock};

use cel::Env;
use cel::common::types::{BOOL_TYPE, DYN_TYPE};

use crate::cost;

static ENV: LazyLock<Result<Arc<Env>, String>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    env.add_extension(cel::extensions::strings)
        .map_err(|e| format!("{e:?}"))?;
    crate::library::register(&mut env)?;
    env.add_overload(cost::CHARGE, "capstan_cost_dyn", vec![DYN_TYPE], cost::charge)
        .map_err(|e| format!("{e:?}"))?;
    env.add_overload(
        cost::CHARGE,
        "capstan_cost_range",
        vec![DYN_TYPE, BOOL_TYPE],
        cost::charge,
    )
    .map_err(|e| format!("{e:?}"))?;
    env.add_overload(
        cost::BOUND,
        "capstan_replace_bound",
        vec![DYN_TYPE, DYN_TYPE],
        cost::bound,
    )
    .map_err(|e| format!("{e:?}"))?;
    Ok(Arc::new(env))
});

/// The shared environment, or why it could not be built (a bug: every policy then fails closed).
pub fn env() -> Result<Arc<Env>, String> {
    ENV.as_ref()
        .map(Arc::clone)
        .map_err(|e| format!("the CEL environment did not start: {e}"))
}
