"""Where the benchmarks keep their jobs and results, and the check that durable files are on a
real disk."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent.parent  # bench/: the jobs, apps/, peers/, results/


MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs"})


def filesystem_type(path: Path) -> str:
    """The type of the filesystem ``path`` is on: its longest mount point in /proc/mounts."""
    resolved, best, kind = path.resolve(), "", "unknown"
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        mount = fields[1].replace("\\040", " ")
        inside = resolved == Path(mount) or Path(mount) in resolved.parents
        if inside and len(mount) >= len(best):  # a later mount on the same point hides earlier
            best, kind = mount, fields[2]
    return kind


def require_real_disk(directory: Path) -> None:
    """Refuse to measure durable writes on a memory filesystem, where an fsync is free."""
    kind = filesystem_type(directory)
    if kind in MEMORY_FILESYSTEMS:
        sys.exit(
            f"{directory} is on {kind}: fsync costs nothing there, so durable-write figures "
            "would be meaningless. Point the results at a real disk."
        )
