"""The Python client against a real Sluice server (scripts/contract.sh starts
one and passes SLUICE_URL, SLUICE_WORKER_TOKEN and SLUICE_ADMIN_TOKEN) and a
real upstream HTTP server on loopback. Pauses go to a recorder instead of
sleeping, so the tests check every wait the client would make."""

from __future__ import annotations

import json
import os
import random
import socket
import threading
import urllib.error
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest

from sluice_client import GaveUp, Refused, RetryPolicy, Sluice, SluiceError, Target, call

URL = os.environ.get("SLUICE_URL", "")
pytestmark = pytest.mark.skipif(not URL, reason="needs a running server: run scripts/contract.sh")


class Recorder:
    """Stands in for time.sleep: records each pause in seconds."""

    def __init__(self) -> None:
        self.pauses: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.pauses.append(seconds)


@pytest.fixture
def pauses() -> Recorder:
    return Recorder()


@pytest.fixture
def sluice(pauses: Recorder) -> Sluice:
    return Sluice(URL, os.environ["SLUICE_WORKER_TOKEN"], sleep=pauses)


@pytest.fixture
def admin() -> Sluice:
    return Sluice(URL, os.environ["SLUICE_ADMIN_TOKEN"])


def rule(admin: Sluice, tokens: int, interval_ms: int) -> str:
    """A fresh scope with one limit rule; returns the scope."""
    scope = f"py_{uuid.uuid4().hex[:12]}"
    status, _, body = admin._call("POST", "/api/v1/limits", {"scope": scope, "tokens": tokens, "interval_ms": interval_ms})
    assert status == 201, body
    return scope


class Upstream:
    """A real HTTP server answering a scripted list of (status, headers); a
    status of 0 closes the connection without answering."""

    def __init__(self, script: list[tuple[int, dict[str, str]]]) -> None:
        self.script = list(script)
        self.requests = 0
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                self.answer()

            def do_POST(self) -> None:  # noqa: N802
                self.answer()

            def answer(self) -> None:
                upstream.requests += 1
                status, headers = upstream.script.pop(0) if upstream.script else (200, {})
                if status == 0:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def send(self, method: str = "GET"):
        def attempt(_: int) -> Any:
            request = urllib.request.Request(self.url + "/x", method=method, data=b"{}" if method == "POST" else None)
            try:
                return urllib.request.urlopen(request, timeout=5)
            except urllib.error.HTTPError as error:
                return error

        return attempt


@pytest.fixture
def upstream() -> Iterator[Any]:
    servers: list[Upstream] = []

    def make(*script: tuple[int, dict[str, str]]) -> Upstream:
        servers.append(Upstream(list(script)))
        return servers[-1]

    yield make
    for server in servers:
        server.server.shutdown()


def test_a_permit_waits_for_its_booked_slot_then_is_refused_past_the_ceiling(sluice: Sluice, admin: Sluice, pauses: Recorder) -> None:
    scope = rule(admin, tokens=1, interval_ms=60_000)
    target = Target(scope=scope, path="/feed", account="a1")
    assert sluice.permit(target).waited_ms == 0
    second = sluice.permit(target)
    assert 59_000 <= second.waited_ms <= 60_000
    assert pauses.pauses == [second.waited_ms / 1000]
    # One request a minute: the ceiling is 2 × 60 s + 5 s, so a third waits
    # two minutes and a fourth is refused.
    assert second.wait_ceiling_ms == 125_000
    sluice.permit(target)
    with pytest.raises(Refused) as refused:
        sluice.permit(target)
    assert refused.value.reason == "wait_ceiling_exceeded"
    assert refused.value.retry_after_ms is not None and refused.value.retry_after_ms > 125_000


def test_a_429_response_blocks_the_bucket_for_its_retry_after(sluice: Sluice, admin: Sluice, pauses: Recorder) -> None:
    scope = rule(admin, tokens=100, interval_ms=1000)
    target = Target(scope=scope, path="/p", method="PUT", account="a2")
    penalty = sluice.penalty(target, 429, {"retry-after": "30"})
    assert penalty is not None and penalty.blocked_ms == 30_000
    permit = sluice.permit(target)
    assert 29_000 <= permit.waited_ms <= 30_000


def test_an_unreadable_retry_after_is_dropped_and_the_429_still_counts(sluice: Sluice, admin: Sluice) -> None:
    scope = rule(admin, tokens=100, interval_ms=1000)
    target = Target(scope=scope, path="/p", account="a3")
    for value in ["1.5", "+5", "soon"]:
        penalty = sluice.penalty(target, 429, {"Retry-After": value})
        # One token's refill (10 ms): the Rust executor ignores such values too.
        assert penalty is not None and penalty.blocked_ms == 10, value


def test_rate_limit_headers_of_a_success_are_observed_and_plain_successes_cost_nothing(sluice: Sluice, admin: Sluice) -> None:
    scope = rule(admin, tokens=100, interval_ms=1000)
    target = Target(scope=scope, path="/p", account="a4")
    assert sluice.penalty(target, 200, {}) is None
    observed = sluice.penalty(target, 200, {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "20"})
    assert observed is not None and observed.observed


def test_low_takes_only_a_free_permit_and_high_books_one_slot_beyond_normal(sluice: Sluice, admin: Sluice, pauses: Recorder) -> None:
    scope = rule(admin, tokens=1, interval_ms=60_000)
    low = Target(scope=scope, path="/feed", account="lanes", priority="low")
    assert sluice.permit(low).waited_ms == 0
    with pytest.raises(Refused) as refused:
        sluice.permit(low)
    assert refused.value.reason == "wait_ceiling_exceeded"
    # Normal books the next two minutes (its ceiling is 2 × 60 s + 5 s)…
    normal = Target(scope=scope, path="/feed", account="lanes")
    sluice.permit(normal)
    sluice.permit(normal)
    with pytest.raises(Refused):
        sluice.permit(normal)
    # …and high the minute after, which normal may not take.
    high = Target(scope=scope, path="/feed", account="lanes", priority="high")
    assert 179_000 <= sluice.permit(high).waited_ms <= 180_000
    assert len(pauses.pauses) == 3


def test_a_422_names_each_invalid_field(sluice: Sluice) -> None:
    with pytest.raises(SluiceError) as error:
        sluice.permit(Target(scope="", path="relative"))
    assert error.value.status == 422
    assert [f.field for f in error.value.fields] == ["scope", "path"]
    with pytest.raises(SluiceError) as error:
        sluice.permit(Target(scope="s", path="/p", priority="urgent"))
    assert (error.value.status, [f.field for f in error.value.fields]) == (422, ["priority"])


def test_the_same_event_key_twice_stores_one_event(sluice: Sluice, admin: Sluice) -> None:
    status, _, merchant = admin._call("POST", "/api/v1/merchants", {"name": "Py Shop", "url": "https://merchant.example/hook"})
    assert status == 201, merchant
    merchant_id = merchant["merchant"]["id"]
    key = f"order-{uuid.uuid4().hex}"
    first = sluice.send_event(merchant_id, "payment.status_changed", {"status": "paid"}, key)
    again = sluice.send_event(merchant_id, "payment.status_changed", {"status": "paid"}, key)
    assert (first.duplicate, again.duplicate) == (False, True)
    assert first.event_id == again.event_id and len(first.delivery_ids) == 1


def test_a_batch_of_events_gets_one_result_per_event(sluice: Sluice, admin: Sluice) -> None:
    status, _, merchant = admin._call("POST", "/api/v1/merchants", {"name": "Py Batch", "url": "https://merchant.example/hook"})
    assert status == 201, merchant
    merchant_id = merchant["merchant"]["id"]
    key = f"batch-{uuid.uuid4().hex}"
    event = {"merchant_id": merchant_id, "event_type": "order.created", "payload": {"n": 1}, "idempotency_key": key}
    results = sluice.send_events([event, event, event | {"merchant_id": "mer_unknown", "idempotency_key": key + "-x"}])
    assert [r.status for r in results] == [201, 200, 422]
    assert results[0].event is not None and results[1].event is not None
    assert results[1].event.event_id == results[0].event.event_id and results[1].event.duplicate
    assert results[2].error is not None and results[2].error.code == "unknown_merchant"


def test_the_retry_helper_backs_off_on_5xx_and_waits_out_a_429(sluice: Sluice, admin: Sluice, pauses: Recorder, upstream: Any) -> None:
    scope = rule(admin, tokens=100, interval_ms=1000)
    target = Target(scope=scope, path="/x", method="GET", account="r1")
    server = upstream((503, {}), (429, {"Retry-After": "2"}), (200, {}))
    expected = random.Random(7)
    jitters = [expected.random() * 500 for _ in range(2)]
    response = call(sluice, target, server.send(), rng=random.Random(7))
    assert response.status == 200 and server.requests == 3
    first, second = jitters
    # 503 after attempt 1: 500 ms + jitter. 429 after attempt 2: the penalty
    # (2 s) beats the backoff (1 s + jitter). Then the permit waits out what is
    # left of the penalty on the server's clock (the recorder did not sleep).
    assert pauses.pauses[0] == pytest.approx((500 + first) / 1000)
    assert pauses.pauses[1] == pytest.approx(2.0)
    assert len(pauses.pauses) == 3 and 1.5 <= pauses.pauses[2] <= 2.0


def test_the_retry_helper_gives_up_with_the_executors_reasons(sluice: Sluice, admin: Sluice, upstream: Any) -> None:
    scope = rule(admin, tokens=100, interval_ms=1000)
    target = Target(scope=scope, path="/x", method="GET", account="r2")
    server = upstream((503, {}), (503, {}), (503, {}))
    with pytest.raises(GaveUp) as gave_up:
        call(sluice, target, server.send())
    assert (gave_up.value.reason, gave_up.value.attempts, gave_up.value.last.status) == ("attempts_exhausted", 3, 503)

    # A POST whose connection broke may have been acted on: not repeated.
    post = Target(scope=scope, path="/x", method="POST", account="r2")
    server = upstream((0, {}))
    with pytest.raises(GaveUp) as gave_up:
        call(sluice, post, server.send("POST"))
    assert (gave_up.value.reason, server.requests) == ("unsafe_to_repeat", 1)

    # 404 is the upstream's answer: returned after one attempt.
    server = upstream((404, {}))
    assert call(sluice, target, server.send()).status == 404 and server.requests == 1

    with pytest.raises(GaveUp) as gave_up:
        call(sluice, Target(scope="nobody_has_this_scope", path="/x"), server.send())
    assert gave_up.value.reason == "no_rule"

    # The budget is checked once the permit is in hand: a clock that moved
    # past it by then gives up before sending.
    ticks = iter([0.0, 10.0])
    with pytest.raises(GaveUp) as gave_up:
        call(sluice, target, server.send(), policy=RetryPolicy(total_budget_ms=1_000), now=lambda: next(ticks))
    assert (gave_up.value.reason, server.requests) == ("budget_exhausted", 1)


def _has_route(path: str) -> bool:
    with urllib.request.urlopen(URL + "/api/openapi.json") as response:
        return path in json.load(response)["paths"]


def test_the_upstream_breaker_opens_after_five_reported_failures_and_permits_are_refused(sluice: Sluice, admin: Sluice, upstream: Any) -> None:
    if not _has_route("/api/v1/upstream-breakers/report"):
        pytest.skip("this server has no upstream breaker endpoints")
    scope = rule(admin, tokens=100, interval_ms=1000)
    target = Target(scope=scope, path="/x", method="GET", account="b1")
    server = upstream(*[(503, {})] * 6)
    policy = RetryPolicy(max_attempts=5, base_delay_ms=1)
    with pytest.raises(GaveUp):
        call(sluice, target, server.send(), policy=policy, breaker=True)
    assert sluice.admit(scope, "b1").state == "open"
    with pytest.raises(GaveUp) as gave_up:
        call(sluice, target, server.send(), breaker=True)
    assert gave_up.value.reason == "breaker_open" and server.requests == 5


def test_policies_are_validated() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)
    assert RetryPolicy().delay_ms(1, 0, 429, 90_000, 65_000) == 65_000
    assert RetryPolicy(wait_ceiling_ms=1_000).delay_ms(3, 0, 429, None, 65_000) == 1_000
    assert RetryPolicy().delay_ms(2, 100, 503, 90_000, None) == 1_100



def set_profile(admin: Sluice, scope: str, profile: dict[str, Any]) -> None:
    status, _, body = admin._call("PUT", f"/api/v1/retry-profiles/{scope}", profile)
    assert status == 200, body


def test_the_retry_helper_retries_by_the_scopes_retry_profile_from_the_server(sluice: Sluice, admin: Sluice, pauses: Recorder, upstream: Any) -> None:
    if not _has_route("/api/v1/retry-profiles/{scope}"):
        pytest.skip("this server has no retry profiles")
    scope = rule(admin, tokens=100, interval_ms=1000)
    set_profile(admin, scope, {"preset": "vtex"})
    policy = RetryPolicy.from_profile(sluice.retry_profile(scope))
    assert (policy.max_attempts, policy.jitter, policy.max_delay_ms, policy.retry_on) == (6, "equal", 60_000, ("429", "503"))
    target = Target(scope=scope, path="/x", method="GET", account="p1")
    # VTEX: a 500 is not retried; the answer comes back after one attempt.
    server = upstream((500, {}), (200, {}))
    assert call(sluice, target, server.send()).status == 500 and server.requests == 1
    # 503 twice: min(60 s, 1 s × 2^k) × (0.5 + u/2) for k = 0, 1, with the same draws.
    server = upstream((503, {}), (503, {}), (200, {}))
    draws = random.Random(11)
    expected = [1.0 * (0.5 + draws.random() / 2), 2.0 * (0.5 + draws.random() / 2)]
    assert call(sluice, target, server.send(), rng=random.Random(11)).status == 200
    assert pauses.pauses == pytest.approx(expected)
    # A network failure is not retried under VTEX's rules.
    server = upstream((0, {}))
    with pytest.raises(GaveUp) as gave_up:
        call(sluice, target, server.send())
    assert (gave_up.value.reason, server.requests) == ("network_not_retried", 1)


def test_a_scope_without_a_profile_of_its_own_uses_the_default_policy(sluice: Sluice, admin: Sluice) -> None:
    if not _has_route("/api/v1/retry-profiles/{scope}"):
        pytest.skip("this server has no retry profiles")
    assert RetryPolicy.from_profile(sluice.retry_profile(rule(admin, tokens=100, interval_ms=1000))) == RetryPolicy()


def test_every_jitter_shape_stays_under_its_cap_and_the_vtex_numbers_hold() -> None:
    for jitter in ("additive", "none", "full", "equal", "decorrelated"):
        policy = RetryPolicy(base_delay_ms=1000, max_delay_ms=60_000, jitter=jitter)
        for attempt in range(1, 13):
            for u in (0.0, 0.3, 0.999):
                assert 0 <= policy.shaped_backoff_ms(attempt, u, 40_000) <= 60_000, (jitter, attempt, u)
    vtex = RetryPolicy(max_attempts=6, base_delay_ms=1000, max_delay_ms=60_000, jitter="equal", retry_on=("429", "503"))
    assert [vtex.shaped_backoff_ms(1, 0.0), vtex.shaped_backoff_ms(5, 0.5), vtex.shaped_backoff_ms(7, 0.0)] == [500, 12_000, 30_000]
    assert vtex.pause_ms(500, 429, 30_000, 125_000) == 30_000, "Retry-After takes precedence when longer"
    assert RetryPolicy(max_delay_ms=10_000, retry_after="cap").pause_ms(500, 429, 30_000, 125_000) == 10_000
    assert RetryPolicy(retry_after="ignore").pause_ms(500, 429, 30_000, 125_000) == 500
    assert vtex.retries(503) and not vtex.retries(500) and not vtex.retries(None)
    with pytest.raises(ValueError):
        RetryPolicy(jitter="gaussian")
