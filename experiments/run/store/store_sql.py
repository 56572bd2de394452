"""The store's SQL, built once: the statements of a claim, a commit and the reads of results.

Building a SQLAlchemy expression per call (values, where clauses, cache keys) cost several
milliseconds a question, which shows directly in the runner's overhead per model call; executed
with a parameter dict, SQLAlchemy reuses their compiled form. The `*_SQL` strings are run on the
sqlite3 connection itself (`Store._sqlite_write`)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from medpanel.experiments.run.store.storage import Pair, claims, executions, prompt_cache, results, transcripts


def key_params(pair: Pair) -> dict[str, object]:
    return {"k_condition": pair[0], "k_dataset": pair[1], "k_qid": pair[2], "k_repeat": pair[3]}


def key_match(table: sa.Table) -> list[Any]:
    return [table.c.condition == sa.bindparam("k_condition"), table.c.dataset == sa.bindparam("k_dataset"),
            table.c.qid == sa.bindparam("k_qid"), table.c.repeat == sa.bindparam("k_repeat")]


def key_values(**extra: object) -> dict[str, object]:
    return {"condition": sa.bindparam("k_condition"), "dataset": sa.bindparam("k_dataset"),
            "qid": sa.bindparam("k_qid"), "repeat": sa.bindparam("k_repeat"), **extra}


IS_DONE = sa.select(results.c.qid).where(*key_match(results))
IS_ANSWERED = sa.select(results.c.qid).where(*key_match(results), results.c.error.is_(None))
CLAIM_SQL = (
    'INSERT INTO {claims} (condition, dataset, qid, "repeat", owner, claimed_at) '
    "SELECT :k_condition, :k_dataset, :k_qid, :k_repeat, :owner, :now WHERE NOT EXISTS ("
    'SELECT 1 FROM {results} WHERE condition = :k_condition AND dataset = :k_dataset AND qid = :k_qid '
    'AND "repeat" = :k_repeat{answered}) ON CONFLICT DO NOTHING'
)
CLAIM_SQL_OPEN = CLAIM_SQL.format(claims=claims.name, results=results.name, answered="")
"""SQLite: claim the pair unless it has a row or a claim."""
CLAIM_SQL_ANSWERABLE = CLAIM_SQL.format(claims=claims.name, results=results.name, answered=" AND error IS NULL")
"""SQLite, `--retry-errors`: claim the pair unless it has an answered row or a claim."""
EXECUTION_SQL = (f'INSERT INTO {executions.name} (condition, dataset, qid, "repeat", owner, started_at) '
                  "VALUES (:k_condition, :k_dataset, :k_qid, :k_repeat, :owner, :now)")
KEY_SQL = 'condition = :k_condition AND dataset = :k_dataset AND qid = :k_qid AND "repeat" = :k_repeat'
INSERT_RESULT_SQL = "INSERT INTO {} ({}) VALUES ({})".format(
    results.name, ", ".join(f'"{c.name}"' for c in results.c), ", ".join(f":{c.name}" for c in results.c))
"""SQLite, on sqlite3 itself: the statements of a commit (`Store.record`)."""
INSERT_PROMPT_CACHE_SQL = (f'INSERT INTO {prompt_cache.name} (condition, dataset, qid, "repeat", cached_tokens, '
                            "saved_usd) VALUES (:k_condition, :k_dataset, :k_qid, :k_repeat, :cached, :saved)")
DROP_CLAIM_SQL = f"DELETE FROM {claims.name} WHERE {KEY_SQL}"
ERROR_TRANSCRIPT_SQL = f"SELECT transcript FROM {results.name} WHERE {KEY_SQL} AND error IS NOT NULL"
DROP_ERROR_ROW_SQL = f"DELETE FROM {results.name} WHERE {KEY_SQL} AND error IS NOT NULL"
DROP_PROMPT_CACHE_SQL = f"DELETE FROM {prompt_cache.name} WHERE {KEY_SQL}"
ERROR_TRANSCRIPT = sa.select(results.c.transcript).where(*key_match(results), results.c.error.is_not(None))
DROP_ERROR_ROW = results.delete().where(*key_match(results), results.c.error.is_not(None))
DROP_TRANSCRIPT = transcripts.delete().where(*key_match(transcripts))
INSERT_CLAIM = claims.insert().values(key_values(owner=sa.bindparam("owner"), claimed_at=sa.bindparam("now")))
INSERT_EXECUTION = executions.insert().values(key_values(owner=sa.bindparam("owner"),
                                                           started_at=sa.bindparam("now")))
RELEASE_CLAIM = claims.delete().where(*key_match(claims), claims.c.owner == sa.bindparam("owner"))
DROP_CLAIM = claims.delete().where(*key_match(claims))
INSERT_RESULT = results.insert()
INSERT_PROMPT_CACHE = prompt_cache.insert().values(key_values(cached_tokens=sa.bindparam("cached"),
                                                                saved_usd=sa.bindparam("saved")))
DROP_PROMPT_CACHE = prompt_cache.delete().where(*key_match(prompt_cache))
ROWS = sa.select(results, prompt_cache.c.cached_tokens, prompt_cache.c.saved_usd).select_from(
    results.outerjoin(prompt_cache, sa.and_(*(results.c[k] == prompt_cache.c[k]
                                              for k in ("condition", "dataset", "qid", "repeat")))))
INSERT_TRANSCRIPT = transcripts.insert().values(key_values(body=sa.bindparam("body")))
