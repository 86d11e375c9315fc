"""The Sluice worker API over HTTP: permits, penalties, the upstream breaker, events.

Standard library only (``urllib``), so a worker adds no dependency by using it.
Every call is one HTTP request; nothing is cached or retried here (the retry
helper in :mod:`sluice_client.retry` is where calls are repeated).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence

__all__ = [
    "Admission",
    "Event",
    "FieldError",
    "Penalty",
    "Permit",
    "Refused",
    "Sluice",
    "SluiceError",
    "Target",
]


@dataclass(frozen=True)
class Target:
    """Which upstream call is meant; resolves to one limit rule on the server.

    ``priority`` is the call's lane: ``"high"``, ``"normal"`` (the server's
    default) or ``"low"``. Low takes a permit only when one is free now, and
    on a token bucket never the last one (send bulk syncs as low); high may
    book one slot beyond what normal may.
    """

    scope: str
    path: str
    method: Optional[str] = None
    account: Optional[str] = None
    priority: Optional[str] = None

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"scope": self.scope, "path": self.path}
        if self.method is not None:
            out["method"] = self.method
        if self.account is not None:
            out["account"] = self.account
        if self.priority is not None:
            out["priority"] = self.priority
        return out


@dataclass(frozen=True)
class FieldError:
    field: str
    message: str


class SluiceError(Exception):
    """The API answered an error: ``code`` is stable, ``message`` for people.

    A 422 names each invalid field in ``fields``.
    """

    def __init__(self, status: int, code: str, message: str, fields: tuple[FieldError, ...] = ()) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.fields = fields


class Refused(Exception):
    """No permit: ``reason`` is ``wait_ceiling_exceeded``, ``concurrency_limit``,
    ``store_unavailable`` or ``breaker_open``; ``retry_after_ms`` says when a
    slot would be free, when known."""

    def __init__(self, reason: str, retry_after_ms: Optional[int]) -> None:
        super().__init__(f"permit refused: {reason}" + (f", retry in {retry_after_ms} ms" if retry_after_ms is not None else ""))
        self.reason = reason
        self.retry_after_ms = retry_after_ms


@dataclass(frozen=True)
class Permit:
    """A granted permit. ``waited_ms`` is how long the client (or the server,
    with ``hold``) waited for the booked slot before returning it."""

    waited_ms: int
    lease_id: Optional[str]
    shadow: bool
    wait_ceiling_ms: Optional[int]
    #: The upstream breaker is half-open and this call is its probe: report its outcome.
    probe: bool = False


@dataclass(frozen=True)
class Penalty:
    """What a reported upstream response did to the bucket."""

    blocked_ms: Optional[int]
    observed: bool


@dataclass(frozen=True)
class Admission:
    """The upstream breaker's answer: ``closed`` (call), ``probe`` (call; this
    call is the half-open probe, report its outcome) or ``open`` (do not call
    before ``retry_after_ms``)."""

    state: str
    retry_after_ms: Optional[int] = None

    @property
    def allowed(self) -> bool:
        return self.state != "open"


@dataclass(frozen=True)
class Event:
    event_id: str
    delivery_ids: tuple[str, ...]
    duplicate: bool


@dataclass(frozen=True)
class BatchResult:
    """One event's result in :meth:`Sluice.send_events`: ``event`` when it
    was stored (``status`` 201) or already stored (200), ``error`` when it
    was refused (422)."""

    status: int
    event: Optional[Event]
    error: Optional[SluiceError]


def _header(headers: Mapping[str, str], name: str) -> Optional[str]:
    """A header by case-insensitive name from any mapping (dict, http.client, requests, httpx)."""
    getter = getattr(headers, "get", None)
    if getter is not None:
        for candidate in (name, name.lower(), name.title()):
            value = getter(candidate)
            if value is not None:
                return str(value)
    for key, value in headers.items():
        if key.lower() == name.lower():
            return str(value)
    return None


@dataclass
class Sluice:
    """A client of one Sluice deployment.

    ``sleep`` waits out booked slots (``time.sleep``; tests pass a recorder).
    """

    base_url: str
    token: str
    timeout: float = 70.0
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    #: How long a fetched retry profile is used before it is fetched again.
    profile_ttl: float = 5.0
    _profiles: dict[str, tuple[float, dict[str, Any]]] = field(default_factory=dict, repr=False)

    def _call(self, method: str, path: str, body: Optional[dict[str, Any] | list[Any]] = None) -> tuple[int, Mapping[str, str], Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base_url.rstrip("/") + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return response.status, response.headers, _json(response.read())
        except urllib.error.HTTPError as error:
            with error:
                return error.code, error.headers, _json(error.read())

    def _expect(self, status: int, payload: Any, *ok: int) -> Any:
        if status in ok:
            return payload
        payload = payload if isinstance(payload, dict) else {}
        fields = tuple(FieldError(f["field"], f["message"]) for f in payload.get("fields", ()))
        raise SluiceError(status, payload.get("code", "unknown"), payload.get("message", ""), fields)

    def permit(self, target: Target, *, cost: int = 1, max_wait_ms: Optional[int] = None, hold: bool = False) -> Permit:
        """Take a permit, waiting for the booked slot: the server books it and
        says how long; this sleeps that long (or the server holds the request
        with ``hold=True``). Raises :class:`Refused` when there is no slot
        within the wait ceiling."""
        body = target.body() | {"cost": cost, "hold": hold}
        if max_wait_ms is not None:
            body["max_wait_ms"] = max_wait_ms
        status, _, payload = self._call("POST", "/api/v1/permits", body)
        if status in (429, 503) and isinstance(payload, dict) and payload.get("granted") is False:
            raise Refused(payload["reason"], payload.get("retry_after_ms"))
        out = self._expect(status, payload, 200)
        if out["wait_ms"] > 0:
            self.sleep(out["wait_ms"] / 1000)
        return Permit(
            waited_ms=out["wait_ms"] + out["held_ms"],
            lease_id=out.get("lease_id"),
            shadow=out["shadow"],
            wait_ceiling_ms=out.get("wait_ceiling_ms"),
            probe=bool(out.get("probe", False)),
        )

    def release(self, lease_id: str) -> None:
        """Give a concurrency lease back."""
        status, _, payload = self._call("DELETE", f"/api/v1/leases/{urllib.request.quote(lease_id, safe='')}")
        self._expect(status, payload, 204)

    def penalty(self, target: Target, status: int, headers: Mapping[str, str]) -> Optional[Penalty]:
        """Report an upstream response: a 429 with its ``Retry-After``, and any
        ``X-RateLimit-Remaining`` / ``X-RateLimit-Reset``. The server parses
        the headers (one ``Retry-After`` parser for every language); a value
        it cannot read is dropped and the 429 reported without it, as the
        Rust executor ignores it. ``None`` when there is nothing to report."""
        body = target.body()
        retry_after = _header(headers, "Retry-After") if status == 429 else None
        remaining = _header(headers, "X-RateLimit-Remaining")
        if status == 429:
            body["status_429"] = True
        if retry_after is not None:
            body["retry_after"] = retry_after
        if remaining is not None:
            body["rate_limit_remaining"] = remaining
            reset = _header(headers, "X-RateLimit-Reset")
            if reset is not None:
                body["rate_limit_reset"] = reset
        if status != 429 and remaining is None:
            return None
        code, _, payload = self._call("POST", "/api/v1/penalties", body)
        if code == 422 and isinstance(payload, dict):
            unreadable = {f["field"] for f in payload.get("fields", ())} & {"retry_after", "rate_limit_remaining", "rate_limit_reset"}
            if unreadable:
                for name in unreadable:
                    body.pop(name, None)
                if status != 429 and "rate_limit_remaining" not in body:
                    return None
                code, _, payload = self._call("POST", "/api/v1/penalties", body)
        out = self._expect(code, payload, 200)
        return Penalty(blocked_ms=out.get("blocked_ms"), observed=out["observed"])

    def retry_profile(self, scope: str) -> dict[str, Any]:
        """The retry policy the scope's calls use (its own profile, ``*``'s, or
        the default) as ``GET /api/v1/retry-profiles/{scope}`` serves it (the
        ``policy`` object, durations in ms); kept for ``profile_ttl`` seconds,
        so an edit reaches workers within that time."""
        cached = self._profiles.get(scope)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        status, _, payload = self._call("GET", f"/api/v1/retry-profiles/{urllib.request.quote(scope, safe='*')}")
        policy = self._expect(status, payload, 200)["policy"]
        self._profiles[scope] = (time.monotonic() + self.profile_ttl, policy)
        return policy

    def admit(self, scope: str, account: Optional[str] = None) -> Admission:
        """Ask the upstream breaker of (account, scope) whether a call may go
        out. Not needed before a permit: the permit endpoint asks it too."""
        body: dict[str, Any] = {"scope": scope} | ({"account": account} if account is not None else {})
        status, _, payload = self._call("POST", "/api/v1/upstream-breakers/admit", body)
        out = self._expect(status, payload, 200)
        return Admission(state=out["decision"], retry_after_ms=out.get("retry_after_ms"))

    def report(self, scope: str, account: Optional[str] = None, *, status: Optional[int] = None, error: Optional[str] = None) -> str:
        """Tell the upstream breaker how a call went: its HTTP ``status``, or
        an ``error`` (``connect``, ``timeout``, ``network``; ``not_sent`` for
        an admitted probe that was never sent). 5xx and errors count as
        failures. Returns how the report was counted."""
        body: dict[str, Any] = {"scope": scope} | ({"account": account} if account is not None else {})
        body |= {"status": status} if status is not None else {"error": error or "network"}
        code, _, payload = self._call("POST", "/api/v1/upstream-breakers/report", body)
        return str(self._expect(code, payload, 200)["counted_as"])

    def send_event(
        self,
        merchant_id: str,
        event_type: str,
        payload: Mapping[str, Any],
        idempotency_key: str,
        status: Optional[str] = None,
    ) -> Event:
        """Hand an event to the webhook outbox; the same key twice stores one event."""
        body: dict[str, Any] = {
            "merchant_id": merchant_id,
            "event_type": event_type,
            "payload": dict(payload),
            "idempotency_key": idempotency_key,
        }
        if status is not None:
            body["status"] = status
        code, _, out = self._call("POST", "/api/v1/events", body)
        out = self._expect(code, out, 200, 201)
        return Event(out["event_id"], tuple(out["delivery_ids"]), out["duplicate"])

    def send_events(self, events: Sequence[Mapping[str, Any]]) -> list[BatchResult]:
        """Hand up to 1000 events (each a dict with ``merchant_id``,
        ``event_type``, ``payload``, ``idempotency_key`` and optionally
        ``status``) to the outbox in one call and one transaction. Returns
        one result per event, in order; each is stored, already stored or
        refused on its own. Raises :class:`SluiceError` when the call as a
        whole is refused (503 while the database is unreachable: nothing
        was stored, send the same batch again)."""
        code, _, out = self._call("POST", "/api/v1/events/batch", [dict(e) for e in events])
        out = self._expect(code, out, 200)
        results = []
        for r in out["results"]:
            event = r.get("event")
            error = r.get("error")
            results.append(
                BatchResult(
                    r["status"],
                    Event(event["event_id"], tuple(event["delivery_ids"]), event["duplicate"]) if event else None,
                    SluiceError(r["status"], error["code"], error["message"], tuple(FieldError(f["field"], f["message"]) for f in error.get("fields", ())))
                    if error
                    else None,
                )
            )
        return results


def _json(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")
