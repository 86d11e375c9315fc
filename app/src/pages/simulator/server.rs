//! The simulator's server side (ssr only): the form as typed becomes the
//! engine's input, every invalid field named at once.

use std::time::Duration;

use sluice_engine::quota::Limit;
use sluice_engine::simulator::{SimulationError, SimulationInput, SimulationReport, WorkerMode};

use super::*;
use crate::format::parse_duration_input;

pub struct Form {
    pub upstream_tokens: String,
    pub window: String,
    pub workers: String,
    pub local_tokens: String,
    pub queue: String,
    pub pause: String,
    pub algorithm: String,
    pub mode: String,
    pub important_every: String,
    /// The lanes checkbox: present (any value) when ticked.
    pub lanes: String,
}


/// Parse the form; every field that is wrong gets its own message.
pub fn input(form: &Form) -> Result<SimulationInput, Vec<FieldError>> {
    let mut errors = Vec::new();
    let mut number = |field: &str, text: &str, min: u32, max: u32| -> u32 {
        match text.trim().parse::<u32>() {
            Ok(n) if (min..=max).contains(&n) => n,
            _ => {
                errors.push(FieldError::new(field, format!("a whole number from {min} to {max}")));
                min
            }
        }
    };
    let upstream_tokens = number("upstream_tokens", &form.upstream_tokens, 1, 100_000);
    let workers = number("workers", &form.workers, 1, 1000);
    let local_tokens = number("local_tokens", &form.local_tokens, 1, 100_000);
    let queue = number("queue", &form.queue, 0, MAX_QUEUE);
    let important_every = match form.important_every.trim() {
        "" => 0,
        text => number("important_every", text, 0, MAX_QUEUE),
    };
    let mut duration = |field: &str, text: &str, allow_zero: bool| -> Duration {
        match parse_duration_input(text) {
            Ok(0) if !allow_zero => {
                errors.push(FieldError::new(field, "must be longer than zero"));
                Duration::from_secs(1)
            }
            Ok(ms) if ms > 86_400_000 => {
                errors.push(FieldError::new(field, "at most one day"));
                Duration::from_secs(1)
            }
            Ok(ms) => Duration::from_millis(ms),
            Err(m) => {
                errors.push(FieldError::new(field, m));
                Duration::from_secs(1)
            }
        }
    };
    let window = duration("window", &form.window, false);
    let initial_pause = duration("pause", &form.pause, true);
    let limit = |tokens: u32| match form.algorithm.as_str() {
        "token_bucket" => Ok(Limit::token_bucket(tokens, window, tokens)),
        "fixed_window" | "" => Ok(Limit::fixed_window(tokens, window)),
        _ => Err(()),
    };
    let (Ok(upstream), Ok(local)) = (limit(upstream_tokens), limit(local_tokens)) else {
        errors.push(FieldError::new("algorithm", "fixed window or token bucket"));
        return Err(errors);
    };
    // The shared limiter is configured with the upstream's own limit:
    // that is the point of sharing one.
    let mode = match form.mode.as_str() {
        "shared" => WorkerMode::SharedLimiter(upstream),
        "local" | "" => WorkerMode::LocalLimits(local),
        _ => {
            errors.push(FieldError::new("mode", "local limits or a shared limiter"));
            WorkerMode::LocalLimits(local)
        }
    };
    let lanes = !form.lanes.is_empty();
    if lanes && !matches!(mode, WorkerMode::SharedLimiter(_)) {
        errors.push(FieldError::new("lanes", "lanes need the shared limiter: local limits know no lanes"));
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(SimulationInput { upstream, workers, mode, queue, initial_pause, important_every, lanes })
}

pub fn engine_error(e: SimulationError) -> Vec<FieldError> {
    let field = match &e {
        SimulationError::Workers => "workers",
        SimulationError::Queue => "queue",
        SimulationError::Upstream(_) => "upstream_tokens",
        SimulationError::WorkerLimit(_) => "local_tokens",
        SimulationError::LanesNeedSharedLimiter => "lanes",
    };
    vec![FieldError::new(field, e.to_string())]
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

pub fn view(input: &SimulationInput, report: &SimulationReport) -> SimulationView {
    let workers = (0..input.workers)
        .map(|w| {
            let mine: Vec<_> = report.permits.iter().filter(|p| p.worker == w).collect();
            WorkerRow {
                worker: w + 1,
                permits_ms: mine.iter().map(|p| ms(p.at)).collect(),
                over_limit: mine.iter().filter(|p| p.over_limit).count() as u32,
            }
        })
        .collect();
    SimulationView {
        sent: report.permits.len() as u32,
        over_limit: report.over_limit,
        busiest_window: report.busiest_window(input.upstream.interval),
        upstream_tokens: input.upstream.tokens,
        window_ms: ms(input.upstream.interval),
        drain_ms: ms(report.drain_time),
        first_important_without_lanes_ms: report.first_important.map(|f| ms(f.without_lanes)),
        first_important_with_lanes_ms: report.first_important.and_then(|f| f.with_lanes).map(ms),
        workers,
        chart_svg: chart(input, report).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "drawing the simulator chart");
            String::new()
        }),
    }
}

/// Cumulative requests sent, accepted by the upstream and refused, over
/// time, against what the upstream allows.
fn chart(input: &SimulationInput, report: &SimulationReport) -> Result<String, Box<dyn std::error::Error>> {
    use plotters::prelude::*;

    let window = input.upstream.interval.as_secs_f64();
    let mut times: Vec<(f64, bool)> = report.permits.iter().map(|p| (p.at.as_secs_f64(), p.over_limit)).collect();
    times.sort_by(|a, b| a.0.total_cmp(&b.0));
    let end = times.last().map_or(0.0, |t| t.0).max(input.initial_pause.as_secs_f64()) + window;
    let sent_total = times.len() as u32;
    let allowance = |t: f64| -> u32 {
        let windows = (t / window).floor() as u32 + 1;
        input.upstream.tokens.saturating_mul(windows)
    };
    let y_max = sent_total.max(allowance(end).min(sent_total.max(input.upstream.tokens) * 2)).max(1) + 1;

    let step = |filter: &dyn Fn(bool) -> bool| -> Vec<(f64, u32)> {
        let mut out = vec![(0.0, 0)];
        let mut n = 0;
        for &(t, over) in &times {
            if filter(over) {
                out.push((t, n));
                n += 1;
                out.push((t, n));
            }
        }
        out.push((end, n));
        out
    };
    let mut allow = Vec::new();
    let mut t = 0.0;
    while t <= end {
        let a = allowance(t).min(y_max);
        allow.push((t, a));
        allow.push(((t + window).min(end), a));
        t += window;
    }

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760, 320)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(44)
            .build_cartesian_2d(0f64..end, 0u32..y_max)?;
        chart
            .configure_mesh()
            .x_desc("seconds from second zero")
            .y_desc("requests (cumulative)")
            .light_line_style(RGBColor(238, 240, 243))
            .draw()?;
        let grey = RGBColor(148, 163, 184);
        let teal = RGBColor(13, 148, 136);
        let red = RGBColor(220, 38, 38);
        let blue = RGBColor(37, 99, 235);
        chart
            .draw_series(LineSeries::new(allow, grey.stroke_width(2)))?
            .label("upstream allows")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], grey));
        chart
            .draw_series(LineSeries::new(step(&|_| true), blue.stroke_width(2)))?
            .label("sent")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], blue));
        chart
            .draw_series(LineSeries::new(step(&|over| !over), teal.stroke_width(2)))?
            .label("accepted")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], teal));
        chart
            .draw_series(LineSeries::new(step(&|over| over), red.stroke_width(2)))?
            .label("refused (429)")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], red));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.9))
            .border_style(RGBColor(226, 232, 240))
            .draw()?;
        root.present()?;
    }
    Ok(svg)
}
