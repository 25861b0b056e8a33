//! The cost budget of an evaluation: a denial, never a hang.
//!
//! The `cel` crate (0.15) has no cost limit of its own (Kubernetes' CEL stops an expression at a
//! runtime cost of 1,000,000). So each compiled expression is rewritten before it runs:
//!
//! - every comprehension's range passes through [`CHARGE`], charged its length: a nested
//!   comprehension is charged its inner range once per outer element, so its cost is the product,
//!   as in Kubernetes;
//! - every function call's result and every list or map literal pass through [`CHARGE`], charged
//!   their whole size (elements of lists and maps, all the way down, and bytes of strings), which is
//!   what building them allocated: `[v, v]` nested in variables doubles at each level and is stopped
//!   at the budget, not after memory runs out;
//! - `s.replace(from, to)` first passes its target through [`BOUND`], charged the most the result
//!   can hold, so a replacement that would build a huge string is refused before it is built.
//!
//! Charges go to a counter of the evaluating thread and fail once it is over the budget; they also
//! fail once the thread's deadline has passed, so an evaluation the caller stopped waiting for stops
//! itself at its next call. An evaluation whose budget was exceeded fails even if CEL's error
//! absorption (`true || error`) would have produced a value.
//!
//! The macros' loop steps (`@result && x`, `@result + [x]`, `c ? @result + [x] : @result`) are left
//! as the interpreter recognises them, so it keeps running them without copying the accumulator.

use std::cell::Cell;
use std::time::Instant;

use cel::common::ast::{CallExpr, EntryExpr, Expr};
use cel::common::types::{CelList, CelMap};
use cel::common::value::{CowVal, Val};
use cel::{ExecutionError, IdedExpr};

/// The function every charged value passes through.
pub const CHARGE: &str = "__capstan_cost";
/// The function `replace`'s target passes through, with the replacement: charged the most the
/// result can hold.
pub const BOUND: &str = "__capstan_replace_bound";

/// The most one expression may cost (Kubernetes' per-call limit for admission policies).
pub const PER_EXPRESSION: u64 = 1_000_000;

thread_local! {
    /// Cost so far of the expression being evaluated on this thread, and its budget.
    static COST: Cell<(u64, u64)> = const { Cell::new((0, PER_EXPRESSION)) };
    /// When this thread's evaluation must stop.
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Start counting the cost of one expression on this thread, with `budget`.
pub fn start(budget: u64) {
    COST.with(|c| c.set((0, budget)));
}

/// The cost counted since [`start`], and whether it went over the budget.
pub fn finish() -> (u64, bool) {
    COST.with(|c| {
        let (spent, budget) = c.get();
        (spent, spent > budget)
    })
}

/// Stop every charge on this thread from `deadline` on (`None`: no deadline).
pub fn set_deadline(deadline: Option<Instant>) {
    DEADLINE.with(|d| d.set(deadline));
}

fn over_budget() -> ExecutionError {
    ExecutionError::function_error("cost", "operation cancelled: actual cost limit exceeded")
}

/// Add `size` to this thread's cost; an error over the budget or past the deadline.
fn spend(size: u64) -> Result<(), ExecutionError> {
    if DEADLINE.with(Cell::get).is_some_and(|d| Instant::now() > d) {
        return Err(ExecutionError::function_error(
            "cost",
            "operation cancelled: the evaluation ran out of time",
        ));
    }
    let over = COST.with(|c| {
        let (spent, budget) = c.get();
        let spent = spent.saturating_add(size);
        c.set((spent, budget));
        spent > budget
    });
    if over { Err(over_budget()) } else { Ok(()) }
}

/// What is left of this thread's budget.
fn remaining() -> u64 {
    COST.with(|c| {
        let (spent, budget) = c.get();
        budget.saturating_sub(spent)
    })
}

/// The size of one value alone: elements of a list or map, bytes of a string, else 1.
fn shallow(value: &dyn Val) -> u64 {
    value
        .as_sizer()
        .map(|s| u64::try_from(*s.size().inner()).unwrap_or(0))
        .unwrap_or(1)
        .max(1)
}

/// The size of `value` with everything in it, counted up to `cap` (a value larger than the budget
/// is not walked to its end).
fn deep(value: &dyn Val, cap: u64) -> u64 {
    let mut total = 0u64;
    let mut stack: Vec<&dyn Val> = vec![value];
    while let Some(v) = stack.pop() {
        if total > cap {
            break;
        }
        if let Some(list) = v.downcast_ref::<CelList>() {
            total = total.saturating_add(1);
            stack.extend(list.inner().iter().map(|b| b.as_ref()));
        } else if let Some(map) = v.downcast_ref::<CelMap>() {
            total = total.saturating_add(1);
            for value in map.inner().values() {
                total = total.saturating_add(1);
                stack.push(value.as_ref());
            }
        } else {
            total = total.saturating_add(shallow(v));
        }
    }
    total
}

/// [`CHARGE`] with one argument: returns it after charging its whole size. With a second argument
/// (a comprehension's range) the value is charged its length only.
pub fn charge<'b, 'v>(mut args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let range = args.len() == 2;
    if range {
        args.pop();
    }
    let Some(value) = args.pop() else {
        return Err(ExecutionError::invalid_argument_count(1, 0));
    };
    let size = if range {
        shallow(value.as_ref())
    } else {
        deep(value.as_ref(), remaining())
    };
    spend(size)?;
    Ok(value)
}

/// [`BOUND`]: returns the target after charging the most `target.replace(_, to)` can hold.
pub fn bound<'b, 'v>(mut args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    if args.len() != 2 {
        return Err(ExecutionError::invalid_argument_count(2, args.len()));
    }
    let to = args.pop().map(|v| shallow(v.as_ref())).unwrap_or(1);
    let Some(target) = args.pop() else {
        return Err(ExecutionError::invalid_argument_count(2, 0));
    };
    let most = shallow(target.as_ref()).saturating_add(1).saturating_mul(to.max(1));
    spend(most)?;
    Ok(target)
}

/// `expr` with every comprehension range, call result and literal charged.
pub fn instrument(expr: &IdedExpr) -> IdedExpr {
    let mut next_id = u64::MAX / 2;
    let mut out = expr.clone();
    walk(&mut out, &mut next_id);
    out
}

fn call(func: &str, args: Vec<IdedExpr>, next_id: &mut u64) -> IdedExpr {
    *next_id += 1;
    IdedExpr {
        id: *next_id,
        expr: Expr::Call(CallExpr {
            func_name: func.to_string(),
            target: None,
            args,
        }),
    }
}

/// Wrap `expr` in a charge (with a second argument, `true`, for a comprehension's range).
fn wrap(expr: &mut IdedExpr, range: bool, next_id: &mut u64) {
    let inner = std::mem::take(expr);
    let mut args = vec![inner];
    if range {
        *next_id += 1;
        args.push(IdedExpr {
            id: *next_id,
            expr: Expr::Literal(cel::common::ast::LiteralValue::Boolean(true.into())),
        });
    }
    *expr = call(CHARGE, args, next_id);
}

/// Whether `expr` is a call whose first argument is the accumulator `accu` (a macro's step).
fn folds(expr: &IdedExpr, accu: &str) -> bool {
    matches!(&expr.expr, Expr::Call(c) if c.target.is_none()
        && matches!(c.args.first().map(|a| &a.expr), Some(Expr::Ident(n)) if n == accu))
}

/// Like [`walk`], but the macro's own calls at the top of `expr` (and a fold of the accumulator
/// among their arguments, as in `filter`'s `c ? @result + [x] : @result`) stay unwrapped.
fn walk_step(expr: &mut IdedExpr, accu: &str, next_id: &mut u64) {
    let folding = folds(expr, accu);
    match &mut expr.expr {
        Expr::Call(call) => {
            if let Some(target) = call.target.as_mut() {
                walk(target, next_id);
            }
            for arg in call.args.iter_mut() {
                if folds(arg, accu) {
                    walk_step(arg, accu, next_id);
                } else if let (true, Expr::List(list)) = (folding, &mut arg.expr) {
                    // The `[x]` a fold appends stays a list literal (its elements are charged).
                    list.elements.iter_mut().for_each(|e| walk(e, next_id));
                } else {
                    walk(arg, next_id);
                }
            }
        }
        _ => walk(expr, next_id),
    }
}

fn walk(expr: &mut IdedExpr, next_id: &mut u64) {
    match &mut expr.expr {
        Expr::Call(c) => {
            if let Some(target) = c.target.as_mut() {
                walk(target, next_id);
            }
            c.args.iter_mut().for_each(|a| walk(a, next_id));
            if c.func_name == "replace"
                && c.args.len() >= 2
                && let Some(target) = c.target.as_mut()
            {
                let to = c.args[1].clone();
                let inner = std::mem::take(target.as_mut());
                **target = call(BOUND, vec![inner, to], next_id);
            }
            if c.func_name != CHARGE && c.func_name != BOUND {
                wrap(expr, false, next_id);
            }
        }
        Expr::Comprehension(c) => {
            walk(&mut c.iter_range, next_id);
            wrap(&mut c.iter_range, true, next_id);
            walk(&mut c.accu_init, next_id);
            let accu = c.accu_var.clone();
            walk_step(&mut c.loop_cond, &accu, next_id);
            walk_step(&mut c.loop_step, &accu, next_id);
            walk_step(&mut c.result, &accu, next_id);
        }
        Expr::List(list) => {
            list.elements.iter_mut().for_each(|e| walk(e, next_id));
            wrap(expr, false, next_id);
        }
        Expr::Map(map) => {
            for entry in &mut map.entries {
                if let EntryExpr::MapEntry(e) = &mut entry.expr {
                    walk(&mut e.key, next_id);
                    walk(&mut e.value, next_id);
                }
            }
            wrap(expr, false, next_id);
        }
        Expr::Select(select) => walk(&mut select.operand, next_id),
        Expr::Struct(_) | Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
        #[allow(unreachable_patterns)]
        _ => {}
    }
}
