"""Settings from ``PLANTSTORE_*`` environment variables and command-line flags.

Everything is validated when the program starts, so a bad value stops it with one clear
line instead of failing on the first request.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import re
from typing import Any, Literal
from urllib.parse import urlsplit

from limits import RateLimitItem, parse
from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from .db.urls import Backend, backend_of, for_writes
from .formats import parse_duration, parse_schedule

DEFAULT_DATABASE_URL = "sqlite:///data/plantstore.db"
DEFAULT_METRICS_ADDRESS = "127.0.0.1:9464"  # loopback: a scraper elsewhere needs it set


_ORIGIN = re.compile(r"https?://[^/\s,]+")
_PUBLIC_URL = re.compile(r"https?://[^/\s?#]+(/[^\s?#]*)?")


def parse_rate(text: str) -> RateLimitItem | None:
    """``"100/second"``, ``"30/minute"`` and the like (the ``limits`` notation); ``"off"``."""
    return None if text.strip().lower() == "off" else parse(text)


class SettingsError(Exception):
    """A setting has a value the service refuses to run with."""


class Settings(BaseSettings):
    """Every knob of the service; each is also ``PLANTSTORE_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="PLANTSTORE_", extra="ignore", frozen=True)

    database_url: str = DEFAULT_DATABASE_URL
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    workers: int = Field(default_factory=lambda: default_workers(), ge=1, le=64)
    max_body_bytes: int = Field(default=65_536, ge=1_024, le=16 * 1024 * 1024)
    page_cap: int = Field(default=1_000, ge=1, le=100_000)
    group_commit: bool = True
    max_batch: int = Field(default=512, ge=1, le=10_000)
    # Who commits a SQLite worker's writes: "each" worker its own, sharing the fsync (the
    # default), or "one" worker per machine, the others sending it theirs (db/sqlite/).
    sqlite_writers: Literal["each", "one"] = "each"
    # How long a SQLite write waits for another process's write lock before a 503.
    busy_timeout_ms: int = Field(default=5_000, ge=0, le=600_000)
    # The longest a request waits for its write to be durable before a 503 (a frozen disk).
    write_timeout: float = Field(default=5.0, ge=1.0, le=60.0)
    pool_size: int = Field(default=10, ge=1, le=1_000)
    connect_timeout: float = Field(default=1.0, gt=0.0, le=60.0)
    statement_timeout: float = Field(default=1.0, gt=0.0, le=600.0)
    # What stands between the service and PostgreSQL: "session" or "transaction" for a pooler
    # such as PgBouncer in that pool mode (db/postgres/pooling.py says what changes).
    postgres_pooling: Literal["none", "session", "transaction"] = "none"
    # The transaction pooler keeps prepared statements (PgBouncer >= 1.21's
    # max_prepared_statements), so asyncpg's statement cache stays on through it.
    postgres_pooler_keeps_prepared: bool = False
    allow_unsafe_durability: bool = False
    token_cache_seconds: float = Field(default=0.5, ge=0.0, le=1.0)
    rate_limit: str = "100/second"  # per token; the ``limits`` notation, or "off"
    auth_failure_limit: str = "30/minute"  # failed authentications per client address
    redis_url: str | None = None  # share the rate limits across instances
    trusted_proxies: str = ""  # comma-separated peers whose X-Forwarded-For is believed
    max_plants_per_user: int = Field(default=100_000, ge=1, le=10**12)
    # Seconds a connection has to send a whole request head, from its accept or from the end
    # of its previous answer: also how long a kept-alive connection may sit idle.
    header_timeout: float = Field(default=10.0, gt=0.0, le=10.0)
    body_timeout: float = Field(default=30.0, gt=0.0, le=30.0)  # seconds to send a body
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    access_log: bool = True  # one line per request
    metrics_address: str = DEFAULT_METRICS_ADDRESS  # host:port of /metrics, or "off"
    cors_origins: str = ""  # comma-separated origins allowed to call the API from a browser
    # Seconds in-flight requests get after SIGTERM; under docker stop's 10 s grace period.
    shutdown_timeout: float = Field(default=8.0, gt=0.0, le=600.0)
    # Tokens from an identity provider (docs/identity-providers.md); all three or none.
    jwt_jwks_url: str | None = None  # https:, http: or file: address of the provider's JWKS
    jwt_issuer: str | None = None  # the `iss` every accepted JWT carries
    jwt_audience: str | None = None  # an `aud` every accepted JWT carries
    jwt_algorithms: str = "RS256,ES256,EdDSA"  # comma-separated; never none or HS*
    jwt_user_claim: str = "sub"  # the claim naming the caller within the issuer
    jwt_jwks_cache_seconds: float = Field(default=300.0, ge=10.0, le=86_400.0)
    public_url: str | None = None  # the address clients use; /openapi.json's `servers`
    sandbox: bool = False  # POST /sandbox/tokens issues tokens to anyone (docs visitors)
    sandbox_ttl: str = "1h"  # how long a sandbox user lives: 90s, 15m, 1h, 7d
    sandbox_max_plants: int = Field(default=100, ge=1, le=10**12)  # each sandbox user's quota
    sandbox_issue_limit: str = "10/hour"  # sandbox tokens per client address, or "off"
    # Webhooks (docs/webhooks.md): private receivers only where asked for (tests, intranets).
    webhook_allow_private: bool = False
    webhook_retry_schedule: str = "0s,5s,5m,30m,2h,5h,10h,14h,20h,24h"
    webhook_retention: str = "30d"  # how long attempt records and finished deliveries stay
    webhook_concurrency: int = Field(default=64, ge=1, le=10_000)  # attempts in flight
    webhook_endpoint_concurrency: int = Field(default=8, ge=1, le=1_000)  # per subscription
    webhook_max_subscriptions: int = Field(default=10, ge=1, le=1_000)  # per user

    @field_validator("database_url")
    @classmethod
    def _known_backend(cls, url: str) -> str:
        return for_writes(url)  # raises for anything we cannot open

    @field_validator("rate_limit", "auth_failure_limit", "sandbox_issue_limit")
    @classmethod
    def _known_rate(cls, text: str) -> str:
        try:
            parse_rate(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a rate such as '100/second' or 'off'") from None
        return text

    @field_validator("redis_url")
    @classmethod
    def _redis_installed(cls, url: str | None) -> str | None:
        if url and importlib.util.find_spec("coredis") is None:
            raise ValueError(
                "sharing rate limits through Redis needs the redis extra: in a checkout, "
                "pip install -c constraints.txt -e '.[redis]' (see docs/operating.md)"
            )
        return url

    @field_validator("metrics_address")
    @classmethod
    def _known_address(cls, text: str) -> str:
        parse_address(text)
        return text

    @field_validator("cors_origins")
    @classmethod
    def _known_origins(cls, text: str) -> str:
        for origin in split_list(text):
            if origin != "*" and not _ORIGIN.fullmatch(origin):
                raise ValueError(f"{origin!r} is not an origin such as 'https://docs.example.com'")
        return text

    @field_validator("jwt_jwks_url")
    @classmethod
    def _known_jwks_url(cls, url: str | None) -> str | None:
        if url is not None:
            check_jwks_url(url)
        return url

    @field_validator("jwt_algorithms")
    @classmethod
    def _known_algorithms(cls, text: str) -> str:
        check_algorithms(split_list(text))
        return text

    @field_validator("jwt_user_claim")
    @classmethod
    def _known_claim(cls, claim: str) -> str:
        if not claim.strip():
            raise ValueError("name the claim that holds the user, e.g. 'sub'")
        return claim

    @model_validator(mode="after")
    def _jwt_all_or_nothing(self) -> Settings:
        check_jwt_settings(self.jwt_jwks_url, self.jwt_issuer, self.jwt_audience)
        return self

    @property
    def jwt_enabled(self) -> bool:
        return self.jwt_jwks_url is not None

    @property
    def jwt_algorithm_list(self) -> list[str]:
        return split_list(self.jwt_algorithms)

    @field_validator("public_url")
    @classmethod
    def _known_public_url(cls, text: str | None) -> str | None:
        if text is not None and not _PUBLIC_URL.fullmatch(text):
            raise ValueError(f"{text!r} is not an address such as 'https://api.example.com'")
        return text

    @field_validator("sandbox_ttl", "webhook_retention")
    @classmethod
    def _known_duration(cls, text: str) -> str:
        parse_duration(text)
        return text

    @property
    def sandbox_ttl_seconds(self) -> int:
        return parse_duration(self.sandbox_ttl)

    @field_validator("webhook_retry_schedule")
    @classmethod
    def _known_schedule(cls, text: str) -> str:
        parse_schedule(text)
        return text

    @property
    def backend(self) -> Backend:
        return backend_of(self.database_url)

    @property
    def trusted_proxy_addresses(self) -> frozenset[str]:
        return frozenset(split_list(self.trusted_proxies))

    @property
    def metrics_listen(self) -> tuple[str, int] | None:
        """Where ``/metrics`` is served, apart from the API; None when it is off."""
        return parse_address(self.metrics_address)

    @property
    def cors_origin_list(self) -> list[str]:
        return split_list(self.cors_origins)


def default_workers(cgroup: str = "/sys/fs/cgroup") -> int:
    """One worker per core this process may run on, at most 8, and no more than its cgroup's
    CPU quota allows (``docker run --cpus=1`` limits time, not affinity: a second worker
    there only splits one core's time between two processes' memory).

    Reads scale with workers; writes gain less, since every worker's go through the machine's
    one writer; and each worker is a process with its own memory (the workers rows and the
    peak RSS of bench/README.md). Eight cover the read-heavy case without flooding a large
    machine with processes.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    quota = cgroup_cpu_quota(cgroup)
    if quota is not None:
        cores = min(cores or quota, quota)
    return max(1, min(8, cores or 1))


def cgroup_cpu_quota(cgroup: str = "/sys/fs/cgroup") -> int | None:
    """The CPUs a cgroup's quota is worth, rounded up; None without a quota or a cgroup.

    cgroup v2's ``cpu.max`` ("200000 100000", or "max 100000" for none) first, then v1's
    ``cpu.cfs_quota_us`` (-1 for none) over ``cpu.cfs_period_us``. A container sees its own
    cgroup at ``/sys/fs/cgroup`` (v1: under ``cpu`` or ``cpu,cpuacct``).
    """
    candidates = [(f"{cgroup}/cpu.max", None)] + [
        (f"{cgroup}/{name}/cpu.cfs_quota_us", f"{cgroup}/{name}/cpu.cfs_period_us")
        for name in ("cpu", "cpu,cpuacct")
    ]
    for quota_file, period_file in candidates:
        try:
            with open(quota_file) as file:
                words = file.read().split()
            if period_file is not None:
                with open(period_file) as file:
                    words = words[:1] + file.read().split()[:1]
        except OSError:
            continue
        if len(words) < 2 or not all(w.lstrip("-").isdigit() for w in words[:2]):
            return None  # "max 100000": no quota
        quota, period = int(words[0]), int(words[1])
        if quota <= 0 or period <= 0:
            return None  # v1's -1: no quota
        return max(1, -(-quota // period))
    return None


def split_list(text: str) -> list[str]:
    """The items of a comma-separated setting, without blanks."""
    return [part.strip() for part in text.split(",") if part.strip()]


def parse_address(text: str) -> tuple[str, int] | None:
    """``"host:port"`` (``"[::1]:9464"`` for IPv6) as a pair; ``"off"``: None."""
    if text.strip().lower() == "off":
        return None
    host, _, port = text.strip().rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    try:
        ipaddress.ip_address(host)
        number = int(port)
    except ValueError:
        number = -1
    if not 0 < number < 65536:
        raise ValueError(f"{text!r} is not 'off' or an address such as '0.0.0.0:9464'")
    return host, number


def load_settings(**overrides: object) -> Settings:
    """Build Settings from the environment plus explicit overrides (None means unset)."""
    given: dict[str, Any] = {key: value for key, value in overrides.items() if value is not None}
    try:
        return Settings(**given)  # pydantic checks each value
    except ValidationError as exc:
        raise SettingsError(_first_problem(exc)) from None


def _first_problem(exc: ValidationError) -> str:
    problem = exc.errors()[0]
    where = ".".join(str(part) for part in problem["loc"])
    message = problem["msg"].removeprefix("Value error, ")
    if not where:  # a check across settings; its message starts with the one to change
        return f"invalid setting {message}"
    return f"invalid setting PLANTSTORE_{where.upper()}: {message}"


# The checks behind the ``PLANTSTORE_JWT_*`` settings: a service that would accept an HMAC or
# an unsigned token, or that has half a provider configured, must not start.
# Asymmetric signatures only: an HMAC "keyed" with a provider's public key, or `none`, would
# let anyone who can read the JWKS sign tokens.
ALLOWED_ALGORITHMS = frozenset(
    {
        "RS256",
        "RS384",
        "RS512",
        "PS256",
        "PS384",
        "PS512",
        "ES256",
        "ES384",
        "ES512",
        "EdDSA",
        "Ed25519",
    }
)
_JWKS_SCHEMES = ("https", "http", "file")


def check_jwks_url(url: str) -> None:
    """An ``https:``/``http:`` URL with a host, or a ``file:`` path."""
    parts = urlsplit(url)
    if parts.scheme not in _JWKS_SCHEMES or not (parts.netloc or parts.scheme == "file"):
        raise ValueError(f"{url!r} is not an https:, http: or file: address of a JWKS")
    if parts.scheme == "file" and not parts.path:
        raise ValueError(f"{url!r} names no file")


def check_algorithms(names: list[str]) -> None:
    """At least one algorithm, each an asymmetric signature joserfc verifies."""
    if not names:
        raise ValueError("name at least one algorithm, e.g. 'RS256,ES256,EdDSA'")
    refused = [name for name in names if name not in ALLOWED_ALGORITHMS]
    if refused:
        allowed = ", ".join(sorted(ALLOWED_ALGORITHMS))
        raise ValueError(f"{refused[0]!r} is not accepted; choose from {allowed}")


def check_jwt_settings(jwks_url: str | None, issuer: str | None, audience: str | None) -> None:
    """JWTs are on when all three are set, off when none is; half a provider is a mistake."""
    given = {"JWKS_URL": jwks_url, "ISSUER": issuer, "AUDIENCE": audience}
    missing = [name for name, value in given.items() if not (value or "").strip()]
    if missing and len(missing) < len(given):
        names = ", ".join(f"PLANTSTORE_JWT_{name}" for name in missing)
        raise ValueError(
            f"{names}: set PLANTSTORE_JWT_JWKS_URL, PLANTSTORE_JWT_ISSUER and "
            "PLANTSTORE_JWT_AUDIENCE together, or none of them"
        )
