//! Every chart in the app, drawn on the server with plotters into SVG strings
//! that pages embed as they are (no chart code in the wasm client).
//!
//! One look for all of them: the colours of [`palette`] (the stylesheet's),
//! the title and the legend in a strip above the plot (a legend never covers
//! data), the time axis in UTC and the value axis named with its unit,
//! limits as dashed lines and events (429 penalties) as red marks on the
//! time axis.

use std::collections::{BTreeMap, HashMap};

use plotters::prelude::*;
use sluice_engine::quota::history::HistoryPoint;

const WIDTH: u32 = 760;
const HEIGHT: u32 = 280;
const FONT: &str = "sans-serif";

/// The app's colours (style/sluice.css uses the same).
pub mod palette {
    use plotters::style::RGBColor;

    pub const INK: RGBColor = RGBColor(0x1d, 0x23, 0x30);
    pub const MUTED: RGBColor = RGBColor(0x6b, 0x73, 0x85);
    pub const GRID: RGBColor = RGBColor(0xe3, 0xe6, 0xec);
    pub const ACCENT: RGBColor = RGBColor(0x25, 0x63, 0xeb);
    /// Granted, delivered: things that went well.
    pub const OK: RGBColor = RGBColor(0x15, 0x80, 0x3d);
    /// Refused, retried: things to watch.
    pub const WARN: RGBColor = RGBColor(0xa1, 0x62, 0x07);
    /// 429 penalties, failures.
    pub const BAD: RGBColor = RGBColor(0xb9, 0x1c, 0x1c);
    /// Series without a meaning of their own (one per rule), in this order.
    pub const SERIES: [RGBColor; 6] = [
        ACCENT,
        RGBColor(0x0e, 0x74, 0x90),
        RGBColor(0x7c, 0x3a, 0xed),
        RGBColor(0xc2, 0x41, 0x0c),
        RGBColor(0xbe, 0x18, 0x5d),
        RGBColor(0x4d, 0x7c, 0x0f),
    ];

    /// The `i`-th colour of [`SERIES`], repeating.
    pub fn series(i: usize) -> RGBColor {
        SERIES[i % SERIES.len()]
    }
}

/// One line of a chart: its legend name, colour and (Unix ms, value) points.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub name: String,
    pub color: RGBColor,
    pub points: Vec<(i64, f64)>,
}

/// A horizontal line across the plot, e.g. a limit.
#[derive(Clone, Debug, PartialEq)]
pub struct Guide {
    pub name: String,
    pub value: f64,
    pub color: RGBColor,
}

/// A chart over time: `[from_ms, to_ms]` on the x axis.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TimeChart {
    pub title: String,
    /// The value axis' name with its unit, e.g. "% of limit".
    pub unit: String,
    pub from_ms: i64,
    pub to_ms: i64,
    pub series: Vec<Series>,
    pub guides: Vec<Guide>,
    /// Instants marked on the time axis (red), with the legend's name for them.
    pub marks: Vec<i64>,
    pub marks_name: String,
    /// The value axis reaches at least this far (100 for a % of limit).
    pub min_top: f64,
}

/// One legend entry and how its swatch is drawn.
enum Swatch {
    Line(RGBColor),
    Dashed(RGBColor),
    Mark,
}

/// Rough width of a legend text, as plotters estimates it for SVG (it
/// draws a font size `s` at `s / 1.24` px: the sizes below are chosen for
/// 12 px legends and 11 px axis labels on the page).
fn text_width(text: &str) -> i32 {
    (text.chars().count() as f64 * 6.9).ceil() as i32
}

/// "14:05" (UTC) for an axis label.
fn clock_label(ms: &i64) -> String {
    let minutes = ms.div_euclid(60_000).rem_euclid(24 * 60);
    format!("{:02}:{:02}", minutes / 60, minutes % 60)
}

/// "12", "0.5", "1.2k" for a value axis label.
fn value_label(v: &f64) -> String {
    if v.abs() >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v.abs() >= 1000.0 {
        format!("{:.1}k", v / 1000.0)
    } else if v.fract().abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Draw `chart` as SVG; a failure is logged and gives an empty string (the
/// page then shows no chart rather than no page).
pub fn draw(chart: &TimeChart) -> String {
    draw_svg(chart).unwrap_or_else(|e| {
        tracing::error!(error = %e, title = %chart.title, "drawing a chart failed");
        String::new()
    })
}

fn draw_svg(c: &TimeChart) -> Result<String, String> {
    let err = |e: DrawingAreaErrorKind<_>| e.to_string();
    let mut legend: Vec<(String, Swatch)> = Vec::new();
    legend.extend(c.series.iter().map(|s| (s.name.clone(), Swatch::Line(s.color))));
    legend.extend(c.guides.iter().map(|g| (g.name.clone(), Swatch::Dashed(g.color))));
    if !c.marks_name.is_empty() {
        legend.push((c.marks_name.clone(), Swatch::Mark));
    }
    // Lay the legend out in rows under the title.
    let mut placed = Vec::with_capacity(legend.len());
    let (mut x, mut row) = ((c.title.chars().count() as f64 * 8.6) as i32 + 30, 0);
    for (name, swatch) in legend {
        let w = 26 + text_width(&name) + 18;
        if x + w > WIDTH as i32 - 10 && x > 10 {
            x = 10;
            row += 1;
        }
        placed.push((x, row, name, swatch));
        x += w;
    }
    let head = 32 + 20 * row;

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (top_strip, plot) = root.split_vertically(head);
        top_strip
            .draw(&Text::new(c.title.clone(), (10, 8), (FONT, 18).into_font().style(FontStyle::Bold).color(&palette::INK)))
            .map_err(err)?;
        let label = (FONT, 15).into_font().color(&palette::INK);
        for (x, row, name, swatch) in &placed {
            let y = 17 + 20 * row;
            match swatch {
                Swatch::Line(color) => top_strip
                    .draw(&PathElement::new(vec![(*x, y), (*x + 20, y)], color.stroke_width(3)))
                    .map_err(err)?,
                Swatch::Dashed(color) => {
                    for dash in [0, 8, 16] {
                        top_strip
                            .draw(&PathElement::new(vec![(*x + dash, y), (*x + dash + 5, y)], color.stroke_width(2)))
                            .map_err(err)?;
                    }
                }
                Swatch::Mark => top_strip
                    .draw(&TriangleMarker::new((*x + 10, y), 5, palette::BAD.filled()))
                    .map_err(err)?,
            }
            top_strip.draw(&Text::new(name.clone(), (*x + 26, y - 7), label.clone())).map_err(err)?;
        }

        let values = c.series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
        let top = values.chain(c.guides.iter().map(|g| g.value)).fold(c.min_top, f64::max);
        let top = if top > 0.0 { top * 1.12 } else { 1.0 };
        let to_ms = c.to_ms.max(c.from_ms + 1);
        let mut chart = ChartBuilder::on(&plot)
            .margin_left(6)
            .margin_right(18)
            .margin_bottom(4)
            .x_label_area_size(38)
            .y_label_area_size(58)
            .build_cartesian_2d(c.from_ms..to_ms, 0.0..top)
            .map_err(err)?;
        let axis_text = (FONT, 14).into_font().color(&palette::MUTED);
        chart
            .configure_mesh()
            .x_labels(7)
            .y_labels(5)
            .x_label_formatter(&clock_label)
            .y_label_formatter(&value_label)
            .x_desc("time (UTC)")
            .y_desc(c.unit.as_str())
            .label_style(axis_text.clone())
            .axis_desc_style((FONT, 15).into_font().color(&palette::MUTED))
            .axis_style(&palette::MUTED)
            .bold_line_style(&palette::GRID)
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(err)?;
        for g in &c.guides {
            chart
                .draw_series(DashedLineSeries::new([(c.from_ms, g.value), (to_ms, g.value)], 8, 5, g.color.stroke_width(2)))
                .map_err(err)?;
        }
        for s in &c.series {
            chart.draw_series(LineSeries::new(s.points.iter().copied(), s.color.stroke_width(2))).map_err(err)?;
        }
        for at in &c.marks {
            chart
                .draw_series([
                    PathElement::new(vec![(*at, 0.0), (*at, top)], palette::BAD.mix(0.35).stroke_width(1)),
                ])
                .map_err(err)?;
            chart.draw_series([TriangleMarker::new((*at, top * 0.97), 5, palette::BAD.filled())]).map_err(err)?;
        }
        if c.series.iter().all(|s| s.points.is_empty()) {
            let (w, h) = plot.dim_in_pixel();
            plot.draw(&Text::new("no samples in this period yet", (w as i32 / 2 - 80, h as i32 / 2), (FONT, 17).into_font().color(&palette::MUTED)))
                .map_err(err)?;
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// The per-account page's two charts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccountCharts {
    pub usage: String,
    pub penalties: String,
}

/// Per rule, one value per sampling slot (zero where the rule was idle);
/// `value` gives `None` for a rule it cannot place (its series stays empty).
fn per_rule(
    points: &[HistoryPoint],
    slots: &[(i64, i64)],
    value: impl Fn(&HistoryPoint) -> Option<f64>,
) -> Vec<(String, Vec<(i64, f64)>)> {
    let mut by_rule: BTreeMap<String, (bool, BTreeMap<i64, f64>)> = BTreeMap::new();
    for p in points {
        let entry = by_rule.entry(format!("{} ({})", p.rule.0, p.scope)).or_default();
        if let Some(v) = value(p) {
            entry.0 = true;
            entry.1.insert(p.at_ms, v);
        }
    }
    by_rule
        .into_iter()
        .map(|(name, (known, values))| {
            let points = if known {
                slots.iter().map(|(at, _)| (*at, values.get(at).copied().unwrap_or(0.0))).collect()
            } else {
                Vec::new()
            };
            (name, points)
        })
        .collect()
}

/// One account's usage as a share of each rule's limit (the limit a dashed
/// line at 100 %, 429 penalties marked on the same timeline), and its 429
/// penalties per minute. `limits`: permits per minute each rule allows, by
/// rule id; a rule without one (deleted since) is named but not drawn.
pub fn account_charts(
    points: &[HistoryPoint],
    slots: &[(i64, i64)],
    limits: &HashMap<String, f64>,
    from_ms: i64,
    to_ms: i64,
) -> AccountCharts {
    let usage = per_rule(points, slots, |p| {
        let limit = limits.get(&p.rule.0).copied().filter(|l| *l > 0.0)?;
        Some(100.0 * p.per_minute(p.grants) / limit)
    });
    let unknown: Vec<String> = usage.iter().filter(|(_, pts)| pts.is_empty()).map(|(n, _)| n.clone()).collect();
    let mut marks: Vec<i64> = points.iter().filter(|p| p.penalties > 0).map(|p| p.at_ms).collect();
    marks.dedup();
    let usage_chart = TimeChart {
        title: "Usage of the limit".into(),
        unit: "% of limit (permits / min)".into(),
        from_ms,
        to_ms,
        series: usage
            .into_iter()
            .enumerate()
            .map(|(i, (name, points))| {
                let name = if unknown.contains(&name) { format!("{name}: rule gone, not drawn") } else { name };
                Series { name, color: palette::series(i), points }
            })
            .collect(),
        guides: vec![Guide { name: "limit".into(), value: 100.0, color: palette::INK }],
        marks,
        marks_name: "429 penalty".into(),
        min_top: 100.0,
    };
    let penalties_chart = TimeChart {
        title: "429 penalties".into(),
        unit: "penalties / min".into(),
        from_ms,
        to_ms,
        series: per_rule(points, slots, |p| Some(p.per_minute(p.penalties)))
            .into_iter()
            .enumerate()
            .map(|(i, (name, points))| Series { name, color: palette::series(i), points })
            .collect(),
        ..TimeChart::default()
    };
    AccountCharts { usage: draw(&usage_chart), penalties: draw(&penalties_chart) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_engine::quota::RuleId;

    fn point(rule: &str, at_ms: i64, grants: u64, penalties: u64) -> HistoryPoint {
        HistoryPoint { rule: RuleId(rule.into()), scope: "s".into(), at_ms, span_ms: 60_000, grants, penalties, refusals: 0 }
    }

    #[test]
    fn usage_is_a_share_of_each_rules_limit_with_idle_slots_at_zero() {
        let points = [point("a", 60_000, 30, 0), point("b", 120_000, 5, 0)];
        let slots = [(60_000, 60_000), (120_000, 60_000), (180_000, 60_000)];
        let limits = HashMap::from([("a".to_owned(), 60.0)]);
        let series = per_rule(&points, &slots, |p| Some(100.0 * p.per_minute(p.grants) / limits.get(&p.rule.0).copied()?));
        assert_eq!(series.len(), 2);
        // 30 permits in a 1-minute slot against 60 / min: 50 %.
        assert_eq!(series[0], ("a (s)".to_owned(), vec![(60_000, 50.0), (120_000, 0.0), (180_000, 0.0)]));
        // No limit known for b: named, nothing drawn.
        assert_eq!(series[1], ("b (s)".to_owned(), vec![]));
        assert_eq!(clock_label(&(13 * 3_600_000 + 5 * 60_000)), "13:05");
    }

    #[test]
    fn the_usage_chart_draws_the_limit_the_penalties_and_a_legend_above_the_plot() {
        let points = [point("a", 60_000, 30, 2), point("b", 120_000, 5, 0)];
        let slots = [(60_000, 60_000), (120_000, 60_000), (180_000, 60_000)];
        let limits = HashMap::from([("a".to_owned(), 60.0)]);
        let charts = account_charts(&points, &slots, &limits, 0, 200_000);
        let svg = &charts.usage;
        assert!(svg.starts_with("<svg"), "{svg}");
        for text in ["a (s)", "b (s): rule gone, not drawn", "limit", "429 penalty", "% of limit (permits / min)", "time (UTC)"] {
            assert!(svg.contains(text), "{text} missing: {svg}");
        }
        // The limit line is in the ink colour, the penalty marks in red.
        assert!(svg.contains("#1D2330") || svg.contains("#1d2330"), "{svg}");
        assert!(svg.contains("#B91C1C") || svg.contains("#b91c1c"), "{svg}");
        // Every legend text sits in the strip above the plot (y < 30 + rows).
        let legend_y = svg.find(">\nlimit\n<").and_then(|at| svg[..at].rfind(" y=\"")).map(|y| &svg[y + 4..]).expect("limit text");
        let y: f64 = legend_y[..legend_y.find('"').expect("quote")].parse().expect("number");
        assert!(y < 40.0, "legend at y={y}");
        assert!(charts.penalties.contains("penalties / min"));
    }

    #[test]
    fn an_empty_chart_says_so() {
        let chart = TimeChart { title: "t".into(), unit: "u".into(), from_ms: 0, to_ms: 1, ..TimeChart::default() };
        assert!(draw(&chart).contains("no samples in this period yet"));
    }
}
