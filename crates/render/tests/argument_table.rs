//! docs/security.md's table of every tool invocation and argument names, for each row, the test
//! that attacks it. This walks the table: every row names a test, and that test exists in the file
//! the row says, so the table cannot claim a test nobody wrote (or one that was renamed away).

use std::path::PathBuf;

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn every_row_of_the_argument_table_names_a_test_that_exists() {
    let doc = std::fs::read_to_string(workspace().join("docs/security.md")).expect("docs/security.md");
    let start = doc.find("<!-- argument-table -->").expect("the table's start marker");
    let end = doc.find("<!-- /argument-table -->").expect("the table's end marker");
    let rows: Vec<&str> = doc[start..end]
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with('|') && !l.starts_with("| ---") && !l.starts_with("| invocation"))
        .collect();
    assert!(
        rows.len() >= 15,
        "the table lists every invocation: {} rows",
        rows.len()
    );
    for row in rows {
        let cells: Vec<&str> = row.trim_matches('|').split(" | ").map(str::trim).collect();
        assert_eq!(cells.len(), 5, "five columns: {row}");
        let test = cells[4].trim_matches('`');
        let (file, name) = test.split_once("::").unwrap_or_else(|| panic!("FILE::TEST in {row}"));
        let source = std::fs::read_to_string(workspace().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(
            source.contains(&format!("fn {name}(")),
            "{file} has no test named {name} (row: {row})"
        );
        assert!(
            !cells[3].is_empty(),
            "each row says how the argument stays a value: {row}"
        );
    }
}
