//! A plan as text for a terminal and as Markdown for a pull-request comment: a summary first, then
//! the details per Application (collapsible in Markdown), in the plan's stable order, cut at a size
//! bound with a note saying so. Everything taken from a repository (names, messages, diffs) is
//! escaped so it cannot break out of its table cell or code block.

use std::fmt::Write;

use crate::model::{Action, AppPlan, Change, Plan};

/// The most characters a Markdown report has (a forge's comment limit is 65,536).
pub const MARKDOWN_LIMIT: usize = 60_000;
/// The most characters of the summary tables; the rows beyond are counted in a note.
pub const SUMMARY_LIMIT: usize = 40_000;
/// The most names listed in one cell (an ApplicationSet's created or removed Applications).
pub const NAMES_IN_A_CELL: usize = 20;

/// At most [`NAMES_IN_A_CELL`] of `names`, and how many more.
fn some(names: &[String]) -> String {
    if names.len() <= NAMES_IN_A_CELL {
        return list(names);
    }
    format!(
        "{} and {} more",
        names[..NAMES_IN_A_CELL].join(", "),
        names.len() - NAMES_IN_A_CELL
    )
}

fn counts(app: &AppPlan) -> (usize, usize, usize) {
    let n = |a: &[Action]| app.objects.iter().filter(|o| a.contains(&o.action)).count();
    (
        n(&[Action::Create]),
        n(&[Action::Update]),
        n(&[Action::Delete, Action::RequiresPruning]),
    )
}

fn denials(app: &AppPlan) -> usize {
    app.verdicts
        .iter()
        .filter(|v| v.actions.iter().any(|a| a == "Deny"))
        .count()
}

fn warnings(app: &AppPlan) -> usize {
    app.verdicts
        .iter()
        .filter(|v| v.actions.iter().any(|a| a == "Warn"))
        .count()
}

/// Verdicts of policies that only audit.
fn audits(app: &AppPlan) -> usize {
    app.verdicts
        .iter()
        .filter(|v| !v.actions.iter().any(|a| a == "Deny" || a == "Warn"))
        .count()
}

/// The policies' cell of the summary.
fn policies_cell(app: &AppPlan) -> String {
    let mut parts = Vec::new();
    if denials(app) > 0 {
        parts.push(format!("**{} denied**", denials(app)));
    }
    if warnings(app) > 0 {
        parts.push(format!("{} warning(s)", warnings(app)));
    }
    if audits(app) > 0 {
        parts.push(format!("{} audited", audits(app)));
    }
    if parts.is_empty() {
        "passed".into()
    } else {
        parts.join(", ")
    }
}

fn change(app: &AppPlan) -> &'static str {
    match app.change {
        Change::Changed => "changed",
        Change::Unchanged => "unchanged",
        Change::Failed => "FAILED",
    }
}

fn action(a: Action) -> &'static str {
    match a {
        Action::Create => "create",
        Action::Update => "update",
        Action::Delete => "delete",
        Action::RequiresPruning => "requires pruning",
    }
}

/// The plan as text.
pub fn text(plan: &Plan) -> String {
    let mut out = String::new();
    if !plan.repo.is_empty() {
        let _ = writeln!(out, "Plan of {} at {}", plan.repo, plan.revision);
    }
    let _ = writeln!(
        out,
        "{:<32} {:<16} {:<10} {:>7} {:>7} {:>7} {:>7} {:>7}",
        "APPLICATION", "CLUSTER", "CHANGE", "CREATE", "UPDATE", "DELETE", "DENIED", "WARNED"
    );
    for app in &plan.applications {
        let (c, u, d) = counts(app);
        let _ = writeln!(
            out,
            "{:<32} {:<16} {:<10} {c:>7} {u:>7} {d:>7} {:>7} {:>7}",
            app.name,
            app.cluster,
            change(app),
            denials(app),
            warnings(app)
        );
    }
    for set in &plan.application_sets {
        let _ = writeln!(
            out,
            "ApplicationSet {}: creates {}, removes {}{}{}",
            set.name,
            list(&set.created),
            list(&set.removed),
            set.deletion_budget
                .as_ref()
                .map(|b| format!("; STOPPED: {b}"))
                .unwrap_or_default(),
            set.error.as_ref().map(|e| format!("; ERROR: {e}")).unwrap_or_default(),
        );
    }
    for app in &plan.applications {
        let _ = writeln!(out, "\n== {} ({})", app.name, change(app));
        if let Some(e) = &app.error {
            let _ = writeln!(out, "error: {e}");
        }
        for v in &app.verdicts {
            let _ = writeln!(
                out,
                "{} by policy {} on {}: {}",
                verdict_word(&v.actions),
                v.policy,
                v.object,
                v.message
            );
        }
        if let Some(b) = &app.deletion_budget {
            let _ = writeln!(out, "deletion budget: {b}");
        }
        for o in &app.objects {
            let _ = writeln!(out, "{} {}", action(o.action), o.key);
            for line in o.diff.lines() {
                let _ = writeln!(out, "    {line}");
            }
        }
    }
    out
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

fn verdict_word(actions: &[String]) -> &'static str {
    if actions.iter().any(|a| a == "Deny") {
        "DENIED"
    } else if actions.iter().any(|a| a == "Warn") {
        "warning"
    } else {
        "audit"
    }
}

/// `s` safe in a Markdown table cell or line: no line break, no pipe, no HTML, no backtick.
fn cell(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '|' => out.push_str("\\|"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '`' => out.push('\''),
            // No link, image or mention can be made of a name or a message.
            '[' | ']' | '(' | ')' | '!' | '*' | '_' | '~' | '#' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '@' => out.push_str("&#64;"),
            '\n' | '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// A fenced code block of `body` whose fence is longer than any run of backticks in it.
fn fenced(lang: &str, body: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in body.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat((longest + 1).max(3));
    format!("{fence}{lang}\n{body}\n{fence}\n")
}

/// The plan as Markdown for a pull-request comment, at most [`MARKDOWN_LIMIT`] characters.
pub fn markdown(plan: &Plan) -> String {
    let mut head = String::new();
    let _ = writeln!(
        head,
        "### Capstan plan: `{}` at `{}`\n",
        cell(&plan.repo),
        cell(&plan.revision)
    );
    let (changed, failed, denied) = (
        plan.applications.iter().filter(|a| a.change == Change::Changed).count(),
        plan.applications.iter().filter(|a| a.change == Change::Failed).count(),
        plan.applications.iter().filter(|a| a.denied()).count(),
    );
    let _ = writeln!(
        head,
        "{} Applications: {changed} changed, {failed} failed to render, {denied} denied by policy.\n",
        plan.applications.len()
    );
    let _ = writeln!(
        head,
        "| Application | Cluster | Change | Create | Update | Delete | Policies | Deletion budget |"
    );
    let _ = writeln!(head, "| --- | --- | --- | ---: | ---: | ---: | --- | --- |");
    for (i, app) in plan.applications.iter().enumerate() {
        if head.len() > SUMMARY_LIMIT {
            let _ = writeln!(
                head,
                "\n_{} more Application(s) are not listed, to keep this comment short: `capstan plan -o json` has them all._",
                plan.applications.len() - i
            );
            break;
        }
        let (c, u, d) = counts(app);
        let policies = policies_cell(app);
        let budget = if app.deletion_budget.is_some() {
            "**exceeded**"
        } else {
            "within"
        };
        let _ = writeln!(
            head,
            "| {} | {} | {} | {c} | {u} | {d} | {policies} | {budget} |",
            cell(&app.name),
            cell(&app.cluster),
            change(app)
        );
    }
    if !plan.application_sets.is_empty() {
        let _ = writeln!(head, "\n| ApplicationSet | Creates | Removes | Deletion budget |");
        let _ = writeln!(head, "| --- | --- | --- | --- |");
        for set in &plan.application_sets {
            let budget = match (&set.error, &set.deletion_budget) {
                (Some(e), _) => format!("error: {}", cell(e)),
                (None, Some(_)) => "**exceeded**".into(),
                (None, None) => "within".into(),
            };
            let _ = writeln!(
                head,
                "| {} | {} | {} | {budget} |",
                cell(&set.name),
                cell(&some(&set.created)),
                cell(&some(&set.removed))
            );
        }
    }
    let mut out = head;
    let mut cut = 0;
    for (i, app) in plan.applications.iter().enumerate() {
        if app.change == Change::Unchanged && app.verdicts.is_empty() {
            continue;
        }
        let details = details(app);
        if out.len() + details.len() + 200 > MARKDOWN_LIMIT {
            cut = plan.applications[i..]
                .iter()
                .filter(|a| a.change != Change::Unchanged || !a.verdicts.is_empty())
                .count();
            break;
        }
        out.push_str(&details);
    }
    if cut > 0 {
        let _ = writeln!(
            out,
            "\n_The details of {cut} more Application(s) are cut to keep this comment under {MARKDOWN_LIMIT} characters: `capstan plan -o json` has them all._"
        );
    }
    out
}

fn details(app: &AppPlan) -> String {
    let mut out = String::new();
    let (c, u, d) = counts(app);
    let _ = writeln!(
        out,
        "\n<details><summary>{}: {} ({c} create, {u} update, {d} delete)</summary>\n",
        cell(&app.name),
        change(app)
    );
    if let Some(e) = &app.error {
        let _ = writeln!(out, "Error: {}\n", cell(e));
    }
    for v in &app.verdicts {
        let _ = writeln!(
            out,
            "- **{}** by policy `{}` on `{}`: {}",
            verdict_word(&v.actions),
            cell(&v.policy),
            cell(&v.object),
            cell(&v.message)
        );
    }
    if let Some(b) = &app.deletion_budget {
        let _ = writeln!(out, "- **Deletion budget**: {}", cell(b));
    }
    for o in &app.objects {
        let _ = writeln!(out, "\n`{}` {}\n", cell(&o.key), action(o.action));
        if !o.diff.is_empty() {
            out.push_str(&fenced("diff", o.diff.trim_end()));
        }
    }
    out.push_str("\n</details>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ObjectPlan, VerdictPlan};

    fn app(name: &str, diff: &str) -> AppPlan {
        AppPlan {
            name: name.into(),
            project: "default".into(),
            cluster: "production".into(),
            namespace: "n".into(),
            change: Change::Changed,
            resolved: "abc".into(),
            error: None,
            objects: vec![ObjectPlan {
                key: "/ConfigMap/n/c".into(),
                action: Action::Update,
                diff: diff.into(),
            }],
            verdicts: vec![VerdictPlan {
                policy: "p".into(),
                object: "/ConfigMap/n/c".into(),
                actions: vec!["Deny".into()],
                message: "no | pipes <b>here</b>".into(),
            }],
            deletion_budget: None,
        }
    }

    #[test]
    fn markdown_escapes_what_comes_from_the_repository() {
        let plan = Plan {
            repo: "git://x/r".into(),
            revision: "pr-1".into(),
            applications: vec![app("a|b", "-x\n+```\n+y")],
            ..Default::default()
        };
        let md = markdown(&plan);
        assert!(
            md.contains("| a\\|b | production | changed | 0 | 1 | 0 | **1 denied** | within |"),
            "{md}"
        );
        assert!(md.contains("no \\| pipes &lt;b&gt;here&lt;/b&gt;"), "{md}");
        assert!(md.contains("````diff\n-x\n+```\n+y\n````"), "{md}");
    }

    #[test]
    fn markdown_is_cut_with_a_note() {
        let big = "+line\n".repeat(2_000);
        let plan = Plan {
            applications: (0..20).map(|i| app(&format!("app-{i:02}"), &big)).collect(),
            ..Default::default()
        };
        let md = markdown(&plan);
        assert!(md.len() <= MARKDOWN_LIMIT, "{}", md.len());
        assert!(md.contains("more Application(s) are cut"), "a note says so");
        assert!(md.contains("| app-19 |"), "the summary lists every Application");
    }
}
