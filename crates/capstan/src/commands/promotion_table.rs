//! The table of promotions that `capstan promote history` and `capstan app history` print.

use capstan_api::promotion::PromotionRecord;

/// A table of promotions (with a SERVICE column when `with_service`), header first: time, service,
/// from, to, the changes, the commit, who, and whether (and why) the checks were overridden.
pub(crate) fn promotion_rows(records: Vec<PromotionRecord>, with_service: bool) -> Vec<Vec<String>> {
    let header = ["TIME", "SERVICE", "FROM", "TO", "CHANGES", "COMMIT", "USER", "FORCED"];
    let mut rows = vec![
        header
            .iter()
            .filter(|h| with_service || **h != "SERVICE")
            .map(|h| h.to_string())
            .collect(),
    ];
    for r in records {
        let changes: Vec<String> = r
            .changes
            .iter()
            .map(|c| format!("{} {} → {}", c.field, c.old, c.new))
            .collect();
        let forced = if r.forced {
            format!("yes: {}", r.reason)
        } else {
            "no".into()
        };
        let mut row = vec![r.time];
        if with_service {
            row.push(r.service);
        }
        row.extend([
            r.from,
            r.to,
            changes.join(", "),
            r.commit.chars().take(12).collect(),
            r.user,
            forced,
        ]);
        rows.push(row);
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_api::promotion::FieldChange;

    #[test]
    fn promotion_rows_list_the_changes_and_why_forced() {
        let record = PromotionRecord {
            service: "payments".into(),
            from: "staging".into(),
            to: "production".into(),
            changes: vec![FieldChange {
                field: "imageTag".into(),
                old: "1.4.2".into(),
                new: "1.5.0".into(),
            }],
            commit: "0123456789abcdef".into(),
            user: "ops".into(),
            time: "2026-01-01T00:00:00Z".into(),
            forced: true,
            reason: "hotfix".into(),
            ..Default::default()
        };
        let rows = promotion_rows(vec![record.clone()], false);
        assert_eq!(rows[0], ["TIME", "FROM", "TO", "CHANGES", "COMMIT", "USER", "FORCED"]);
        assert_eq!(
            rows[1],
            [
                "2026-01-01T00:00:00Z",
                "staging",
                "production",
                "imageTag 1.4.2 → 1.5.0",
                "0123456789ab",
                "ops",
                "yes: hotfix"
            ]
        );
        assert_eq!(promotion_rows(vec![record], true)[1][1], "payments");
    }
}
