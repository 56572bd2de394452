"""Tidy pandas frames of a run, for a notebook: every cell a scalar, one row per observation.

- `results(data)`: one row per (condition, question, repeat): the outcome, the counts, the
  condition's flags (`flag_<name>`) and the pipeline summary's scalar facts (`summary_<key>`);
  lists and dicts (votes, timings by round) stay in the transcripts and in `Run.records()`.
- `calls(data)`: one row per model call, from the transcripts: who called (agent, role, step,
  round, turn), the model, the tokens, the latency, a cache hit, an invalid reply or an error.

pandas is the `[pandas]` extra; its absence is an ImportError naming it.
"""

from __future__ import annotations

from typing import Any

from medpanel.experiments.run.store.rundir import RunData

PANDAS_EXTRA = "pip install 'medpanel[pandas]'"
RESULT_COLUMNS = ["condition", "dataset", "qid", "repeat", "status", "answer", "gold", "correct", "invalid", "error",
                  "error_kind", "calls", "logical_calls", "tokens", "cost_usd", "latency_s"]
CALL_COLUMNS = ["condition", "dataset", "qid", "repeat", "call", "agent", "role", "step", "round", "turn", "model",
                "prompt_tokens", "completion_tokens", "latency_s", "cache_hit", "attempts", "invalid", "error"]


def pandas_module(what: str) -> Any:
    try:
        import pandas  # optional: the [pandas] extra
    except ImportError:
        raise ImportError(f"{what} needs pandas, which medpanel does not install by default: {PANDAS_EXTRA}") from None
    return pandas


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, bool | int | float | str)


def _ordered(data: RunData) -> list[Any]:
    order = {c: i for i, c in enumerate(data.conditions)}
    return sorted(data.rows, key=lambda r: (order.get(r.condition, len(order)), r.dataset, r.qid, r.repeat))


def results(data: RunData) -> Any:
    """One row per (condition, question, repeat), scalar columns only."""
    pandas = pandas_module("Run.to_pandas")
    flags = data.record.flags
    out = []
    for row in _ordered(data):
        rec: dict[str, object] = {k: getattr(row, k) for k in RESULT_COLUMNS}
        rec.update({f"flag_{k}": v for k, v in flags.get(row.condition, {}).items() if _scalar(v)})
        rec.update({f"summary_{k}": v for k, v in row.summary.items() if _scalar(v) and k != "format_version"})
        out.append(rec)
    return pandas.DataFrame(out, columns=None if out else RESULT_COLUMNS)


def calls(data: RunData) -> Any:
    """One row per model call of every transcript, in the rows' order and each transcript's call order."""
    pandas = pandas_module("Run.calls")
    out = []
    for row in _ordered(data):
        events = (data.transcript(row) or {}).get("events") or []
        n = 0
        for e in events:
            if not isinstance(e, dict) or e.get("kind") != "call":
                continue
            usage = e.get("usage") or {}
            out.append({"condition": row.condition, "dataset": row.dataset, "qid": row.qid, "repeat": row.repeat,
                        "call": n, "agent": e.get("agent", ""), "role": e.get("role", ""), "step": e.get("step", ""),
                        "round": e.get("round", 0), "turn": e.get("turn", 0), "model": e.get("model", ""),
                        "prompt_tokens": int(usage.get("prompt_tokens") or 0),
                        "completion_tokens": int(usage.get("completion_tokens") or 0),
                        "latency_s": float(e.get("latency_s") or 0.0), "cache_hit": bool(e.get("cache_hit")),
                        "attempts": int(e.get("attempts") or 1), "invalid": bool(e.get("invalid")),
                        "error": e.get("error")})
            n += 1
    return pandas.DataFrame(out, columns=CALL_COLUMNS)
