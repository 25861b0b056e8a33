//! Kubernetes' quantity library (`k8s.io/apiserver/pkg/cel/library/quantity.go`):
//! `quantity(string)`, `isQuantity(string)`, and on a quantity `isInteger()`,
//! `asInteger()`, `asApproximateFloat()`, `sign()`, `add(q|int)`, `sub(q|int)`,
//! `compareTo(q)`, `isGreaterThan(q)` and `isLessThan(q)`; `==` compares values,
//! so `quantity('1Gi') == quantity('1073741824')`.
//!
//! # Representation
//!
//! A [`Quantity`] is an opaque CEL value of type `kubernetes.Quantity`, as in
//! Kubernetes, holding:
//!
//! * its exact value, a [`Decimal`] `m × 10^e` with an `i128` mantissa. Parsing
//!   follows `resource.ParseQuantity` to the letter (its fast and slow paths,
//!   the rounding up to nano-units of the slow path, the cap of binary values at
//!   2^63-1), so values, comparisons and sums are exact: `1Gi` is
//!   `1073741824 × 10^0`, `1Ei` and `9999999999999999999999999999999999999G` fit
//!   too. Nano-units in an `i64` would top out at about 9.2e9 units, and in an
//!   `i128` at 1.7e29, short of Kubernetes' examples; an `f64` isn't
//!   exact. The one limit: a value, or a sum, needing more than 38 significant
//!   digits (e.g. `1e100` + `1n`) is an error, where Kubernetes' `inf.Dec` is
//!   unbounded;
//! * how Kubernetes holds it, an `int64Amount` or an `inf.Dec` ([`Repr`]), which
//!   `isInteger()`, `asInteger()` and `asApproximateFloat()` depend on: in
//!   Kubernetes, `quantity('1000m').isInteger()` and
//!   `quantity('1.5Gi').isInteger()` are false, and so they are here.

use cel::common::types::{CelBool, CelDouble, CelInt, CelString, Type};
use cel::common::value::{StaticVal, Val};
use cel::{DeclarationError, Env, ExecutionError};
use std::any::Any;
use std::cmp::Ordering;
use std::sync::LazyLock;

/// `kubernetes.Quantity`, an opaque type as in Kubernetes.
pub static QUANTITY_TYPE: LazyLock<Type> = LazyLock::new(|| Type::new_opaque_type("kubernetes.Quantity"));

const ERR_FORMAT: &str = "quantities must match the regular expression \
    '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
const ERR_NUMERIC: &str = "unable to parse numeric part of quantity";
const ERR_SUFFIX: &str = "unable to parse quantity's suffix";
const ERR_RANGE: &str = "quantity needs more than 38 significant digits, beyond what is supported";

/// An exact decimal `m × 10^e`; `m` has no trailing zeros, and zero is `0 × 10^0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decimal {
    m: i128,
    e: i64,
}

/// `10^k`, if it fits an `i128`.
fn pow10(k: i64) -> Option<i128> {
    10i128.checked_pow(u32::try_from(k).ok()?)
}

/// `v × 10^k`, `k >= 0`, if it fits an `i128`.
fn times_pow10(v: i128, k: i64) -> Option<i128> {
    if v == 0 { Some(0) } else { v.checked_mul(pow10(k)?) }
}

impl Decimal {
    /// `m × 10^e`, normalised (trailing zeros of `m` moved into `e`).
    pub fn new(mut m: i128, mut e: i64) -> Decimal {
        if m == 0 {
            return Decimal { m: 0, e: 0 };
        }
        while m % 10 == 0 {
            m /= 10;
            e += 1;
        }
        Decimal { m, e }
    }

    fn digits(self) -> i64 {
        self.m.unsigned_abs().checked_ilog10().map_or(0, |d| d as i64 + 1)
    }

    /// Exact, whatever the exponents: values of one order of magnitude have
    /// exponents at most 38 apart.
    fn compare(self, other: Decimal) -> Ordering {
        let sign = self.m.signum().cmp(&other.m.signum());
        if sign != Ordering::Equal || self.m == 0 {
            return sign;
        }
        let magnitude = (self.digits() + self.e).cmp(&(other.digits() + other.e));
        let magnitude = if self.m < 0 { magnitude.reverse() } else { magnitude };
        if magnitude != Ordering::Equal {
            return magnitude;
        }
        let e = self.e.min(other.e);
        match (times_pow10(self.m, self.e - e), times_pow10(other.m, other.e - e)) {
            (Some(a), Some(b)) => a.cmp(&b),
            _ => Ordering::Equal, // unreachable: both have at most 38 digits
        }
    }

    fn add(self, other: Decimal) -> Option<Decimal> {
        if self.m == 0 || other.m == 0 {
            return Some(if self.m == 0 { other } else { self });
        }
        let e = self.e.min(other.e);
        let sum = times_pow10(self.m, self.e - e)?.checked_add(times_pow10(other.m, other.e - e)?)?;
        let sum = Decimal::new(sum, e);
        (sum.digits() <= 38).then_some(sum)
    }
}

/// How Kubernetes holds a quantity, which some functions depend on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repr {
    /// An `int64Amount`, `value × 10^scale`.
    Int {
        /// The amount.
        value: i64,
        /// Its power of ten.
        scale: i64,
    },
    /// An `inf.Dec` of scale `-exp`.
    Dec {
        /// Its power of ten.
        exp: i64,
    },
}

/// A Kubernetes `resource.Quantity`: see the [module documentation](self).
#[derive(Clone, Copy, Debug)]
pub struct Quantity {
    value: Decimal,
    repr: Repr,
}

impl Quantity {
    fn int(value: i64, scale: i64) -> Quantity {
        let repr = Repr::Int { value, scale };
        Quantity {
            value: Decimal::new(value.into(), scale),
            repr,
        }
    }

    /// Parses `s` as `resource.ParseQuantity` does, failing with its message.
    pub fn parse(s: &str) -> Result<Quantity, &'static str> {
        let b = s.as_bytes();
        let negative = b.first() == Some(&b'-');
        let mut pos = usize::from(matches!(b.first(), Some(b'-' | b'+')));
        if b.is_empty() {
            return Err(ERR_FORMAT);
        }
        while b.get(pos) == Some(&b'0') {
            pos += 1;
        }
        if pos == b.len() {
            return Ok(Quantity::int(0, 0));
        }
        let digits_from = |from: usize| from + b[from..].iter().take_while(|c| c.is_ascii_digit()).count();
        let num_end = digits_from(pos);
        let num = if num_end == pos { "0" } else { &s[pos..num_end] };
        let (denom, mut pos) = match b.get(num_end) {
            Some(b'.') => (&s[num_end + 1..digits_from(num_end + 1)], digits_from(num_end + 1)),
            _ => ("", num_end),
        };
        let any_digit = b[..pos].iter().any(u8::is_ascii_digit);
        let suffix_start = pos;
        pos += b[pos..].iter().take_while(|c| b"eEinumkKMGTP".contains(c)).count();
        pos += usize::from(matches!(b.get(pos), Some(b'-' | b'+')));
        if digits_from(pos) != b.len() {
            return Err(ERR_FORMAT);
        }
        let suffix = &s[suffix_start..];
        let decimal = ["n", "u", "m", "", "k", "M", "G", "T", "P", "E"]
            .iter()
            .position(|&x| x == suffix);
        let binary_si = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"].iter().position(|&x| x == suffix);
        let (binary, exponent): (bool, i32) = match (decimal, binary_si) {
            (Some(i), _) => (false, 3 * i as i32 - 9),
            (_, Some(i)) => (true, 10 * (i as i32 + 1)),
            // Go parses an int64 and truncates it to an int32, as `as` does.
            _ if suffix.len() > 1 && suffix.starts_with(['e', 'E']) => {
                (false, suffix[1..].parse::<i64>().map_err(|_| ERR_SUFFIX)? as i32)
            }
            _ => return Err(ERR_SUFFIX),
        };
        let sign = |v: i128| if negative { -v } else { v };
        let digits = format!("{num}{denom}");
        // Go's int32 arithmetic, wrapping as it does.
        let scale = if binary { 0 } else { exponent }.wrapping_sub(denom.len() as i32);
        // The fast path: an `int64Amount`, exact.
        let fast = if binary {
            let precision = 15 - num.len() as i64 - i64::from(exponent) * 3 / 10 - 1;
            (denom.is_empty() && precision >= 0)
                .then(|| num.parse::<i64>().ok()?.checked_mul(1 << exponent))
                .flatten()
        } else {
            (num.len() + denom.len() <= 18 && scale >= -9)
                .then(|| digits.parse::<i64>().ok())
                .flatten()
        };
        if let Some(v) = fast {
            let v = sign(v.into()) as i64; // |v| < 2^63: no overflow
            return Ok(Quantity::int(v, scale.into()));
        }
        // The slow path: an `inf.Dec`, rounded up to nano-units, binary values
        // capped at 2^63-1.
        if !any_digit {
            return Err(ERR_NUMERIC);
        }
        let shift = if binary { exponent as u32 } else { 0 };
        let magnitude = round_up_to_nano(digits.as_bytes(), shift, scale.into());
        let cap = Decimal::new(i64::MAX.into(), 0);
        let (magnitude, exp) = match magnitude {
            Some(v) if v.m == 0 => (v, i64::from(scale)),
            Some(v) if !binary || v.compare(cap) != Ordering::Greater => (v, -9),
            None if !binary => return Err(ERR_RANGE),
            _ => (cap, 0),
        };
        let value = Decimal::new(sign(magnitude.m), magnitude.e);
        Ok(Quantity {
            value,
            repr: Repr::Dec { exp },
        })
    }

    /// The value as an `i64`, when Kubernetes' `AsInt64` gives one.
    pub fn as_i64(&self) -> Option<i64> {
        match self.repr {
            Repr::Int { value, scale: 0 } => Some(value),
            Repr::Int { value, scale } if scale > 0 => i64::try_from(times_pow10(value.into(), scale)?).ok(),
            _ => None,
        }
    }

    /// Kubernetes' `AsApproximateFloat64`: its unscaled value times `10^exponent`.
    pub fn as_approximate_f64(&self) -> f64 {
        let (base, exp) = match self.repr {
            Repr::Int { value, scale } => (value as f64, scale),
            Repr::Dec { exp } => {
                let Decimal { m, e } = self.value;
                let unscaled = (e >= exp).then(|| times_pow10(m, e - exp)).flatten();
                (unscaled.map_or_else(|| m as f64 * go_pow10(e - exp), |u| u as f64), exp)
            }
        };
        if exp == 0 { base } else { base * go_pow10(exp) }
    }

    /// Kubernetes' `Add`, `Sub` when `negate`.
    fn plus(&self, other: &Quantity, negate: bool) -> Result<Quantity, ExecutionError> {
        let (mut y, mut y_repr) = (other.value, other.repr);
        if negate {
            y = Decimal { m: -y.m, e: y.e };
            y_repr = match y_repr {
                Repr::Int { value, scale } if value != i64::MIN => Repr::Int { value: -value, scale },
                Repr::Int { scale, .. } => Repr::Dec { exp: scale },
                dec => dec,
            };
        }
        let op = if negate { "sub" } else { "add" };
        let value = self
            .value
            .add(y)
            .ok_or_else(|| ExecutionError::function_error(op, ERR_RANGE))?;
        let exp = |r: Repr| match r {
            Repr::Int { scale, .. } => scale,
            Repr::Dec { exp } => exp,
        };
        let repr = match (self.repr, y_repr) {
            (Repr::Int { value: a, scale: sa }, Repr::Int { value: b, scale: sb }) => {
                int64_add(a, sa, b, sb).unwrap_or(Repr::Dec { exp: sa.min(sb) })
            }
            (a, b) => Repr::Dec {
                exp: exp(a).min(exp(b)),
            },
        };
        Ok(Quantity { value, repr })
    }
}

/// Kubernetes' `int64Amount.Add`: `None` when it falls back to `inf.Dec`.
fn int64_add(a: i64, sa: i64, b: i64, sb: i64) -> Option<Repr> {
    let scaled = |v: i64, k: i64| i64::try_from(times_pow10(v.into(), k)?).ok();
    let (value, scale) = match (a, b) {
        (_, 0) => (a, sa),
        (0, _) => (b, sb),
        _ if sa == sb => (a.checked_add(b)?, sa),
        _ if sa > sb => (scaled(a, sa - sb)?.checked_add(b)?, sb),
        _ => (a.checked_add(scaled(b, sb - sa)?)?, sa),
    };
    Some(Repr::Int { value, scale })
}

/// `digits × 2^shift × 10^exp`, rounded up to a multiple of 10^-9, as a
/// `Decimal` if it has at most 38 significant digits.
fn round_up_to_nano(digits: &[u8], shift: u32, exp: i64) -> Option<Decimal> {
    // Least significant digit first.
    let mut ds: Vec<u8> = digits.iter().rev().map(|d| d - b'0').collect();
    let mut carry = 0u128;
    for d in ds.iter_mut() {
        let v = u128::from(*d) * (1u128 << shift) + carry;
        (*d, carry) = ((v % 10) as u8, v / 10);
    }
    while carry > 0 {
        ds.push((carry % 10) as u8);
        carry /= 10;
    }
    let mut exp = exp;
    if exp < -9 {
        let dropped = usize::try_from(-9 - exp).unwrap_or(usize::MAX).min(ds.len());
        let round_up = ds[..dropped].iter().any(|&d| d != 0);
        ds.drain(..dropped);
        exp = -9;
        if round_up {
            // + 1 at 10^-9, carrying over the nines
            let nines = ds.iter().take_while(|&&d| d == 9).count();
            ds[..nines].fill(0);
            match ds.get_mut(nines) {
                Some(d) => *d += 1,
                None => ds.push(1),
            }
        }
    }
    let zeros = ds.iter().take_while(|&&d| d == 0).count();
    let significant = &ds[zeros..];
    let len = significant.iter().rposition(|&d| d != 0).map_or(0, |i| i + 1);
    if len > 38 {
        return None;
    }
    let m = significant[..len]
        .iter()
        .rev()
        .fold(0i128, |m, &d| m * 10 + i128::from(d));
    Some(Decimal::new(m, exp + zeros as i64))
}

/// Go's `math.Pow10`, whose rounding `asApproximateFloat` inherits.
fn go_pow10(n: i64) -> f64 {
    let lit = |k: i64| format!("1e{k}").parse::<f64>().unwrap_or(f64::NAN);
    match n {
        0..=308 => lit(32 * (n / 32)) * lit(n % 32),
        -323..=-1 => lit(-32 * (-n / 32)) / lit(-n % 32),
        309.. => f64::INFINITY,
        _ => 0.0,
    }
}

impl Val for Quantity {
    fn get_type(&self) -> &Type {
        &QUANTITY_TYPE
    }

    fn cel_type() -> &'static Type {
        &QUANTITY_TYPE
    }

    fn equals(&self, other: &dyn Val) -> bool {
        other.downcast_ref::<Quantity>().is_some_and(|o| self.value == o.value)
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(*self)
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

impl StaticVal for Quantity {}

/// Registers the quantity functions on `env`.
pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    cel::add_overload!(env, fn quantity: (CelString) -> Result<Quantity>)?;
    cel::add_overload!(env, fn is_quantity: (CelString) -> CelBool)?;
    cel::add_member_overload!(env, fn sign: (Quantity) -> CelInt)?;
    // Kubernetes declares `sign` as a global function, and documents it as a member.
    cel::add_overload!(env, fn sign: (Quantity) -> CelInt)?;
    cel::add_member_overload!(env, fn is_integer: (Quantity) -> CelBool)?;
    cel::add_member_overload!(env, fn as_integer: (Quantity) -> Result<CelInt>)?;
    cel::add_member_overload!(env, fn as_approximate_float: (Quantity) -> CelDouble)?;
    cel::add_member_overload!(env, fn add: (Quantity, Quantity) -> Result<Quantity>)?;
    cel::add_member_overload!(env, fn add_int: (Quantity, CelInt) -> Result<Quantity>, name = "add")?;
    cel::add_member_overload!(env, fn sub: (Quantity, Quantity) -> Result<Quantity>)?;
    cel::add_member_overload!(env, fn sub_int: (Quantity, CelInt) -> Result<Quantity>, name = "sub")?;
    cel::add_member_overload!(env, fn compare_to: (Quantity, Quantity) -> CelInt)?;
    cel::add_member_overload!(env, fn is_greater_than: (Quantity, Quantity) -> CelBool)?;
    cel::add_member_overload!(env, fn is_less_than: (Quantity, Quantity) -> CelBool)?;
    Ok(())
}

fn quantity(s: &CelString<'_>) -> Result<Quantity, ExecutionError> {
    Quantity::parse(s).map_err(|e| ExecutionError::function_error("quantity", e))
}

fn is_quantity(s: &CelString<'_>) -> CelBool {
    Quantity::parse(s).is_ok().into()
}

fn sign(q: &Quantity) -> CelInt {
    (q.value.m.signum() as i64).into()
}

fn is_integer(q: &Quantity) -> CelBool {
    q.as_i64().is_some().into()
}

fn as_integer(q: &Quantity) -> Result<CelInt, ExecutionError> {
    q.as_i64()
        .map(CelInt::from)
        .ok_or_else(|| ExecutionError::function_error("asInteger", "cannot convert value to integer"))
}

fn as_approximate_float(q: &Quantity) -> CelDouble {
    q.as_approximate_f64().into()
}

fn add(q: &Quantity, other: &Quantity) -> Result<Quantity, ExecutionError> {
    q.plus(other, false)
}

fn add_int(q: &Quantity, i: &CelInt) -> Result<Quantity, ExecutionError> {
    q.plus(&Quantity::int(*i.inner(), 0), false)
}

fn sub(q: &Quantity, other: &Quantity) -> Result<Quantity, ExecutionError> {
    q.plus(other, true)
}

fn sub_int(q: &Quantity, i: &CelInt) -> Result<Quantity, ExecutionError> {
    q.plus(&Quantity::int(*i.inner(), 0), true)
}

fn compare_to(q: &Quantity, other: &Quantity) -> CelInt {
    (q.value.compare(other.value) as i64).into()
}

fn is_greater_than(q: &Quantity, other: &Quantity) -> CelBool {
    (q.value.compare(other.value) == Ordering::Greater).into()
}

fn is_less_than(q: &Quantity, other: &Quantity) -> CelBool {
    (q.value.compare(other.value) == Ordering::Less).into()
}

#[cfg(test)]
mod tests {
    use super::{Decimal, Quantity, Repr};
    use crate::library::tests::{assert_error, assert_true};

    fn parsed(s: &str) -> (i128, i64, Repr) {
        let q = Quantity::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        (q.value.m, q.value.e, q.repr)
    }

    #[test]
    fn kubernetes_examples() {
        assert_true("quantity('1Gi').isGreaterThan(quantity('500Mi'))");
        assert_true("isQuantity('1.3G') && isQuantity('1.3Gi') && isQuantity('10000k')");
        assert_true("!isQuantity('1,3G') && !isQuantity('200K') && !isQuantity('Three')");
        assert_true("quantity('50000000G').isInteger() && quantity('50k').isInteger()");
        assert_true("!quantity('9999999999999999999999999999999999999G').isInteger()");
        assert_true("quantity('50k').asInteger() == 50000");
        assert_true("quantity('50k').sub(20000).asApproximateFloat() == 30000.0");
        assert_true("quantity('50k').add(quantity('20k')) == quantity('70k')");
        assert_true("quantity('50k').add(20) == quantity('50020')");
        assert_true("quantity('50k').sub(quantity('20k')) == quantity('30k')");
        assert_true("quantity('50k').add(20).sub(quantity('100k')).sub(-50000) == quantity('20')");
        assert_true("quantity('200M').compareTo(quantity('0.2G')) == 0");
        assert_true("quantity('50M').compareTo(quantity('50Mi')) == -1");
        assert_true("quantity('50Mi').compareTo(quantity('50M')) == 1");
        let q = |s: &str| format!("quantity('{s}')");
        for (a, b) in [("150Mi", "100Mi"), ("100M", "50M"), ("1", "999m"), ("-1m", "-1")] {
            let (a, b) = (q(a), q(b));
            assert_true(&format!("{a}.isGreaterThan({b}) && !{b}.isGreaterThan({a})"));
            assert_true(&format!(
                "{b}.isLessThan({a}) && !{a}.isLessThan({b}) && !{a}.isLessThan({a})"
            ));
        }
        assert_true("quantity('-1').sign() == -1 && sign(quantity('0')) == 0 && quantity('1m').sign() == 1");
        assert_error(
            "quantity('9999999999999999999999999999999999999G').asInteger()",
            "cannot convert value to integer",
        );
        assert_error("quantity('200K')", "unable to parse quantity's suffix");
        assert_error("quantity('Three')", "quantities must match the regular expression");
        assert_error("quantity('1.5.3')", "quantities must match the regular expression");
    }

    #[test]
    fn exact_values() {
        assert_true(
            "quantity('1Gi') == quantity('1073741824') && quantity('1Gi').compareTo(quantity('1073741824')) == 0",
        );
        assert_true("quantity('1') == quantity('1000m') && quantity('1k') != quantity('1Ki')");
        assert_true("quantity('1Ei') == quantity('1152921504606846976')");
        assert_true("quantity('8Ei') == quantity('9223372036854775807')"); // capped, as Kubernetes does
        assert_true("quantity('1e100').isGreaterThan(quantity('99999999999999999999E'))");
        assert_true(
            "quantity('1e3') == quantity('1k') && quantity('1E-3') == quantity('1m') && quantity('1e+3') == quantity('1k')",
        );
        assert_true("quantity('0.1n') == quantity('1n') && quantity('-0.1n') == quantity('-1n')"); // rounded up
        assert_true("type(quantity('1')) == type(quantity('2')) && type(quantity('1')) != string");
        assert_eq!(parsed("1.5Gi"), (1610612736, 0, Repr::Dec { exp: -9 }));
        assert_eq!(parsed("-1.5"), (-15, -1, Repr::Int { value: -15, scale: -1 }));
        assert_eq!(parsed("+.5k"), (5, 2, Repr::Int { value: 5, scale: 2 }));
        assert_eq!(parsed("5."), (5, 0, Repr::Int { value: 5, scale: 0 }));
        assert_eq!(parsed("1e-100"), (1, -9, Repr::Dec { exp: -9 }));
        assert_eq!(Decimal::new(1200, -3), Decimal { m: 12, e: -1 });
    }

    #[test]
    fn kubernetes_representation() {
        // `int64Amount` scale < 0, or an `inf.Dec`: not integers in Kubernetes
        assert_true("!quantity('1000m').isInteger() && !quantity('1.5Gi').isInteger()");
        assert_true("quantity('1Ti').isInteger() && !quantity('100Ti').isInteger()");
        assert_true("quantity('1k').add(quantity('1')).asInteger() == 1001");
        assert_true("!quantity('1').add(quantity('500m')).isInteger()");
        assert_true("quantity('1.5Gi').asApproximateFloat() > 1610612735.9");
        assert_true("quantity('1e400').asApproximateFloat() == double('Infinity')");
    }

    #[test]
    fn errors() {
        let bad = "|1.5.3|1 | 1|1e|1ee3|1Ki3|1mi|1e3e|--1|1e99999999999999999999|e-10|0x1|1_000";
        for bad in bad.split('|') {
            assert!(Quantity::parse(bad).is_err(), "{bad:?}");
        }
        let long = format!("quantity('1{}1')", "0".repeat(60));
        assert_error(&long, "more than 38 significant digits");
        assert_error(
            "quantity('1e100').add(quantity('1n'))",
            "more than 38 significant digits",
        );
        assert_true("quantity('1') != 1");
        assert_error("quantity(1)", "found no matching overload");
        // a quantity has no `Value` form: returning one is an error, not a panic
        assert!(crate::library::tests::eval("quantity('1')").is_err());
    }
}
