//! The demo's delivery timings, apart from the rest of the demo so that
//! startup can choose them without depending on the demo's runner.

use std::time::Duration;

use sluice_engine::delivery::ladder::LadderConfig;
use sluice_engine::delivery::merchant_breaker::MerchantBreakerConfig;

/// The delivery timings of the demo: the product's ladders and breaker
/// (docs/delivery.md) with the long pauses shortened, so a delivery climbs both
/// ladders and a breaker opens and probes within a minute or two:
/// - fast ladder unchanged (1 s, 2 s, 4 s, … already visible);
/// - slow ladder ÷ 60: 15 s, 1 min, 4 min, 12 min, 24 min, ceiling 48 min;
/// - breaker: first pause 20 s (doubling to at most 2 min), deferrals
///   re-checked every 5 s; window and thresholds unchanged.
pub fn demo_timing() -> (LadderConfig, MerchantBreakerConfig) {
    let product = LadderConfig::default();
    let ladder = LadderConfig {
        slow_pauses: product.slow_pauses.iter().map(|p| *p / 60).collect(),
        slow_ceiling: product.slow_ceiling / 60,
        ..product
    };
    let breaker = MerchantBreakerConfig {
        base_pause: Duration::from_secs(20),
        max_pause: Duration::from_secs(120),
        defer: Duration::from_secs(5),
        probe_lease: Duration::from_secs(20),
        ..MerchantBreakerConfig::default()
    };
    (ladder, breaker)
}
