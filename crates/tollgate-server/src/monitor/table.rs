//! What `tollgate top` shows, and the text of it: a line per policy (its limit and its
//! decisions per second, when the server says how many it made) and under it its top denied
//! keys, each count with its error bound.

use std::fmt::Write;

/// One policy's, domain's or the inline summary's lines.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Row {
    /// `api`, `(inline)`, or `domain d`.
    pub(super) name: String,
    /// `3/1h`; empty where there is none to show.
    pub(super) limit: String,
    /// Allowed and denied decisions per second, since the last refresh.
    pub(super) rates: Option<(f64, f64)>,
    /// The top denied keys: the key, its count, its error bound.
    pub(super) keys: Vec<(String, u64, u64)>,
}

/// A whole screen.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Screen {
    /// The server.
    pub(super) url: String,
    /// `1m` or `1h`.
    pub(super) window: String,
    /// The lines.
    pub(super) rows: Vec<Row>,
    /// What could not be shown, and why.
    pub(super) notes: Vec<String>,
}

const NAME: usize = 44;
const LIMIT: usize = 16;

/// The text of `screen`, every line at most 90 columns wide.
pub(super) fn render(screen: &Screen) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "tollgate top  {}  window {}  (every 1 s, q quits)",
        screen.url, screen.window
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<NAME$} {:<LIMIT$} {:>12} {:>12}",
        "POLICY / TOP DENIED KEY", "LIMIT", "ALLOWED/s", "DENIED/s"
    );
    for row in &screen.rows {
        let (allowed, denied) = match row.rates {
            Some((a, d)) => (format!("{a:.1}"), format!("{d:.1}")),
            None => ("-".to_owned(), "-".to_owned()),
        };
        let _ = writeln!(
            out,
            "{:<NAME$} {:<LIMIT$} {allowed:>12} {denied:>12}",
            clip(&row.name, NAME),
            clip(&row.limit, LIMIT)
        );
        for (key, count, error) in &row.keys {
            let _ = writeln!(
                out,
                "  {:<width$} {:>LIMIT$} {:>12}",
                clip(&printable(key), NAME - 2),
                format!("denied {count}"),
                format!("±{error}"),
                width = NAME - 2
            );
        }
    }
    for note in &screen.notes {
        let _ = writeln!(out, "\n{note}");
    }
    out
}

/// `text` cut to `width` characters, the cut marked.
fn clip(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(width - 1).collect();
    cut.push('…');
    cut
}

/// `key` with its control characters (an Envoy key's separators, an escape sequence a client
/// sent) shown escaped rather than sent to the terminal.
fn printable(key: &str) -> String {
    key.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{Row, Screen, render};

    #[test]
    fn a_screen_lists_each_policy_then_its_keys_with_their_error_and_escapes_control_bytes() {
        let screen = Screen {
            url: "http://127.0.0.1:9090".to_owned(),
            window: "1m".to_owned(),
            rows: vec![
                Row {
                    name: "api".to_owned(),
                    limit: "3/1h".to_owned(),
                    rates: Some((1.25, 0.5)),
                    keys: vec![("mallory".to_owned(), 7, 0)],
                },
                Row {
                    name: "domain d".to_owned(),
                    limit: String::new(),
                    rates: None,
                    keys: vec![("k\u{1f}v\u{1e}\u{1b}[2J".to_owned(), 3, 1)],
                },
            ],
            notes: vec!["rates: GET /v1/status is not served".to_owned()],
        };
        let text = render(&screen);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("window 1m"));
        assert!(lines[3].starts_with("api ") && lines[3].contains("3/1h"));
        assert!(
            lines[3].trim_end().ends_with("1.2          0.5"),
            "{}",
            lines[3]
        );
        assert!(lines[4].starts_with("  mallory") && lines[4].contains("denied 7"));
        assert!(lines[4].trim_end().ends_with("±0"));
        assert!(lines[5].contains(" -"));
        assert!(
            lines[6].contains("k\\u{1f}v\\u{1e}\\u{1b}[2J"),
            "{}",
            lines[6]
        );
        assert!(!text.contains('\u{1b}'));
        assert!(text.lines().all(|l| l.chars().count() <= 90));
    }
}
