//! Integration tests of the shared-quota limiter: one binary (to keep link
//! time down) with the contract suite per backend, ManualClock scenarios,
//! multi-process races, Redis Cluster, Redis outages and rule hot reload.

#[macro_use]
mod contract;
mod forgetting;
mod history;
mod procs;
mod redis_ops;
mod rules;
mod scenarios;
mod support;

macro_rules! all_contract_cases {
    ($backend:expr) => {
        contract_tests!($backend;
            token_bucket_gives_the_burst_then_books_at_the_steady_rate,
            fixed_windows_are_aligned_to_the_unix_epoch,
            sliding_log_allows_tokens_per_interval_exactly,
            single_token_rules_may_wait_two_intervals_plus_five_seconds,
            multi_token_rules_may_wait_one_interval_plus_five_seconds,
            concurrent_reservations_get_distinct_slots_in_order,
            a_429_blocks_the_bucket_until_retry_after_or_one_refill,
            rate_limit_headers_lower_the_bucket_and_never_raise_it,
            peek_reads_usage_without_consuming,
            shadow_rules_record_but_never_block,
            requests_matching_no_rule_are_refused_not_unlimited,
            costs_above_one_spend_several_tokens_and_too_large_costs_are_errors,
            concurrency_leases_cap_in_flight_requests_and_expire,
            accounts_have_separate_buckets_and_all_are_listed,
            lanes_book_within_their_own_horizons,
            window_lanes_reserve_one_interval_for_high,
        );
    };
}

mod quota_contract_memory {
    use crate::support::Backend;
    all_contract_cases!(Backend::Memory);
}

mod quota_contract_redis {
    use crate::support::Backend;
    all_contract_cases!(Backend::redis());
}

mod quota_contract_parity {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn random_sequences_agree_between_the_rust_and_lua_math() {
        crate::contract::random_sequences_agree_between_the_rust_and_lua_math().await;
    }
}
