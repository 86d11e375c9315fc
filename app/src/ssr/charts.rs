//! Charts drawn on the server with plotters into SVG strings, which the pages
//! embed as they are (no chart code in the wasm client).

use std::collections::BTreeMap;

use plotters::prelude::*;
use sluice_engine::quota::history::HistoryPoint;

const WIDTH: u32 = 760;
const HEIGHT: u32 = 260;

/// One line of a chart: a name for the legend and (Unix ms, value) points.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(i64, f64)>,
}

/// The per-account page's two charts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccountCharts {
    pub usage: String,
    pub penalties: String,
}

/// "14:05" (UTC) for an axis label.
fn clock_label(ms: &i64) -> String {
    let minutes = ms.div_euclid(60_000).rem_euclid(24 * 60);
    format!("{:02}:{:02}", minutes / 60, minutes % 60)
}

/// A line chart over `[from_ms, to_ms]`; an empty chart says so.
pub fn line_chart(title: &str, y_desc: &str, from_ms: i64, to_ms: i64, series: &[Series]) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let top = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(0.0_f64, f64::max);
        let top = if top > 0.0 { top * 1.15 } else { 1.0 };
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 15))
            .margin(10)
            .x_label_area_size(28)
            .y_label_area_size(48)
            .build_cartesian_2d(from_ms..to_ms.max(from_ms + 1), 0.0..top)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_labels(7)
            .y_labels(5)
            .x_label_formatter(&clock_label)
            .y_desc(y_desc)
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(|e| e.to_string())?;
        if series.iter().all(|s| s.points.is_empty()) {
            root.draw(&Text::new("no samples in this period yet", (WIDTH as i32 / 2 - 90, HEIGHT as i32 / 2), ("sans-serif", 14)))
                .map_err(|e| e.to_string())?;
        }
        for (i, s) in series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(s.points.iter().copied(), color.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(s.name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2)));
        }
        if !series.is_empty() {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK.mix(0.3))
                .draw()
                .map_err(|e| e.to_string())?;
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// Per rule, one value per sampling slot (zero where the rule was idle).
fn per_rule(
    points: &[HistoryPoint],
    slots: &[(i64, i64)],
    value: impl Fn(&HistoryPoint) -> f64,
) -> Vec<Series> {
    let mut by_rule: BTreeMap<String, BTreeMap<i64, f64>> = BTreeMap::new();
    for p in points {
        by_rule.entry(format!("{} ({})", p.rule.0, p.scope)).or_default().insert(p.at_ms, value(p));
    }
    by_rule
        .into_iter()
        .map(|(name, values)| Series {
            name,
            points: slots.iter().map(|(at, _)| (*at, values.get(at).copied().unwrap_or(0.0))).collect(),
        })
        .collect()
}

/// Usage (permits per minute) and 429 penalties of one account's rules.
pub fn account_charts(points: &[HistoryPoint], slots: &[(i64, i64)], from_ms: i64, to_ms: i64) -> AccountCharts {
    let draw = |title: &str, y: &str, series: Vec<Series>| {
        line_chart(title, y, from_ms, to_ms, &series).unwrap_or_else(|e| {
            tracing::error!(error = %e, "drawing a chart failed");
            String::new()
        })
    };
    AccountCharts {
        usage: draw("Usage", "permits / min", per_rule(points, slots, |p| p.per_minute(p.grants))),
        penalties: draw("429 penalties", "penalties", per_rule(points, slots, |p| p.penalties as f64)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_engine::quota::RuleId;

    #[test]
    fn charts_are_svg_with_one_line_per_rule_and_zero_filled_gaps() {
        let point = |rule: &str, at_ms, grants| HistoryPoint {
            rule: RuleId(rule.into()),
            scope: "s".into(),
            at_ms,
            span_ms: 60_000,
            grants,
            penalties: 0,
            refusals: 0,
        };
        let points = [point("a", 60_000, 30), point("b", 120_000, 5)];
        let slots = [(60_000, 60_000), (120_000, 60_000), (180_000, 60_000)];
        let series = per_rule(&points, &slots, |p| p.per_minute(p.grants));
        assert_eq!(series.len(), 2);
        assert_eq!(series[0].points, vec![(60_000, 30.0), (120_000, 0.0), (180_000, 0.0)]);
        let charts = account_charts(&points, &slots, 0, 200_000);
        assert!(charts.usage.starts_with("<svg"), "{}", charts.usage);
        assert!(charts.usage.contains("a (s)") && charts.usage.contains("b (s)"));
        assert_eq!(clock_label(&(13 * 3_600_000 + 5 * 60_000)), "13:05");
    }
}
