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
        printable(&screen.url),
        printable(&screen.window)
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
            clip(&printable(&row.name), NAME),
            clip(&printable(&row.limit), LIMIT)
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
        let _ = writeln!(out, "\n{}", printable(note));
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

/// `text` from the server (a key, a policy's or domain's name, an error's detail) with its
/// control characters (an Envoy key's separators, an escape sequence a client sent) and its
/// format characters (bidirectional overrides, zero-width ones: a key made to look like
/// another) shown escaped rather than sent to the terminal.
pub(super) fn printable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() || is_format(c) {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Whether `c` is in Unicode's format category (Cf), as of Unicode 16.
fn is_format(c: char) -> bool {
    matches!(
        u32::from(c),
        0xAD | 0x600..=0x605
            | 0x61C
            | 0x6DD
            | 0x70F
            | 0x890..=0x891
            | 0x8E2
            | 0x180E
            | 0x200B..=0x200F
            | 0x202A..=0x202E
            | 0x2060..=0x2064
            | 0x2066..=0x206F
            | 0xFEFF
            | 0xFFF9..=0xFFFB
            | 0x110BD
            | 0x110CD
            | 0x13430..=0x1343F
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0xE0001
            | 0xE0020..=0xE007F
    )
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
                    name: "domain d\u{202e}".to_owned(),
                    limit: String::new(),
                    rates: None,
                    keys: vec![("k\u{1f}v\u{1e}\u{1b}[2J".to_owned(), 3, 1)],
                },
            ],
            notes: vec!["rates: GET /v1/status is not served\u{1b}[2J".to_owned()],
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
        assert!(!text.contains('\u{202e}') && text.contains("d\\u{202e}"));
        assert!(text.lines().all(|l| l.chars().count() <= 90));
    }
}
