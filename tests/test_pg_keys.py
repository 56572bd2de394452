"""PostgreSQL key columns hold long question ids: TEXT, and older VARCHAR(128) studies widened."""

from __future__ import annotations

import json
from pathlib import Path

from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.scenario.plan import make_plan
from medpanel.experiments.run.scenario.scenario import Scenario
from medpanel.experiments.run.store.store import Store

from .conftest import needs_postgres

pytestmark = needs_postgres

LONG_QID = "q" + "x" * 299


def _runner(tmp_path: Path, url: str) -> Runner:
    data = tmp_path / "q.jsonl"
    data.write_text(json.dumps({"realidx": LONG_QID, "question": "A long-id question?",
                                "options": {"A": "a", "B": "b"}, "answer_idx": "A"}) + "\n")
    scenario = Scenario.model_validate({
        "name": "pgkeys", "pipeline": "generalist", "flags": {"c": [0]},
        "dataset": {"source": "jsonl", "path": str(data)},
        "model": {"backend": "scripted"}, "run": {"workers": 1, "storage": url}})
    return Runner.create(make_plan(scenario, base_dir=tmp_path), run_dir=tmp_path / "run")


def _finished(runner: Runner) -> list[str]:
    status = runner.run(install_signals=False)
    assert status["state"] == "complete", status
    store = Store(runner.storage_url, runner.run_dir)
    qids = [r.qid for r in store.rows()]
    store.close()
    return qids


def test_a_300_character_question_id_runs_on_postgresql(tmp_path: Path, pg_url: str) -> None:
    assert _finished(_runner(tmp_path, pg_url)) == [LONG_QID]


def test_a_study_made_with_varchar_keys_is_widened(tmp_path: Path, pg_url: str) -> None:
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:  # the schema before the keys became TEXT
        conn.execute("create table mp_claims (condition varchar(128), dataset varchar(128), qid varchar(128), "
                     '"repeat" integer, owner varchar(128) not null, claimed_at double precision not null, '
                     'primary key (condition, dataset, qid, "repeat"))')
    assert _finished(_runner(tmp_path, pg_url)) == [LONG_QID]
    with psycopg.connect(pg_url) as conn:
        types = dict(conn.execute("select column_name, data_type from information_schema.columns "
                                  "where table_name = 'mp_claims'").fetchall())
    assert types["qid"] == types["owner"] == "text"
