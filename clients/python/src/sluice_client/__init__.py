"""A client for Sluice's worker API: shared quotas, the upstream breaker and
webhook events, for workers written in Python.

    from sluice_client import Sluice, Target, call

    sluice = Sluice("http://127.0.0.1:3000", token)
    target = Target(account="seller-42", scope="vtex_pricing", method="PUT", path="/api/pricing/prices/42")
    response = call(sluice, target, lambda attempt: requests.put(UPSTREAM + target.path, json=body))
"""

from .client import Admission, BatchResult, Event, FieldError, Penalty, Permit, Refused, Sluice, SluiceError, Target
from .retry import GaveUp, RetryPolicy, call

__all__ = [
    "Admission",
    "BatchResult",
    "Event",
    "FieldError",
    "GaveUp",
    "Penalty",
    "Permit",
    "Refused",
    "RetryPolicy",
    "Sluice",
    "SluiceError",
    "Target",
    "call",
]
