//! Simulator: K workers with their own local limits, or
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
    /// When the first important request gets its permit, every request
    /// `normal` (queue order); `None` when no request is important.
    pub first_important_without_lanes_ms: Option<u64>,
    /// The same with important requests `high` and the rest `low` (shared
    /// limiter only).
    pub first_important_with_lanes_ms: Option<u64>,
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
mod server;

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
    #[server(default)] important_every: String,
    #[server(default)] lanes: String,
) -> Result<Simulated, ServerFnError> {
    crate::ssr::auth::require(crate::auth::Role::Viewer).await?;
    let form =
        server::Form { upstream_tokens, window, workers, local_tokens, queue, pause, algorithm, mode, important_every, lanes };
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
                {field("important_every", "Every n-th request is important (0: none)", "0", "e.g. 1000: a price correction among every thousand stock syncs")}
                <label class="check">
                    <input type="checkbox" name="lanes" value="on" data-testid="sim-lanes"/>
                    "Priority lanes: important requests high, the rest low (shared limiter)"
                    {move || errors().into_iter().find(|e| e.field == "lanes").map(|e| view! { <span class="field-error" data-testid="sim-error-lanes">{e.message}</span> })}
                </label>
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
            {view.first_important_without_lanes_ms.map(|without| view! {
                <div class="card" data-testid="sim-first-important">
                    <h2>"First important permit"</h2>
                    <p class="big" data-testid="sim-first-important-lanes">{view.first_important_with_lanes_ms.map_or_else(|| "—".to_owned(), secs)}</p>
                    <span class="muted">{format!("with lanes; without lanes (queue order): {}", secs(without))}</span>
                </div>
            })}
        </section>
        <section class="card chart" data-testid="sim-chart" inner_html=view.chart_svg></section>
        <section>
            <h2>"Permit times per worker"</h2>
            <div class="table-scroll" tabindex="0">
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
            </div>
        </section>
    }
}
