"""docs/operating.md's settings table gives the same bounds as the settings themselves."""

from __future__ import annotations

import re
from pathlib import Path

from annotated_types import Ge, Le

from plantstore.settings import Settings

OPERATING = Path(__file__).parents[2] / "docs" / "operating.md"
ROW = re.compile(r"^\| `PLANTSTORE_(\w+)` \|[^|]*\|[^|]*?\((\d[\d.]*)\u2013(\d[\d.]*)[;)]", re.M)


def test_every_documented_range_is_the_settings_bound() -> None:
    documented = {
        name.lower(): (low, high) for name, low, high in ROW.findall(OPERATING.read_text())
    }
    assert "max_body_bytes" in documented
    for name, (low, high) in documented.items():
        field = Settings.model_fields[name]
        ge = next(m.ge for m in field.metadata if isinstance(m, Ge))
        le = next(m.le for m in field.metadata if isinstance(m, Le))
        assert (float(low), float(high)) == (ge, le), name
