"""A Patroni cluster for the tests: one etcd and three Patroni nodes of PostgreSQL, on free
ports in a temporary directory, in strict synchronous mode (a commit waits for a standby).

PostgreSQL refuses to run as root, so under root Patroni runs as the ``postgres`` user and
owns its data directories. Timings are small so that a failover takes seconds, not a minute,
and the standby left behind follows the new leader at once (no slot to wait for, a short
``wal_retrieve_retry_interval``): strict mode takes no write until it does.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests import pg
from tests.fixtures.servers import free_port

NODES = 3
TTL = 10  # seconds the leader key outlives its holder: the wait before a failover
LOOP_WAIT = 1
RETRY_TIMEOUT = 3  # loop_wait + 2 * retry_timeout <= ttl, as Patroni asks


def missing_tools() -> list[str]:
    """The programs this cluster needs that this machine lacks."""
    missing = [name for name in ("etcd", "patroni") if shutil.which(name) is None]
    if pg.postgres_binaries() is None:
        missing.append("PostgreSQL binaries (initdb, pg_ctl)")
    return missing


@dataclass
class Node:
    name: str
    port: int
    api_port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = None
    frozen: set[int] = field(default_factory=set)  # backends signalled, killed with the rest

    @property
    def data(self) -> Path:
        return self.directory / "data"

    @property
    def log(self) -> Path:
        return self.directory / "patroni.log"

    def role(self) -> int:
        """The status Patroni's ``/primary`` answers: 200 on the leader, 503 elsewhere."""
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.api_port}/primary", timeout=0.5
            ) as response:
                return int(response.status)
        except urllib.error.HTTPError as refused:
            return refused.code
        except (OSError, ValueError):
            return 0  # not answering

    def postmaster_pid(self) -> int:
        with contextlib.suppress(OSError, ValueError, IndexError):
            return int((self.data / "postmaster.pid").read_text().split()[0])
        return 0

    def kill(self) -> None:
        """SIGKILL Patroni and its postmaster: the machine is gone, nothing shuts down."""
        self._signal(signal.SIGKILL)

    def freeze(self) -> None:
        """SIGSTOP Patroni, its postmaster and every backend: the machine still takes TCP
        connections (the kernel does) but answers nothing, as behind a partition."""
        self._signal(signal.SIGSTOP)

    def _signal(self, number: int) -> None:
        postmaster = self.postmaster_pid()
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, number)  # runuser and Patroni
        if postmaster:
            self.frozen.update(_children(postmaster))
            for pid in {postmaster, *self.frozen}:  # a stopped backend outlives its postmaster
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, number)


def _children(pid: int) -> set[int]:
    children: set[int] = set()
    with contextlib.suppress(FileNotFoundError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError):
                children.update(int(word) for word in (task / "children").read_text().split())
    return children


class PatroniCluster:
    """etcd and three Patroni nodes; ``url`` names every node, writes go to the leader."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.etcd_port = free_port()
        self._etcd: subprocess.Popen[bytes] | None = None
        self.nodes = [
            Node(f"node{n}", free_port(), free_port(), directory / f"node{n}")
            for n in range(1, NODES + 1)
        ]
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)
        self.url = f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write"
        binaries = pg.postgres_binaries()
        if binaries is None:
            raise RuntimeError("no PostgreSQL binaries (initdb, pg_ctl) on this machine")
        self._bin = binaries
        self._run_as: list[str] = []
        self._owner: tuple[int, int] | None = None
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            self._owner = (owner.pw_uid, owner.pw_gid)
            self._run_as = ["runuser", "-u", "postgres", "--"]
            os.chown(directory, *self._owner)

    def node_url(self, node: Node) -> str:
        return f"postgresql://postgres@127.0.0.1:{node.port}/postgres"

    def url_listing_first(self, first: Node) -> str:
        """``url`` with ``first`` before the other nodes."""
        nodes = [first, *(node for node in self.nodes if node is not first)]
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in nodes)
        return f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write"

    def start(self) -> None:
        self._start_etcd()
        for node in self.nodes:
            node.directory.mkdir()
            config = node.directory / "patroni.yml"
            config.write_text(json.dumps(self._config(node), indent=1))  # YAML reads JSON
            if self._owner is not None:
                os.chown(node.directory, *self._owner)
                os.chown(config, *self._owner)
            with node.log.open("wb") as log:
                node.process = subprocess.Popen(
                    [*self._run_as, "patroni", str(config)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    cwd=node.directory,  # one the postgres user may enter, unlike a root-only clone
                )

    def _start_etcd(self) -> None:
        peer = f"http://127.0.0.1:{free_port()}"
        client = f"http://127.0.0.1:{self.etcd_port}"
        with (self.directory / "etcd.log").open("wb") as log:
            self._etcd = subprocess.Popen(
                [
                    "etcd",
                    "--name=etcd",
                    f"--data-dir={self.directory / 'etcd'}",
                    f"--listen-client-urls={client}",
                    f"--advertise-client-urls={client}",
                    f"--listen-peer-urls={peer}",
                    f"--initial-advertise-peer-urls={peer}",
                    f"--initial-cluster=etcd={peer}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def _config(self, node: Node) -> dict[str, object]:
        address = f"127.0.0.1:{node.port}"
        api = f"127.0.0.1:{node.api_port}"
        trust = [
            "local all all trust",
            "host all all 127.0.0.1/32 trust",
            "host replication all 127.0.0.1/32 trust",
        ]
        return {
            "scope": f"plantstore-{self.etcd_port}",
            "name": node.name,
            "log": {"level": "INFO"},
            "restapi": {"listen": api, "connect_address": api},
            "etcd3": {"hosts": [f"127.0.0.1:{self.etcd_port}"]},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL,
                    "loop_wait": LOOP_WAIT,
                    "retry_timeout": RETRY_TIMEOUT,
                    "maximum_lag_on_failover": 1048576,
                    "synchronous_mode": True,
                    "synchronous_mode_strict": True,
                    "postgresql": {
                        "use_pg_rewind": False,
                        # With slots, the standby left behind cannot stream from the new
                        # leader until its Patroni makes the slot, a loop or two after the
                        # promotion, and strict mode holds every commit until it streams.
                        "use_slots": False,
                        "parameters": {
                            "wal_level": "replica",
                            "hot_standby": "on",
                            "max_wal_senders": 10,
                            "max_replication_slots": 10,
                            "fsync": "on",
                            # A standby whose primary went away tries again after this,
                            # not after PostgreSQL's 5 s.
                            "wal_retrieve_retry_interval": "200ms",
                        },
                    },
                },
                "initdb": [{"auth": "trust"}, {"encoding": "UTF8"}],
                "pg_hba": trust,
            },
            "postgresql": {
                "listen": address,
                "connect_address": address,
                "data_dir": str(node.data),
                "bin_dir": str(self._bin),
                "pgpass": str(node.directory / "pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres"},
                    "replication": {"username": "postgres"},
                },
                "parameters": {"unix_socket_directories": str(node.directory)},
                "pg_hba": trust,
            },
        }

    def leader(self, among: list[Node] | None = None) -> Node | None:
        """The node whose ``/primary`` answers 200, if one does."""
        return next((node for node in among or self.nodes if node.role() == 200), None)

    def wait_until_replicating(self, timeout: float) -> Node:
        """Wait for a leader with both others streaming from it, one of them synchronous."""
        deadline = time.monotonic() + timeout
        while True:
            leader = self.leader()
            if leader is not None:
                with contextlib.suppress(Exception):  # not up yet: ask again
                    [rows] = pg.run_sql(
                        self.node_url(leader),
                        "SELECT application_name, sync_state FROM pg_stat_replication"
                        " WHERE state = 'streaming'",
                    )
                    # by name: pg_basebackup's WAL stream (a node's bootstrap) streams too
                    states = {str(name): str(state) for name, state in rows}
                    others = [node.name for node in self.nodes if node is not leader]
                    if all(name in states for name in others) and any(
                        states[name] == "sync" for name in others
                    ):
                        return leader
            if time.monotonic() > deadline:
                raise RuntimeError(f"no replicating Patroni cluster in {timeout} s: {self.logs()}")
            time.sleep(0.2)

    def logs(self) -> str:
        """The tail of every node's log, for a failure's message."""
        tails = []
        for node in self.nodes:
            text = node.log.read_text(errors="replace") if node.log.exists() else ""
            tails.append(f"--- {node.name}\n{text[-1500:]}")
        return "\n".join(tails)

    def stop(self) -> None:
        pg_ctl = [*self._run_as, str(self._bin / "pg_ctl")]
        for node in self.nodes:
            node.kill()
            if node.process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node.process.wait(timeout=10)
        for node in self.nodes:  # a postmaster's children outlive it briefly
            if (node.data / "postmaster.pid").exists():
                with contextlib.suppress(subprocess.TimeoutExpired):
                    subprocess.run(
                        [*pg_ctl, "stop", "-m", "immediate", "-D", str(node.data)],
                        capture_output=True,
                        timeout=30,
                        cwd=node.directory,
                    )
        if self._etcd is not None:
            self._etcd.kill()
            self._etcd.wait()


@contextlib.contextmanager
def patroni_cluster() -> Iterator[PatroniCluster]:
    """A running, replicating cluster; stopped and removed afterwards."""
    directory = Path(tempfile.mkdtemp(prefix="plantstore-patroni-"))
    cluster = PatroniCluster(directory)
    try:
        cluster.start()
        cluster.wait_until_replicating(timeout=90)
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(directory, ignore_errors=True)
