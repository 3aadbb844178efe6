"""One writer per SQLite file per machine (``PLANTSTORE_SQLITE_WRITERS=one``): under a real ``serve --workers 3`` one worker owns
it (it holds the writer's lock in ``<database>-locks`` and notes its pid there) and every
worker's writes reach it; SIGKILL of the owner hands the writer to another worker within 2 s,
with every write meanwhile a 200 or a 503 with Retry-After, and nothing acknowledged lost; an
owner that answers nothing (SIGSTOP) costs the others a 503 after the busy timeout, not a
hang. A process of another user is refused before anything it sends is unpickled, and a
message the owner cannot read costs its sender alone the connection."""

from __future__ import annotations

import asyncio
import os
import pickle
import shutil
import signal
import struct
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from harness.procstat import writer_owner
from plantstore.db.migrate import upgrade
from plantstore.db.sqlite import locks_file, ofd_lock
from plantstore.db.sqlite.database import SQLiteDatabase
from plantstore.db.sqlite.machine_writer import MachineWriter, writer_address
from plantstore.db.sqlite.ops import WriteOp
from tests.db.sqlite.one_writer import machine_writer
from tests.fixtures.calls import assert_error, bearer
from tests.fixtures.servers import (
    LiveServer,
    all_plants,
    answered_by,
    child_pids,
    start_workers,
    stop_server,
)

WORKERS = 3
ONE_WRITER = {"PLANTSTORE_SQLITE_WRITERS": "one"}  # the setting these tests are about


def python_for_another_user() -> str:
    """A Python that user 65534 may run (the tests' own may sit under root's home)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run a process as another user")
    found = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    if found is None:
        pytest.skip("no system python3 for another user to run")
    return found


def address_of(db: Path) -> str:
    """The abstract name the owner of ``db``'s writer listens on."""
    fd = os.open(locks_file.path_of(db), os.O_RDONLY)
    try:
        return writer_address(fd)
    finally:
        os.close(fd)


def owner(db: Path) -> int | None:
    return writer_owner(db)


def wait_for_owner(db: Path, server: LiveServer, timeout: float = 10.0) -> int:
    deadline = time.monotonic() + timeout
    while True:
        pid = owner(db)
        if pid is not None and pid in child_pids(server.process.pid):
            return pid
        assert time.monotonic() < deadline, f"no worker owns the writer (holder: {pid})"
        time.sleep(0.05)


def create(base_url: str, token: str, plant_id: int, timeout: float = 10) -> httpx.Response:
    """One create on a connection of its own, so the kernel may hand it to any worker."""
    with httpx.Client(base_url=base_url, headers={"Connection": "close"}, timeout=timeout) as http:
        return http.post(
            "/plants", json={"id": plant_id, "name": f"p{plant_id}"}, headers=bearer(token)
        )


@pytest.mark.server
def test_one_worker_owns_the_writer_and_every_worker_writes_through_it(tmp_path: Path) -> None:
    db = tmp_path / "machine.db"
    server = start_workers(f"sqlite:///{db}", tmp_path / "serve.log", WORKERS, **ONE_WRITER)
    try:
        holder = wait_for_owner(db, server)
        answered: Counter[str] = Counter()
        for plant_id in range(1, 31):
            response = create(server.base_url, server.token, plant_id)
            assert response.status_code == 200, response.text
            answered[answered_by(response)] += 1
        stored = {int(plant["name"][1:]) for plant in all_plants(server, server.token)}
        assert owner(db) == holder  # one owner all along
    finally:
        stop_server(server)
    assert len(answered) > 1, f"one worker answered every create: {answered}"
    assert stored == set(range(1, 31))


@pytest.mark.timeout(120)
@pytest.mark.server
def test_a_sigkilled_owner_hands_the_writer_on_within_two_seconds(tmp_path: Path) -> None:
    db = tmp_path / "machine.db"
    server = start_workers(f"sqlite:///{db}", tmp_path / "serve.log", WORKERS, **ONE_WRITER)
    # sent at, id, status, answer; a create whose connection the killed owner held gets no
    # answer at all (status 0): it was never acknowledged, so it may or may not be stored
    answers: list[tuple[float, int, int, httpx.Response | None]] = []
    stop = threading.Event()
    lock = threading.Lock()

    def traffic(first: int) -> None:
        plant_id = first
        while not stop.is_set():
            sent = time.monotonic()
            try:
                response: httpx.Response | None = create(server.base_url, server.token, plant_id)
            except httpx.TransportError:
                response = None
            status = 0 if response is None else response.status_code
            with lock:
                answers.append((sent, plant_id, status, response))
            plant_id += 1

    try:
        first_owner = wait_for_owner(db, server)
        threads = [threading.Thread(target=traffic, args=(n * 100_000,)) for n in range(1, 7)]
        for thread in threads:
            thread.start()
        time.sleep(1.0)
        killed_at = time.monotonic()
        os.kill(first_owner, signal.SIGKILL)
        time.sleep(4.0)
        stop.set()
        for thread in threads:
            thread.join()
        second_owner = wait_for_owner(db, server)
        stored = {int(plant["name"][1:]) for plant in all_plants(server, server.token)}
    finally:
        stop_server(server)

    assert second_owner != first_owner
    statuses = Counter(status for _, _, status, _ in answers)
    assert set(statuses) <= {0, 200, 503}, statuses  # never a 500
    unanswered = [sent for sent, _, status, _ in answers if status == 0]
    # only a connection the owner held when it died goes unanswered: one per client at most
    assert len(unanswered) <= len(threads), statuses
    assert all(sent < killed_at + 0.5 for sent in unanswered), "a later create went unanswered"
    for _, _, status, response in answers:
        if status == 503:
            assert response is not None
            assert_error(response, 503)
            assert response.headers["retry-after"] == "1"
    after = [(sent, status) for sent, _, status, _ in answers if sent > killed_at]
    served = [sent for sent, status in after if status == 200]
    assert served, f"no create succeeded after the kill: {statuses}"
    print(f"first create served {min(served) - killed_at:.3f} s after the kill; {statuses}")
    # Writing again within 2 s: every create sent from then on is made. (When the first one
    # was sent is printed, not asserted: a stalled client may send none for a while.)
    late = [status for sent, status in after if sent > killed_at + 2.0]
    assert late, "no create was sent 2 s after the kill"
    assert set(late) == {200}, Counter(late)
    acknowledged = {plant_id for _, plant_id, status, _ in answers if status == 200}
    assert acknowledged <= stored, f"lost: {sorted(acknowledged - stored)[:10]}"


@pytest.mark.server
def test_a_process_of_another_user_is_refused_before_its_message_is_read(
    tmp_path: Path,
) -> None:
    """An abstract socket has no file permissions: the owner asks the kernel who connected and
    hangs up on anyone but its own user, so a pickle that would run code never loads."""
    python = python_for_another_user()
    db = tmp_path / "machine.db"
    upgrade(f"sqlite:///{db}")
    proof = tmp_path / "pwned"
    tmp_path.chmod(0o777)

    class Exploit:
        def __reduce__(self) -> tuple[object, ...]:
            return (os.system, (f"touch {proof}",))

    payload = pickle.dumps(Exploit())
    message = struct.pack("!I", len(payload)) + payload

    async def scenario() -> bytes:
        database = machine_writer(db)
        await database.open()
        try:
            address = address_of(db)
            intruder = (
                "import socket, sys\n"
                "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
                f"s.connect({address!r})\n"
                "s.settimeout(5)\n"
                "try:\n"
                f"    s.sendall({message!r})\n"
                "    answer = s.recv(10)\n"
                "except (BrokenPipeError, ConnectionResetError):\n"
                "    answer = b''\n"
                "sys.stdout.buffer.write(b'closed' if answer == b'' else b'open')\n"
            )
            result = await asyncio.to_thread(
                subprocess.run,
                [python, "-c", intruder],
                user=65534,
                capture_output=True,
                timeout=30,
                check=True,
            )
            await asyncio.sleep(0.2)
            return result.stdout
        finally:
            await database.close()

    assert asyncio.run(scenario()) == b"closed"
    assert not proof.exists()


@pytest.mark.server
def test_a_worker_refuses_an_owner_of_another_user(tmp_path: Path) -> None:
    """And the other way round: a worker will not send its writes to, nor unpickle answers
    from, a listener of another user on the writer's name."""
    python = python_for_another_user()
    db = tmp_path / "machine.db"
    upgrade(f"sqlite:///{db}")
    fd = locks_file.open_shared(db)
    address = writer_address(fd)
    impostor = subprocess.Popen(
        [
            python,
            "-c",
            "import socket, time\n"
            "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
            f"s.bind({address!r}); s.listen(8); print('ready', flush=True); time.sleep(60)\n",
        ],
        user=65534,
        stdout=subprocess.PIPE,
    )
    try:
        assert impostor.stdout is not None
        assert impostor.stdout.readline() == b"ready\n"
        ofd_lock.lock(fd, locks_file.WRITER)  # as if the impostor's side owned the writer

        async def scenario() -> None:
            database = machine_writer(db)
            with pytest.raises(PermissionError, match="another user"):
                await database.open()
            await database.close()

        asyncio.run(scenario())
    finally:
        impostor.kill()
        impostor.communicate()  # reaps it and closes its pipe
        os.close(fd)


@pytest.mark.timeout(120)
@pytest.mark.server
@pytest.mark.serial  # the clock judges its 503's wait
def test_a_stopped_owner_costs_other_workers_a_503_not_a_hang(tmp_path: Path) -> None:
    """An owner that answers nothing (SIGSTOP here; stuck, in life) keeps its lock: another
    worker's write waits out its deadline (the write timeout), then answers 503 with
    Retry-After."""
    db = tmp_path / "machine.db"
    server = start_workers(
        f"sqlite:///{db}",
        tmp_path / "serve.log",
        WORKERS,
        PLANTSTORE_WRITE_TIMEOUT="2",
        **ONE_WRITER,
    )
    try:
        holder = wait_for_owner(db, server)
        os.kill(holder, signal.SIGSTOP)
        try:
            refused: list[tuple[float, httpx.Response]] = []
            for plant_id in range(1, 30):
                began = time.monotonic()
                try:
                    response = create(server.base_url, server.token, plant_id, timeout=4)
                except httpx.TimeoutException:
                    continue  # the connection went to the stopped worker itself
                refused.append((time.monotonic() - began, response))
                if len(refused) == 3:
                    break
        finally:
            os.kill(holder, signal.SIGCONT)
        resumed = create(server.base_url, server.token, 1_000)
    finally:
        stop_server(server)
    assert len(refused) == 3, "no worker but the stopped one answered"
    for took, response in refused:
        assert_error(response, 503)
        assert response.headers["retry-after"] == "1"
        assert 1.4 <= took < 2.5, took  # waited for the owner, up to the write's deadline
    assert resumed.status_code == 200


def test_an_unreadable_message_hangs_up_on_its_sender_alone(tmp_path: Path) -> None:
    """A message the owner cannot unpickle (another version's write, say) costs its sender the
    connection; the relay goes on taking every other process's writes."""
    db = tmp_path / "machine.db"
    upgrade(f"sqlite:///{db}")
    garbage = b"\x80\x05not a pickle"

    async def scenario() -> tuple[bytes, object]:
        owning, other = machine_writer(db), machine_writer(db)
        await owning.open()
        await other.open()  # the same file from the same user: it sends its writes to owning
        try:
            assert owning.writer.engine is not None
            assert other.writer.engine is None
            address = address_of(db)
            reader, writer = await asyncio.open_unix_connection(address)
            writer.write(struct.pack("!I", len(garbage)) + garbage)
            async with asyncio.timeout(5):
                ended = await reader.read(10)
            writer.close()
            answer = await other.writer.submit(ANSWER_OF_THE_OWNER, 41)
            return ended, answer
        finally:
            await other.close()
            await owning.close()

    ended, answer = asyncio.run(scenario())
    assert ended == b""  # hung up on
    assert answer == 42


def test_a_write_the_stopping_owner_never_read_is_made_by_the_next_owner(tmp_path: Path) -> None:
    """A write sent as the owner stops, after its last read, was not made: the owner says so
    as it hangs up, and the sender makes it with the next owner (itself, here) instead of
    failing with 'went away'."""

    async def send_as_the_owner_stops(owning: SQLiteDatabase, other: SQLiteDatabase) -> object:
        assert isinstance(owning.writer, MachineWriter)
        service = owning.writer._service
        assert service is not None
        service.stop_taking()  # the owner reads nothing more
        sent = asyncio.ensure_future(other.writer.submit(ANSWER_OF_THE_OWNER, 41))
        await asyncio.sleep(0.1)
        assert not sent.done()  # sent, and never read
        await owning.close()
        async with asyncio.timeout(10):
            return await sent

    assert made_by_the_next_owner(tmp_path / "machine.db", send_as_the_owner_stops) == 42


def test_a_write_sent_after_the_owner_said_goodbye_is_made_by_the_next_owner(
    tmp_path: Path,
) -> None:
    """A process that sends its first write after the owner has said goodbye and hung up (a CLI
    command slow to start, beside another that finished, as two run side by side sometimes
    did) finds the socket closed as it sends: the goodbye still waits unread, and it makes the
    write with the next owner instead of failing with 'went away'."""

    async def send_as_the_owner_stops(owning: SQLiteDatabase, other: SQLiteDatabase) -> object:
        owning.writer.stop()  # goodbye and hang up, with no turn of this loop meanwhile
        # awaited in this task: a task of its own would give the loop a turn to read first
        return await other.writer.submit(ANSWER_OF_THE_OWNER, 41)

    assert made_by_the_next_owner(tmp_path / "machine.db", send_as_the_owner_stops) == 42


def made_by_the_next_owner(
    db: Path, send_as_the_owner_stops: Callable[[SQLiteDatabase, SQLiteDatabase], Awaitable[object]]
) -> object:
    """The answer to a write another process sends as the owner stops; that process must have
    made it as the next owner."""
    upgrade(f"sqlite:///{db}")

    async def scenario() -> object:
        owning, other = machine_writer(db), machine_writer(db)
        await owning.open()
        await other.open()
        try:
            assert owning.writer.engine is not None
            assert other.writer.engine is None
            answer = await send_as_the_owner_stops(owning, other)
            assert other.writer.engine is not None
            return answer
        finally:
            await other.close()
            await owning.close()

    return asyncio.run(scenario())


def answer_of_the_owner(conn: object, value: int) -> int:
    """A write sent from a process that does not own the writer (a declared operation)."""
    return value + 1


ANSWER_OF_THE_OWNER = WriteOp(answer_of_the_owner)
