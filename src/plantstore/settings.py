"""Settings from ``PLANTSTORE_*`` environment variables and command-line flags.

Everything is validated when the program starts, so a bad value stops it with one clear
line instead of failing on the first request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_DATABASE_URL = "sqlite:///data/plantstore.db"


class SettingsError(Exception):
    """A setting has a value the service refuses to run with."""


class Settings(BaseSettings):
    """Every knob of the service; each is also ``PLANTSTORE_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="PLANTSTORE_", extra="ignore", frozen=True)

    database_url: str = DEFAULT_DATABASE_URL
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    workers: int = Field(default=1, ge=1, le=64)
    max_body_bytes: int = Field(default=65_536, ge=1_024, le=16 * 1024 * 1024)
    page_cap: int = Field(default=1_000, ge=1, le=100_000)
    group_commit: bool = True
    max_batch: int = Field(default=512, ge=1, le=10_000)
    busy_timeout_ms: int = Field(default=5_000, ge=0, le=600_000)
    token_cache_seconds: float = Field(default=1.0, ge=0.0, le=1.0)
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    @field_validator("database_url")
    @classmethod
    def _known_scheme(cls, url: str) -> str:
        sqlite_path(url)  # raises for anything we cannot open
        return url

    @field_validator("workers")
    @classmethod
    def _one_sqlite_process(cls, workers: int) -> int:
        if workers > 1:
            raise ValueError(
                "SQLite is served by one process (its single writer is what makes group "
                "commit work); use 1"
            )
        return workers


def sqlite_path(url: str) -> Path:
    """Return the file a ``sqlite:///relative`` or ``sqlite:////absolute`` URL names."""
    prefix = "sqlite:///"
    if not url.startswith(prefix):
        raise ValueError(
            f"database URL must start with {prefix} (sqlite:///relative.db or "
            "sqlite:////absolute/path.db)"
        )
    path = url[len(prefix) :]
    if not path or path == ":memory:" or path.startswith("file:"):
        raise ValueError("database URL must name a file, e.g. sqlite:///data/plantstore.db")
    return Path(path)


def load_settings(**overrides: object) -> Settings:
    """Build Settings from the environment plus explicit overrides (None means unset)."""
    given = {key: value for key, value in overrides.items() if value is not None}
    try:
        return Settings(**given)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise SettingsError(_first_problem(exc)) from None


def _first_problem(exc: ValidationError) -> str:
    problem = exc.errors()[0]
    where = ".".join(str(part) for part in problem["loc"])
    message = problem["msg"].removeprefix("Value error, ")
    if not where:
        return f"invalid settings: {message}"
    return f"invalid setting PLANTSTORE_{where.upper()}: {message}"
