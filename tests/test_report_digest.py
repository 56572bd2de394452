"""The report's one pass over a run's transcripts: each row reduced to a typed digest, the documents
read one at a time and dropped, a missing transcript counted, a damaged one a one-line error."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from medpanel.experiments.analysis import digest as digest_mod
from medpanel.experiments.analysis.digest import read_digests
from medpanel.experiments.analysis.inference.ledger import ledger
from medpanel.experiments.analysis.transitions import call_events, cell_of, transition_tables
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.store.rows import Row

QUESTION = {"dataset": "d", "qid": "q1", "text": "Which organ makes insulin?",
            "options": {"A": "pancreas", "B": "liver"}, "gold": ["A"]}


def _call(agent: str, step: str, answer: str | None, *, rnd: int = 1, turn: int = 1, pt: int = 100, ct: int = 10,
          error: str | None = None, content: str = "", data: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"kind": "call", "role": "specialist", "agent": agent, "round": rnd, "turn": turn, "step": step,
            "messages": [{"role": "user", "content": "the prompt " * 20}], "content": content,
            "parsed": {"answer": answer} if answer else None, "invalid": answer is None, "usage":
            {"prompt_tokens": pt, "completion_tokens": ct}, "latency_s": 0.1, "model": "m", "cache_hit": False,
            "attempts": 1, "error": error, "data": data or {}, "t": 0.0}


def _vote(answer: str) -> dict[str, Any]:
    return {"kind": "vote", "role": "moderator", "agent": "moderator", "step": "final", "content": answer,
            "data": {"rule": "majority", "counts": {answer: 2}}}


def _doc(qid: str, answer: list[str], events: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    return {"format_version": 1, "condition": "c0", "question": {**QUESTION, "qid": qid}, "repeat": 0,
            "answer": answer, "gold": ["A"], "correct": answer == ["A"], "invalid": not answer and not kw.get("error"),
            "error": None, "events": events, **kw}


def _row(qid: str, *, answer: str = "", correct: bool = False, invalid: bool = False, error: str | None = None,
         transcript: str | None = None) -> Row:
    return Row(condition="c0", dataset="d", qid=qid, repeat=0, answer=answer, gold="A", correct=correct,
               invalid=invalid, error=error, error_kind="transport" if error else None, calls=2, logical_calls=2,
               tokens=220, latency_s=0.2, summary={}, transcript=transcript or f"transcripts/c0/{qid}.json")


@pytest.fixture
def small_run(tmp_path: Path) -> tuple[Path, list[Row]]:
    """Four rows of one condition: wrong -> right (with a passage), an invalid answer, an error, a missing file."""
    (tmp_path / "transcripts" / "c0").mkdir(parents=True)
    passage = {"doc_id": "p1", "title": "Insulin", "text": "Beta cells of the pancreas secrete insulin."}
    docs = {
        "q1": _doc("q1", ["A"], [_call("a1", "turn", "B"), _call("a2", "turn", "B"),
                                 {"kind": "note", "role": "curator", "agent": "curator", "step": "brief",
                                  "data": {"evidence": [passage], "received_by": ["a1", "a2"], "trigger": "gap"}},
                                 _call("a1", "turn", "A", turn=2), _call("a2", "turn", "A", turn=2), _vote("A")]),
        "q2": _doc("q2", [], [_call("a1", "turn", None), _call("a2", "turn", None, pt=50, ct=5)]),
        "q3": _doc("q3", [], [_call("a1", "turn", "A", error="boom")], error="boom"),
    }
    for qid, doc in docs.items():
        (tmp_path / "transcripts" / "c0" / f"{qid}.json").write_text(json.dumps(doc), encoding="utf-8")
    rows = [_row("q1", answer="A", correct=True), _row("q2", invalid=True), _row("q3", error="boom"),
            _row("q4", answer="B")]  # q4's transcript file was never written
    return tmp_path, rows


def test_every_row_has_a_digest_with_its_calls_passages_and_trajectory(small_run: tuple[Path, list[Row]]) -> None:
    run_dir, rows = small_run
    digests = list(read_digests(run_dir, rows))
    assert [d.row.qid for d in digests] == ["q1", "q2", "q3", "q4"]
    assert [d.missing for d in digests] == [False, False, False, True]
    q1, _q2, q3, q4 = digests
    assert [(c.prompt_tokens, c.completion_tokens) for c in q1.calls] == [(100, 10)] * 4
    assert [c.failed for c in q3.calls] == [True] and q4.calls == ()
    assert [(p.event, p.key, p.index, p.item["doc_id"]) for p in q1.passages] == [(2, "evidence", 0, "p1")]
    assert [s.majority for s in q1.trajectory.stages] == ["B", "A", "A"]
    assert [x.kind for x in q1.trajectory.stages[1].before] == ["brief"]
    # hand-counted cells: wrong -> right, invalid -> invalid, the error, and the missing file's
    # stand-in (no events: its first state is invalid; its row says B, which is wrong)
    assert [cell_of(d.trajectory) for d in digests] == ["wrong->right", "invalid->invalid", "errors",
                                                        "invalid->wrong"]
    assert q4.outcome.answer == ("B",) and q4.question == {"dataset": "d", "qid": "q4"}


def test_the_tables_count_the_missing_the_invalid_and_the_error_row(small_run: tuple[Path, list[Row]]) -> None:
    run_dir, rows = small_run
    digests = list(read_digests(run_dir, rows))
    transitions = transition_tables(digests, ["c0"], n_boot=50)[0]
    overall = dict(zip(transitions.columns, transitions.rows[-1], strict=True))
    assert overall["n"] == 4 and overall["wrong->right"] == 1 and overall["invalid->invalid"] == 1
    assert overall["errors"] == 1 and overall["invalid->wrong"] == 1 and overall["net_gain"] == 1
    events = call_events(digests)
    (line,) = ledger({"c0": [c for r in rows for c in events(r)]}, {})
    assert (line.role, line.step, line.calls, line.prompt_tokens, line.completion_tokens, line.failed) == \
        ("specialist", "turn", 7, 650, 65, 1)


def test_the_reader_holds_one_document_at_a_time(small_run: tuple[Path, list[Row]],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir, rows = small_run
    reads: list[int] = []
    real = digest_mod.TRANSCRIPT_FIELDS

    class Counting:
        def validate_json(self, data: bytes) -> Any:
            reads.append(len(data))
            return real.validate_json(data)

    monkeypatch.setattr(digest_mod, "TRANSCRIPT_FIELDS", Counting())
    stream = read_digests(run_dir, rows)
    assert reads == []  # a generator: nothing is read before it is asked for
    next(stream)
    assert len(reads) == 1
    next(stream)
    assert len(reads) == 2
    list(stream)
    assert len(reads) == 3  # the missing file is not read


def test_a_run_is_read_in_a_fraction_of_its_transcripts_memory(tmp_path: Path) -> None:
    (tmp_path / "transcripts" / "c0").mkdir(parents=True)
    rows = []
    total = 0
    for n in range(40):
        qid = f"q{n}"
        # long replies and prompts: what a transcript is mostly made of, read by no table
        events = [_call(f"a{i}", "turn", "A", content="x" * 40_000 + qid) for i in range(3)]
        text = json.dumps(_doc(qid, ["A"], events))
        total += len(text)
        (tmp_path / "transcripts" / "c0" / f"{qid}.json").write_text(text, encoding="utf-8")
        rows.append(_row(qid, answer="A", correct=True))
    tracemalloc.start()
    try:
        digests = list(read_digests(tmp_path, rows))
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(digests) == 40
    assert peak < total / 8, (peak, total)


def test_a_transcript_of_the_wrong_shape_is_one_error_naming_the_file_and_field(
        small_run: tuple[Path, list[Row]]) -> None:
    run_dir, rows = small_run
    path = run_dir / "transcripts" / "c0" / "q2.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["events"][1]["kind"] = "shout"
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(UserError, match=r"q2\.json: not a medpanel transcript \(events\.1\.kind: "):
        list(read_digests(run_dir, rows))
    path.write_text('{"condition": "c0", "events": [', encoding="utf-8")
    with pytest.raises(UserError, match=r"q2\.json: not valid JSON"):
        list(read_digests(run_dir, rows))


def test_the_reports_field_lists_are_the_records_own() -> None:
    # The report checks transcripts against TypedDicts (no pydantic model per event), which repeat
    # the records' keys: a field added to a record and not here would make the report refuse every
    # new transcript, or read a key the record no longer writes.
    from medpanel.agents.types import TranscriptEvent
    from medpanel.experiments.analysis.event_facts import EventFields, QuestionFields, TranscriptFields
    from medpanel.experiments.run.store.records import QuestionRecord, TranscriptRecord

    assert set(TranscriptFields.__annotations__) == set(TranscriptRecord.model_fields)
    assert set(QuestionFields.__annotations__) == set(QuestionRecord.model_fields)
    assert set(EventFields.__annotations__) <= set(TranscriptEvent.model_fields)
