//! The webhook pages: Deliveries (filtered list with
//! keyset pagination and bulk retry), one delivery's ladder timeline,
//! Merchants, and Breakers (merchant delivery breakers and upstream breakers).
//!
//! Each page is one file; this module holds what they share: the filter as
//! it travels in the URL, and how instants are written.

mod breakers;
mod detail;
mod list;
mod merchants;
#[cfg(feature = "ssr")]
pub(crate) mod server;

pub use breakers::BreakersPage;
pub use detail::DeliveryPage;
pub use list::DeliveriesPage;
pub use merchants::MerchantsPage;

use serde::{Deserialize, Serialize};

use crate::format::percent_encode;

/// The deliveries filter exactly as it appears in the page's query string,
/// so a filtered view is a link. Empty strings mean "any"; the server parses
/// and validates every field and names the ones it refuses.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryQuery {
    /// `PENDING`, `DELIVERING`, `DELIVERED` or `FAILED`.
    #[serde(default)]
    pub status: Option<String>,
    /// A merchant id (`mer_…`).
    #[serde(default)]
    pub merchant: Option<String>,
    /// An exact event type, e.g. `payment.status_changed`.
    #[serde(default)]
    pub event_type: Option<String>,
    /// `money` or `non_money`.
    #[serde(default)]
    pub money: Option<String>,
    /// `fast` or `slow`.
    #[serde(default)]
    pub ladder: Option<String>,
    /// Created at or after, UTC, `YYYY-MM-DDTHH:MM` (what `datetime-local` sends).
    #[serde(default)]
    pub from: Option<String>,
    /// Created before, UTC.
    #[serde(default)]
    pub to: Option<String>,
}

impl DeliveryQuery {
    /// Read the filter from a query map; blank values are dropped.
    pub fn from_pairs<'a>(get: impl Fn(&str) -> Option<String> + 'a) -> Self {
        let field = |name: &str| get(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        DeliveryQuery {
            status: field("status"),
            merchant: field("merchant"),
            event_type: field("event_type"),
            money: field("money"),
            ladder: field("ladder"),
            from: field("from"),
            to: field("to"),
        }
    }

    fn values(&self) -> [(&'static str, Option<&String>); 7] {
        [
            ("status", self.status.as_ref()),
            ("merchant", self.merchant.as_ref()),
            ("event_type", self.event_type.as_ref()),
            ("money", self.money.as_ref()),
            ("ladder", self.ladder.as_ref()),
            ("from", self.from.as_ref()),
            ("to", self.to.as_ref()),
        ]
    }

    /// `/deliveries?…` for this filter, plus one extra pair (a cursor).
    pub fn href(&self, extra: Option<(&str, &str)>) -> String {
        let mut pairs: Vec<String> =
            self.values().into_iter().filter_map(|(k, v)| v.map(|v| format!("{k}={}", percent_encode(v)))).collect();
        if let Some((k, v)) = extra {
            pairs.push(format!("{k}={}", percent_encode(v)));
        }
        if pairs.is_empty() {
            "/deliveries".to_owned()
        } else {
            format!("/deliveries?{}", pairs.join("&"))
        }
    }

    pub fn is_empty(&self) -> bool {
        self.values().iter().all(|(_, v)| v.is_none())
    }
}


/// The pill class for a delivery status or a breaker state.
pub fn state_class(state: &str) -> &'static str {
    match state {
        "DELIVERED" | "closed" => "pill ok",
        "PENDING" | "DELIVERING" | "probing" | "half_open" => "pill warn",
        "FAILED" | "open" => "pill bad",
        _ => "pill muted",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_round_trips_through_its_link() {
        let q = DeliveryQuery {
            status: Some("FAILED".into()),
            event_type: Some("payment.status_changed".into()),
            from: Some("2026-12-02T14:03".into()),
            ..DeliveryQuery::default()
        };
        let href = q.href(Some(("after", "1.msg_x")));
        assert_eq!(href, "/deliveries?status=FAILED&event_type=payment.status_changed&from=2026-12-02T14%3A03&after=1.msg_x");
        assert_eq!(DeliveryQuery::default().href(None), "/deliveries");
        let blank = DeliveryQuery::from_pairs(|k| (k == "status").then(|| "  ".to_owned()));
        assert!(blank.is_empty());
    }
}
