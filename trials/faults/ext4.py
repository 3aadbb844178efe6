"""A small ext4 file system of the run's own: an image file on a loop device, mounted under
the work directory, and the faults staged on it (filled, an error triggered, frozen). Every
step is a real command; ``close`` undoes whatever was done (unfreeze, unmount, detach)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from pathlib import Path

from .config import StagingError, require_root, require_tools

TOOLS = ("losetup", "mkfs.ext4", "mount", "umount", "e2fsck", "fsfreeze", "fallocate", "dd")


def run(*command: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    if check and result.returncode != 0:
        raise StagingError(
            f"{' '.join(command)} failed ({result.returncode}): {result.stderr.strip()[-500:]}"
        )
    return result


class LoopFs:
    """``truncate`` + ``mkfs.ext4`` an image, attach it to a free loop device, mount it."""

    def __init__(self, directory: Path, size_mb: int, options: str = "") -> None:
        self.image = directory / "ext4.img"
        self.mount = directory / "mnt"
        self.size_mb = size_mb
        self.options = options
        self.device = ""
        self.mounted = False
        self.frozen = False

    def setup(self) -> None:
        """Make, attach and mount it (``close`` undoes whatever part of this was done)."""
        require_root("a loop-mounted file system")
        require_tools(*TOOLS)
        self.mount.mkdir(parents=True, exist_ok=True)
        with self.image.open("wb") as image:
            image.truncate(self.size_mb * 1024 * 1024)
        # -m 0: no blocks reserved for root (the service runs as root here); no lazy init,
        # so no kernel thread writes behind the faults' backs.
        lazy = "lazy_itable_init=0,lazy_journal_init=0"
        run("mkfs.ext4", "-q", "-m", "0", "-E", lazy, str(self.image))
        self.device = run("losetup", "--find", "--show", str(self.image)).stdout.strip()
        if not self.device.startswith("/dev/loop"):
            raise StagingError(f"losetup gave no loop device: {self.device!r}")
        self.mount_fs()

    @property
    def sysfs(self) -> Path:
        return Path("/sys/fs/ext4") / Path(self.device).name

    def mount_fs(self) -> None:
        extra = ["-o", self.options] if self.options else []
        run("mount", "-t", "ext4", *extra, self.device, str(self.mount))
        self.mounted = True

    def unmount(self) -> None:
        if self.frozen:
            self.thaw()
        for attempt in range(20):
            result = run("umount", str(self.mount), check=False)
            if result.returncode == 0:
                self.mounted = False
                return
            time.sleep(0.25)
            if attempt == 19:
                raise StagingError(f"umount {self.mount}: {result.stderr.strip()}")

    def fsck(self) -> tuple[int, str]:
        """``e2fsck -fy`` on the unmounted image: its exit status (0 clean, 1 repaired) and
        its last lines."""
        result = run("e2fsck", "-fy", self.device, check=False, timeout=120)
        if result.returncode > 2:
            raise StagingError(f"e2fsck -fy failed ({result.returncode}): {result.stdout[-500:]}")
        return result.returncode, " / ".join(result.stdout.strip().splitlines()[-2:])

    def close(self) -> None:
        with contextlib.suppress(StagingError, subprocess.TimeoutExpired):
            if self.frozen:
                self.thaw()
        with contextlib.suppress(StagingError, subprocess.TimeoutExpired):
            if self.mounted:
                self.unmount()
        if self.device:
            with contextlib.suppress(subprocess.TimeoutExpired):
                run("losetup", "-d", self.device, check=False)
            self.device = ""
        self.image.unlink(missing_ok=True)

    # --- the faults ------------------------------------------------------------------------

    def fill(self) -> str:
        """Fill the file system until a write fails with ENOSPC: ``fallocate`` most of the free
        space, then ``dd`` the rest in 4 KiB blocks. Returns the evidence."""
        stats = os.statvfs(self.mount)
        free = stats.f_bavail * stats.f_frsize
        bulk = max(0, free - 2 * 1024 * 1024)
        if bulk:
            run("fallocate", "-l", str(bulk), str(self.mount / "filler-bulk"))
        tail = run("dd", "if=/dev/zero", f"of={self.mount / 'filler-tail'}", "bs=4096", check=False)
        if "No space left on device" not in tail.stderr:
            raise StagingError(f"the file system did not fill: dd said {tail.stderr.strip()!r}")
        try:  # one more write, as the service would make it
            with (self.mount / "filler-probe").open("wb") as probe:
                probe.write(b"\0" * 65536)
                probe.flush()
                os.fsync(probe.fileno())
            raise StagingError("a 64 KiB write still succeeded on the filled file system")
        except OSError as exc:
            refused = exc.strerror
        left = os.statvfs(self.mount)
        return (
            f"dd: No space left on device after {(bulk + tail_bytes(tail.stderr)) >> 20} MB; "
            f"a 64 KiB write then: {refused} ({left.f_bfree * left.f_frsize // 1024} KiB "
            "counted free, which ext4 holds back)"
        )

    def unfill(self) -> None:
        for name in ("filler-bulk", "filler-tail", "filler-probe"):
            (self.mount / name).unlink(missing_ok=True)
        run("sync", "-f", str(self.mount))  # the freed blocks are usable once committed

    def trigger_error(self) -> None:
        trigger = self.sysfs / "trigger_fs_error"
        if not trigger.exists():
            raise StagingError(f"{trigger} does not exist (ext4 of this kernel has no trigger)")
        trigger.write_text("1\n")

    def error_evidence(self) -> str:
        """Proof the file system took the error: read-only in the mount table, its error
        count, a write refused, and the kernel's line (when dmesg can be read)."""
        options = mount_options(self.mount)
        read_only = "ro" in options or "emergency_ro" in options
        try:
            errors = (self.sysfs / "errors_count").read_text().strip()
        except OSError:
            errors = "unknown"
        try:
            (self.mount / "probe").write_text("x")
            refused = "a write still succeeded"
        except OSError as exc:
            refused = f"a write fails: {exc.strerror}"
        kernel = run("dmesg", check=False).stdout
        line = next(
            (ln for ln in reversed(kernel.splitlines()) if Path(self.device).name in ln), ""
        )
        if not read_only and "succeeded" in refused:
            raise StagingError(f"no I/O error took: options {','.join(options)}; {refused}")
        return (
            f"mount options {','.join(options)}; errors_count {errors}; {refused}; "
            f"dmesg: {line.split('] ', 1)[-1] if line else 'unreadable'}"
        )

    def freeze(self) -> None:
        run("fsfreeze", "-f", str(self.mount))
        self.frozen = True

    def thaw(self) -> None:
        run("fsfreeze", "-u", str(self.mount))
        self.frozen = False


class FreezeProbe:
    """A write and fsync of a file on the mount in a thread of its own: while the file system
    is frozen it cannot finish (it ends after the thaw)."""

    def __init__(self, mount: Path) -> None:
        self.path = mount / "freeze-probe"
        self.finished = threading.Event()
        self._thread = threading.Thread(target=self._write, name="faults-freeze", daemon=True)
        self._thread.start()

    def _write(self) -> None:
        with contextlib.suppress(OSError):
            descriptor = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(descriptor, b"probe")
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
        self.finished.set()

    def join(self) -> None:
        self._thread.join(timeout=10)


def mount_options(mount: Path) -> list[str]:
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[1] == str(mount):
            return fields[3].split(",")
    return []


def tail_bytes(dd_stderr: str) -> int:
    """The bytes dd wrote, from its summary line ("123 bytes (...) copied")."""
    for line in dd_stderr.splitlines():
        if "bytes" in line and "copied" in line:
            with contextlib.suppress(ValueError):
                return int(line.split()[0])
    return 0
