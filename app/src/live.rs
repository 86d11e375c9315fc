//! Live data from a server-sent-events stream, for pages that update without
//! a reload. In the browser (`hydrate`) [`use_live`] opens an `EventSource`,
//! closes it while the tab is hidden (`visibilitychange`) and reopens it when
//! the tab is shown again; on the server it does nothing, so the page's
//! server-rendered numbers stand until the wasm client takes over.

use leptos::prelude::*;

/// Where a live page's numbers come from right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LiveState {
    /// Server-rendered numbers; no stream (yet, or no JavaScript).
    Static,
    /// Opening the stream.
    Connecting,
    /// Receiving updates.
    Live,
    /// The tab is hidden; the stream is closed until it is shown again.
    Paused,
    /// The stream broke; the browser retries by itself.
    Reconnecting,
}

impl LiveState {
    pub fn as_str(self) -> &'static str {
        match self {
            LiveState::Static => "static",
            LiveState::Connecting => "connecting",
            LiveState::Live => "live",
            LiveState::Paused => "paused",
            LiveState::Reconnecting => "reconnecting",
        }
    }
}

/// A live subscription's state and the seconds since its last update (the
/// latter ticks in the browser only).
#[derive(Clone, Copy, Debug)]
pub struct Live {
    pub state: ReadSignal<LiveState>,
    pub seconds: ReadSignal<u32>,
}

/// "live · updated 3 s ago", "paused while the tab is hidden", …
#[component]
pub fn LiveIndicator(live: Live) -> impl IntoView {
    let text = move || match live.state.get() {
        LiveState::Static => "numbers as of page load".to_owned(),
        LiveState::Connecting => "connecting…".to_owned(),
        LiveState::Live => format!("live · updated {} s ago", live.seconds.get()),
        LiveState::Paused => "paused while the tab is hidden".to_owned(),
        LiveState::Reconnecting => format!("reconnecting… last update {} s ago", live.seconds.get()),
    };
    let class = move || match live.state.get() {
        LiveState::Live => "freshness live",
        LiveState::Reconnecting => "freshness stale",
        _ => "freshness",
    };
    view! {
        <span class=class data-testid="freshness" data-state=move || live.state.get().as_str()>{text}</span>
    }
}

/// Subscribe to the SSE stream at `url` (re-subscribing when it changes),
/// calling `on_data` with each `event` message's JSON payload.
pub fn use_live<T>(url: Memo<String>, event: &'static str, on_data: impl Fn(T) + 'static) -> Live
where
    T: serde::de::DeserializeOwned + 'static,
{
    let (state, set_state) = signal(LiveState::Static);
    let (seconds, set_seconds) = signal(0u32);
    #[cfg(feature = "hydrate")]
    client::subscribe(url, event, on_data, set_state, set_seconds);
    #[cfg(not(feature = "hydrate"))]
    {
        let _ = (url, event, on_data, set_state, set_seconds);
    }
    Live { state, seconds }
}

#[cfg(feature = "hydrate")]
mod client {
    use std::rc::Rc;
    use std::time::Duration;

    use leptos::prelude::*;
    use wasm_bindgen::closure::Closure;
    use wasm_bindgen::JsCast;
    use web_sys::{Event, EventSource, MessageEvent};

    use super::LiveState;

    /// An open stream; closing it is dropping it.
    struct Connection {
        source: EventSource,
        _on_message: Closure<dyn FnMut(MessageEvent)>,
        _on_error: Closure<dyn FnMut(Event)>,
        _on_open: Closure<dyn FnMut(Event)>,
    }

    impl Drop for Connection {
        fn drop(&mut self) {
            self.source.close();
        }
    }

    fn tab_hidden() -> bool {
        document().hidden()
    }

    pub fn subscribe<T>(
        url: Memo<String>,
        event: &'static str,
        on_data: impl Fn(T) + 'static,
        set_state: WriteSignal<LiveState>,
        set_seconds: WriteSignal<u32>,
    ) where
        T: serde::de::DeserializeOwned + 'static,
    {
        let on_data: Rc<dyn Fn(T)> = Rc::new(on_data);
        let conn: StoredValue<Option<Connection>, LocalStorage> = StoredValue::new_local(None);
        let open: Rc<dyn Fn()> = Rc::new(move || {
            conn.set_value(None);
            if tab_hidden() {
                set_state.set(LiveState::Paused);
                return;
            }
            let Ok(source) = EventSource::new(&url.get_untracked()) else {
                set_state.set(LiveState::Reconnecting);
                return;
            };
            let on_data = on_data.clone();
            let on_message = Closure::<dyn FnMut(MessageEvent)>::new(move |ev: MessageEvent| {
                if let Some(text) = ev.data().as_string() {
                    match serde_json::from_slice::<T>(text.as_bytes()) {
                        Ok(value) => {
                            on_data(value);
                            set_seconds.set(0);
                            set_state.set(LiveState::Live);
                        }
                        Err(e) => leptos::logging::warn!("live update not understood: {e}"),
                    }
                }
            });
            let on_error = Closure::<dyn FnMut(Event)>::new(move |_| set_state.set(LiveState::Reconnecting));
            let on_open = Closure::<dyn FnMut(Event)>::new(move |_| set_state.set(LiveState::Live));
            let _ = source.add_event_listener_with_callback(event, on_message.as_ref().unchecked_ref());
            source.set_onerror(Some(on_error.as_ref().unchecked_ref()));
            source.set_onopen(Some(on_open.as_ref().unchecked_ref()));
            set_state.set(LiveState::Connecting);
            conn.set_value(Some(Connection { source, _on_message: on_message, _on_error: on_error, _on_open: on_open }));
        });

        // (Re)subscribe whenever the URL changes.
        let reopen = open.clone();
        Effect::new(move |_| {
            url.track();
            reopen();
        });

        // Close while the tab is hidden, reopen when it is shown.
        let on_visibility = Closure::<dyn FnMut(Event)>::new(move |_: Event| {
            if tab_hidden() {
                conn.set_value(None);
                set_state.set(LiveState::Paused);
            } else {
                open();
            }
        });
        let _ = document().add_event_listener_with_callback("visibilitychange", on_visibility.as_ref().unchecked_ref());
        let listener: StoredValue<Option<Closure<dyn FnMut(Event)>>, LocalStorage> =
            StoredValue::new_local(Some(on_visibility));

        // "updated N s ago" counts up between messages.
        let ticker = set_interval_with_handle(move || set_seconds.update(|s| *s += 1), Duration::from_secs(1)).ok();

        on_cleanup(move || {
            conn.set_value(None);
            if let Some(cb) = listener.try_update_value(|l| l.take()).flatten() {
                let _ = document().remove_event_listener_with_callback("visibilitychange", cb.as_ref().unchecked_ref());
            }
            if let Some(t) = ticker {
                t.clear();
            }
        });
    }
}
