//! Who is signed in, and the login page.
//!
//! Roles are enforced on the server: every server function starts with
//! [`crate::ssr::auth::require`], and the server redirects page requests
//! without a session to `/login`. The browser only uses the role to hide
//! buttons the server would refuse anyway.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

// The role and user types live with the other wire types; pages take them
// from here together with the helpers that use them.
pub use crate::model::{Role, SessionUser};

/// The signed-in user, or `None`.
#[server(prefix = "/ui", endpoint = "me")]
pub async fn current_user() -> Result<Option<SessionUser>, ServerFnError> {
    crate::ssr::auth::current_user().await
}

/// Check a username and password; on success rotate the session id, store the
/// user and redirect to `next` (a local path) or the overview. Attempts are
/// throttled per username with Sluice's own limiter.
#[server(prefix = "/ui", endpoint = "login")]
pub async fn login(username: String, password: String, next: Option<String>) -> Result<(), ServerFnError> {
    crate::ssr::auth::login(&username, &password, next.as_deref()).await
}

/// End the session and go to the login page.
#[server(prefix = "/ui", endpoint = "logout")]
pub async fn logout() -> Result<(), ServerFnError> {
    crate::ssr::auth::logout().await
}

/// The signed-in user as a resource, provided once by the shell.
pub type UserResource = crate::codec::JsonResource<Result<Option<SessionUser>, ServerFnError>>;

/// The signed-in user's role, if known yet: for showing or hiding controls.
pub fn use_role() -> Signal<Option<Role>> {
    let user = use_context::<UserResource>();
    Signal::derive(move || user.and_then(|u| u.get()).and_then(|r| r.ok()).flatten().map(|u| u.role))
}

/// Controls for `role` and above only (the server refuses the others anyway).
///
/// The signed-in user is a resource, so the check sits inside a `Transition`:
/// the server renders the controls once the user is known, and hydration
/// finds the same markup. Read outside one, the role is still `None` while
/// the page hydrates, and whether the controls ever appeared depended on
/// timing (browser tests found admins without the "Add a merchant" form).
#[component]
pub fn ForRole(role: Role, children: ChildrenFn) -> impl IntoView {
    let current = use_role();
    view! {
        <Transition fallback=|| ()>
            {
                let children = children.clone();
                move || current.get().is_some_and(|r| r.allows(role)).then(|| children())
            }
        </Transition>
    }
}

/// Strip the "error running server function:" wrapper from a server error.
pub fn error_text(e: &ServerFnError) -> String {
    match e {
        ServerFnError::ServerError(msg) => msg.clone(),
        other => other.to_string(),
    }
}

#[component]
pub fn LoginPage() -> impl IntoView {
    let action = ServerAction::<Login>::new();
    let query = use_query_map();
    let next = move || query.with(|q| q.get("next")).unwrap_or_default();
    let error = move || action.value().get().and_then(|r| r.err()).map(|e| error_text(&e));
    view! {
        <Title text="Sign in"/>
        <section class="login">
            <h1>"Sign in to Sluice"</h1>
            <ActionForm action=action attr:class="form" attr:data-testid="login-form">
                <input type="hidden" name="next" value=next/>
                <label>"Username"
                    <input type="text" name="username" autocomplete="username" required autofocus/>
                </label>
                <label>"Password"
                    <input type="password" name="password" autocomplete="current-password" required/>
                </label>
                <button type="submit" class="primary" disabled=move || action.pending().get()>"Sign in"</button>
                {move || error().map(|e| view! { <p class="error" role="alert" data-testid="login-error">{e}</p> })}
            </ActionForm>
        </section>
    }
}
