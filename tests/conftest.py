"""Shared fixtures: paths to the shared data, scripted runs, and the opt-in e2e marker."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
MEDAGENTSBENCH = SHARED / "data" / "medagentsbench"
CORPUS = SHARED / "data" / "corpus"

# A real PostgreSQL server's URL: CI starts a throwaway one with .ci/start_postgres.sh.
PG_URL = os.environ.get("MEDPANEL_TEST_PG_URL")
needs_postgres = pytest.mark.skipif(not PG_URL, reason="set MEDPANEL_TEST_PG_URL (CI starts a server with "
                                                       ".ci/start_postgres.sh)")


@pytest.fixture()
def pg_url() -> Iterator[str]:
    """A fresh database on the test server, dropped after the test."""
    import psycopg

    assert PG_URL is not None
    name = f"mp_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield PG_URL.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


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
