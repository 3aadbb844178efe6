"""The peers `make bench` sets plantstore beside: what each is, its venv, how it is started.

Each peer is one short file in bench/peers/ with a requirements file beside it that pins every
package. Its venv, bench/peers/.venvs/<name> (git-ignored), is made from that file with the
project's Python on first use, and made again only when the file changes. A peer is started
the way its server's docs say (one worker, no reload), with two settings in its environment:
``PEER_DATABASE`` (a SQLite path or a PostgreSQL URL) and ``PEER_TOKEN`` (the bench user's
bearer token, which the peer registers at start).
"""

from __future__ import annotations

import hashlib
import secrets
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.lib.place import HERE
from harness.servers import Server, launch

PEERS_DIR = HERE / "peers"
# What a reader of the report needs to know a peer by (the rest is pinned in its file too).
KEY_PACKAGES = (
    "fastapi",
    "pydantic",
    "starlette",
    "msgspec",
    "uvicorn",
    "granian",
    "uvloop",
    "asyncpg",
    "aiosqlite",
)
VENVS = PEERS_DIR / ".venvs"


@dataclass(frozen=True)
class Peer:
    name: str  # the file's stem: peers/<name>.py, peers/<name>.requirements.txt, .venvs/<name>
    label: str
    short: str  # for the targets' names
    server: str  # "uvicorn" or "granian"

    @property
    def requirements(self) -> Path:
        return PEERS_DIR / f"{self.name}.requirements.txt"

    @property
    def venv(self) -> Path:
        return VENVS / self.name

    def versions(self) -> dict[str, str]:
        """The pinned versions of the packages that make the peer what it is."""
        pins = {}
        for line in self.requirements.read_text().splitlines():
            name, _, version = line.partition("==")
            name = name.split("[")[0].strip().lower()
            if version and name in KEY_PACKAGES:
                pins[name] = version.strip()
        return pins

    def command(self) -> list[str]:
        """The server as its docs start it; ``launch`` adds ``--port``."""
        binaries = self.venv / "bin"
        if self.server == "uvicorn":  # uvicorn[standard]: uvloop and httptools, picked itself
            return [str(binaries / "uvicorn"), f"{self.name}:app", "--workers", "1"]
        return [
            str(binaries / "granian"),
            *("--interface", "asgi", "--workers", "1", f"{self.name}:app"),
        ]


FASTAPI_SQLITE = Peer(
    "fastapi_sqlite", "FastAPI+pydantic+sqlite3 FULL on uvicorn", "FastAPI", "uvicorn"
)
STARLETTE_NAIVE = Peer(
    "starlette_naive",
    "naive Starlette+msgspec+sqlite3 FULL on granian",
    "naive Starlette",
    "granian",
)
# The same app on aiosqlite: timed beside FASTAPI_SQLITE once, the faster kept (bench/README).
FASTAPI_AIOSQLITE = Peer(
    "fastapi_aiosqlite", "FastAPI+pydantic+aiosqlite FULL on uvicorn", "FastAPI", "uvicorn"
)
FASTAPI_ASYNCPG = Peer(
    "fastapi_asyncpg", "FastAPI+pydantic+asyncpg on uvicorn", "FastAPI+asyncpg", "uvicorn"
)


def ensure_venv(peer: Peer) -> None:
    """Make the peer's venv unless it exists for this very requirements file."""
    stamp = peer.venv / ".requirements-sha256"
    digest = hashlib.sha256(peer.requirements.read_bytes()).hexdigest()
    if stamp.is_file() and stamp.read_text() == digest:
        return
    print(f"  making {peer.venv.relative_to(HERE)} from {peer.requirements.name}", flush=True)
    _run([sys.executable, "-m", "venv", "--clear", str(peer.venv)])
    pip = [str(peer.venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    _run([*pip, "--disable-pip-version-check", "-r", str(peer.requirements)])
    stamp.write_text(digest)


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        raise RuntimeError(f"{' '.join(command[:4])} ... failed: {tail}")


def start_peer(peer: Peer, database: str, log: Path, cpus: str | None) -> Server:
    """The peer on ``database`` (its tables made at start) with a fresh token of its own."""
    ensure_venv(peer)
    token = f"peer_{secrets.token_urlsafe(32)}"
    environment = {"PEER_DATABASE": database, "PEER_TOKEN": token}
    # /plants without a token: any answer (401) means the app is up and its start-up done.
    process, url = launch(peer.command(), log, cpus, environment, "/plants", cwd=PEERS_DIR)
    return Server(process, url, token)
