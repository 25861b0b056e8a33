//! The cost budget of an evaluation: a denial, never a hang.
//!
//! The `cel` crate (0.15) has no cost limit of its own (Kubernetes' CEL stops an expression at a
//! runtime cost of 1,000,000). So each compiled expression is rewritten before it runs: every
//! comprehension's range and every function call's result pass through [`CHARGE`], which adds the
//! value's size (elements of a list or map, bytes of a string, 1 for anything else) to a counter of
//! the evaluating thread, and fails once the counter is over the budget. A nested comprehension is
//! charged its inner range once per outer element, so its cost is the product, as in Kubernetes.
//! An evaluation whose budget was exceeded fails even if CEL's error absorption (`true || error`)
//! would have produced a value. The caller also bounds the whole evaluation by wall-clock time.

use std::cell::Cell;

use cel::common::ast::{CallExpr, Expr};
use cel::common::value::CowVal;
use cel::{ExecutionError, IdedExpr};

/// The function every charged value passes through.
pub const CHARGE: &str = "__capstan_cost";

/// The most one expression may cost (Kubernetes' per-call limit for admission policies).
pub const PER_EXPRESSION: u64 = 1_000_000;

thread_local! {
    /// Cost so far of the expression being evaluated on this thread, and its budget.
    static COST: Cell<(u64, u64)> = const { Cell::new((0, PER_EXPRESSION)) };
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

/// [`CHARGE`]: returns its argument, after charging its size.
pub fn charge<'b, 'v>(mut args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let Some(value) = args.pop() else {
        return Err(ExecutionError::invalid_argument_count(1, 0));
    };
    let size = value
        .as_sizer()
        .map(|s| u64::try_from(*s.size().inner()).unwrap_or(0))
        .unwrap_or(1)
        .max(1);
    let over = COST.with(|c| {
        let (spent, budget) = c.get();
        let spent = spent.saturating_add(size);
        c.set((spent, budget));
        spent > budget
    });
    if over {
        return Err(ExecutionError::function_error(
            "cost",
            "operation cancelled: actual cost limit exceeded",
        ));
    }
    Ok(value)
}

/// `expr` with every comprehension range and every call's result charged.
pub fn instrument(expr: &IdedExpr) -> IdedExpr {
    let mut next_id = u64::MAX / 2;
    let mut out = expr.clone();
    walk(&mut out, &mut next_id);
    out
}

fn wrap(expr: &mut IdedExpr, next_id: &mut u64) {
    *next_id += 1;
    let inner = std::mem::take(expr);
    *expr = IdedExpr {
        id: *next_id,
        expr: Expr::Call(CallExpr {
            func_name: CHARGE.to_string(),
            target: None,
            args: vec![inner],
        }),
    };
}

/// Like [`walk`], but a call at the top of `expr` is left unwrapped (its arguments are not).
fn walk_inside(expr: &mut IdedExpr, next_id: &mut u64) {
    match &mut expr.expr {
        Expr::Call(call) => {
            if let Some(target) = call.target.as_mut() {
                walk(target, next_id);
            }
            call.args.iter_mut().for_each(|a| walk(a, next_id));
        }
        _ => walk(expr, next_id),
    }
}

fn walk(expr: &mut IdedExpr, next_id: &mut u64) {
    match &mut expr.expr {
        Expr::Call(call) => {
            if let Some(target) = call.target.as_mut() {
                walk(target, next_id);
            }
            call.args.iter_mut().for_each(|a| walk(a, next_id));
            if call.func_name != CHARGE {
                wrap(expr, next_id);
            }
        }
        Expr::Comprehension(c) => {
            walk(&mut c.iter_range, next_id);
            wrap(&mut c.iter_range, next_id);
            walk(&mut c.accu_init, next_id);
            // The interpreter recognises the macros' loop steps by their shape (`@result && x`,
            // `@result + [x]`) to run them without copying: their own call stays unwrapped.
            walk_inside(&mut c.loop_cond, next_id);
            walk_inside(&mut c.loop_step, next_id);
            walk_inside(&mut c.result, next_id);
        }
        Expr::List(list) => list.elements.iter_mut().for_each(|e| walk(e, next_id)),
        Expr::Map(map) => {
            for entry in &mut map.entries {
                if let cel::common::ast::EntryExpr::MapEntry(e) = &mut entry.expr {
                    walk(&mut e.key, next_id);
                    walk(&mut e.value, next_id);
                }
            }
        }
        Expr::Select(select) => walk(&mut select.operand, next_id),
        Expr::Struct(_) | Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
        #[allow(unreachable_patterns)]
        _ => {}
    }
}
