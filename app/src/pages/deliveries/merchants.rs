//! Merchants: where webhooks go, how they are signed, and each merchant's
//! delivery breaker. Everyone signed in reads; admins create merchants,
//! change URLs (checked against SSRF) and rotate secrets. While https is
//! required (`delivery_require_https`), a merchant whose URL is still plain
//! http is flagged: its deliveries are held until the URL is fixed.
//!
//! Secrets are never shown in full except once, in the answer to the
//! creation or rotation that produced them; afterwards the page shows a
//! masked hint only (docs/decisions.md, "Merchant secrets on the page").

use leptos::prelude::*;
use leptos_meta::Title;
use serde::{Deserialize, Serialize};

use super::state_class;
use crate::model::{error_for, FieldError};
use crate::format;
use crate::auth::{error_text, use_role, ForRole, Role};

/// How long the previous secret keeps signing after a rotation, unless the admin says otherwise.
pub const DEFAULT_OVERLAP_HOURS: u64 = 24;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MerchantView {
    pub id: String,
    pub name: String,
    pub url: String,
    /// Plain http while https is required: deliveries wait for an https URL.
    pub held: bool,
    pub scheme: String,
    /// e.g. `whsec_…(32 characters)`: never the secret itself.
    pub secret_hint: String,
    /// While a rotation overlaps, the previous secret signs too until then.
    pub previous_secret_until: Option<i64>,
    pub breaker: String,
    pub window_attempts: u32,
    pub window_failures: u32,
    pub next_probe_at: Option<i64>,
    pub updated_at: i64,
}

/// The answer of a merchant write: done (with the new secret, once, when one
/// was made), or the fields that were refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MerchantResult {
    Ok { id: String, name: String, secret: Option<String> },
    Invalid(Vec<FieldError>),
}

/// A hint that tells two secrets apart without revealing them: the scheme's
/// fixed prefix and the length. (Even four characters of a short,
/// hand-chosen secret would be too many.)
#[cfg(feature = "ssr")]
pub fn secret_hint(secret: &str) -> String {
    let prefix = if secret.starts_with("whsec_") { "whsec_" } else { "" };
    format!("{prefix}••••••• ({} characters)", secret.chars().count())
}

#[server(prefix = "/ui", endpoint = "merchants/list")]
pub async fn list_merchants() -> Result<Vec<MerchantView>, ServerFnError> {
    crate::ssr::auth::require(Role::Viewer).await?;
    let ctx = crate::ssr::context()?;
    let now = ctx.clock.now();
    let all = ctx.deliveries.list_merchants(now, &ctx.delivery_breaker).await.map_err(|e| crate::ssr::internal("listing merchants", e))?;
    Ok(all
        .into_iter()
        .map(|o| {
            let m = o.merchant;
            MerchantView {
                id: m.id.as_str().to_owned(),
                name: m.name.clone(),
                url: m.url.clone(),
                held: ctx.ssrf.holds(&m.url),
                scheme: m.scheme.as_str().to_owned(),
                secret_hint: secret_hint(&m.secret),
                previous_secret_until: m.previous_secret_expires_at.filter(|t| *t > now).map(|t| t.as_millis()),
                breaker: o.breaker.status.as_str().to_owned(),
                window_attempts: o.window.attempts,
                window_failures: o.window.failures,
                next_probe_at: o.breaker.next_probe_at.map(|t| t.as_millis()),
                updated_at: m.updated_at.as_millis(),
            }
        })
        .collect())
}

#[cfg(feature = "ssr")]
fn refused(e: sluice_engine::delivery::ops::OpsError) -> Result<MerchantResult, ServerFnError> {
    use sluice_engine::delivery::ops::OpsError;
    use sluice_engine::delivery::StoreError;
    let field = |field: &str, message: String| Ok(MerchantResult::Invalid(vec![FieldError::new(field, message)]));
    match e {
        OpsError::EmptyName => field("name", "a merchant needs a name".to_owned()),
        OpsError::Url(e) => field("url", format!("URL refused: {e}")),
        OpsError::Secret(e) => field("secret", format!("secret refused: {e}")),
        OpsError::Store(StoreError::UnknownMerchant(id)) => field("id", format!("merchant {id} does not exist")),
        e => Err(crate::ssr::internal("changing the merchant", e)),
    }
}

#[cfg(feature = "ssr")]
fn merchant_id(id: &str) -> Result<sluice_engine::delivery::model::MerchantId, MerchantResult> {
    sluice_engine::delivery::model::MerchantId::parse(id)
        .map_err(|_| MerchantResult::Invalid(vec![FieldError::new("id", format!("'{id}' is not a merchant id"))]))
}

/// Register a merchant (admin). An empty secret means "generate one"; the
/// secret in the answer is shown once.
#[server(prefix = "/ui", endpoint = "merchants/create")]
pub async fn create_merchant(name: String, url: String, scheme: String, secret: Option<String>) -> Result<MerchantResult, ServerFnError> {
    use sluice_engine::delivery::model::MerchantIn;
    use sluice_engine::delivery::ops;
    let me = crate::ssr::auth::require(Role::Admin).await?;
    let ctx = crate::ssr::context()?;
    let Ok(scheme) = scheme.parse::<sluice_engine::delivery::model::SigningScheme>() else {
        return Ok(MerchantResult::Invalid(vec![FieldError::new("scheme", "choose sluice or standard_webhooks")]));
    };
    let input = MerchantIn { name, url: url.trim().to_owned(), scheme, secret: secret.filter(|s| !s.is_empty()) };
    match ops::create_merchant(&ctx.deliveries, input, &ctx.ssrf, &ctx.delivery_breaker, ops::Actor::named(&me.username), ctx.clock.now()).await {
        Ok(m) => {
            Ok(MerchantResult::Ok { id: m.id.as_str().to_owned(), name: m.name.clone(), secret: Some(m.secret.clone()) })
        }
        Err(e) => refused(e),
    }
}

/// Point a merchant at a new URL (admin), checked against the SSRF policy.
#[server(prefix = "/ui", endpoint = "merchants/url")]
pub async fn update_merchant_url(id: String, url: String) -> Result<MerchantResult, ServerFnError> {
    use sluice_engine::delivery::ops;
    let me = crate::ssr::auth::require(Role::Admin).await?;
    let ctx = crate::ssr::context()?;
    let id = match merchant_id(&id) {
        Ok(id) => id,
        Err(invalid) => return Ok(invalid),
    };
    match ops::update_merchant_url(&ctx.deliveries, &id, url.trim(), &ctx.ssrf, ops::Actor::named(&me.username), ctx.clock.now()).await {
        Ok(c) => {
            Ok(MerchantResult::Ok { id: id.as_str().to_owned(), name: c.after.name, secret: None })
        }
        Err(e) => refused(e),
    }
}

/// Rotate a merchant's signing secret (admin): a new one is generated and
/// shown once; the old one keeps signing for `overlap_hours` (default 24).
#[server(prefix = "/ui", endpoint = "merchants/rotate")]
pub async fn rotate_secret(id: String, overlap_hours: Option<String>) -> Result<MerchantResult, ServerFnError> {
    use sluice_engine::delivery::ops;
    let me = crate::ssr::auth::require(Role::Admin).await?;
    let ctx = crate::ssr::context()?;
    let id = match merchant_id(&id) {
        Ok(id) => id,
        Err(invalid) => return Ok(invalid),
    };
    let hours = match overlap_hours.as_deref().map(str::trim).filter(|h| !h.is_empty()) {
        None => DEFAULT_OVERLAP_HOURS,
        Some(h) => match h.parse::<u64>() {
            Ok(h) if h <= 24 * 30 => h,
            _ => {
                let message = "overlap is a whole number of hours, at most 720".to_owned();
                return Ok(MerchantResult::Invalid(vec![FieldError::new("overlap_hours", message)]));
            }
        },
    };
    let overlap = std::time::Duration::from_secs(hours * 3600);
    match ops::rotate_secret(&ctx.deliveries, &id, None, overlap, ops::Actor::named(&me.username), ctx.clock.now()).await {
        Ok(c) => {
            Ok(MerchantResult::Ok { id: id.as_str().to_owned(), name: c.after.name.clone(), secret: Some(c.after.secret.clone()) })
        }
        Err(e) => refused(e),
    }
}

#[component]
fn ResultNotice(result: Option<Result<MerchantResult, ServerFnError>>, done: &'static str) -> impl IntoView {
    match result {
        None => ().into_any(),
        Some(Err(e)) => view! { <p class="notice bad" role="alert">{error_text(&e)}</p> }.into_any(),
        Some(Ok(MerchantResult::Invalid(errors))) => view! {
            <div class="notice bad" role="alert" data-testid="merchant-invalid">
                {errors.into_iter().map(|e| view! { <p data-field=e.field.clone()>{e.message}</p> }).collect_view()}
            </div>
        }
        .into_any(),
        Some(Ok(MerchantResult::Ok { id, name, secret })) => view! {
            <div class="notice" role="status">
                <p>{format!("{name} ({id}) {done}.")}</p>
                {secret.map(|s| view! {
                    <p>"Signing secret — copy it now; it is not shown again:"</p>
                    <p class="secret" data-testid="one-time-secret">{s}</p>
                })}
            </div>
        }
        .into_any(),
    }
}

#[component]
pub fn MerchantsPage() -> impl IntoView {
    let create = ServerAction::<CreateMerchant>::new();
    let set_url = ServerAction::<UpdateMerchantUrl>::new();
    let rotate = ServerAction::<RotateSecret>::new();
    let role = use_role();
    let is_admin = move || role.get().is_some_and(|r| r.allows(Role::Admin));
    let merchants = crate::codec::resource(
        move || (create.version().get(), set_url.version().get(), rotate.version().get()),
        |_| list_merchants(),
    );
    let create_errors = move || match create.value().get() {
        Some(Ok(MerchantResult::Invalid(e))) => e,
        _ => Vec::new(),
    };
    view! {
        <Title text="Merchants"/>
        <header class="page-header"><h1>"Merchants"</h1></header>
        {move || view! { <ResultNotice result=set_url.value().get() done="now delivers to its new URL"/> }}
        {move || view! { <ResultNotice result=rotate.value().get() done="signs with a new secret"/> }}
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || merchants.get().map(|r| match r {
                Err(e) => view! { <p class="error">{error_text(&e)}</p> }.into_any(),
                Ok(list) => view! {
                    <div class="table-scroll" tabindex="0">
                    <table data-testid="merchants">
                        <thead><tr><th>"Merchant"</th><th>"URL"</th><th>"Signing"</th><th>"Breaker"</th><th>"Last 5 min"</th><th>"Updated"</th></tr></thead>
                        <tbody>
                            {list.into_iter().map(|m| {
                                let id_url = m.id.clone();
                                let id_rotate = m.id.clone();
                                let url = m.url.clone();
                                let admin = is_admin();
                                view! {
                                    <tr data-testid="merchant-row" data-id=m.id.clone()>
                                        <td><strong>{m.name.clone()}</strong><br/><span class="muted mono">{m.id.clone()}</span></td>
                                        <td class="wrap">
                                            {m.url.clone()}
                                            {m.held.then(|| view! {
                                                <br/><span class="pill bad" data-testid="merchant-held"
                                                    title="Merchant URLs must use https (delivery_require_https). Nothing is sent or failed meanwhile.">
                                                    "plain http: deliveries held until the URL uses https"
                                                </span>
                                            })}
                                            {admin.then(|| view! {
                                                <details>
                                                    <summary>"Change URL"</summary>
                                                    <ActionForm action=set_url attr:class="form inline">
                                                        <input type="hidden" name="id" value=id_url/>
                                                        <input type="url" name="url" value=url required aria-label="New URL"/>
                                                        <button type="submit">"Save URL"</button>
                                                    </ActionForm>
                                                </details>
                                            })}
                                        </td>
                                        <td>
                                            {m.scheme.clone()}<br/>
                                            <span class="mono" data-testid="secret-hint">{m.secret_hint.clone()}</span>
                                            {m.previous_secret_until.map(|t| view! { <br/><span class="muted">"previous secret signs until " {format::date_time_seconds(t)}</span> })}
                                            {admin.then(|| view! {
                                                <details>
                                                    <summary>"Rotate secret"</summary>
                                                    <ActionForm action=rotate attr:class="form inline">
                                                        <input type="hidden" name="id" value=id_rotate/>
                                                        <label>"Old secret also signs for (hours)"
                                                            <input type="number" name="overlap_hours" min="0" max="720" value=DEFAULT_OVERLAP_HOURS.to_string()/>
                                                        </label>
                                                        <button type="submit" class="danger">"Rotate"</button>
                                                    </ActionForm>
                                                </details>
                                            })}
                                        </td>
                                        <td><span class=state_class(&m.breaker)>{m.breaker.clone()}</span>
                                            {m.next_probe_at.map(|t| view! { <br/><span class="muted">"probe " {format::date_time_seconds(t)}</span> })}</td>
                                        <td>{format!("{} attempts, {} failed", m.window_attempts, m.window_failures)}</td>
                                        <td>{format::date_time_seconds(m.updated_at)}</td>
                                    </tr>
                                }
                            }).collect_view()}
                        </tbody>
                    </table>
                    </div>
                }.into_any(),
            })}
        </Transition>
        <ForRole role=Role::Admin>
            <section class="card">
                <h2>"Add a merchant"</h2>
                <ActionForm action=create attr:class="form" attr:data-testid="add-merchant">
                    <label>"Name"<input type="text" name="name" required/></label>
                    {move || error_for(&create_errors(), "name").map(|m| view! { <span class="field-error">{m}</span> })}
                    <label>"Webhook URL"<input type="url" name="url" required placeholder="https://shop.example/webhooks"/></label>
                    {move || error_for(&create_errors(), "url").map(|m| view! { <span class="field-error">{m}</span> })}
                    <label>"Signing scheme"
                        <select name="scheme">
                            <option value="sluice">"sluice (X-Webhook-Signature, hex HMAC-SHA256)"</option>
                            <option value="standard_webhooks">"Standard Webhooks (whsec_ secret)"</option>
                        </select>
                    </label>
                    <label>"Secret (empty: generate one)"<input type="password" name="secret" autocomplete="off"/></label>
                    {move || error_for(&create_errors(), "secret").map(|m| view! { <span class="field-error">{m}</span> })}
                    <button type="submit" class="primary">"Add merchant"</button>
                </ActionForm>
                {move || match create.value().get() {
                    Some(Ok(MerchantResult::Invalid(_))) => ().into_any(),
                    other => view! { <ResultNotice result=other done="added"/> }.into_any(),
                }}
            </section>
        </ForRole>
    }
}

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::secret_hint;

    #[test]
    fn hints_reveal_no_secret_characters() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let hint = secret_hint(secret);
        assert_eq!(hint, "whsec_••••••• (38 characters)");
        assert!(!hint.contains("MfKQ"));
        assert_eq!(secret_hint("hunter2"), "••••••• (7 characters)");
    }
}
