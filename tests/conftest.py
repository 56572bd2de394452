"""Shared fixtures: paths to the shared data, scripted runs, and the opt-in e2e marker."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
MEDAGENTSBENCH = SHARED / "data" / "medagentsbench"
CORPUS = SHARED / "data" / "corpus"


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Corpora and caches of one test never leak into another, or into the user's ~/.medpanel.
    monkeypatch.setenv("MEDPANEL_HOME", str(tmp_path / "medpanel-home"))


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # With pytest-xdist (`-n 2 --dist loadgroup`, pyproject's addopts), the end-to-end tests run one
    # after another on one worker: each starts the embedded model's server, which takes a core of
    # its own, while the other worker runs the scripted tests beside it.
    for item in items:
        if item.get_closest_marker("e2e") is not None:
            item.add_marker(pytest.mark.xdist_group("embedded-model"))
