//! Writing a string as a YAML scalar: plain when that reads back as the same string, else quoted.

use saphyr_parser::{Event, Parser, ScalarStyle};

/// Whether a plain scalar spelled `s` might resolve to something other than a string (null, a
/// boolean in YAML 1.1 or 1.2, an integer, a float, a sexagesimal number). Errs on the side of quoting: quoting a
/// string that did not need it is harmless, leaving `1.10` plain turns a tag into the number 1.1.
pub(crate) fn plain_may_be_typed(s: &str) -> bool {
    let lower = s.to_ascii_lowercase();
    const WORDS: [&str; 16] = [
        "", "~", "null", "true", "false", "yes", "no", "on", "off", "y", "n", ".inf", "-.inf", "+.inf", ".nan", "<<",
    ];
    if WORDS.contains(&lower.as_str()) || s.parse::<f64>().is_ok() {
        return true;
    }
    let unsigned = lower.strip_prefix(['+', '-']).unwrap_or(&lower);
    // YAML 1.1 and 1.2 integers in base 16, 8 and 2; 1.1 allows `_` between digits.
    if let Some(digits) = ["0x", "0o", "0b"].iter().find_map(|p| unsigned.strip_prefix(p)) {
        return digits.chars().all(|c| c.is_ascii_hexdigit() || c == '_');
    }
    if s.contains('_') && s.replace('_', "").parse::<f64>().is_ok() {
        return true;
    }
    // YAML 1.1 sexagesimal numbers: 1:20, 190:20:30.15
    unsigned.starts_with(|c: char| c.is_ascii_digit())
        && unsigned.contains(':')
        && unsigned
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, ':' | '_' | '.'))
}

/// Whether `s` can be written as a plain scalar in block context and read back as the string `s`.
pub(crate) fn plain_ok(s: &str) -> bool {
    if plain_may_be_typed(s) || s.trim() != s || s.chars().any(|c| c.is_control()) {
        return false;
    }
    if s.starts_with(|c: char| "-?:,[]{}#&*!|>'\"%@`".contains(c)) || s.ends_with(':') {
        return false;
    }
    if s.contains(": ") || s.contains(" #") || s.contains(|c: char| ",[]{}".contains(c)) {
        return false;
    }
    // Belt and braces: the parser must read `k: s` as one plain scalar `s`.
    let doc = format!("k: {s}\n");
    let scalars: Vec<_> = Parser::new_from_str(&doc)
        .filter_map(|e| match e {
            Ok((Event::Scalar(v, style, _, _), _)) => Some(Ok((v.into_owned(), style))),
            Ok(_) => None,
            Err(e) => Some(Err(e)),
        })
        .collect();
    matches!(scalars.as_slice(), [Ok((k, _)), Ok((v, ScalarStyle::Plain))] if k == "k" && v == s)
}

/// `s` as a YAML double-quoted scalar (JSON's escapes are a subset of YAML's).
pub(crate) fn double_quoted(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

/// `s` as a YAML single-quoted scalar, if it has no characters single quotes cannot hold on one line.
pub(crate) fn single_quoted(s: &str) -> Option<String> {
    (!s.chars().any(|c| c.is_control())).then(|| format!("'{}'", s.replace('\'', "''")))
}

/// `s` as a scalar in the style the old value had, where that style can hold it safely.
pub(crate) fn render(s: &str, style: ScalarStyle) -> String {
    match style {
        ScalarStyle::Plain if plain_ok(s) => s.to_string(),
        ScalarStyle::SingleQuoted => single_quoted(s).unwrap_or_else(|| double_quoted(s)),
        _ => double_quoted(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_booleans_and_nulls_are_quoted() {
        for typed in [
            "1.10", "1", "0x1F", "1e3", "1_000", "1:20", "yes", "Off", "null", "~", "", ".inf", "-0x1f", "0o17",
        ] {
            assert!(!plain_ok(typed), "{typed}");
            assert_eq!(render(typed, ScalarStyle::Plain), format!("\"{typed}\""));
        }
        for plain in [
            "1.10.3",
            "1.2.3-rc",
            "v1.10",
            "1.10-alpha",
            "nginx",
            "sha-abc123",
            "registry.example/app:1.2",
        ] {
            assert!(plain_ok(plain), "{plain}");
        }
        for unsafe_plain in ["a: b", "x #y", "- a", "*ref", "{a}", " lead", "trail:", "a\nb"] {
            assert!(!plain_ok(unsafe_plain), "{unsafe_plain}");
        }
    }

    #[test]
    fn the_old_quoting_style_is_kept() {
        assert_eq!(render("it's", ScalarStyle::SingleQuoted), "'it''s'");
        assert_eq!(render("a\"b", ScalarStyle::DoubleQuoted), r#""a\"b""#);
        assert_eq!(render("a\nb", ScalarStyle::SingleQuoted), r#""a\nb""#);
        assert_eq!(render("1.2.3-rc", ScalarStyle::Plain), "1.2.3-rc");
    }
}
