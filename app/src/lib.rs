//! Sluice's web application: the Leptos pages operators, support staff and
//! admins use, rendered on the server (feature `ssr`) and hydrated in the
//! browser (feature `hydrate`, wasm32).
//!
//! Server-only code lives in [`ssr`]; the wasm build compiles none of the
//! engine, sqlx, redis or tokio. Types that cross the wire are plain serde
//! structs in [`model`]. One page per file in [`pages`].

pub mod auth;
pub mod codec;
pub mod components;
pub mod format;
pub mod live;
pub mod model;
pub mod pages;
pub mod shell;
#[cfg(feature = "ssr")]
pub mod ssr;

pub use shell::{shell, App};

/// Entry point of the wasm module: attach the reactive system to the
/// server-rendered HTML.
#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    // What `leptos::mount::hydrate_lazy` does (hydration waits for the page's
    // lazily loaded chunk, `shell::page_group!`), then the page is marked
    // hydrated: effects run while the chunk is still on its way, so an effect
    // would mark it too early.
    wasm_bindgen_futures::spawn_local(async {
        let owner = leptos::mount::hydrate_from_async(leptos::tachys::dom::body(), App).await;
        owner.forget();
        shell::mark_hydrated();
    });
}
