//! The Prometheus text format (0.0.4) of mapped counters: one family per name, its series
//! sorted; counters of one name and labels add up, as statsd_exporter adds the statsd counters
//! that map to one series.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The scrape's content type.
pub(super) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Counter families by name.
#[derive(Default)]
pub(super) struct Families {
    families: BTreeMap<String, Family>,
}

struct Family {
    help: Option<String>,
    series: BTreeMap<Vec<(String, String)>, u64>,
}

impl Families {
    /// Adds `value` to the series `name{labels}`.
    pub(super) fn add_counter(
        &mut self,
        name: String,
        mut labels: Vec<(String, String)>,
        help: Option<String>,
        value: u64,
    ) {
        labels.sort();
        let family = self.families.entry(name).or_insert_with(|| Family {
            help: None,
            series: BTreeMap::new(),
        });
        if family.help.is_none() {
            family.help = help;
        }
        let sum = family.series.entry(labels).or_insert(0);
        *sum = sum.saturating_add(value);
    }

    /// The text.
    pub(super) fn render(&self) -> String {
        let mut out = String::new();
        for (name, family) in &self.families {
            let help = family.help.as_deref().map_or_else(
                || "envoyproxy/ratelimit's statsd counter, mapped to Prometheus.".to_owned(),
                escape_help,
            );
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            for (labels, value) in &family.series {
                out.push_str(name);
                if !labels.is_empty() {
                    out.push('{');
                    for (i, (label, value)) in labels.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        let _ = write!(out, "{label}=\"{}\"", escape_value(value));
                    }
                    out.push('}');
                }
                let _ = writeln!(out, " {value}");
            }
        }
        out
    }
}

fn escape_help(help: &str) -> String {
    help.replace('\\', r"\\").replace('\n', r"\n")
}

fn escape_value(value: &str) -> String {
    value
        .replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', r"\n")
}

#[cfg(test)]
mod tests {
    use super::Families;

    #[test]
    fn series_of_one_name_add_up_and_values_are_escaped() {
        let mut f = Families::default();
        let l = |v: &str| {
            vec![
                ("key1".to_owned(), v.to_owned()),
                ("domain".to_owned(), "d".to_owned()),
            ]
        };
        f.add_counter("hits".to_owned(), l("a\"b\\c\nd"), None, 2);
        f.add_counter("hits".to_owned(), l("x"), Some("Help\nme".to_owned()), 1);
        f.add_counter("hits".to_owned(), l("x"), None, 3);
        f.add_counter("loads".to_owned(), Vec::new(), None, 0);
        assert_eq!(
            f.render(),
            "# HELP hits Help\\nme\n# TYPE hits counter\n\
             hits{domain=\"d\",key1=\"a\\\"b\\\\c\\nd\"} 2\n\
             hits{domain=\"d\",key1=\"x\"} 4\n\
             # HELP loads envoyproxy/ratelimit's statsd counter, mapped to Prometheus.\n\
             # TYPE loads counter\nloads 0\n"
        );
    }
}
