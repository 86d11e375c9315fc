//! Which events move money. Money events get the slow ladder on a 4xx instead
//! of failing at once (docs/delivery.md). The list is exact: anything not on
//! it, including unknown types and statuses, is non-money.

/// True for the events that record an actual movement of money:
/// `payment.status_changed` with status `paid`, `settled` or `refunded`;
/// `withdrawal.status_changed` and `exchange.status_changed` with `completed`;
/// `refund.completed` and `refund.reversed` (any status).
pub fn is_money_event(event_type: &str, status: Option<&str>) -> bool {
    matches!(
        (event_type, status),
        ("payment.status_changed", Some("paid" | "settled" | "refunded"))
            | ("withdrawal.status_changed" | "exchange.status_changed", Some("completed"))
            | ("refund.completed" | "refund.reversed", _)
    )
}

/// The status an event is classified by: the explicit one, else the payload's
/// top-level `"status"` string.
pub fn event_status<'a>(explicit: Option<&'a str>, payload: &'a serde_json::Value) -> Option<&'a str> {
    explicit.or_else(|| payload.get("status").and_then(serde_json::Value::as_str))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exactly_the_listed_events_move_money() {
        for (t, s) in [
            ("payment.status_changed", Some("paid")),
            ("payment.status_changed", Some("settled")),
            ("payment.status_changed", Some("refunded")),
            ("withdrawal.status_changed", Some("completed")),
            ("exchange.status_changed", Some("completed")),
            ("refund.completed", None),
            ("refund.reversed", Some("anything")),
        ] {
            assert!(is_money_event(t, s), "{t} {s:?} is money");
        }
        for (t, s) in [
            ("payment.status_changed", Some("amount_mismatch")),
            ("payment.status_changed", Some("expired")),
            ("payment.status_changed", Some("cancelled")),
            ("payment.status_changed", Some("failed")),
            ("payment.status_changed", Some("PAID")),
            ("payment.status_changed", None),
            ("withdrawal.status_changed", Some("failed")),
            ("exchange.status_changed", Some("paid")),
            ("refund.rejected", None),
            ("refund.failed", None),
            ("subscription.status_changed", Some("paid")),
            ("kyc.status_changed", Some("completed")),
            ("gateway.status_changed", None),
            ("payment.delivery_proof_reminder", None),
            ("unknown.type", Some("completed")),
        ] {
            assert!(!is_money_event(t, s), "{t} {s:?} is not money");
        }
    }

    #[test]
    fn the_status_comes_from_the_payload_when_not_given() {
        let payload = serde_json::json!({"status": "paid", "amount": 10});
        assert_eq!(event_status(None, &payload), Some("paid"));
        assert_eq!(event_status(Some("settled"), &payload), Some("settled"));
        assert_eq!(event_status(None, &serde_json::json!({"status": 1})), None);
    }
}
