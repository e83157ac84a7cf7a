//! Small helpers on the text the planner reads and writes.

use jiff::Timestamp;

pub(crate) fn parse_time(text: Option<&str>) -> Option<Timestamp> {
    text.and_then(|t| t.parse().ok())
}

pub(super) fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_string(),
    }
}
