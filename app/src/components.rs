//! Small building blocks shared by pages.

use leptos::prelude::*;

use crate::model::ComponentState;

/// A coloured pill for the state of a dependency.
#[component]
pub fn StatePill(state: ComponentState) -> impl IntoView {
    let (class, text) = match &state {
        ComponentState::Up => ("pill ok", "up".to_owned()),
        ComponentState::NotConfigured => ("pill muted", "not configured".to_owned()),
        ComponentState::Down(why) => ("pill bad", format!("down: {why}")),
    };
    view! { <span class=class>{text}</span> }
}

/// "updated 3 s ago", counting up in the browser once the page is hydrated.
/// `tick` is a signal the page bumps every second.
#[component]
pub fn FreshnessClock(seconds: ReadSignal<u32>) -> impl IntoView {
    view! {
        <span class="freshness" data-testid="freshness">
            "live · updated " {move || seconds.get()} " s ago"
        </span>
    }
}

/// "2026-12-02 14:03 UTC" from Unix ms (no timezone database in wasm; UTC is
/// what the audit log and the server logs use too).
pub fn format_ms(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02} UTC", rem / 3600, rem % 3600 / 60)
}

#[cfg(test)]
mod tests {
    use super::format_ms;

    #[test]
    fn formats_unix_milliseconds_as_utc() {
        assert_eq!(format_ms(0), "1970-01-01 00:00 UTC");
        assert_eq!(format_ms(1_796_220_180_000), "2026-12-02 14:03 UTC");
        assert_eq!(format_ms(951_782_400_000), "2000-02-29 00:00 UTC");
    }
}
