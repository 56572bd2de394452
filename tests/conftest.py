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
