"""Hand-built transcript documents, in the shape `Store.commit` writes, with known trajectories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from medpanel.agents.types import Question, QuestionResult
from medpanel.experiments.analysis.digest import RowDigest, read_digests
from medpanel.experiments.analysis.trajectory import Trajectory, trajectory
from medpanel.experiments.run.store.store import Store
from medpanel.experiments.run.store.transcript_log import record_path

OPTIONS = {"A": "a", "B": "b", "C": "c", "D": "d"}


def trajectories(docs: list[dict[str, Any]]) -> list[Trajectory]:
    """Each document's trajectory, scored exactly (the report reads them from digests)."""
    return [trajectory(d) for d in docs]


def ev(kind: str, role: str, agent: str, step: str, *, round: int = 0, turn: int = 0,
       parsed: dict[str, Any] | None = None, data: dict[str, Any] | None = None, invalid: bool = False) -> dict:
    return {"kind": kind, "role": role, "agent": agent, "round": round, "turn": turn, "step": step,
            "messages": [], "content": json.dumps(parsed) if parsed else "", "parsed": parsed, "invalid": invalid,
            "error": None if parsed is not None or kind != "call" else "unparsed reply: no JSON", "data": data or {}}


def turn(agent: str, t: int, answer: Any, *, rnd: int = 1, step: str = "turn") -> dict:
    """A specialist's turn; `answer=None` is a reply that did not parse (after the re-ask: invalid)."""
    parsed = {"reasoning": f"{agent} reasons", "answer": answer} if answer is not None else None
    return ev("call", "specialist", agent, step, round=rnd, turn=t, parsed=parsed,
              invalid=answer is None and step.endswith(":reask"))


def bad_turn(agent: str, t: int, *, rnd: int = 1) -> list[dict]:
    """A turn whose reply and re-ask both failed to parse."""
    return [turn(agent, t, None, rnd=rnd), turn(agent, t, None, rnd=rnd, step="turn:reask")]


def critique(t: int, *, weak: bool = True, gap: str = "missing_differential", rnd: int = 1) -> dict:
    return ev("call", "challenger", "challenger", "critique", round=rnd, turn=t,
              parsed={"material_weakness": weak, "gap_type": gap if weak else "none", "challenge": "Reconsider."})


def brief(t: int, to: list[str], *, rnd: int = 1, source: str | None = None, **data: Any) -> dict:
    d = {"trigger": "between_gap", "query": "q", "received_by": to, **data}
    if source:
        d["source"] = source
    return ev("note", "curator", "evidence_curator" if not source else "clear_channel", "brief", round=rnd,
              turn=t, data=d)


def gate(t: int, fired: bool, *, rnd: int = 1) -> dict:
    return ev("note", "knowledge_gate", "knowledge_gate", "gate_decision", round=rnd, turn=t,
              data={"fired": fired, "blind": False, "query": "q", "gap": "g", "valid": True})


def recruitment(t: int, roles: list[str], *, rnd: int = 1, trigger: str = "challenger") -> dict:
    return ev("note", "pipeline", "recruiter", "recruitment", round=rnd, turn=t,
              data={"trigger": trigger, "checks": [], "flagged": 1, "room": 2, "recruited": roles, "panel": []})


def route(t: int, to: str, gap: str, *, rnd: int = 1) -> dict:
    return ev("note", "pipeline", "router", "route", round=rnd, turn=t, data={"gap_type": gap, "route": to})


def vote(answer: str, rule: str = "majority", **data: Any) -> dict:
    e = ev("vote", "moderator", "moderator", "final", data={"votes": {}, "rule": rule, **data})
    e["content"] = answer or "invalid"
    return e


def doc(condition: str, qid: str, events: list[dict], answer: str, gold: str = "A", *, dataset: str = "medqa",
        error: str | None = None, repeat: int = 0, options: dict[str, str] | None = None) -> dict:
    letters = answer.split(",") if answer else []
    gold_letters = gold.split(",") if gold else []
    return {"condition": condition, "question": {"dataset": dataset, "qid": qid, "text": f"Question {qid}?",
                                                 "options": OPTIONS if options is None else options,
                                                 "gold": gold_letters, "multi_answer": False},
            "repeat": repeat, "answer": [] if error else letters, "gold": gold_letters,
            "correct": not error and bool(letters) and set(letters) == set(gold_letters),
            "invalid": not error and not letters, "error": error, "error_kind": "timeout" if error else None,
            "summary": {}, "events": events}


def stored_docs(results: list[tuple[QuestionResult, Question]], run_dir: Path) -> list[dict[str, Any]]:
    """Commit results through the real store and read the transcript files back, as every reader does."""
    run_dir.mkdir(parents=True, exist_ok=True)
    store = Store(f"sqlite:///{run_dir / 'study.db'}", run_dir)
    try:
        for result, question in results:
            assert store.claim((result.condition, result.dataset, result.qid, result.repeat), "test")
            store.commit(result, question, "test")
        rows = store.rows()
    finally:
        store.close()
    return [json.loads(record_path(run_dir, r.transcript).read_text(encoding="utf-8")) for r in rows]


def stored_digests(run_dir: Path) -> list[RowDigest]:
    """The digests the report reads of the rows `stored_docs` committed into `run_dir`."""
    store = Store(f"sqlite:///{run_dir / 'study.db'}", run_dir)
    try:
        rows = store.rows()
    finally:
        store.close()
    return list(read_digests(run_dir, rows))
