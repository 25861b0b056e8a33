//! Kubernetes' regex library (`k8s.io/apiserver/pkg/cel/library/regex.go`):
//! `find(regex)`, `findAll(regex)` and `findAll(regex, n)`, member functions on
//! strings.
//!
//! Patterns are RE2 syntax, as Go's `regexp` reads it, and run on the `regex`
//! crate: matching is linear in the input, with no backtracking, and a
//! pattern whose compiled form would exceed [`SIZE_LIMIT`] is an error rather
//! than a memory blow-up. Go's ASCII-only Perl classes (`\d`, `\s`, `\w`, `\b`
//! and their negations) are kept ASCII-only, and `[`, `&` and `~` inside a
//! bracket class are literals, as in Go; see [`go_syntax`].

use ::regex::{Regex, RegexBuilder};
use cel::common::types::{CelInt, CelList, CelString};
use cel::common::value::Val;
use cel::{DeclarationError, Env, ExecutionError};
use std::cell::RefCell;

/// The most bytes a compiled pattern may take, and its lazy DFA's cache.
pub const SIZE_LIMIT: usize = 1 << 20;

/// Registers the regex functions on `env`.
pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    cel::add_member_overload!(env, fn find: (CelString, CelString) -> Result<CelString>)?;
    cel::add_member_overload!(env, fn find_all: (CelString, CelString) -> Result<CelList>)?;
    cel::add_member_overload!(env, fn find_all_n: (CelString, CelString, CelInt) -> Result<CelList>,
        name = "findAll")?;
    Ok(())
}

thread_local! {
    /// The last pattern compiled on this thread: a comprehension calling
    /// `find` with one pattern compiles it once.
    static LAST: RefCell<Option<(String, Regex)>> = const { RefCell::new(None) };
}

/// Compiles `pattern`, Go's syntax, or fails as `function`'s error.
pub fn compile(function: &str, pattern: &str) -> Result<Regex, ExecutionError> {
    let cached = |last: &Option<(String, Regex)>| last.as_ref().filter(|(p, _)| p == pattern).map(|(_, re)| re.clone());
    if let Some(re) = LAST.with_borrow(cached) {
        return Ok(re);
    }
    let re = RegexBuilder::new(&go_syntax(pattern))
        .size_limit(SIZE_LIMIT)
        .dfa_size_limit(SIZE_LIMIT)
        .build()
        .map_err(|e| ExecutionError::function_error(function, format!("Illegal regex: {e}")))?;
    LAST.set(Some((pattern.to_owned(), re.clone())));
    Ok(re)
}

/// `pattern` rewritten so that the `regex` crate reads it as Go does: outside
/// a bracket class, `\d`, `\s`, `\w` and their negations become ASCII classes
/// and `\b`, `\B` ASCII word boundaries; inside one, those classes nest as
/// `[0-9]` and the like, and `[` (but for `[:alpha:]` and the like), `&` and
/// `~`, which the `regex` crate would read as nesting or set operators, are
/// escaped.
pub fn go_syntax(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars().peekable();
    // `Some(first)` inside a bracket class: `first` while a `]` is a literal.
    let mut class: Option<bool> = None;
    while let Some(c) = chars.next() {
        let first = class == Some(true);
        if class.is_some() {
            class = Some(first && c == '^');
        }
        match c {
            '\\' => match chars.next() {
                Some(e @ ('d' | 'D' | 's' | 'S' | 'w' | 'W')) => {
                    let set = match e.to_ascii_lowercase() {
                        'd' => "0-9",
                        's' => "\\t\\n\\f\\r ",
                        _ => "0-9A-Za-z_",
                    };
                    let negated = if e.is_ascii_uppercase() { "^" } else { "" };
                    out.push_str(&format!("[{negated}{set}]"));
                }
                Some(e @ ('b' | 'B')) if class.is_none() => out.push_str(&format!("(?-u:\\{e})")),
                Some(e) => {
                    out.push('\\');
                    out.push(e);
                }
                None => out.push('\\'),
            },
            '[' if class.is_none() => {
                class = Some(true);
                out.push('[');
            }
            '[' if chars.peek() == Some(&':') => {
                // a POSIX class, `[:alpha:]`: copied up to its `:]`
                out.push('[');
                let mut prev = '[';
                for p in chars.by_ref() {
                    out.push(p);
                    if prev == ':' && p == ']' {
                        break;
                    }
                    prev = p;
                }
            }
            '[' | '&' | '~' if class.is_some() => {
                out.push('\\');
                out.push(c);
            }
            ']' if class.is_some() && !first => {
                class = None;
                out.push(']');
            }
            _ => out.push(c),
        }
    }
    out
}

fn find(this: &CelString<'_>, re: &CelString<'_>) -> Result<CelString<'static>, ExecutionError> {
    let re = compile("find", re)?;
    Ok(re.find(this).map_or("", |m| m.as_str()).to_owned().into())
}

fn find_all(this: &CelString<'_>, re: &CelString<'_>) -> Result<CelList<'static>, ExecutionError> {
    find_all_n(this, re, &CelInt::from(-1))
}

/// At most `n` matches, or all of them if `n` is negative, as Go's
/// `FindAllString`.
fn find_all_n(this: &CelString<'_>, re: &CelString<'_>, n: &CelInt) -> Result<CelList<'static>, ExecutionError> {
    let re = compile("findAll", re)?;
    let limit = usize::try_from(*n.inner()).unwrap_or(usize::MAX);
    let found: Vec<Box<dyn Val>> = re
        .find_iter(this)
        .take(limit)
        .map(|m| Box::new(CelString::from(m.as_str().to_owned())) as Box<dyn Val>)
        .collect();
    Ok(found.into())
}

#[cfg(test)]
mod tests {
    use super::go_syntax;
    use crate::library::tests::{assert_error, assert_true};

    #[test]
    fn kubernetes_examples() {
        assert_true("'abc 123'.find('[0-9]+') == '123'");
        assert_true("'abc 123'.find('xyz') == ''");
        assert_true("'123 abc 456'.findAll('[0-9]+') == ['123', '456']");
        assert_true("'123 abc 456'.findAll('[0-9]+', 1) == ['123']");
        assert_true("'123 abc 456'.findAll('xyz') == []");
        assert_true("'123 abc 456'.findAll('[0-9]+', 0) == []");
        assert_true("'123 abc 456'.findAll('[0-9]+', -1) == ['123', '456']");
    }

    #[test]
    fn go_semantics() {
        // Go's `\d` and `\w` are ASCII only
        assert_true("'٣3'.find('\\\\d+') == '3' && 'é_a'.find('\\\\w+') == '_a'");
        assert_true("'٣'.find('\\\\D') == '٣' && 'x y'.findAll('[\\\\s]') == [' ']");
        assert_true("'a[b&c'.findAll('[[&]') == ['[', '&']");
        assert_true("'ab1'.find('[[:alpha:]]+') == 'ab' && ']a'.find('[]a]+') == ']a'");
        assert_true("'baaab'.findAll('a*') == ['', 'aaa', '']");
        assert_eq!(go_syntax(r"\\d[^\d]\b"), r"\\d[^[0-9]](?-u:\b)");
    }

    #[test]
    fn errors() {
        assert_error("'abc'.find('[a-')", "Illegal regex");
        assert_error("'abc'.findAll('(')", "Illegal regex");
        assert_true("['a1', 'b2', 'c'].map(s, s.find('[0-9]')) == ['1', '2', '']");
        // a compiled pattern beyond the size limit is an error, not an allocation
        assert_error("'abc'.find('((a{1000}){1000}){1000}')", "exceeds size limit");
        assert_error("'abc'.findAll('\\\\pL{100}')", "exceeds size limit");
    }
}
