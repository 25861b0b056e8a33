//! Health of Gateway API objects (`gateway.networking.k8s.io`): GatewayClass, Gateway and the routes
//! HTTPRoute, GRPCRoute, TLSRoute, TCPRoute and UDPRoute, read from their `Accepted`, `ResolvedRefs` and
//! `Programmed` conditions.
//!
//! Upstream rules followed: Argo CD `resource_customizations/gateway.networking.k8s.io/GatewayClass/health.lua`,
//! `.../Gateway/health.lua`, `.../HTTPRoute/health.lua` (also used here for GRPCRoute, as upstream's
//! newer GRPCRoute check is "consistent with HTTPRoute", and for TCPRoute and UDPRoute, which upstream
//! has no check for) and `.../TLSRoute/health.lua`.

use serde_json::Value;

use crate::Health;
use crate::json::{
    Condition, Malformed, Verdict, conditions_in, find, int_at, status_conditions, status_object, str_at,
};

/// GatewayClass: the first `Accepted` condition of the current generation.
pub(crate) fn gateway_class(obj: &Value) -> Verdict {
    const WAITING: &str = "Waiting for GatewayClass status";
    let generation = int_at(obj, &["metadata", "generation"]);
    for c in status_conditions(obj)?.unwrap_or_default() {
        if c.type_ != "Accepted" {
            continue;
        }
        if let (Some(g), Some(o)) = (generation, c.observed_generation)
            && g != o
        {
            continue;
        }
        return Ok(if c.is_true() {
            Health::healthy(c.message_or("GatewayClass is accepted"))
        } else if c.is_false() {
            Health::degraded(c.message_or("GatewayClass is not accepted"))
        } else {
            Health::progressing(c.message_or(WAITING))
        });
    }
    Ok(Health::progressing(WAITING))
}

/// The verdict of one condition list (the Gateway's, a listener's, a route parent's), if it decides:
/// ResolvedRefs False, then Accepted False are Degraded; Programmed not True is Progressing.
fn failing_or_programming(conditions: &[Condition<'_>], programming: &str) -> Option<Health> {
    for type_ in ["ResolvedRefs", "Accepted"] {
        if let Some(c) = conditions.iter().find(|c| c.type_ == type_ && c.is_false()) {
            return Some(Health::degraded(c.message_or(&format!("Failed condition: {type_}"))));
        }
    }
    conditions
        .iter()
        .find(|c| c.type_ == "Programmed" && !c.is_true())
        .map(|c| Health::progressing(c.message_or(programming)))
}

fn prefixed(prefix: &str, h: Health) -> Health {
    Health::new(h.code, format!("{prefix}{}", h.message))
}

/// Gateway: its own conditions, then each listener's; Healthy once it reports any of them.
pub(crate) fn gateway(obj: &Value) -> Verdict {
    let Some(status) = status_object(obj)? else {
        return Ok(Health::progressing("Waiting for Gateway status"));
    };
    let own = status_conditions(obj)?;
    if let Some(h) = own
        .as_deref()
        .and_then(|c| failing_or_programming(c, "Gateway is still being programmed"))
    {
        return Ok(h);
    }
    let listeners = match status.get("listeners") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Array(l)) => l.as_slice(),
        Some(_) => return Err(Malformed("status.listeners")),
    };
    for listener in listeners {
        let conditions =
            conditions_in(listener.get("conditions"), "status.listeners[].conditions")?.unwrap_or_default();
        if let Some(h) = failing_or_programming(&conditions, "Listener is still being programmed") {
            return Ok(prefixed("Listener: ", h));
        }
    }
    Ok(if own.is_some() || !listeners.is_empty() {
        Health::healthy("Gateway is healthy")
    } else {
        Health::progressing("Waiting for Gateway status")
    })
}

/// The route kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RouteKind {
    Http,
    Grpc,
    Tls,
    Tcp,
    Udp,
}

impl RouteKind {
    fn name(self) -> &'static str {
        match self {
            RouteKind::Http => "HTTPRoute",
            RouteKind::Grpc => "GRPCRoute",
            RouteKind::Tls => "TLSRoute",
            RouteKind::Tcp => "TCPRoute",
            RouteKind::Udp => "UDPRoute",
        }
    }
}

/// One entry of `status.parents`.
struct Parent<'a> {
    name: &'a str,
    conditions: Vec<Condition<'a>>,
}

/// A route: judged per parent Gateway, skipping parents whose conditions are about an older
/// generation of the route.
pub(crate) fn route(obj: &Value, kind: RouteKind) -> Verdict {
    let waiting = || Health::progressing(format!("Waiting for {} status", kind.name()));
    let Some(status) = status_object(obj)? else {
        return Ok(waiting());
    };
    let parents = match status.get("parents") {
        None | Some(Value::Null) => return Ok(waiting()),
        Some(Value::Array(p)) => p,
        Some(_) => return Err(Malformed("status.parents")),
    };
    let mut read = Vec::with_capacity(parents.len());
    for p in parents {
        let conditions = conditions_in(p.get("conditions"), "status.parents[].conditions")?.unwrap_or_default();
        read.push(Parent {
            name: str_at(p, &["parentRef", "name"]).unwrap_or(""),
            conditions,
        });
    }
    let generation = int_at(obj, &["metadata", "generation"]);
    if kind == RouteKind::Tls {
        return Ok(tls_route(&read, generation).unwrap_or_else(waiting));
    }
    // HTTPRoute: a parent is current when any of its conditions observed this generation.
    let current =
        |p: &Parent<'_>| generation.is_none_or(|g| p.conditions.iter().any(|c| c.observed_generation == Some(g)));
    for p in read.iter().filter(|p| current(p)) {
        if let Some(h) = failing_or_programming(&p.conditions, "Route is still being programmed") {
            return Ok(prefixed(&format!("Parent {}: ", p.name), h));
        }
    }
    if read.iter().any(|p| !p.conditions.is_empty() && current(p)) {
        return Ok(Health::healthy(format!("{} is healthy", kind.name())));
    }
    Ok(waiting())
}

/// TLSRoute: a parent is current unless one of its conditions observed another generation; Healthy
/// needs a parent with Accepted and ResolvedRefs both True.
fn tls_route(parents: &[Parent<'_>], generation: Option<i64>) -> Option<Health> {
    let current = |p: &Parent<'_>| {
        generation.is_none_or(|g| {
            !p.conditions.is_empty()
                && p.conditions
                    .iter()
                    .all(|c| c.observed_generation.is_none_or(|o| o == g))
        })
    };
    let mut programming = None;
    let mut healthy = false;
    let mut waiting = None;
    for p in parents.iter().filter(|p| !p.conditions.is_empty() && current(p)) {
        let prefix = format!("Parent {}: ", p.name);
        for type_ in ["ResolvedRefs", "Accepted"] {
            if let Some(c) = find(&p.conditions, type_).filter(|c| c.is_false()) {
                return Some(Health::degraded(format!(
                    "{prefix}{}",
                    c.message_or(&format!("Failed condition: {type_}"))
                )));
            }
        }
        let is_true = |t: &str| find(&p.conditions, t).is_some_and(|c| c.is_true());
        if let Some(c) = find(&p.conditions, "Programmed").filter(|c| !c.is_true()) {
            programming.get_or_insert_with(|| format!("{prefix}{}", c.message_or("Route is still being programmed")));
        } else if is_true("Accepted") && is_true("ResolvedRefs") {
            healthy = true;
        } else {
            waiting.get_or_insert_with(|| format!("{prefix}Waiting for TLSRoute conditions"));
        }
    }
    if let Some(m) = programming {
        Some(Health::progressing(m))
    } else if healthy {
        Some(Health::healthy("TLSRoute is healthy"))
    } else {
        waiting.map(Health::progressing)
    }
}

#[cfg(test)]
mod tests;
