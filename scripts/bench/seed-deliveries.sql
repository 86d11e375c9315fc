-- Seed a PostgreSQL Sluice database with :n deliveries (default 1,000,000)
-- for the Deliveries page benchmark (docs/benchmarks.md). One INSERT … SELECT
-- per table over generate_series: about a minute for a million rows.
--
--   psql "$DATABASE_URL" -v n=1000000 -f scripts/bench/seed-deliveries.sql
--
-- 20 merchants (`mer_bench001` …), eight event types, creation times spread
-- evenly over the last 30 days; 90 % DELIVERED, 5 % FAILED, 4 % PENDING,
-- 1 % DELIVERING; a third of the money-type events are money events.
\if :{?n}
\else
\set n 1000000
\endif

BEGIN;
INSERT INTO merchants (id, name, url, scheme, secret, previous_secret, previous_secret_expires_at, created_at, updated_at)
SELECT 'mer_bench' || lpad(i::text, 3, '0'), 'Bench Shop ' || i, 'https://shop' || i || '.example/webhooks', 'sluice',
       md5(random()::text), NULL, NULL, 1764547200000, 1764547200000
FROM generate_series(1, 20) AS i;
INSERT INTO merchant_breakers (merchant_id, state, version, pause_ms, failed_probes, opened_at, next_probe_at,
                               probe_delivery_id, probe_started_at, counters_since, updated_at)
SELECT id, 'closed', 0, 300000, 0, NULL, NULL, NULL, NULL, 1764547200000, 1764547200000
FROM merchants WHERE id LIKE 'mer_bench%';

CREATE TEMP TABLE bench_rows ON COMMIT DROP AS
SELECT i,
       'mer_bench' || lpad((1 + i % 20)::text, 3, '0') AS merchant_id,
       (ARRAY['payment.status_changed', 'order.created', 'order.updated', 'refund.completed',
              'withdrawal.status_changed', 'kyc.status_changed', 'shipment.updated', 'exchange.status_changed'])[1 + (i * 7) % 8] AS event_type,
       CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT) - CAST(i AS BIGINT) * (2592000000 / :n) AS at,
       CASE WHEN i % 100 < 90 THEN 'DELIVERED' WHEN i % 100 < 95 THEN 'FAILED' WHEN i % 100 < 99 THEN 'PENDING' ELSE 'DELIVERING' END AS status
FROM generate_series(1, :n) AS i;

INSERT INTO events (id, merchant_id, event_type, status, is_money, payload, idempotency_key, created_at)
SELECT 'evt_bench' || i, merchant_id, event_type, 'paid',
       event_type IN ('payment.status_changed', 'refund.completed', 'withdrawal.status_changed', 'exchange.status_changed') AND i % 3 = 0,
       '{"status":"paid","order":"o-' || i || '"}', 'bench-' || i, at
FROM bench_rows;

INSERT INTO deliveries (id, event_id, merchant_id, event_type, is_money, status, ladder, fast_attempts, slow_steps,
                        slow_started_at, cycle_started_at, next_attempt_at, lease_owner, lease_until, deferred, deferrals,
                        last_deferred_at, last_status_code, last_error, failed_reason, created_at, updated_at, finished_at)
SELECT 'msg_bench' || lpad(i::text, 8, '0'), 'evt_bench' || i, merchant_id, event_type,
       event_type IN ('payment.status_changed', 'refund.completed', 'withdrawal.status_changed', 'exchange.status_changed') AND i % 3 = 0,
       status,
       CASE WHEN status = 'FAILED' AND i % 2 = 0 THEN 'slow' ELSE 'fast' END,
       CASE WHEN status = 'DELIVERED' THEN 0 ELSE 1 + i % 10 END, 0, NULL, at,
       CASE WHEN status IN ('PENDING', 'DELIVERING') THEN at + CAST(86400000 AS BIGINT) * 40 ELSE at END,
       CASE WHEN status = 'DELIVERING' THEN 'bench' END, CASE WHEN status = 'DELIVERING' THEN at + CAST(86400000 AS BIGINT) * 40 END,
       FALSE, 0, NULL,
       CASE WHEN status = 'DELIVERED' THEN 200 WHEN status = 'FAILED' THEN 410 ELSE 503 END, NULL,
       CASE WHEN status = 'FAILED' THEN 'non_money_client_error' END,
       at, at, CASE WHEN status IN ('DELIVERED', 'FAILED') THEN at END
FROM bench_rows;
COMMIT;
ANALYZE merchants;
ANALYZE events;
ANALYZE deliveries;
