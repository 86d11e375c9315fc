//! The HTML document, the router and the page frame.

use leptos::prelude::*;
use leptos_meta::{provide_meta_context, MetaTags, Title};
use leptos_router::components::{Route, Router, Routes, A};
use leptos_router::{Lazy, LazyRoute, ParamSegment, SsrMode, StaticSegment};

use crate::auth::{current_user, LoginPage, Logout, Role, UserResource};
use crate::pages::{
    AuditPage, BreakersPage, DeliveriesPage, DeliveryPage, LimitsPage, MerchantsPage, OverviewPage, QuotaAccountPage,
    QuotasPage, SimulatorPage, UsersPage,
};

/// The whole document, rendered by the server around [`App`].
pub fn shell(options: LeptosOptions) -> impl IntoView {
    let stylesheet = pkg_href(&options, "css");
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                <link rel="icon" href="/favicon.svg" type="image/svg+xml"/>
                <link rel="stylesheet" id="sluice" href=stylesheet/>
                <ClientScripts options/>
                <MetaTags/>
            </head>
            <body>
                <App/>
            </body>
        </html>
    }
}

/// The hash the site build put in a file's name (`js`, `wasm` or `css`), from
/// the lines `kind: hash` of its `hash.txt`.
pub fn asset_hash<'a>(hashes: &'a str, kind: &str) -> Option<&'a str> {
    hashes.lines().filter_map(|line| line.split_once(':')).find(|(k, _)| k.trim() == kind).map(|(_, h)| h.trim())
}

/// The address of the client's `kind` file (`js`, `wasm` or `css`):
/// `/pkg/sluice.<hash>.<kind>` when the site's files are named by content
/// (the build's `hash.txt` is next to them), else the names wasm-bindgen
/// gives (`sluice.js`, `sluice_bg.wasm`, `sluice.css`). Read per page, as
/// Leptos reads the same file: a rebuilt site is picked up without a restart.
fn pkg_href(options: &LeptosOptions, kind: &str) -> String {
    let hashes = if options.hash_files { std::fs::read_to_string(options.hash_file.as_ref()).ok() } else { None };
    let (pkg, name) = (&options.site_pkg_dir, &options.output_name);
    match hashes.as_deref().and_then(|h| asset_hash(h, kind)) {
        Some(hash) => format!("/{pkg}/{name}.{hash}.{kind}"),
        None if kind == "wasm" => format!("/{pkg}/{name}_bg.wasm"),
        None => format!("/{pkg}/{name}.{kind}"),
    }
}

/// The client's scripts, written here rather than by Leptos'
/// `HydrationScripts` so that every one of them carries the response's
/// nonce: the Content-Security-Policy allows scripts by nonce only, and a
/// `modulepreload` link is fetched under `script-src` too (HTML standard,
/// "link type modulepreload"), but `HydrationScripts` leaves the nonce off
/// it. The module script loads the client (its import inherits the nonce)
/// and hydrates the page, as Leptos' own hydration script does.
#[component]
fn ClientScripts(options: LeptosOptions) -> impl IntoView {
    #[cfg(feature = "ssr")]
    provide_split_manifest(&options);
    let nonce = leptos::nonce::use_nonce();
    let js = pkg_href(&options, "js");
    let wasm = pkg_href(&options, "wasm");
    let start = format!("import({js:?}).then((m) => m.default({{ module_or_path: {wasm:?} }}).then(() => m.hydrate()));");
    view! {
        <link rel="modulepreload" href=js nonce=nonce.clone()/>
        <link rel="preload" href=wasm r#as="fetch" r#type="application/wasm" crossorigin="anonymous"/>
        <script type="module" nonce=nonce>{start}</script>
    }
}

/// Mark the page hydrated (the frame's `data-hydrated`), once the wasm client
/// has taken over all of it: the frame and the page's chunk, which arrives
/// after the frame (`crate::hydrate`).
#[cfg(feature = "hydrate")]
pub fn mark_hydrated() {
    if let Ok(Some(frame)) = document().query_selector(".frame") {
        let _ = frame.set_attribute("data-hydrated", "true");
    }
}

/// The client's split manifest (`pkg/__wasm_split_manifest.json`, written by
/// the site build): for each page group's split point, the chunk files its code
/// fetches. Read per page, like `hash.txt`; empty without a split site
/// (server tests).
#[cfg(feature = "ssr")]
#[derive(Clone, Debug, Default)]
struct SplitManifest {
    /// The client's files' directory in URLs (`pkg`).
    pkg: String,
    files: std::sync::Arc<std::collections::HashMap<String, Vec<String>>>,
}

#[cfg(feature = "ssr")]
fn provide_split_manifest(options: &LeptosOptions) {
    let pkg = options.site_pkg_dir.to_string();
    let path = std::path::Path::new(options.site_root.as_ref()).join(&pkg).join("__wasm_split_manifest.json");
    let files = std::fs::read(path).ok().and_then(|text| serde_json::from_slice(&text).ok()).unwrap_or_default();
    provide_context(SplitManifest { pkg, files: std::sync::Arc::new(files) });
}

/// Put a `<link rel=preload>` into the head for each chunk the page group
/// `name`'s code fetches (split point `<name>_<hash>`, as Leptos' `lazy`
/// names it), so that they travel alongside the main module instead of
/// being asked for only once it runs. Registered with the head's meta
/// context, not rendered into the page, so hydration sees the same view.
#[cfg(feature = "ssr")]
fn preload_group_chunks(name: &str) {
    use leptos_meta::Link;
    let Some(SplitManifest { pkg, files }) = use_context::<SplitManifest>() else { return };
    let prefix = format!("{name}_");
    let files = files.iter().filter(|(split, _)| split.starts_with(&prefix)).flat_map(|(_, files)| files);
    for file in files {
        // `to_html` on a meta component registers it with the head.
        let _ = view! {
            <Link rel="preload" href=format!("/{pkg}/{file}.wasm") as_="fetch" type_="application/wasm" crossorigin="anonymous"/>
        }
        .to_html();
    }
}

/// One entry of the sidebar: the least role that sees it.
struct NavItem {
    href: &'static str,
    label: &'static str,
    role: Role,
}

const NAV: &[NavItem] = &[
    NavItem { href: "/", label: "Overview", role: Role::Viewer },
    NavItem { href: "/quotas", label: "Quotas", role: Role::Viewer },
    NavItem { href: "/limits", label: "Limits", role: Role::Viewer },
    NavItem { href: "/deliveries", label: "Deliveries", role: Role::Viewer },
    NavItem { href: "/merchants", label: "Merchants", role: Role::Viewer },
    NavItem { href: "/breakers", label: "Breakers", role: Role::Viewer },
    NavItem { href: "/simulator", label: "Simulator", role: Role::Viewer },
    NavItem { href: "/audit", label: "Audit log", role: Role::Support },
    NavItem { href: "/users", label: "Users & tokens", role: Role::Admin },
];

#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();

    view! {
        <Title formatter=|page: String| format!("{page} · Sluice")/>
        <Router>
            <Frame/>
        </Router>
    }
}

/// The page frame, inside the router: the signed-in user is read again on
/// every navigation, so signing in or out (a client-side redirect once
/// hydrated) shows at once in the sidebar and in the pages' controls.
#[component]
fn Frame() -> impl IntoView {
    let location = leptos_router::hooks::use_location();
    let user: UserResource = crate::codec::resource(move || location.pathname.get(), |_| current_user());
    provide_context(user);
    view! {
            // "true" once the wasm client has taken over the whole page, its
            // lazily loaded part included ([`mark_hydrated`]); browser tests
            // wait for it, and it is how an operator's devtools tell SSR from
            // hydrated.
            <div class="frame" data-hydrated="false">
                <nav class="sidebar">
                    <a class="brand" href="/">"Sluice"</a>
                    <Transition fallback=|| ()>
                        {move || user.get().and_then(|r| r.ok()).flatten().map(|me| {
                            let links = NAV
                                .iter()
                                .filter(|item| me.role.allows(item.role))
                                .map(|item| view! { <li><A href=item.href>{item.label}</A></li> })
                                .collect_view();
                            view! {
                                <ul>{links}</ul>
                                <UserBox username=me.username.clone() role=me.role/>
                            }
                        })}
                    </Transition>
                </nav>
                <main class="content">
                    <Routes fallback=|| view! { <NotFound/> }>
                        <Route path=StaticSegment("") view={Lazy::<Overview>::new()} ssr=SsrMode::Async/>
                        <Route path=StaticSegment("login") view=LoginPage/>
                        <Route path=StaticSegment("users") view={Lazy::<Users>::new()} ssr=SsrMode::Async/>
                        <Route path=StaticSegment("quotas") view={Lazy::<Quotas>::new()} ssr=SsrMode::Async/>
                        <Route
                            path=(StaticSegment("quotas"), ParamSegment("account"))
                            view={Lazy::<QuotaAccount>::new()}
                            ssr=SsrMode::Async
                        />
                        <Route path=StaticSegment("deliveries") view={Lazy::<Deliveries>::new()} ssr=SsrMode::Async/>
                        <Route path=(StaticSegment("deliveries"), ParamSegment("id")) view={Lazy::<Delivery>::new()} ssr=SsrMode::Async/>
                        <Route path=StaticSegment("merchants") view={Lazy::<Merchants>::new()} ssr=SsrMode::Async/>
                        <Route path=StaticSegment("breakers") view={Lazy::<Breakers>::new()} ssr=SsrMode::Async/>
                        <Route path=StaticSegment("limits") view={Lazy::<Limits>::new()} ssr=SsrMode::Async/>
                        <Route path=StaticSegment("simulator") view={Lazy::<Simulator>::new()} ssr=SsrMode::Async/>
                        <Route path=StaticSegment("audit") view={Lazy::<Audit>::new()} ssr=SsrMode::Async/>
                    </Routes>
                </main>
            </div>
    }
}

/// Pages whose code the browser loads when one of them is first shown: each
/// group is a `#[lazy]` function, a chunk of its own in the site build
/// (`wasm-split`, scripts/lib.sh `build_site`), so a first visit downloads
/// the frame and one group, not every page (docs/benchmarks.md, "Browser
/// client size"). A group per page would download less but in many more
/// files (the code two pages share is a file of its own), and on a fast
/// link each file costs more than its bytes; four groups keep a first visit
/// to a dozen files. `group` names the lazy function, which is the split
/// point's name (`<group>_<hash>`) in the manifest; `preload` is the loader
/// `#[lazy]` makes for it (`__preload_<group>`).
macro_rules! page_group {
    ($group:ident, $preload:ident { $($route:ident => $page:ident,)* }) => {
        #[derive(Clone, Copy, Debug)]
        #[allow(non_camel_case_types)]
        enum $group {
            $($route,)*
        }

        #[leptos::lazy]
        fn $group(page: $group) -> AnyView {
            #[cfg(feature = "ssr")]
            preload_group_chunks(stringify!($group));
            match page {
                $($group::$route => view! { <$page/> }.into_any(),)*
            }
        }

        $(
            struct $route;

            impl LazyRoute for $route {
                fn data() -> Self {
                    $route
                }

                async fn view(_this: Self) -> AnyView {
                    $group($group::$route).await
                }

                // The router loads the chunk before it hydrates or shows the
                // page (`preload` is what `#[lazy]` generates for `$group`).
                async fn preload() {
                    #[cfg(feature = "hydrate")]
                    $preload().await;
                }
            }
        )*
    };
}

page_group!(watch_pages, __preload_watch_pages {
    Overview => OverviewPage,
    Quotas => QuotasPage,
    QuotaAccount => QuotaAccountPage,
});
page_group!(delivery_pages, __preload_delivery_pages {
    Deliveries => DeliveriesPage,
    Delivery => DeliveryPage,
    Merchants => MerchantsPage,
    Breakers => BreakersPage,
});
page_group!(limit_pages, __preload_limit_pages {
    Limits => LimitsPage,
});
page_group!(admin_pages, __preload_admin_pages {
    Users => UsersPage,
    Audit => AuditPage,
    Simulator => SimulatorPage,
});

#[component]
fn UserBox(username: String, role: Role) -> impl IntoView {
    let logout = ServerAction::<Logout>::new();
    view! {
        <div class="userbox" data-testid="userbox">
            <span class="who">{username}</span>
            <span class="pill muted">{role.as_str()}</span>
            <ActionForm action=logout>
                <button type="submit" class="link" data-testid="logout">"Sign out"</button>
            </ActionForm>
        </div>
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
