//! What every benchmark's report is: a title, paragraphs, the goals judged, sections of text
//! and tables, notes on reading it, and bar charts. Each benchmark keeps its measurements typed
//! and builds one [`Report`] from them; one Markdown writer and one SVG writer render every
//! report, so a new benchmark is a scenario and a few columns, not a new renderer.

mod markdown;
mod numbers;
mod svg;
mod tls;

use std::path::Path;

use crate::BenchError;

pub(crate) use numbers::{compact, median, micros, per, percent, small, thousands};
pub(crate) use tls::table as tls_table;
pub use tls::{Medians, TlsCost};

/// A report as written: `NAME.md`, and `NAME.svg` when it has charts.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The files' stem: `redis` writes `redis.md` and `redis.svg`.
    pub name: &'static str,
    /// The heading of the Markdown and the caption of the SVG.
    pub title: String,
    /// Paragraphs under the title: what ran, where, how long.
    pub intro: Vec<String>,
    /// The goals judged on the run, as a table; none for a benchmark held to none.
    pub goals: Vec<Goal>,
    /// The measurements, in order.
    pub sections: Vec<Section>,
    /// "How to read it": one bullet each.
    pub notes: Vec<String>,
    /// One panel each in the SVG, in order.
    pub charts: Vec<Chart>,
}

/// A heading, paragraphs, and a table under them.
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    /// The heading (a second-level one in Markdown).
    pub heading: String,
    /// Paragraphs before the table (Markdown inline syntax allowed).
    pub text: Vec<String>,
    /// The table; `None` for a section of text only.
    pub table: Option<Table>,
}

/// Rows of cells under named columns.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// The columns, left to right.
    pub columns: Vec<Column>,
    /// One cell per column each, already formatted.
    pub rows: Vec<Vec<String>>,
}

/// A column's name and how its cells line up.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    /// The header.
    pub name: String,
    /// Numbers to the right, words to the left.
    pub align: Align,
}

/// How a column's cells line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Words.
    Left,
    /// Numbers, so that their digits line up.
    Right,
}

/// Grouped bars on one scale: a group per label on the x axis, a bar per series in each.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// The panel's title.
    pub title: String,
    /// What the bars measure.
    pub y_label: String,
    /// The bars of every group, in order; the legend.
    pub series: Vec<String>,
    /// The groups, left to right.
    pub groups: Vec<Group>,
}

/// One group of bars: its label and a value per series (`None` leaves the bar out).
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// Under the group.
    pub label: String,
    /// One per series of the chart.
    pub values: Vec<Option<f64>>,
}

/// A goal of the benchmark and whether this run met it.
#[derive(Debug, Clone, PartialEq)]
pub struct Goal {
    /// The goal, in words.
    pub goal: String,
    /// What was measured.
    pub measured: String,
    /// `None` when the run did not measure what the goal needs.
    pub met: Option<bool>,
}

impl Goal {
    /// An over-grant test's goal, `goal` in words: met when it allowed at most `max_allowed`.
    pub(crate) fn over_grant(goal: String, max_allowed: u64, allowed: u64, errors: u64) -> Goal {
        let over = allowed as f64 / max_allowed as f64 - 1.0;
        Goal {
            goal,
            measured: format!("{allowed} allowed ({}), {errors} errors", percent(over)),
            met: Some(allowed <= max_allowed),
        }
    }

    /// A goal the run could not judge, and why.
    pub fn unmeasured(goal: impl Into<String>, why: impl Into<String>) -> Goal {
        Goal {
            goal: goal.into(),
            measured: why.into(),
            met: None,
        }
    }
}

impl Report {
    /// Writes `NAME.md` to `dir`, and `NAME.svg` when the report has charts, creating `dir`.
    pub fn write(&self, dir: &Path) -> Result<(), BenchError> {
        write(&dir.join(format!("{}.md", self.name)), &self.to_markdown())?;
        if !self.charts.is_empty() {
            write(&dir.join(format!("{}.svg", self.name)), &self.to_svg()?)?;
        }
        Ok(())
    }
}

impl Section {
    /// A section of paragraphs only.
    pub fn text(heading: impl Into<String>, text: Vec<String>) -> Section {
        Section {
            heading: heading.into(),
            text,
            table: None,
        }
    }

    /// A section holding `table` under `text`.
    pub fn table(heading: impl Into<String>, text: Vec<String>, table: Table) -> Section {
        Section {
            heading: heading.into(),
            text,
            table: Some(table),
        }
    }
}

impl Table {
    /// A table of these columns, `(name, align)` each, and these rows, a cell per column each.
    pub fn new(columns: &[(&str, Align)], rows: impl IntoIterator<Item = Vec<String>>) -> Table {
        let rows: Vec<Vec<String>> = rows.into_iter().collect();
        debug_assert!(rows.iter().all(|r| r.len() == columns.len()), "{rows:?}");
        Table {
            columns: columns
                .iter()
                .map(|&(name, align)| Column {
                    name: name.to_owned(),
                    align,
                })
                .collect(),
            rows,
        }
    }
}

fn write(path: &Path, text: &str) -> Result<(), BenchError> {
    let io = |source| BenchError::Write {
        path: path.to_owned(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    std::fs::write(path, text).map_err(io)
}
