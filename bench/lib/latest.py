"""The report's one current table: every target of a run, its verdict and figure, written into
bench/README.md between two markers, so that the README always shows one run, the latest full
one, and its commit. Earlier runs live in bench/results/ only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

BEGIN = "<!-- latest run: written by make bench -->"
END = "<!-- end of the latest run -->"


def commit_of(payload: dict[str, Any]) -> str:
    """The measured commit, short, and whether the tree differed from it."""
    code = payload.get("code", {})
    dirty = " (with uncommitted changes)" if code.get("dirty") else ""
    return str(code.get("commit", "?"))[:7] + dirty


def markdown(payload: dict[str, Any], results_name: str) -> str:
    """The run's header line and its targets as a Markdown table."""
    commit = commit_of(payload)
    machine = payload.get("machine", {})
    lines = [
        f"Run `{payload.get('started_utc', '?')}` on commit `{commit}`: "
        f"{machine.get('nproc', '?')} cores ({machine.get('cpu', '?')}), Python "
        f"{machine.get('python', '?')}, SQLite {machine.get('sqlite', '?')}, granian "
        f"{machine.get('granian', '?')}; {payload.get('duration_s', 0) / 60:.0f} minutes; "
        f"all figures in [`results/{results_name}`](results/{results_name}).",
        *_peer_versions(payload),
        "",
        "| target | goal | measured | verdict |",
        "|---|---|---|---|",
    ]
    for target in payload.get("targets", []):
        cells = (target["name"], target["goal"], target["measured"], target["verdict"])
        lines.append("| " + " | ".join(str(cell).replace("|", "/") for cell in cells) + " |")
    return "\n".join(lines + _phase_lines(payload))


def _phase_lines(payload: dict[str, Any]) -> list[str]:
    """The webhooks and copy phases' figures and their targets, as each phase words them."""
    found = [
        f"- {title}: " + "; ".join(payload[key]) + "."
        for title, key in (("Webhooks", "webhooks"), ("`plantstore db copy`", "db_copy"))
        if payload.get(key)
    ]
    return ["", "The same run's webhooks and copy phases:", "", *found] if found else []


def _peer_versions(payload: dict[str, Any]) -> list[str]:
    """One line naming each peer's pinned framework versions, when peers ran."""
    versions = (payload.get("peers") or {}).get("versions") or {}
    if not versions:
        return []
    peers = "; ".join(
        f"{name}: " + ", ".join(f"{package} {version}" for package, version in pins.items())
        for name, pins in versions.items()
    )
    return ["", f"Peers (pinned in `peers/<name>.requirements.txt`): {peers}."]


def write(readme: Path, table: str) -> None:
    """Replace what stands between the markers with ``table``."""
    text = readme.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    readme.write_text(f"{text[:start]}\n{table}\n{text[end:]}")
