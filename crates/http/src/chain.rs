//! An error and its causes on one line. hyper's top-level messages alone say little
//! (`client error (Connect)`); the cause that matters (`Connection refused`, `invalid peer
//! certificate: UnknownIssuer`) is several sources down.

/// `err`, then each of its sources, joined by `: `; a source whose text is already on the line
/// (an error that shows its source in its own message, or a wrapper repeating it) is not repeated.
pub fn chain(err: &dyn std::error::Error) -> String {
    let mut parts = vec![err.to_string()];
    let mut cur = err.source();
    while let Some(e) = cur {
        let s = e.to_string();
        if !parts.contains(&s) {
            parts.push(s);
        }
        cur = e.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::chain;

    #[derive(Debug, thiserror::Error)]
    #[error("{text}")]
    struct Layer {
        text: &'static str,
        #[source]
        source: Option<Box<Layer>>,
    }

    fn layers(texts: &[&'static str]) -> Layer {
        let mut inner: Option<Box<Layer>> = None;
        for text in texts.iter().rev() {
            inner = Some(Box::new(Layer { text, source: inner }));
        }
        match inner {
            Some(top) => *top,
            None => Layer { text: "", source: None },
        }
    }

    #[test]
    fn every_cause_in_order_on_one_line() {
        let err = layers(&[
            "client error (Connect)",
            "tcp connect error",
            "Connection refused (os error 111)",
        ]);
        assert_eq!(
            chain(&err),
            "client error (Connect): tcp connect error: Connection refused (os error 111)"
        );
    }

    #[test]
    fn a_repeated_text_is_shown_once() {
        let err = layers(&["no answer", "no answer", "timed out", "no answer"]);
        assert_eq!(chain(&err), "no answer: timed out");
    }

    #[test]
    fn an_error_without_source_is_its_message() {
        let err = std::io::Error::other("closed");
        assert_eq!(chain(&err), "closed");
    }
}
