//! `DELETE /api/v1/leases/{id}`: give a concurrency lease back.
//!
//! The id handed to clients is opaque: hex of `account:scope:lease:rule`, so
//! the release finds the bucket without server-side bookkeeping. Accounts and
//! scopes cannot contain ':' and lease ids have none; the rule id comes last
//! so it may.

use axum::extract::State;
use axum::http::StatusCode;
use sluice_engine::quota::{BucketKey, Lease, RuleId};

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::Caller;
use super::error::{ApiError, ErrorOut, Path};
use crate::state::AppState;
use sluice_engine::tokens::ApiScope;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(delete_lease))
}

pub fn encode_lease_id(lease: &Lease) -> String {
    let b = &lease.bucket;
    format!("lse_{}", hex::encode(format!("{}:{}:{}:{}", b.account, b.scope, lease.id, b.rule.0)))
}

pub fn decode_lease_id(id: &str) -> Option<Lease> {
    let raw = hex::decode(id.strip_prefix("lse_")?).ok()?;
    let raw = String::from_utf8(raw).ok()?;
    let mut parts = raw.splitn(4, ':');
    let (account, scope, lease, rule) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if [account, scope, lease, rule].iter().any(|p| p.is_empty()) {
        return None;
    }
    // The same account rule as for permits: an id carrying anything else was
    // not issued here.
    sluice_engine::account::parse_account(Some(account)).ok()?;
    Some(Lease {
        bucket: BucketKey { account: account.to_owned(), scope: scope.to_owned(), rule: RuleId(rule.to_owned()) },
        id: lease.to_owned(),
    })
}

#[utoipa::path(delete, path = "/api/v1/leases/{id}", tag = "quota",
    params(("id" = String, Path, description = "The `lease_id` of a permit")),
    security(("bearer" = [])),
    responses(
        (status = 204, description = "Released (also when it had already expired)"),
        (status = 404, description = "Not a lease id", body = ErrorOut),
        (status = 503, description = "Quota store unavailable (`store_unavailable`)", body = ErrorOut),
    ))]
pub async fn delete_lease(State(state): State<AppState>, caller: Caller, Path(id): Path<String>) -> Result<StatusCode, ApiError> {
    caller.require(ApiScope::Worker)?;
    let lease = decode_lease_id(&id).ok_or_else(|| ApiError::not_found("not a lease id issued by this API"))?;
    state.limiter.release(&lease).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_ids_round_trip_and_garbage_is_rejected() {
        let lease = Lease {
            bucket: BucketKey { account: "acct".into(), scope: "pricing".into(), rule: RuleId("rule:odd".into()) },
            id: "lease_01".into(),
        };
        assert_eq!(decode_lease_id(&encode_lease_id(&lease)), Some(lease));
        assert_eq!(decode_lease_id("lse_zz"), None);
        assert_eq!(decode_lease_id("nope"), None);
        assert_eq!(decode_lease_id(&format!("lse_{}", hex::encode("a:b:c"))), None);
        assert_eq!(decode_lease_id(&format!("lse_{}", hex::encode("a\nb:pricing:lease_01:r"))), None);
    }
}
