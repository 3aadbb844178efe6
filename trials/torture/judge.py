"""What each ``(user, id)`` may be after the kills, and the final listing judged against it:
lost, resurrected or unexpected plants; plus the SQLite file's integrity check."""

from __future__ import annotations

import contextlib
import sqlite3
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urljoin

import httpx

from .config import State, TortureError, TortureResult, Value

LIST_LIMIT = 500


@dataclass
class Key:
    """One ``(user, id)`` and everything known about it."""

    user: str
    plant_id: int
    possible: set[State] = field(default_factory=lambda: {None})
    sent: set[Value] = field(default_factory=set)  # creates that may have reached a server
    version: int = 0

    def describe(self) -> str:
        states = sorted(("absent" if s is None else repr(s)) for s in self.possible)
        return f"user {self.user!r} id {self.plant_id} (may be: {', '.join(states)})"


def judge(key: Key, observed: State) -> list[Literal["lost", "resurrected", "unexpected"]]:
    """What is wrong with seeing ``observed`` for ``key`` (nothing when it may be so)."""
    if observed in key.possible:
        return []
    verdicts: list[Literal["lost", "resurrected", "unexpected"]] = []
    if None not in key.possible:
        verdicts.append("lost")  # an acknowledged plant is missing or not exactly as sent
    if observed is not None:
        verdicts.append("resurrected" if observed in key.sent else "unexpected")
    return verdicts


def list_plants(http: httpx.Client, base_url: str, token: str) -> tuple[list[Value], list[str]]:
    """Every plant of the token's user, page by page; and any odd answers on the way."""
    plants: list[Value] = []
    odd: list[str] = []
    url: str | None = f"{base_url}/plants?limit={LIST_LIMIT}"
    headers = {"Authorization": f"Bearer {token}"}
    while url is not None:
        response = http.get(url, headers=headers)
        if response.status_code != 200:
            raise TortureError(f"listing answered {response.status_code}: {response.text}")
        for plant in response.json():
            extra = set(plant) - {"name", "tag"}
            if extra or "name" not in plant or plant.get("tag", "") is None:
                odd.append(f"listed plant has a bad shape: {plant!r}")
            plants.append((plant["name"], plant.get("tag")))
        link = response.headers.get("link")
        url = urljoin(url, link[link.index("<") + 1 : link.index(">")]) if link else None
    return plants, odd


def plant_id_of(name: str) -> int | None:
    head = name.split(" ", 1)[0]
    try:
        return int(head.partition("~")[0])
    except ValueError:
        return None


def judge_listing(
    result: TortureResult, keys: dict[tuple[str, int], Key], listings: dict[str, list[Value]]
) -> None:
    """Compare each user's listed plants with what each key may be."""
    observed: dict[tuple[str, int], State] = {}
    for user, plants in listings.items():
        last_id: int | None = None
        for value in plants:
            plant_id = plant_id_of(value[0])
            where = f"user {user!r} lists {value!r}"
            if plant_id is None:
                result.unexpected.append(f"{where}: no plant of ours is named so")
                continue
            if last_id is not None and plant_id <= last_id:
                result.odd.append(f"{where} after id {last_id}: not in ascending id order")
            last_id = plant_id
            key_id = (user, plant_id)
            if key_id not in keys:
                result.unexpected.append(f"{where}: id {plant_id} was never sent by this user")
            elif key_id in observed:
                result.unexpected.append(f"{where}: id {plant_id} listed twice")
            else:
                observed[key_id] = value
    result.listed = sum(len(plants) for plants in listings.values())
    for key_id, key in keys.items():
        seen = observed.get(key_id)
        for verdict in judge(key, seen):
            shown = "absent" if seen is None else repr(seen)
            getattr(result, verdict).append(f"{key.describe()} is listed as {shown}")


def sqlite_integrity(database_url: str) -> str:
    path = database_url.removeprefix("sqlite:///")
    with contextlib.closing(sqlite3.connect(path, timeout=30)) as conn:
        rows = conn.execute("PRAGMA integrity_check").fetchall()
    return "; ".join(str(row[0]) for row in rows)
