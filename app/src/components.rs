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

/// A long id on one line: cut with an ellipsis when its box is narrow (the
/// whole id is in the tooltip and in the page's text), with a button that
/// copies it.
#[component]
pub fn CopyId(id: String, #[prop(optional)] testid: &'static str) -> impl IntoView {
    let (copied, set_copied) = signal(false);
    let text = id.clone();
    let copy = move |_| {
        #[cfg(feature = "hydrate")]
        if let Some(window) = web_sys::window() {
            let _ = window.navigator().clipboard().write_text(&text);
            set_copied.set(true);
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = (&text, set_copied);
    };
    view! {
        <span class="copy-id" data-testid=testid>
            <code class="id" title=id.clone()>{id.clone()}</code>
            <button type="button" class="copy" on:click=copy aria-label=format!("Copy {id}")>
                {move || if copied.get() { "Copied" } else { "Copy" }}
            </button>
        </span>
    }
}
