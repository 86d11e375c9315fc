//! Users and API tokens (admin only): who may sign in with which role, and
//! which workers may call the API. Passwords and tokens are shown once, when
//! they are created, and never again.

use leptos::prelude::*;
use leptos_meta::Title;
use serde::{Deserialize, Serialize};

use crate::auth::{error_text, Role};
use crate::format;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserRow {
    pub username: String,
    pub role: Role,
    /// Unix ms.
    pub created_at: i64,
    pub last_login_at: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRow {
    pub name: String,
    pub scope: String,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
    pub revoked_at: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accounts {
    pub users: Vec<UserRow>,
    pub tokens: Vec<TokenRow>,
}

/// The result of a create form: what was created and its one-time secret,
/// or the problem with one field.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Created {
    /// `secret` is the generated password or the API token, shown once.
    Ok { name: String, secret: Option<String> },
    Invalid { field: String, message: String },
}

#[cfg(feature = "ssr")]
mod server {
    use sluice_engine::{tokens, users};

    use super::*;
    use crate::ssr::{internal, AppContext};

    pub fn to_engine(role: Role) -> users::Role {
        match role {
            Role::Viewer => users::Role::Viewer,
            Role::Support => users::Role::Support,
            Role::Admin => users::Role::Admin,
        }
    }

    pub fn from_engine(role: users::Role) -> Role {
        match role {
            users::Role::Viewer => Role::Viewer,
            users::Role::Support => Role::Support,
            users::Role::Admin => Role::Admin,
        }
    }

    pub fn user_row(u: users::User) -> UserRow {
        UserRow {
            username: u.username,
            role: from_engine(u.role),
            created_at: u.created_at.as_millis(),
            last_login_at: u.last_login_at.map(|t| t.as_millis()),
        }
    }

    pub async fn load(ctx: &AppContext) -> Result<Accounts, ServerFnError> {
        let users = users::list_users(&ctx.db).await.map_err(|e| internal("listing users", e))?;
        let tokens = tokens::list_tokens(&ctx.db).await.map_err(|e| internal("listing tokens", e))?;
        Ok(Accounts {
            users: users.into_iter().map(user_row).collect(),
            tokens: tokens
                .into_iter()
                .map(|t| TokenRow {
                    name: t.token.name,
                    scope: t.token.scope.as_str().to_owned(),
                    created_at: t.token.created_at.as_millis(),
                    last_used_at: t.last_used_at.map(|x| x.as_millis()),
                    revoked_at: t.revoked_at.map(|x| x.as_millis()),
                })
                .collect(),
        })
    }
}

#[server(prefix = "/ui", endpoint = "users/list")]
pub async fn list_accounts() -> Result<Accounts, ServerFnError> {
    crate::ssr::auth::require(Role::Admin).await?;
    let ctx = crate::ssr::context()?;
    server::load(&ctx).await
}

/// Create a user; an empty password means "generate one and show it once".
#[server(prefix = "/ui", endpoint = "users/add")]
pub async fn add_user(username: String, role: Role, password: String) -> Result<Created, ServerFnError> {
    use sluice_engine::users::{self, UserError};
    let me = crate::ssr::auth::require(Role::Admin).await?;
    let ctx = crate::ssr::context()?;
    let (password, generated) = if password.is_empty() {
        (users::generate_password(), true)
    } else {
        (password, false)
    };
    let invalid = |field: &str, e: UserError| Created::Invalid { field: field.to_owned(), message: e.to_string() };
    match users::create_user(&ctx.db, &username, &password, server::to_engine(role), ctx.clock.now()).await {
        Ok(user) => {
            crate::ssr::audit(&ctx, &me.username, sluice_engine::audit::AuditAction::UserCreate, &user.id, None, Some(&user), None).await?;
            Ok(Created::Ok { name: user.username, secret: generated.then_some(password) })
        }
        Err(e @ (UserError::Username | UserError::Duplicate(_))) => Ok(invalid("username", e)),
        Err(e @ UserError::WeakPassword) => Ok(invalid("password", e)),
        Err(e) => Err(crate::ssr::internal("creating the user", e)),
    }
}

/// Change a user's role (the last admin stays admin). The user's sessions
/// end, but the caller's own when they change their own role.
#[server(prefix = "/ui", endpoint = "users/role")]
pub async fn set_user_role(username: String, role: Role) -> Result<(), ServerFnError> {
    use sluice_engine::users::{self, UserError};
    let me = crate::ssr::auth::require(Role::Admin).await?;
    let ctx = crate::ssr::context()?;
    let keep = match username.trim() == me.username {
        true => crate::ssr::auth::session().await?.id().map(|id| id.to_string()),
        false => None,
    };
    match users::set_role(&ctx.db, &username, server::to_engine(role), keep.as_deref()).await {
        Ok((before, after)) => crate::ssr::audit(&ctx, &me.username, sluice_engine::audit::AuditAction::UserRole, &after.id, Some(&before), Some(&after), None).await,
        Err(e @ (UserError::LastAdmin | UserError::NotFound(_))) => Err(ServerFnError::new(e.to_string())),
        Err(e) => Err(crate::ssr::internal("changing the role", e)),
    }
}

/// Remove a user; their session stops working at its next request.
#[server(prefix = "/ui", endpoint = "users/remove")]
pub async fn remove_user(username: String) -> Result<(), ServerFnError> {
    use sluice_engine::users::{self, UserError};
    let me = crate::ssr::auth::require(Role::Admin).await?;
    let ctx = crate::ssr::context()?;
    match users::delete_user(&ctx.db, &username).await {
        Ok(user) => crate::ssr::audit(&ctx, &me.username, sluice_engine::audit::AuditAction::UserDelete, &user.id, Some(&user), None, None).await,
        Err(e @ (UserError::LastAdmin | UserError::NotFound(_))) => Err(ServerFnError::new(e.to_string())),
        Err(e) => Err(crate::ssr::internal("removing the user", e)),
    }
}

/// Create an API token; the token is in the answer, once.
#[server(prefix = "/ui", endpoint = "tokens/add")]
pub async fn add_token(name: String, scope: String) -> Result<Created, ServerFnError> {
    use sluice_engine::tokens::{self, ApiScope, TokenError};
    let me = crate::ssr::auth::require(Role::Admin).await?;
    let ctx = crate::ssr::context()?;
    let scope: ApiScope = match scope.parse() {
        Ok(s) => s,
        Err(e) => return Ok(Created::Invalid { field: "scope".into(), message: format!("{e}") }),
    };
    match tokens::create_token(&ctx.db, &name, scope, ctx.clock.now()).await {
        Ok((token, secret)) => {
            let record = serde_json::json!({ "id": token.id, "name": token.name, "scope": token.scope.as_str() });
            crate::ssr::audit(&ctx, &me.username, sluice_engine::audit::AuditAction::TokenCreate, &token.id, None, Some(&record), None).await?;
            Ok(Created::Ok { name: token.name, secret: Some(secret.expose().to_owned()) })
        }
        Err(e @ (TokenError::Name | TokenError::Duplicate(_))) => {
            Ok(Created::Invalid { field: "name".into(), message: e.to_string() })
        }
        Err(e) => Err(crate::ssr::internal("creating the token", e)),
    }
}

#[server(prefix = "/ui", endpoint = "tokens/revoke")]
pub async fn revoke_token(name: String) -> Result<(), ServerFnError> {
    use sluice_engine::tokens;
    let me = crate::ssr::auth::require(Role::Admin).await?;
    let ctx = crate::ssr::context()?;
    let revoked = tokens::revoke_token(&ctx.db, &name, ctx.clock.now()).await.map_err(|e| crate::ssr::internal("revoking", e))?;
    ctx.api_tokens.forget(&name);
    if !revoked {
        return Err(ServerFnError::new(format!("no live token named '{name}'")));
    }
    let record = serde_json::json!({ "name": name, "revoked": true });
    crate::ssr::audit(&ctx, &me.username, sluice_engine::audit::AuditAction::TokenRevoke, &name, None, Some(&record), None).await
}

#[component]
fn CreatedNotice(result: Option<Result<Created, ServerFnError>>, what: &'static str) -> impl IntoView {
    match result {
        None => ().into_any(),
        Some(Err(e)) => view! { <p class="notice bad" role="alert">{error_text(&e)}</p> }.into_any(),
        Some(Ok(Created::Invalid { field, message })) => {
            view! { <p class="notice bad" role="alert" data-field=field>{message}</p> }.into_any()
        }
        Some(Ok(Created::Ok { name, secret })) => view! {
            <div class="notice" role="status">
                <p>{format!("{what} '{name}' created.")}</p>
                {secret.map(|s| view! {
                    <p>"Copy it now; it is not shown again:"</p>
                    <p class="secret" data-testid="one-time-secret">{s}</p>
                })}
            </div>
        }
        .into_any(),
    }
}

#[component]
pub fn UsersPage() -> impl IntoView {
    let add_user = ServerAction::<AddUser>::new();
    let set_role = ServerAction::<SetUserRole>::new();
    let remove = ServerAction::<RemoveUser>::new();
    let add_token = ServerAction::<AddToken>::new();
    let revoke = ServerAction::<RevokeToken>::new();
    let accounts = crate::codec::resource(
        move || {
            (
                add_user.version().get(),
                set_role.version().get(),
                remove.version().get(),
                add_token.version().get(),
                revoke.version().get(),
            )
        },
        |_| list_accounts(),
    );
    let last_error = move || {
        [set_role.value().get(), remove.value().get(), revoke.value().get()]
            .into_iter()
            .flatten()
            .find_map(|r| r.err())
            .map(|e| error_text(&e))
    };

    view! {
        <Title text="Users and tokens"/>
        <header class="page-header"><h1>"Users and API tokens"</h1></header>
        {move || last_error().map(|e| view! { <p class="notice bad" role="alert">{e}</p> })}
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || accounts.get().map(|r| match r {
                Err(e) => view! { <p class="error">{error_text(&e)}</p> }.into_any(),
                Ok(a) => view! {
                    <section>
                        <h2>"Users"</h2>
                        <div class="table-scroll" tabindex="0">
                        <table data-testid="users">
                            <thead><tr><th>"Username"</th><th>"Role"</th><th>"Created"</th><th>"Last sign-in"</th><th></th></tr></thead>
                            <tbody>
                                {a.users.into_iter().map(|u| {
                                    let name_role = u.username.clone();
                                    let name_remove = u.username.clone();
                                    view! {
                                        <tr>
                                            <td>{u.username.clone()}</td>
                                            <td>
                                                <ActionForm action=set_role attr:class="form inline">
                                                    <input type="hidden" name="username" value=name_role/>
                                                    <select name="role" aria-label="Role">
                                                        {[Role::Viewer, Role::Support, Role::Admin].into_iter().map(|r| view! {
                                                            <option value=r.as_str() selected=r == u.role>{r.as_str()}</option>
                                                        }).collect_view()}
                                                    </select>
                                                    <button type="submit">"Change"</button>
                                                </ActionForm>
                                            </td>
                                            <td>{format::date_time(u.created_at)}</td>
                                            <td>{u.last_login_at.map(format::date_time).unwrap_or_else(|| "never".into())}</td>
                                            <td>
                                                <ActionForm action=remove>
                                                    <input type="hidden" name="username" value=name_remove/>
                                                    <button type="submit" class="danger">"Remove"</button>
                                                </ActionForm>
                                            </td>
                                        </tr>
                                    }
                                }).collect_view()}
                            </tbody>
                        </table>
                        </div>
                    </section>
                    <section>
                        <h2>"API tokens"</h2>
                        <div class="table-scroll" tabindex="0">
                        <table data-testid="tokens">
                            <thead><tr><th>"Name"</th><th>"Scope"</th><th>"Created"</th><th>"Last used"</th><th>"State"</th><th></th></tr></thead>
                            <tbody>
                                {a.tokens.into_iter().map(|t| {
                                    let live = t.revoked_at.is_none();
                                    let name = t.name.clone();
                                    view! {
                                        <tr data-testid="token-row" data-token=t.name.clone()>
                                            <td>{t.name.clone()}</td>
                                            <td>{t.scope.clone()}</td>
                                            <td>{format::date_time(t.created_at)}</td>
                                            <td>{t.last_used_at.map(format::date_time).unwrap_or_else(|| "never".into())}</td>
                                            <td data-testid="token-state">{if live {
                                                view! { <span class="pill ok">"live"</span> }.into_any()
                                            } else {
                                                view! { <span class="pill muted">"revoked"</span> }.into_any()
                                            }}</td>
                                            <td>{live.then(|| view! {
                                                <ActionForm action=revoke>
                                                    <input type="hidden" name="name" value=name/>
                                                    <button type="submit" class="danger">"Revoke"</button>
                                                </ActionForm>
                                            })}</td>
                                        </tr>
                                    }
                                }).collect_view()}
                            </tbody>
                        </table>
                        </div>
                    </section>
                }.into_any(),
            })}
        </Transition>
        <section class="cards">
            <div class="card">
                <h2>"Add a user"</h2>
                <ActionForm action=add_user attr:class="form" attr:data-testid="add-user">
                    <label>"Username"<input type="text" name="username" required/></label>
                    <label>"Role"
                        <select name="role">
                            <option value="viewer">"viewer"</option>
                            <option value="support">"support"</option>
                            <option value="admin">"admin"</option>
                        </select>
                    </label>
                    <label>"Password (empty: generate one)"<input type="password" name="password" autocomplete="new-password"/></label>
                    <button type="submit" class="primary">"Add user"</button>
                </ActionForm>
                {move || view! { <CreatedNotice result=add_user.value().get() what="User"/> }}
            </div>
            <div class="card">
                <h2>"Create an API token"</h2>
                <ActionForm action=add_token attr:class="form" attr:data-testid="add-token">
                    <label>"Name"<input type="text" name="name" required/></label>
                    <label>"Scope"
                        <select name="scope">
                            <option value="worker">"worker (permits, penalties, events, reads)"</option>
                            <option value="admin">"admin (also limits and merchants)"</option>
                        </select>
                    </label>
                    <button type="submit" class="primary">"Create token"</button>
                </ActionForm>
                {move || view! { <CreatedNotice result=add_token.value().get() what="Token"/> }}
            </div>
        </section>
    }
}
