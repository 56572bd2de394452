"""The report builds its tables with the run's digests out of the cycle collector's passes, and
leaves the collector as it found it, whether the tables are built or fail."""

from __future__ import annotations

import gc
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from medpanel.experiments.analysis import report
from medpanel.experiments.analysis.digest import gc_frozen


def test_the_tables_are_built_with_the_digests_frozen_and_the_collector_on(monkeypatch: pytest.MonkeyPatch,
                                                                           tmp_path: Path) -> None:
    seen: list[tuple[int, bool]] = []

    class Built:
        def complete(self, digests: Any) -> list[Any]:
            seen.append((gc.get_freeze_count(), gc.isenabled()))
            return []

    def read(run_dir: Any, rows: Any, *, scoring: str, processes: int, meanwhile: Any) -> list[Any]:
        meanwhile()
        return []

    monkeypatch.setattr(report, "read_digests_spread", read)
    monkeypatch.setattr(report, "row_tables", lambda rows, record: Built())
    was = gc.isenabled()
    report.read_run_tables(tmp_path, [], SimpleNamespace(scoring="exact_set"))  # type: ignore[arg-type]
    assert seen and seen[0][0] > 0 and seen[0][1] == was  # frozen, collecting what the builders make
    assert gc.get_freeze_count() == 0 and gc.isenabled() == was


def test_a_failing_build_leaves_nothing_frozen() -> None:
    with pytest.raises(RuntimeError), gc_frozen():
        assert gc.get_freeze_count() > 0
        raise RuntimeError("a table failed")
    assert gc.get_freeze_count() == 0
