//! The Kubernetes CEL function libraries a ValidatingAdmissionPolicy
//! expression may use, on top of the `cel` crate: this module owns their
//! registration on a [`cel::Env`] ([`register`]) and the list of those left
//! out ([`MISSING`]). Each library is a submodule: [`lists`], [`regex`] and
//! [`quantity`].
//!
//! The caller builds the `Env` with `Env::stdlib()` and the `cel` crate's
//! `strings` extension, which Kubernetes also enables; not its `lists`
//! extension, whose `lists.range(n)` builds lists of unbounded size.

pub mod lists;
pub mod quantity;
pub mod regex;

/// The Kubernetes CEL libraries and functions this module doesn't provide.
pub const MISSING: &[&str] = &[
    "authorizer library (authorizer.group(...).resource(...).check(...), allowed(), reason(), ...)",
    "IP and CIDR library (ip(), isIP(), cidr(), isCIDR(), family(), containsIP(), ...)",
    "URL library (url(), isURL(), getScheme(), getHost(), getPort(), getEscapedPath(), getQuery())",
    "format library (format.dns1123Label(), format.named(), validate(), ...)",
    "semver library (semver(), isSemver(), major(), compareTo(), ...)",
    "sets extension (sets.contains(), sets.equivalent(), sets.intersects())",
    "newer additions: quantity mul(), div(), divInt(); lists includes()",
    "cel-go's ext.Strings functions the cel crate's strings extension lacks",
    "type checking: overloads are resolved at run time, so type errors surface on evaluation",
];

/// Registers the Kubernetes libraries of this module on `env`, built with
/// `Env::stdlib()` and the `cel` crate's `strings` extension.
///
/// # Errors
///
/// Fails if one of their overloads is already declared, e.g. when called twice.
pub fn register(env: &mut cel::Env) -> Result<(), String> {
    lists::register(env).map_err(|e| format!("lists library: {e}"))?;
    regex::register(env).map_err(|e| format!("regex library: {e}"))?;
    quantity::register(env).map_err(|e| format!("quantity library: {e}"))?;
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use cel::{Context, Env, ExecutionError, Value};
    use std::sync::Arc;

    pub(crate) fn eval(expr: &str) -> Result<Value, ExecutionError> {
        let mut env = Env::stdlib();
        env.add_extension(cel::extensions::strings).expect("strings extension");
        super::register(&mut env).expect("register");
        let program = env.compile(expr).unwrap_or_else(|e| panic!("{expr}: {e:?}"));
        program.execute(&Context::with_env(Arc::new(env)))
    }

    pub(crate) fn assert_true(expr: &str) {
        assert_eq!(eval(expr), Ok(Value::Bool(true)), "{expr}");
    }

    /// `expr` fails with an error whose message contains `message`.
    pub(crate) fn assert_error(expr: &str, message: &str) {
        match eval(expr) {
            Err(e) => assert!(e.to_string().contains(message), "{expr}: {e}"),
            Ok(v) => panic!("{expr}: expected an error, got {v:?}"),
        }
    }

    #[test]
    fn registering_twice_fails() {
        let mut env = Env::stdlib();
        assert_eq!(super::register(&mut env), Ok(()));
        assert!(super::register(&mut env).is_err());
    }
}
