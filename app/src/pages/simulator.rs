//! Simulator (SPEC §6, seed 003): K workers with their own local limits, or
//! one shared limiter, against an upstream limit with windows from second
//! zero. Shows when each permit is issued, how many requests the upstream
//! would refuse, the busiest window and the time to drain the queue, as a
//! table and a chart drawn on the server (plotters, SVG). The numbers come
//! from the engine's `simulate`, which runs the limiter's own decision code.

use leptos::prelude::*;
use leptos_meta::Title;
use serde::{Deserialize, Serialize};

use crate::auth::error_text;
use crate::format;
use crate::model::FieldError;

/// The largest queue the page simulates (the chart and table stay readable).
pub const MAX_QUEUE: u32 = 10_000;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerRow {
    pub worker: u32,
    /// Permit times in ms from second zero, in order.
    pub permits_ms: Vec<u64>,
    pub over_limit: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimulationView {
    pub sent: u32,
    pub over_limit: u32,
    /// Most permits issued inside one upstream window.
    pub busiest_window: u32,
    pub upstream_tokens: u32,
    pub window_ms: u64,
    pub drain_ms: u64,
    pub workers: Vec<WorkerRow>,
    /// The chart, an SVG document rendered on the server.
    pub chart_svg: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Simulated {
    Ok(SimulationView),
    Invalid(Vec<FieldError>),
}

#[cfg(feature = "ssr")]
mod server {
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
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(SimulationInput { upstream, workers, mode, queue, initial_pause })
    }

    pub fn engine_error(e: SimulationError) -> Vec<FieldError> {
        let field = match &e {
            SimulationError::Workers => "workers",
            SimulationError::Queue => "queue",
            SimulationError::Upstream(_) => "upstream_tokens",
            SimulationError::WorkerLimit(_) => "local_tokens",
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
}

/// Run the simulator. Every field arrives as typed; wrong ones come back as
/// messages next to their field.
#[server(prefix = "/ui", endpoint = "simulator/run")]
pub async fn run_simulation(
    #[server(default)] upstream_tokens: String,
    #[server(default)] window: String,
    #[server(default)] workers: String,
    #[server(default)] local_tokens: String,
    #[server(default)] queue: String,
    #[server(default)] pause: String,
    #[server(default)] algorithm: String,
    #[server(default)] mode: String,
) -> Result<Simulated, ServerFnError> {
    crate::ssr::auth::require(crate::auth::Role::Viewer).await?;
    let form = server::Form { upstream_tokens, window, workers, local_tokens, queue, pause, algorithm, mode };
    let input = match server::input(&form) {
        Ok(i) => i,
        Err(errors) => return Ok(Simulated::Invalid(errors)),
    };
    match sluice_engine::simulator::simulate(&input) {
        Ok(report) => Ok(Simulated::Ok(server::view(&input, &report))),
        Err(e) => Ok(Simulated::Invalid(server::engine_error(e))),
    }
}

fn secs(ms: u64) -> String {
    if ms % 1000 == 0 {
        format!("{} s", ms / 1000)
    } else {
        format!("{:.3} s", ms as f64 / 1000.0)
    }
}

#[component]
pub fn SimulatorPage() -> impl IntoView {
    let action = ServerAction::<RunSimulation>::new();
    let errors = move || match action.value().get() {
        Some(Ok(Simulated::Invalid(e))) => e,
        _ => Vec::new(),
    };
    let field = move |name: &'static str, label: &'static str, value: &'static str, hint: &'static str| {
        let message = move || errors().into_iter().find(|e| e.field == name).map(|e| e.message);
        view! {
            <label>
                {label}
                <input type="text" name=name value=value aria-invalid=move || message().is_some().to_string() data-testid=format!("sim-{name}") title=hint/>
                {move || message().map(|m| view! { <span class="field-error" data-testid=format!("sim-error-{name}")>{m}</span> })}
            </label>
        }
    };
    view! {
        <Title text="Simulator"/>
        <header class="page-header"><h1>"Schedule simulator"</h1></header>
        <p class="muted intro">
            "When does each request of a ready queue get its permit, and how many would the upstream refuse? "
            "Windows count from second zero; the simulation shows permit times, not responses (no latency, no connections)."
        </p>
        <section class="card">
            <ActionForm action=action attr:class="form grid sim-form" attr:data-testid="sim-form">
                {field("upstream_tokens", "Upstream limit (requests per window)", "3", "what the upstream allows per window")}
                {field("window", "Window", "10s", "e.g. 10s, 1m")}
                {field("workers", "Workers (K)", "4", "worker processes")}
                {field("local_tokens", "Local limit per worker (per window)", "3", "each worker's own limit; unused with a shared limiter")}
                {field("queue", "Queue (N requests ready)", "12", "requests ready at the start")}
                {field("pause", "Initial pause", "0s", "common pause before any worker starts")}
                <label>"Algorithm"
                    <select name="algorithm" data-testid="sim-algorithm">
                        <option value="fixed_window" selected=true>"fixed window"</option>
                        <option value="token_bucket">"token bucket"</option>
                    </select>
                </label>
                <fieldset class="choice">
                    <legend>"Workers are limited by"</legend>
                    <label class="check"><input type="radio" name="mode" value="local" checked=true data-testid="sim-mode-local"/>"their own local limits"</label>
                    <label class="check"><input type="radio" name="mode" value="shared" data-testid="sim-mode-shared"/>"one shared limiter (Sluice)"</label>
                </fieldset>
                <div class="form-actions">
                    <button type="submit" class="primary" disabled=move || action.pending().get()>"Simulate"</button>
                </div>
            </ActionForm>
        </section>
        {move || action.value().get().map(|r| match r {
            Err(e) => view! { <p class="notice bad" role="alert">{error_text(&e)}</p> }.into_any(),
            Ok(Simulated::Invalid(_)) => view! { <p class="notice bad" role="alert">"Fix the marked fields."</p> }.into_any(),
            Ok(Simulated::Ok(v)) => view! { <SimulationResult view=v/> }.into_any(),
        })}
    }
}

#[component]
fn SimulationResult(view: SimulationView) -> impl IntoView {
    let over_class = if view.over_limit > 0 { "big error" } else { "big" };
    let busiest_class = if view.busiest_window > view.upstream_tokens { "big error" } else { "big" };
    view! {
        <section class="cards" data-testid="sim-summary">
            <div class="card"><h2>"Sent"</h2><p class="big" data-testid="sim-sent">{view.sent}</p></div>
            <div class="card">
                <h2>"Busiest window"</h2>
                <p class=busiest_class data-testid="sim-busiest">{view.busiest_window}</p>
                <span class="muted">{format!("requests in one {} window; the upstream allows {}", format::duration_input(view.window_ms), view.upstream_tokens)}</span>
            </div>
            <div class="card"><h2>"Over the upstream limit"</h2><p class=over_class data-testid="sim-over">{view.over_limit}</p><span class="muted">"would get 429"</span></div>
            <div class="card"><h2>"Drain time"</h2><p class="big" data-testid="sim-drain">{secs(view.drain_ms)}</p><span class="muted">"until the last permit: how stale the last record gets"</span></div>
        </section>
        <section class="card chart" data-testid="sim-chart" inner_html=view.chart_svg></section>
        <section>
            <h2>"Permit times per worker"</h2>
            <table data-testid="sim-worker-table">
                <thead><tr><th>"Worker"</th><th>"Permits"</th><th>"Over limit"</th><th>"Permit times (from second zero)"</th></tr></thead>
                <tbody>
                    {view.workers.into_iter().map(|w| {
                        let shown: Vec<String> = w.permits_ms.iter().take(40).map(|&ms| secs(ms)).collect();
                        let more = w.permits_ms.len().saturating_sub(40);
                        view! {
                            <tr>
                                <td>{format!("#{}", w.worker)}</td>
                                <td>{w.permits_ms.len()}</td>
                                <td>{w.over_limit}</td>
                                <td class="times">{shown.join(", ")}{(more > 0).then(|| format!(" … and {more} more"))}</td>
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
        </section>
    }
}
