//! The HTML document, the router and the page frame.

use leptos::prelude::*;
use leptos_meta::{provide_meta_context, MetaTags, Stylesheet, Title};
use leptos_router::components::{Route, Router, Routes, A};
use leptos_router::{SsrMode, StaticSegment};

use crate::pages::OverviewPage;

/// The whole document, rendered by the server around [`App`].
pub fn shell(options: LeptosOptions) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                <link rel="icon" href="/favicon.svg" type="image/svg+xml"/>
                <HydrationScripts options/>
                <MetaTags/>
            </head>
            <body>
                <App/>
            </body>
        </html>
    }
}

#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    // Set once the wasm module has taken over the page; browser tests wait
    // for it, and it is how an operator's devtools tell SSR from hydrated.
    let hydrated = RwSignal::new(false);
    Effect::new(move |_| hydrated.set(true));

    view! {
        <Stylesheet id="sluice" href="/pkg/sluice.css"/>
        <Title formatter=|page: String| format!("{page} · Sluice")/>
        <Router>
            <div class="frame" data-hydrated=move || hydrated.get().to_string()>
                <nav class="sidebar">
                    <a class="brand" href="/">"Sluice"</a>
                    <ul>
                        <li><A href="/">"Overview"</A></li>
                    </ul>
                </nav>
                <main class="content">
                    <Routes fallback=|| view! { <NotFound/> }>
                        <Route path=StaticSegment("") view=OverviewPage ssr=SsrMode::Async/>
                    </Routes>
                </main>
            </div>
        </Router>
    }
}

#[component]
fn NotFound() -> impl IntoView {
    #[cfg(feature = "ssr")]
    {
        if let Some(resp) = use_context::<leptos_axum::ResponseOptions>() {
            resp.set_status(http::StatusCode::NOT_FOUND);
        }
    }
    view! {
        <Title text="Not found"/>
        <h1>"Not found"</h1>
        <p>"There is no page at this address."</p>
    }
}
