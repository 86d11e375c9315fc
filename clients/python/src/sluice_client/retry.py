"""Calling an upstream API the way Sluice's Rust executor does (docs/retry.md).

Every attempt asks the upstream breaker (when enabled) and takes a permit; a
429 is reported first (the server parses ``Retry-After``, so every language
reads it alike) and then waited out; the outcomes the policy retries back off
exponentially by its jitter shape; a give-up says why. The policy is the
scope's retry profile, fetched from the server (``Sluice.retry_profile``),
unless the caller passes one.

Delay after failed attempt ``n``, with ``e = base × 2^(n−1)``, ``c = min(cap, e)``
and one uniform draw ``u`` in ``[0, 1)``:

- backoff: ``additive`` ``min(cap, e + u × base)`` (the default), ``none`` ``c``,
  ``full`` ``u × c``, ``equal`` ``c × (0.5 + u/2)``, ``decorrelated``
  ``min(cap, base + u × (3 × previous − base))``;
- 429: ``min(max(hint, backoff), ceiling)`` where ``hint`` is the penalty the
  server applied (``max(Retry-After, one token's refill)``), whole
  (``honour``), at most the cap (``cap``) or not at all (``ignore``), and the
  ceiling is the rule's wait ceiling (or the policy's own); other retried
  outcomes wait the backoff.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Generic, Optional, TypeVar

from .client import Refused, Sluice, SluiceError, Target

__all__ = ["GaveUp", "RetryPolicy", "call"]

R = TypeVar("R")

log = logging.getLogger(__name__)

IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})

# Permit refusals and what the executor calls them when it gives up.
REFUSAL_REASONS = {
    "wait_ceiling_exceeded": "wait_ceiling",
    "concurrency_limit": "concurrency_limit",
    "store_unavailable": "store_unavailable",
    "breaker_open": "breaker_open",
}


DAY_MS = 86_400_000
JITTERS = ("additive", "none", "full", "equal", "decorrelated")


@dataclass(frozen=True)
class RetryPolicy:
    """A retry policy; the defaults are the Rust executor's: 3 attempts, 500 ms
    base, additive jitter, no cap, 429/5xx/network retried, 180 s budget."""

    max_attempts: int = 3
    base_delay_ms: int = 500
    total_budget_ms: int = 180_000
    #: Overrides the rule's wait ceiling when set.
    wait_ceiling_ms: Optional[int] = None
    #: The longest single pause; ``None``: no cap.
    max_delay_ms: Optional[int] = None
    jitter: str = "additive"
    #: Retried outcomes: ``"429"``, ``"503"`` …, ``"5xx"``, ``"network"``.
    retry_on: tuple[str, ...] = ("429", "5xx", "network")
    #: On a 429: ``honour``, ``cap`` or ``ignore`` the penalty's Retry-After.
    retry_after: str = "honour"

    @staticmethod
    def from_profile(policy: dict[str, Any]) -> "RetryPolicy":
        """The policy of a retry profile as the server serves it."""
        return RetryPolicy(
            max_attempts=policy["max_attempts"],
            base_delay_ms=policy["base_delay_ms"],
            total_budget_ms=policy["total_budget_ms"],
            wait_ceiling_ms=policy.get("wait_ceiling_ms"),
            max_delay_ms=policy.get("max_delay_ms"),
            jitter=policy.get("jitter", "additive"),
            retry_on=tuple(policy.get("retry_on", ("429", "5xx", "network"))),
            retry_after=policy.get("retry_after", "honour"),
        )

    def retries(self, status: Optional[int]) -> bool:
        """Whether an answer with ``status`` (``None``: a network failure) is retried."""
        if status is None:
            return "network" in self.retry_on
        return str(status) in self.retry_on or (500 <= status <= 599 and "5xx" in self.retry_on)

    def shaped_backoff_ms(self, attempt: int, u: float, previous_ms: Optional[float] = None) -> float:
        """The backoff after failed attempt ``attempt`` for the draw ``u`` (module docs)."""
        base = float(self.base_delay_ms)
        cap = float(self.max_delay_ms if self.max_delay_ms is not None else DAY_MS)
        u = min(max(u, 0.0), 1.0 - 2**-52)
        e = min(base * 2 ** min(attempt - 1, 40), float(DAY_MS))
        c = min(cap, e)
        if self.jitter == "none":
            pause = c
        elif self.jitter == "full":
            pause = u * c
        elif self.jitter == "equal":
            pause = c * (0.5 + u / 2)
        elif self.jitter == "decorrelated":
            previous = min(max(previous_ms if previous_ms is not None else base, base), cap)
            pause = base + u * (3 * previous - base)
        else:
            pause = e + u * base
        return min(pause, cap, float(DAY_MS))

    def pause_ms(self, backoff: float, status: Optional[int], blocked_ms: Optional[int], rule_ceiling_ms: Optional[int]) -> float:
        """The pause before the next attempt given its ``backoff`` (module docs)."""
        if status != 429:
            return backoff
        blocked = float(blocked_ms or 0)
        if self.retry_after == "ignore":
            hint = 0.0
        elif self.retry_after == "cap":
            hint = min(blocked, float(self.max_delay_ms if self.max_delay_ms is not None else DAY_MS))
        else:
            hint = blocked
        wanted = max(hint, backoff)
        ceiling = self.wait_ceiling_ms if self.wait_ceiling_ms is not None else rule_ceiling_ms
        return wanted if ceiling is None else min(wanted, float(ceiling))

    def __post_init__(self) -> None:
        if not 1 <= self.max_attempts <= 20:
            raise ValueError(f"max_attempts must be between 1 and 20, got {self.max_attempts}")
        if not 1 <= self.base_delay_ms <= 3_600_000:
            raise ValueError(f"base_delay_ms must be between 1 ms and 1 hour, got {self.base_delay_ms}")
        if not 1 <= self.total_budget_ms <= 86_400_000:
            raise ValueError(f"total_budget_ms must be between 1 ms and 1 day, got {self.total_budget_ms}")
        if self.wait_ceiling_ms is not None and not 1 <= self.wait_ceiling_ms <= 86_400_000:
            raise ValueError(f"wait_ceiling_ms must be between 1 ms and 1 day, got {self.wait_ceiling_ms}")
        if self.max_delay_ms is not None and not self.base_delay_ms <= self.max_delay_ms <= 86_400_000:
            raise ValueError(f"max_delay_ms must be at least base_delay_ms and at most 1 day, got {self.max_delay_ms}")
        if self.jitter not in JITTERS:
            raise ValueError(f"jitter must be one of {', '.join(JITTERS)}, got {self.jitter!r}")
        if self.retry_after not in ("honour", "cap", "ignore"):
            raise ValueError(f"retry_after must be honour, cap or ignore, got {self.retry_after!r}")

    def backoff_ms(self, attempt: int, jitter_ms: float) -> float:
        """``base × 2^(attempt−1) + jitter`` (jitter below ``base``), at most a day."""
        jitter = min(max(jitter_ms, 0.0), self.base_delay_ms - 0.001)
        return min(self.base_delay_ms * 2 ** min(attempt - 1, 40) + jitter, 86_400_000.0)

    def delay_ms(self, attempt: int, jitter_ms: float, status: Optional[int], blocked_ms: Optional[int], rule_ceiling_ms: Optional[int]) -> float:
        """The pause after failed attempt ``attempt``: see the module docs."""
        return self.pause_ms(self.backoff_ms(attempt, jitter_ms), status, blocked_ms, rule_ceiling_ms)


class GaveUp(Exception, Generic[R]):
    """The call was given up: ``reason`` is the Rust executor's code
    (``attempts_exhausted``, ``budget_exhausted``, ``wait_ceiling``,
    ``unsafe_to_repeat``, ``network_not_retried``, ``store_unavailable``, ``breaker_open``,
    ``concurrency_limit``, ``no_rule``, ``invalid_request``); ``last`` is the
    last response, ``error`` the last network error, if any."""

    def __init__(self, reason: str, attempts: int, last: Optional[R] = None, error: Optional[BaseException] = None) -> None:
        super().__init__(f"gave up after {attempts} attempt(s): {reason}")
        self.reason = reason
        self.attempts = attempts
        self.last = last
        self.error = error


def _status(response: Any) -> int:
    return int(getattr(response, "status_code", None) or getattr(response, "status"))


def _connect_error(error: BaseException) -> bool:
    """Did the request never leave? Then any method may be sent again."""
    seen: Optional[BaseException] = error
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError) or type(seen).__name__ in ("ConnectError", "ConnectTimeout"):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def call(
    sluice: Sluice,
    target: Target,
    send: Callable[[int], R],
    *,
    policy: Optional[RetryPolicy] = None,
    breaker: bool = False,
    safe_to_repeat: Optional[bool] = None,
    is_connect_error: Callable[[BaseException], bool] = _connect_error,
    now: Callable[[], float] = time.monotonic,
    rng: Optional[random.Random] = None,
) -> R:
    """Send ``send(attempt)`` until it answers 2xx or a status the policy does
    not retry (both returned), or a reason to give up (:class:`GaveUp`). The
    policy is the scope's retry profile from the server unless ``policy`` is
    given (the default policy if the server has none to serve).

    ``send`` returns a response with ``status_code`` or ``status`` and
    ``headers`` (requests, httpx, urllib); an exception it raises is a network
    failure. A failure after the request may have left (timeout, reset) is
    retried only for idempotent methods or when ``safe_to_repeat``.
    ``breaker=True`` reports every attempt's outcome to the upstream breaker
    of (account, scope), which the permit endpoint asks before granting (a
    probe's outcome is always reported). Pauses use ``sluice.sleep``.
    """
    rng = rng or random.Random()
    policy = policy or _profile_or_default(sluice, target.scope)
    method = (target.method or "GET").upper()
    repeat_is_safe = method in IDEMPOTENT if safe_to_repeat is None else safe_to_repeat
    deadline = now() + policy.total_budget_ms / 1000
    last: Optional[R] = None
    error: Optional[BaseException] = None
    previous_backoff: Optional[float] = None
    for attempt in range(1, policy.max_attempts + 1):
        sent = attempt - 1
        # The permit endpoint asks the upstream breaker first: an open one
        # refuses (`breaker_open`), a half-open one makes this call its probe.
        try:
            permit = sluice.permit(target, max_wait_ms=policy.wait_ceiling_ms)
        except (Refused, SluiceError) as refusal:
            reason = REFUSAL_REASONS.get(refusal.reason, "invalid_request") if isinstance(refusal, Refused) else (
                "no_rule" if refusal.code == "no_rule" else "invalid_request"
            )
            raise GaveUp(reason, sent, last, error) from refusal
        if now() >= deadline:
            _release(sluice, permit.lease_id)
            if permit.probe:
                _feedback(sluice.report, target.scope, target.account, error="not_sent")
            raise GaveUp("budget_exhausted", attempt, last, error)
        response: Optional[R] = None
        try:
            response = send(attempt)
        except Exception as failure:  # noqa: BLE001 - any failure to get a response is a network failure
            error, last = failure, None
        finally:
            _release(sluice, permit.lease_id)
        status = None if response is None else _status(response)
        if breaker or permit.probe:
            kind = None if status is not None else ("connect" if is_connect_error(error) else _error_kind(error))  # type: ignore[arg-type]
            _feedback(lambda: sluice.report(target.scope, target.account, status=status, error=kind))
        if response is not None:
            last, error = response, None
        if status is not None and 200 <= status < 300:
            _feedback(sluice.penalty, target, status, response.headers)  # type: ignore[union-attr]
            return response  # type: ignore[return-value]
        blocked_ms = None
        if status == 429:
            # Report first: every worker on this bucket must hold back, not only this call.
            penalty = _feedback(sluice.penalty, target, status, response.headers)  # type: ignore[union-attr]
            blocked_ms = penalty.blocked_ms if penalty else None
        if not policy.retries(status):
            if response is not None:
                return response
            raise GaveUp("network_not_retried", attempt, last, error)
        if status is None and not (repeat_is_safe or is_connect_error(error)):  # type: ignore[arg-type]
            raise GaveUp("unsafe_to_repeat", attempt, last, error)
        if attempt == policy.max_attempts:
            break
        backoff = policy.shaped_backoff_ms(attempt, rng.random(), previous_backoff)
        previous_backoff = backoff
        delay_ms = policy.pause_ms(backoff, status, blocked_ms, permit.wait_ceiling_ms)
        if now() + delay_ms / 1000 >= deadline:
            raise GaveUp("budget_exhausted", attempt, last, error)
        sluice.sleep(delay_ms / 1000)
    raise GaveUp("attempts_exhausted", policy.max_attempts, last, error)


def _profile_or_default(sluice: Sluice, scope: str) -> RetryPolicy:
    """The scope's retry profile; the default policy from a server without the endpoint."""
    try:
        return RetryPolicy.from_profile(sluice.retry_profile(scope))
    except SluiceError as e:
        if e.status in (404, 422):
            return RetryPolicy()
        raise


def _error_kind(error: BaseException) -> str:
    return "timeout" if isinstance(error, TimeoutError) or "Timeout" in type(error).__name__ else "network"


def _release(sluice: Sluice, lease_id: Optional[str]) -> None:
    if lease_id is not None:
        _feedback(sluice.release, lease_id)


def _feedback(report: Callable[..., Any], *args: Any) -> Any:
    """Feedback that fails (a penalty, a breaker report, a lease release) is
    logged and does not fail a call that has its answer; the next permit or
    admit notices a dead store."""
    try:
        return report(*args)
    except (SluiceError, OSError) as e:
        log.warning("sluice feedback failed: %s", e)
        return None
