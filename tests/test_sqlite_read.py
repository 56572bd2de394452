"""Readers read a SQLite run's rows with sqlite3 alone (`store.sqlite_read`): the same rows, in the
same order, as the store gives, the same refusals, and an older study (a table missing) read
through the store, which brings it up to date."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sqlalchemy.dialects import sqlite

from medpanel.experiments.errors import UserError
from medpanel.experiments.run.store import sqlite_read, store_sql
from medpanel.experiments.run.store.rundir import done_pairs, load_record, open_store, read_rows
from tests.rundir_helpers import finished_run

V0_PANEL = Path(__file__).parent / "fixtures" / "v0" / "v0-panel"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return finished_run(tmp_path_factory.mktemp("sqlite-read"))


def _store_rows(run_dir: Path) -> list[object]:
    store = open_store(run_dir, load_record(run_dir))
    try:
        return list(store.rows())
    finally:
        store.close()


def test_the_query_is_the_stores_own() -> None:
    assert sqlite_read.ROWS_SQL == str(store_sql.ROWS.compile(dialect=sqlite.dialect()))


def test_the_rows_and_their_order_are_the_stores(run: Path) -> None:
    rows = read_rows(run, load_record(run))
    assert len(rows) == 8 and rows == _store_rows(run)
    assert done_pairs(run, load_record(run)) == 8
    assert sqlite_read.study_rows(run / "study.db") is not None  # the fast path answered, not the store


def test_an_old_fixture_reads_the_same_both_ways(tmp_path: Path) -> None:
    copy = shutil.copytree(V0_PANEL, tmp_path / "v0-panel")
    assert read_rows(copy, load_record(copy)) == _store_rows(copy)


def test_an_older_schema_is_read_through_the_store(run: Path, tmp_path: Path) -> None:
    copy = shutil.copytree(run, tmp_path / "old")
    with sqlite3.connect(copy / "study.db") as conn:
        conn.execute("DROP TABLE mp_prompt_cache")  # a study made before the prompt cache's table
    assert sqlite_read.study_rows(copy / "study.db") is None
    assert sqlite_read.study_pair_count(copy / "study.db") is None
    rows = read_rows(copy, load_record(copy))  # the store opens it and adds the table
    assert len(rows) == 8 and done_pairs(copy, load_record(copy)) == 8
    assert sqlite_read.study_rows(copy / "study.db") is not None


def test_a_study_of_another_run_is_refused_as_before(run: Path, tmp_path: Path) -> None:
    copy = shutil.copytree(run, tmp_path / "other")
    with sqlite3.connect(copy / "study.db") as conn:
        conn.execute("DELETE FROM mp_meta WHERE key = 'run_json'")
    with pytest.raises(UserError, match=r"keeps no copy of the run\.json"):
        read_rows(copy, load_record(copy))
    (copy / "study.db").unlink()
    with pytest.raises(UserError, match="is missing: the study database"):
        read_rows(copy, load_record(copy))


def test_reading_the_rows_imports_no_sqlalchemy(run: Path) -> None:
    code = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from medpanel.experiments.run.store.rundir import done_pairs, load_record, read_rows
        run = Path({str(run)!r})
        assert len(read_rows(run, load_record(run))) == 8 and done_pairs(run, load_record(run)) == 8
        print("SQLALCHEMY", "sqlalchemy" in sys.modules)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "SQLALCHEMY False"
