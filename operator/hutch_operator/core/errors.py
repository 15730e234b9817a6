"""The operator's error tree: every failure carries the stable Ready/ReconcileSuccess reason.

Why: ``reconciling`` maps errors to conditions, events and Kopf retry classes in one place, so
each error states its ``reason`` and whether retrying can help; library errors are chained
(``raise ... from exc``) so logs keep the original cause.

    HutchError                       reason           retry
    ├── SpecError                    InvalidSpec      permanent
    ├── ArgumentsImmutableError      ArgumentsImmutable permanent
    ├── NamespaceNotAllowedError     NamespaceNotAllowed permanent (the sweep re-checks)
    ├── BrokerRejectedError(status)  BrokerRejected   permanent (the sweep retries)
    │   └── OperatorPolicyChangesDisabledError  OperatorPolicyChangesDisabled  permanent
    ├── BrokerMismatchError          BrokerMismatch   permanent (never deleted to fix)
    ├── BrokerUnavailableError       BrokerUnavailable exponential backoff
    ├── BrokerNotFoundError          BrokerNotFound   30 s
    ├── BrokerNotReadyError          BrokerNotReady   10 s
    ├── ConnectionSecretInvalidError ConnectionSecretInvalid 30 s
    ├── AuthenticationFailedError    AuthenticationFailed 60 s
    ├── TLSVerificationFailedError   TLSVerificationFailed 60 s (the CA does not vouch for it)
    ├── TLSHandshakeFailedError      TLSHandshakeFailed 60 s (no TLS there, or no common terms)
    ├── TLSSecretInvalidError        TLSSecretInvalid 30 s (a spec.tls Secret missing or lacking)
    ├── VhostNotFoundError           VhostNotFound    30 s
    ├── AlreadyExistsError           AlreadyExists    permanent (the sweep re-checks)
    ├── CredentialsSecretInvalidError CredentialsSecretInvalid 30 s
    ├── DependencyNotFoundError      DependencyNotFound 1 s doubling to 15 s
    ├── ObjectNotFoundError          (404 from the broker; success on delete)
    └── KubeError(status)            Error            exponential backoff
"""

from __future__ import annotations

from typing import ClassVar


class HutchError(Exception):
    """Base: ``reason`` is the CamelCase condition reason, ``delay`` None means permanent;
    ``backoff``: retry after ``backoff_base`` seconds, doubling up to ``backoff_cap``."""

    reason: ClassVar[str] = "Error"
    delay: ClassVar[float | None] = 10.0
    backoff: ClassVar[bool] = False
    backoff_base: ClassVar[float] = 5.0
    backoff_cap: ClassVar[float] = 300.0


class SpecError(HutchError):
    reason = "InvalidSpec"
    delay = None


class ArgumentsImmutableError(HutchError):
    reason = "ArgumentsImmutable"
    delay = None


class NamespaceNotAllowedError(HutchError):
    reason = "NamespaceNotAllowed"
    delay = None


class BrokerMismatchError(HutchError):
    reason = "BrokerMismatch"
    delay = None


class BrokerRejectedError(HutchError):
    """A 4xx other than 401/403/404 from the management API: the broker refused the request."""

    reason = "BrokerRejected"
    delay = None

    def __init__(self, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class OperatorPolicyChangesDisabledError(BrokerRejectedError):
    """405 to an operator-policy write: the broker runs with
    ``management.restrictions.operator_policy_changes.disabled = true``."""

    reason = "OperatorPolicyChangesDisabled"


class BrokerUnavailableError(HutchError):
    reason = "BrokerUnavailable"
    backoff = True


class BrokerNotFoundError(HutchError):
    reason = "BrokerNotFound"
    delay = 30.0


class BrokerNotReadyError(HutchError):
    reason = "BrokerNotReady"
    delay = 10.0


class ConnectionSecretInvalidError(HutchError):
    reason = "ConnectionSecretInvalid"
    delay = 30.0


class AuthenticationFailedError(HutchError):
    reason = "AuthenticationFailed"
    delay = 60.0


class TLSVerificationFailedError(HutchError):
    """The management certificate did not verify against the trusted CA (or name)."""

    reason = "TLSVerificationFailed"
    delay = 60.0


class TLSHandshakeFailedError(HutchError):
    reason = "TLSHandshakeFailed"
    delay = 60.0


class TLSSecretInvalidError(HutchError):
    reason = "TLSSecretInvalid"
    delay = 30.0


class VhostNotFoundError(HutchError):
    reason = "VhostNotFound"
    delay = 30.0


class ObjectNotFoundError(HutchError):
    """404 on an object path; callers decide whether that is an error (declare) or not (delete)."""

    reason = "NotFound"
    delay = 30.0


class KubeError(HutchError):
    """A Kubernetes API call failed; ``status`` is the HTTP status (0 when unreachable)."""

    reason = "Error"
    backoff = True

    def __init__(self, message: str, *, status: int = 0, body: object = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class DependencyNotFoundError(HutchError):
    """A binding's source or destination (a permission's user or vhost) does not exist yet:
    GitOps ordering, where a whole directory is applied at once and the dependency is usually
    declared within a second. So retry after 1 s, doubling up to 15 s, not a flat 15 s that
    held every such object (and a make run's topology step) for 15 s."""

    reason = "DependencyNotFound"
    backoff = True
    backoff_base = 1.0
    backoff_cap = 15.0


class AlreadyExistsError(HutchError):
    """A vhost, user or permission exists in the broker and this object did not create it:
    declaring would silently take it over (a user's password, a team's vhost), and deleting
    the object would then delete it. Refused unless the object says ``adopt: true``."""

    reason = "AlreadyExists"
    delay = None


class CredentialsSecretInvalidError(HutchError):
    """A User's credentials Secret is missing, lacks a password, or belongs to someone else."""

    reason = "CredentialsSecretInvalid"
    delay = 30.0
