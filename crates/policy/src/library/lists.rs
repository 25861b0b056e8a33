//! Kubernetes' list library (`k8s.io/apiserver/pkg/cel/library/lists.go`):
//! `isSorted()`, `sum()`, `min()`, `max()`, `indexOf(x)` and `lastIndexOf(x)`,
//! member functions on lists.
//!
//! Kubernetes declares them for typed lists; here, lists are checked at run
//! time instead: `sum` takes ints, uints, doubles or durations, `isSorted`,
//! `min` and `max` comparable elements (numbers, bools, strings, bytes,
//! durations, timestamps), and any mix CEL can't add or compare is an error.
//! Every function is a single pass over the list.

use cel::common::traits::Comparer;
use cel::common::types::{CelBool, CelDouble, CelInt, DYN_TYPE, Kind, LIST_TYPE};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};
use std::cmp::Ordering;

/// Registers the list functions on `env`.
pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_member_overload("isSorted", "list_is_sorted", LIST_TYPE, vec![], is_sorted)?;
    env.add_member_overload("sum", "list_sum", LIST_TYPE, vec![], sum)?;
    env.add_member_overload("min", "list_min", LIST_TYPE, vec![], |args| {
        extreme("min", args, Ordering::Less)
    })?;
    env.add_member_overload("max", "list_max", LIST_TYPE, vec![], |args| {
        extreme("max", args, Ordering::Greater)
    })?;
    let any = || vec![DYN_TYPE];
    env.add_member_overload("indexOf", "list_index_of", LIST_TYPE, any(), |args| {
        position(args, false)
    })?;
    env.add_member_overload("lastIndexOf", "list_last_index_of", LIST_TYPE, any(), |args| {
        position(args, true)
    })?;
    Ok(())
}

fn error(function: &str, message: impl ToString) -> ExecutionError {
    ExecutionError::function_error(function, message)
}

/// The target and arguments of an overload taking `N - 1` arguments.
fn take<'b, 'v, const N: usize>(args: Vec<CowVal<'b, 'v>>) -> Result<[CowVal<'b, 'v>; N], ExecutionError> {
    args.try_into()
        .map_err(|args: Vec<_>| ExecutionError::invalid_argument_count(N, args.len()))
}

/// The elements of `list`, borrowed.
fn elements<'b, 'v>(function: &str, list: &'b (dyn Val + 'v)) -> Result<Vec<&'b (dyn Val + 'v)>, ExecutionError> {
    let mut items = list
        .as_iterable()
        .ok_or_else(|| error(function, format!("not a list: {}", list.get_type().name())))?
        .iter();
    let mut out = Vec::new();
    while let Some(item) = items.next() {
        out.push(item);
    }
    Ok(out)
}

/// `a`'s comparer, or an error naming `function` if it has none.
fn comparable<'a>(function: &str, a: &'a dyn Val) -> Result<&'a dyn Comparer, ExecutionError> {
    let name = a.get_type().name();
    a.as_comparer()
        .ok_or_else(|| error(function, format!("list elements of type {name} are not comparable")))
}

/// How `a` orders against `b`, or an error naming `function` if CEL can't
/// compare them (other types, or a NaN, which Kubernetes silently skips).
fn compare(function: &str, a: &dyn Val, b: &dyn Val) -> Result<Ordering, ExecutionError> {
    comparable(function, b)?;
    comparable(function, a)?.compare(b).map_err(|_| {
        let (ta, tb) = (a.get_type().name(), b.get_type().name());
        error(function, format!("cannot compare list elements of types {ta} and {tb}"))
    })
}

fn is_sorted<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [list] = take(args)?;
    let items = elements("isSorted", list.as_ref())?;
    if let [only] = items[..] {
        comparable("isSorted", only)?;
    }
    for pair in items.windows(2) {
        if compare("isSorted", pair[0], pair[1])? == Ordering::Greater {
            return Ok(CowVal::owned(CelBool::from(false)));
        }
    }
    Ok(CowVal::owned(CelBool::from(true)))
}

/// The sum of ints, uints, doubles or durations; `0` for an empty list, which
/// has no element type at run time.
fn sum<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [list] = take(args)?;
    let mut total: Option<Box<dyn Val + 'v>> = None;
    for item in elements("sum", list.as_ref())? {
        let kind = item.get_type().kind();
        if !matches!(kind, Kind::Int | Kind::UInt | Kind::Double | Kind::Duration) {
            let name = item.get_type().name();
            return Err(error("sum", format!("cannot sum list elements of type {name}")));
        }
        total = Some(match total.take() {
            None if kind != Kind::Double => item.clone_as_boxed(),
            // As Kubernetes does, doubles start from 0.0: `[-0.0].sum()` is `0.0`.
            acc => {
                let acc = acc.unwrap_or_else(|| Box::new(CelDouble::from(0.0)));
                let adder = acc.as_adder().ok_or_else(|| error("sum", "cannot add"))?;
                adder.add(item).map_err(|e| error("sum", e))?.into_owned()
            }
        });
    }
    Ok(CowVal::Owned(total.unwrap_or_else(|| Box::new(CelInt::from(0)))))
}

/// The first element that no other element orders `prefer` against.
fn extreme<'b, 'v>(
    function: &str,
    args: Vec<CowVal<'b, 'v>>,
    prefer: Ordering,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [list] = take(args)?;
    let items = elements(function, list.as_ref())?;
    let mut best = *items
        .first()
        .ok_or_else(|| error(function, format!("{function} called on empty list")))?;
    comparable(function, best)?;
    for &item in &items[1..] {
        if compare(function, item, best)? == prefer {
            best = item;
        }
    }
    Ok(CowVal::Owned(best.clone_as_boxed()))
}

/// The index of the first (or last) element equal to `x`, or -1.
fn position<'b, 'v>(args: Vec<CowVal<'b, 'v>>, last: bool) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [list, x] = take(args)?;
    let items = elements(if last { "lastIndexOf" } else { "indexOf" }, list.as_ref())?;
    let found = |item: &&(dyn Val + 'v)| item.equals(x.as_ref());
    let index = if last {
        items.iter().rposition(found)
    } else {
        items.iter().position(found)
    };
    Ok(CowVal::owned(CelInt::from(index.map_or(-1, |i| i as i64))))
}

#[cfg(test)]
mod tests {
    use crate::library::tests::{assert_error, assert_true};

    #[test]
    fn kubernetes_examples() {
        assert_true("[1, 2, 3].isSorted()");
        assert_true("['a', 'b', 'b', 'c'].isSorted()");
        assert_true("![2.0, 1.0].isSorted()");
        assert_true("[1].isSorted() && [].isSorted()");
        assert_true("[1, 2, 3].sum() == 6");
        assert_true("[1, 3].sum() == 4 && [1.0, 3.0].sum() == 4.0 && [1u, 2u].sum() == 3u");
        assert_true("['1m', '1s'].map(d, duration(d)).sum() == duration('1m1s')");
        assert_true("[].sum() == 0");
        assert_true("[1, 3].min() == 1 && [1, 3].max() == 3 && [1].min() == 1");
        assert_true("(['b', 'a', 'c'].min() == 'a') && (['b', 'a', 'c'].max() == 'c')");
        assert_true("[1, 2, 2, 3].indexOf(2) == 1");
        assert_true("['a', 'b', 'b', 'c'].lastIndexOf('b') == 2");
        assert_true("[1.0].indexOf(1.1) == -1 && [].indexOf('string') == -1");
        // the strings extension's `indexOf` still works
        assert_true("'abcb'.indexOf('b') == 1 && 'abcb'.lastIndexOf('b') == 3");
    }

    #[test]
    fn errors() {
        assert_error("[].min()", "min called on empty list");
        assert_error("[].max()", "max called on empty list");
        assert_error("['a', 'b'].sum()", "cannot sum list elements of type string");
        assert_error("[[1], [2]].max()", "list elements of type list are not comparable");
        assert_error("[{}].isSorted()", "list elements of type map are not comparable");
        assert_error("[1, 'a'].isSorted()", "cannot compare list elements");
        assert_error(
            "[1, double('NaN')].max()",
            "cannot compare list elements of types double and int",
        );
        assert_true("[double('NaN')].isSorted() && [double('NaN')].max() != 0.0");
        assert_error("[9223372036854775807, 1].sum()", "Overflow");
        assert_error("[1, 2.0].sum()", "Unsupported binary operator");
    }
}
