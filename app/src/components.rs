//! Small building blocks shared by pages.

use leptos::prelude::*;

use crate::model::ComponentState;

/// A coloured pill for the state of a dependency.
#[component]
pub fn StatePill(state: ComponentState) -> impl IntoView {
    let (class, text) = match &state {
        ComponentState::Up => ("pill ok", "up".to_owned()),
        ComponentState::NotConfigured => ("pill muted", "not configured".to_owned()),
        ComponentState::Down(why) => ("pill bad", format!("down: {why}")),
    };
    view! { <span class=class>{text}</span> }
}

/// "updated 3 s ago", counting up in the browser once the page is hydrated.
/// `tick` is a signal the page bumps every second.
#[component]
pub fn FreshnessClock(seconds: ReadSignal<u32>) -> impl IntoView {
    view! {
        <span class="freshness" data-testid="freshness">
            "live · updated " {move || seconds.get()} " s ago"
        </span>
    }
}
