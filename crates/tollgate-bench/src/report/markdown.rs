//! Every report as Markdown: the title, the intro, the goals as a table, each section, the
//! notes, and a link to the charts.

use super::Align::{Left, Right};
use super::{Goal, Report, Table};

impl Report {
    /// The report as GitHub-flavoured Markdown.
    pub fn to_markdown(&self) -> String {
        let mut md = format!("# {}\n\n", self.title);
        paragraphs(&mut md, &self.intro);
        if !self.goals.is_empty() {
            md.push_str("## Goals\n\n");
            table(&mut md, &goals(&self.goals));
        }
        for section in &self.sections {
            md.push_str(&format!("## {}\n\n", section.heading));
            paragraphs(&mut md, &section.text);
            if let Some(t) = &section.table {
                table(&mut md, t);
            }
        }
        if !self.notes.is_empty() {
            md.push_str("## How to read it\n\n");
            for note in &self.notes {
                md.push_str(&format!("- {note}\n"));
            }
            md.push('\n');
        }
        if !self.charts.is_empty() {
            md.push_str(&format!("![{}]({}.svg)\n", self.title, self.name));
        }
        md
    }
}

fn paragraphs(md: &mut String, text: &[String]) {
    for paragraph in text {
        md.push_str(paragraph);
        md.push_str("\n\n");
    }
}

/// The goals as a table; an unmet goal stands out in bold.
fn goals(goals: &[Goal]) -> Table {
    let rows = goals.iter().map(|g| {
        let met = match g.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "not measured",
        };
        vec![g.goal.clone(), g.measured.clone(), met.into()]
    });
    let columns = [("goal", Left), ("measured", Left), ("met?", Left)];
    Table::new(&columns, rows)
}

fn table(md: &mut String, table: &Table) {
    row(md, table.columns.iter().map(|c| cell(&c.name)));
    row(
        md,
        table.columns.iter().map(|c| match c.align {
            Left => "---".to_owned(),
            Right => "---:".to_owned(),
        }),
    );
    for cells in &table.rows {
        row(md, cells.iter().map(|c| cell(c)));
    }
    md.push('\n');
}

fn row(md: &mut String, cells: impl Iterator<Item = String>) {
    md.push('|');
    for cell in cells {
        md.push_str(&format!(" {cell} |"));
    }
    md.push('\n');
}

/// A cell's text: a `|` would end the cell and a line break the row.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Chart, Section};

    fn report() -> Report {
        let row = vec!["a|b".into(), "1,234".into()];
        let t = Table::new(&[("name", Left), ("count", Right)], [row]);
        Report {
            name: "sample",
            title: "Sample".into(),
            intro: vec!["First.".into(), "Second.".into()],
            goals: vec![
                Goal {
                    goal: "fast".into(),
                    measured: "2×".into(),
                    met: Some(true),
                },
                Goal {
                    goal: "exact".into(),
                    measured: "+1.00%".into(),
                    met: Some(false),
                },
                Goal::unmeasured("durable", "not run"),
            ],
            sections: vec![Section::table("Cells", vec!["Each one.".into()], t)],
            notes: vec!["**name**: what ran.".into()],
            charts: Vec::new(),
        }
    }

    #[test]
    fn tables_have_an_alignment_row_cells_are_escaped_and_goals_say_whether_met() {
        assert_eq!(
            report().to_markdown(),
            "# Sample\n\nFirst.\n\nSecond.\n\n## Goals\n\n\
             | goal | measured | met? |\n| --- | --- | --- |\n| fast | 2× | yes |\n\
             | exact | +1.00% | **no** |\n| durable | not run | not measured |\n\n\
             ## Cells\n\nEach one.\n\n| name | count |\n| --- | ---: |\n| a\\|b | 1,234 |\n\n\
             ## How to read it\n\n- **name**: what ran.\n\n"
        );
    }

    #[test]
    fn the_charts_are_linked_only_when_there_are_some() {
        let mut r = report();
        assert!(!r.to_markdown().contains("sample.svg"));
        r.goals.clear();
        r.charts.push(Chart {
            title: "t".into(),
            y_label: "y".into(),
            series: vec!["s".into()],
            groups: Vec::new(),
        });
        let md = r.to_markdown();
        assert!(md.trim_end().ends_with("![Sample](sample.svg)"), "{md}");
        assert!(!md.contains("## Goals"), "{md}");
    }
}
