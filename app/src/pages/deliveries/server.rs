//! Server side of the webhook pages: parsing what the browser sends into
//! engine values (once, here), the audit helper, and error mapping.

use sluice_engine::clock::Timestamp;
use sluice_engine::delivery::model::{Cursor, DeliveryFilter, DeliveryId, MerchantId};

use super::DeliveryQuery;
use crate::model::FieldError;

pub use crate::ssr::set_status;

/// Parse the filter; every refused field is reported, not only the first.
pub fn parse_filter(q: &DeliveryQuery) -> Result<DeliveryFilter, Vec<FieldError>> {
    let mut f = DeliveryFilter::default();
    let mut errors = Vec::new();
    let mut bad = |field: &str, message: String| errors.push(FieldError::new(field, message));
    if let Some(s) = &q.status {
        match s.to_uppercase().parse() {
            Ok(s) => f.status = Some(s),
            Err(_) => bad("status", format!("'{s}' is not a status; use PENDING, DELIVERING, DELIVERED or FAILED")),
        }
    }
    if let Some(m) = &q.merchant {
        match MerchantId::parse(m) {
            Ok(m) => f.merchant_id = Some(m),
            Err(_) => bad("merchant", format!("'{m}' is not a merchant id (mer_…)")),
        }
    }
    if let Some(t) = &q.event_type {
        if t.len() > 128 || t.chars().any(char::is_whitespace) {
            bad("event_type", "an event type is one word of at most 128 characters".to_owned());
        } else {
            f.event_type = Some(t.clone());
        }
    }
    match q.money.as_deref() {
        None | Some("any") => {}
        Some("money") => f.is_money = Some(true),
        Some("non_money") => f.is_money = Some(false),
        Some(other) => bad("money", format!("'{other}' is not one of money, non_money")),
    }
    if let Some(l) = &q.ladder {
        match l.to_lowercase().parse() {
            Ok(l) => f.ladder = Some(l),
            Err(_) => bad("ladder", format!("'{l}' is not a ladder; use fast or slow")),
        }
    }
    for (field, value, slot) in [("from", &q.from, &mut f.created_from), ("to", &q.to, &mut f.created_to)] {
        if let Some(v) = value {
            match parse_utc(v) {
                Some(ms) => *slot = Some(Timestamp::from_millis(ms)),
                None => bad(field, format!("'{v}' is not a UTC time like 2026-12-02T14:03")),
            }
        }
    }
    if let (Some(from), Some(to)) = (f.created_from, f.created_to) {
        if from >= to {
            bad("to", "the end of the time range must be after its start".to_owned());
        }
    }
    if errors.is_empty() {
        Ok(f)
    } else {
        Err(errors)
    }
}

/// `2026-12-02T14:03`, `2026-12-02 14:03:07` or `2026-12-02` (UTC) as Unix ms.
pub fn parse_utc(s: &str) -> Option<i64> {
    let s = s.trim().trim_end_matches('Z');
    let (date, time) = match s.split_once(['T', ' ']) {
        Some((d, t)) => (d, t),
        None => (s, "00:00"),
    };
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.splitn(3, ':').map(|p| p.parse::<i64>().ok());
    let (h, min) = (t.next()??, t.next()??);
    let sec = t.next().unwrap_or(Some(0))?;
    if !(1970..=9999).contains(&y) || !(0..24).contains(&h) || !(0..60).contains(&min) || !(0..60).contains(&sec) {
        return None;
    }
    let month = time::Month::try_from(u8::try_from(m).ok()?).ok()?;
    let date = time::Date::from_calendar_date(i32::try_from(y).ok()?, month, u8::try_from(day).ok()?).ok()?;
    let midnight = date.midnight().assume_utc().unix_timestamp();
    Some((midnight + (h * 60 + min) * 60 + sec) * 1000)
}

/// A page cursor as it appears in links: `<created_at ms>.<delivery id>`.
pub fn cursor_text(c: &Cursor) -> String {
    format!("{}.{}", c.created_at.as_millis(), c.id)
}

pub fn parse_cursor(s: &str) -> Option<Cursor> {
    let (ms, id) = s.split_once('.')?;
    Some(Cursor { created_at: Timestamp::from_millis(ms.parse().ok()?), id: DeliveryId::parse(id).ok()? })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_times_parse_in_the_forms_browsers_send() {
        assert_eq!(parse_utc("1970-01-01"), Some(0));
        assert_eq!(parse_utc("2026-12-02T14:03"), Some(1_796_220_180_000));
        assert_eq!(parse_utc("2026-12-02 14:03:07"), Some(1_796_220_187_000));
        assert_eq!(parse_utc("2000-02-29T00:00"), Some(951_782_400_000));
        for bad in ["", "yesterday", "2026-13-01", "2026-02-30T00:00", "2026-12-02T24:00", "2026-12-02T10"] {
            assert_eq!(parse_utc(bad), None, "{bad}");
        }
    }

    #[test]
    fn every_bad_field_is_named() {
        let q = DeliveryQuery {
            status: Some("LOST".into()),
            merchant: Some("shop".into()),
            money: Some("maybe".into()),
            from: Some("2026-12-02T10:00".into()),
            to: Some("2026-12-02T09:00".into()),
            ..DeliveryQuery::default()
        };
        let fields: Vec<String> = parse_filter(&q).unwrap_err().into_iter().map(|e| e.field).collect();
        assert_eq!(fields, ["status", "merchant", "money", "to"]);
        let ok = DeliveryQuery { status: Some("failed".into()), ladder: Some("slow".into()), ..DeliveryQuery::default() };
        let f = parse_filter(&ok).expect("valid");
        assert_eq!(f.status.map(|s| s.as_str()), Some("FAILED"));
    }

    #[test]
    fn cursors_round_trip_and_refuse_junk() {
        let c = Cursor { created_at: Timestamp::from_millis(1_796_220_187_123), id: DeliveryId::parse("msg_01ABC").expect("id") };
        assert_eq!(parse_cursor(&cursor_text(&c)), Some(c));
        for bad in ["", "12", "x.msg_1", "12.evt_1", "12.msg_"] {
            assert_eq!(parse_cursor(bad), None, "{bad}");
        }
    }
}
