"""The one exception tree of the service, and the only place an HTTP status is chosen.

    PlantstoreError                 -> its ``status`` with the Error body
      BadRequest                    400  a request the service refuses (names the field)
      Unauthenticated               401  no Authorization header, or another scheme
        InvalidToken                401  a Bearer token that is malformed/unknown/revoked/expired
      QuotaExceeded                 403  the user holds the most plants allowed
      NotFound                      404
      RequestTimeout                408  the body did not arrive within the body deadline
      Conflict                      409  same id, different plant
      PayloadTooLarge               413
      UnsupportedMediaType          415  not JSON, or a body in a content coding (gzip, …)
      TooManyRequests               429  a rate limit is spent (with Retry-After)
      TransferCodingNotImplemented  501  a body in a transfer coding other than chunked
      StoreUnavailable              503  the database cannot take the request now: unreachable, its
                                         disk full, failing, frozen or read-only, its file replaced
                                         (with Retry-After; ``kind`` names the trouble)
      KeysUnavailable               503  no key for a JWT: the provider's JWKS cannot be fetched

Handlers and rules raise these; ``http/boundary.py`` turns them, and any other exception, into
the answer in one function, and ``Error`` is the body every one of them answers with.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

import msgspec
from msgspec import Meta

CHALLENGE = 'Bearer realm="plantstore"'


class Error(msgspec.Struct):
    """Every error answer: ``error`` equals the HTTP status."""

    error: Annotated[
        int,
        Meta(
            ge=100,
            le=599,
            description="The HTTP status code",
            extra_json_schema={"format": "int32"},
        ),
    ]
    message: Annotated[str, Meta(description="What was wrong, naming the field or parameter")]


class PlantstoreError(Exception):
    """A failure the client is told about with the Error body."""

    status = 500

    def __init__(self, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.headers = dict(headers or {})


class BadRequest(PlantstoreError):
    status = 400


class Unauthenticated(PlantstoreError):
    status = 401

    def __init__(self, message: str) -> None:
        super().__init__(message, {"WWW-Authenticate": CHALLENGE})


class InvalidToken(PlantstoreError):
    status = 401

    def __init__(self, message: str = "the bearer token is invalid, expired or revoked") -> None:
        super().__init__(message, {"WWW-Authenticate": f'{CHALLENGE}, error="invalid_token"'})


class QuotaExceeded(PlantstoreError):
    status = 403


class NotFound(PlantstoreError):
    status = 404


class RequestTimeout(PlantstoreError):
    status = 408

    def __init__(self, message: str) -> None:
        super().__init__(message, {"Connection": "close"})


class Conflict(PlantstoreError):
    status = 409


class PayloadTooLarge(PlantstoreError):
    status = 413


class UnsupportedMediaType(PlantstoreError):
    status = 415


class TransferCodingNotImplemented(PlantstoreError):
    status = 501


class StoreUnavailable(PlantstoreError):
    """A fault of the environment, not of the service: the client may retry.

    ``kind`` is a short name of the trouble for logs and metrics (``disk_full``,
    ``io_error``, ``read_only``, ``not_answering``, ``file_replaced``, ``unreachable``,
    ``busy``, ...); the message says it to a client and never names a path or host.
    """

    status = 503

    def __init__(
        self,
        message: str = "the database is not answering; retry shortly",
        kind: str = "unreachable",
    ) -> None:
        super().__init__(message, {"Retry-After": "1"})
        self.kind = kind

    def __reduce__(self) -> tuple[type[StoreUnavailable], tuple[str, str]]:
        return StoreUnavailable, (self.message, self.kind)  # travels between workers


class TooManyRequests(PlantstoreError):
    status = 429

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message, {"Retry-After": str(retry_after)})


class KeysUnavailable(PlantstoreError):
    status = 503

    def __init__(self, retry_after: int) -> None:
        super().__init__(
            "the identity provider's keys cannot be fetched; retry shortly",
            {"Retry-After": str(max(1, retry_after))},
        )
