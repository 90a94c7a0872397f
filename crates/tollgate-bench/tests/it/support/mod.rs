//! What the benchmarks' tests check of every report the same way.

use std::path::Path;

use tollgate_bench::Report;

/// `doc` renders to a whole SVG with a titled panel per chart and `bars` bars in all, and
/// `dir` holds exactly its Markdown and its SVG.
pub fn written_with_its_chart(doc: &Report, dir: &Path, bars: usize) {
    let svg = doc.to_svg().unwrap();
    assert!(svg.starts_with("<svg "), "{svg}");
    assert!(svg.trim_end().ends_with("</svg>"));
    let drawn = doc
        .charts
        .iter()
        .flat_map(|c| &c.groups)
        .flat_map(|g| g.values.iter().flatten())
        .count();
    assert_eq!(drawn, bars, "{:?}", doc.charts);
    for chart in &doc.charts {
        assert!(svg.contains(&format!("\n{}\n", chart.title)), "{svg}");
    }
    let read = |ext: &str| std::fs::read_to_string(dir.join(format!("{}.{ext}", doc.name)));
    assert_eq!(read("md").unwrap(), doc.to_markdown());
    assert_eq!(read("svg").unwrap(), svg);
}
