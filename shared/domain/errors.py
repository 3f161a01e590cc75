"""Domain errors: expected failures that a caller caused or can act on.

The db layer and the domain raise them; nothing below the HTTP edge knows a status code. The error
middleware (shared/web/errors.py) maps each class to the contract's status and error body, once.
`message` is exactly what the client sees.
"""

from __future__ import annotations


class DomainError(Exception):
    """Base class; `message` is the client-facing text. `retry_after_secs`, when set, is sent as
    the answer's `Retry-After`."""

    retry_after_secs: int | None = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ValidationFailed(DomainError):
    """The input breaks a rule (400)."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"validation error: {detail}")


class InvalidWorkflow(ValidationFailed):
    """A workflow definition breaks a rule: no steps, a cycle, an unknown dependency (400)."""

    def __init__(self, detail: str) -> None:
        DomainError.__init__(self, f"invalid workflow: {detail}")


class Unauthorized(DomainError):
    """No credential, or one that names nobody (401)."""

    def __init__(self) -> None:
        super().__init__("unauthorized")


class Forbidden(DomainError):
    """A valid credential that may not do this (403)."""

    def __init__(self, message: str = "access denied") -> None:
        super().__init__(message)


class NotFound(DomainError):
    """No such resource for this caller; another tenant's resource is not found too (404)."""

    def __init__(self, what: str, ident: object) -> None:
        super().__init__(f"{what} not found: {ident}")


class Gone(DomainError):
    """The resource existed but what it needs was removed, e.g. purged by retention. The contract
    answers 404, like an unknown resource, with a message that says why."""


class Conflict(DomainError):
    """The resource's state forbids the change; `reason` says which state (409)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"conflict: {reason}")
        self.reason = reason


class ContentTooLarge(DomainError):
    """A part of the body (a payload, a result) is larger than this server takes (413)."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"payload too large: {detail}")


class RetryLater(DomainError):
    """Refused for now, not for good: the answer carries `Retry-After: retry_after` (seconds)."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = self.retry_after_secs = retry_after


class TooManyRequests(RetryLater):
    """The caller is past its own share: its tenant holds as many open streams or parked
    long-polls as one tenant may, or its address presents unknown worker keys too fast (429)."""


class QuotaExceeded(TooManyRequests):
    """A per-tenant quota is used up for now; retry after `retry_after_secs` (429)."""

    def __init__(self, detail: str, retry_after_secs: int) -> None:
        super().__init__(f"quota exceeded: {detail}", retry_after_secs)


class Overloaded(RetryLater):
    """This process holds as many open streams or parked long-polls as it takes from all callers
    together (503)."""


class ProviderUnavailable(RetryLater):
    """The OpenID provider (--oidc-issuer) could not be asked: its discovery document, its keys or
    its token endpoint did not answer (503). Nothing is refused for good."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"the OpenID provider could not be reached: {detail}", 5)


class TooManyQueues(Conflict):
    """A new queue would take its tenant past --max-queues-per-tenant (409): the tenant's state, not
    the request, is what conflicts, and retrying will not help until the operator raises the cap."""
