"""`medpanel export --format inspect`: real Inspect AI logs, read back by inspect_ai itself (its reader, its
events, its dataframes). The viewer in a browser: tests/test_inspect_viewer.py."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from autogen_core.models import UserMessage
from typer.testing import CliRunner

from medpanel.agents.model.client import CallTag, QuestionSession, RecordingClient
from medpanel.agents.model.scripted import ScriptedChatCompletionClient
from medpanel.agents.model.spec import ModelSpec
from medpanel.agents.types import TranscriptEvent, Usage
from medpanel.experiments.cli.main import app
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.store.rundir import load_run

from .inspect_fixtures import GRID_QUESTIONS, events_run, grid_run, token_responder

log = pytest.importorskip("inspect_ai.log", reason="the [inspect] extra is not installed")
MODEL = "scripted/scripted"  # backend/name, as Inspect names models


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("inspect")
    run_dir = grid_run(base)  # the panel's c/r 2x2 grid: c1 conditions have Challenger messages
    out = base / "logs"
    res = CliRunner().invoke(app, ["export", str(run_dir), "--format", "inspect", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "4 Inspect logs written" in res.output
    return run_dir, out


def test_every_log_reads_back_with_the_runs_counts_scores_and_usage(exported: tuple[Path, Path]) -> None:
    run_dir, out = exported
    data = load_run(run_dir)
    files = sorted(out.glob("*.eval"))
    assert len(files) == len(data.conditions) == 4
    seen = set()
    for f in files:
        ev = log.read_eval_log(str(f))
        cond = ev.eval.metadata["condition"]
        seen.add(cond)
        rows = {f"{r.dataset}:{r.qid}": r for r in data.rows if r.condition == cond}
        assert ev.status == "success"
        assert len(ev.samples) == len(rows) == ev.results.total_samples == 3
        assert ev.eval.metadata["commit"] == data.record.git.commit
        assert ev.eval.metadata["config"]["scenario"]["flags"] == {"c": [0, 1], "r": [0, 1]}
        want = {"correct": "C", "wrong": "I", "invalid": "N", "error": "N"}
        total_in = total_out = 0
        for s in ev.samples:
            row = rows[str(s.id)]
            assert s.scores["choice"].value == want[row.status]
            assert s.output.completion == row.answer
            assert s.target == row.gold
            assert s.choices and s.input.startswith("Question:")
            doc = data.transcript(row)
            events = doc["events"]
            # one card per event, in order, after the question; each opens with the agent that spoke
            assert len(s.messages) == len(events) + 1
            assert [m.metadata["agent"] for m in s.messages[1:]] == [e["agent"] for e in events]
            assert [m.metadata["medpanel_role"] for m in s.messages[1:]] == [e["role"] for e in events]
            assert [m.text.split("\n", 1)[0].split(" · ")[:2] for m in s.messages[1:]] == \
                [[f"**{e['agent']}**", e["role"]] for e in events]
            sent = [e for e in events if e["kind"] == "call" and not e["cache_hit"]]  # hits spent nothing
            p = sum(e["usage"]["prompt_tokens"] for e in sent)
            c = sum(e["usage"]["completion_tokens"] for e in sent)
            assert list(s.model_usage) == [MODEL]
            assert s.model_usage[MODEL].input_tokens == p and s.model_usage[MODEL].output_tokens == c
            assert s.model_usage[MODEL].total_tokens == row.tokens == s.metadata["tokens"]
            assert s.metadata["calls"] == row.calls
            total_in, total_out = total_in + p, total_out + c
            if cond.startswith("c1"):
                assert any(m.metadata["medpanel_role"] == "challenger" for m in s.messages[1:])
            else:
                assert all(m.metadata["medpanel_role"] != "challenger" for m in s.messages[1:])
        assert ev.eval.model == MODEL and list(ev.stats.model_usage) == [MODEL]
        assert ev.stats.model_usage[MODEL].input_tokens == total_in
        assert ev.stats.model_usage[MODEL].output_tokens == total_out
        assert ev.stats.model_usage[MODEL].total_tokens == sum(r.tokens for r in rows.values())
        acc = sum(r.correct for r in rows.values()) / len(rows)
        assert ev.results.scores[0].metrics["accuracy"].value == pytest.approx(acc)
        assert Counter(s.scores["choice"].value for s in ev.samples)["C"] == sum(r.correct for r in rows.values())
    assert seen == set(data.conditions)


def test_without_a_run_dir_it_is_a_user_error(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["export", str(tmp_path / "nope"), "--format", "inspect"])
    assert isinstance(res.exception, UserError) and "does not exist" in str(res.exception)
    assert not (tmp_path / "nope").exists()


def _logs(out: Path) -> dict[str, log.EvalLog]:
    return {(ev := log.read_eval_log(str(f), resolve_attachments=True)).eval.metadata["condition"]: ev
            for f in sorted(out.glob("*.eval"))}


def test_each_call_is_a_model_event_and_each_note_or_vote_an_info_event(exported: tuple[Path, Path]) -> None:
    run_dir, out = exported
    data = load_run(run_dir)
    for cond, ev in _logs(out).items():
        for s in ev.samples:
            row = next(r for r in data.rows if r.condition == cond and f"{r.dataset}:{r.qid}" == s.id)
            events = data.transcript(row)["events"]
            model_events = [e for e in s.events if e.event == "model"]
            infos = [e for e in s.events if e.event == "info"]
            calls = [e for e in events if e["kind"] == "call"]
            others = [e for e in events if e["kind"] != "call"]
            assert len(model_events) == len(calls) and len(infos) == len(others)
            for me, call in zip(model_events, calls, strict=True):
                # the messages that call sent, in order, and its reply
                assert [(m.role, m.text) for m in me.input] == [(m["role"], m["content"]) for m in call["messages"]]
                assert me.output.completion == call["content"] and me.output.message.source == "generate"
                assert me.model == MODEL and me.role == call["role"] and me.metadata["agent"] == call["agent"]
                assert (me.output.usage.input_tokens, me.output.usage.output_tokens) == \
                    (call["usage"]["prompt_tokens"], call["usage"]["completion_tokens"])
                assert me.timestamp <= me.completed
            for info, other in zip(infos, others, strict=True):
                assert info.source == other["agent"] and info.data["step"] == other["step"]
                assert info.data["text"] == other["content"] and info.data["data"] == other["data"]
            if cond.endswith("r1"):  # recruitment notes
                assert any(i.data["step"] == "recruitment" for i in infos)
            # every event sits in a span named for its agent
            spans = {e.id: e.name for e in s.events if e.event == "span_begin"}
            assert [spans[e.span_id] for e in model_events] == [c["agent"] for c in calls]
            assert s.role_usage["specialist"].input_tokens == sum(
                c["usage"]["prompt_tokens"] for c in calls if c["role"] == "specialist" and not c["cache_hit"])
            # a reply from medpanel's cache stays in the transcript as a cache read, with its tokens
            for me, call in zip(model_events, calls, strict=True):
                assert me.cache == ("read" if call["cache_hit"] else None)


def test_samples_have_stable_uuids_and_times_and_the_log_its_real_span(exported: tuple[Path, Path],
                                                                       tmp_path: Path) -> None:
    run_dir, out = exported
    created = datetime.fromisoformat(load_run(run_dir).record.created or "")
    logs = _logs(out)
    uuids = [s.uuid for ev in logs.values() for s in ev.samples]
    assert len(set(uuids)) == len(uuids) == 12 and all(uuids)
    for ev in logs.values():
        starts = [datetime.fromisoformat(s.started_at) for s in ev.samples]
        ends = [datetime.fromisoformat(s.completed_at) for s in ev.samples]
        assert all(created <= a < b for a, b in zip(starts, ends, strict=True))
        assert datetime.fromisoformat(ev.stats.started_at) == min(starts)
        assert datetime.fromisoformat(ev.stats.completed_at) == max(ends)  # not the run's creation time twice
    again = tmp_path / "again"
    assert CliRunner().invoke(app, ["export", str(run_dir), "--format", "inspect", "--out", str(again)]).exit_code == 0
    assert [s.uuid for ev in _logs(again).values() for s in ev.samples] == uuids  # a re-export is the same samples


@pytest.fixture(scope="module")
def token_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 2x2 grid on one question, with a fixed panel of two specialists who never ask to recruit."""
    base = tmp_path_factory.mktemp("tokens")
    run_dir = grid_run(base, questions=GRID_QUESTIONS[:1], responder=token_responder(), name="tokens")
    out = base / "logs"
    assert CliRunner().invoke(app, ["export", str(run_dir), "--format", "inspect", "--out", str(out)]).exit_code == 0
    return out


# By hand, from the panel's protocol (3 rounds x 3 turns, two specialists seated, unanimous answers):
# one selector call; 2 x 9 specialist turns; with c, one critique after each turn but the last (8); with
# r, each specialist's recruitment check after each turn but the last (2 x 8) and, none being needed, a
# recruitment note each time (8 info events); the moderator's vote (1 info event) in every condition.
CALLS = {"c0r0": 19, "c0r1": 35, "c1r0": 27, "c1r1": 43}
INFOS = {"c0r0": 1, "c0r1": 9, "c1r0": 1, "c1r1": 9}
AGENTS = {"c0r0": 3, "c0r1": 3, "c1r0": 4, "c1r1": 4}  # selector, two specialists (+ the Challenger)


def test_inspects_dataframes_read_the_runs_calls_and_questions(token_logs: Path) -> None:
    analysis = pytest.importorskip("inspect_ai.analysis", reason="the [inspect] extra is not installed")
    evals = analysis.evals_df(str(token_logs), quiet=True)
    assert len(evals) == 4 and set(evals["model"]) == {MODEL}
    assert sorted(evals["task_name"]) == sorted(CALLS)  # the task `tokens/<condition>`, shown without its prefix
    samples = analysis.samples_df(str(token_logs), quiet=True)
    assert len(samples) == 4 and set(samples["id"]) == {"medqa:t1"}
    assert set(samples["score_choice"]) == {"I"}  # every specialist answers C; the gold is A
    messages = analysis.messages_df(str(token_logs), quiet=True)
    task = dict(zip(evals["eval_id"], evals["task_name"], strict=True))
    messages["condition"] = messages["eval_id"].map(task)
    replies = messages[(messages["role"] == "assistant") & (messages["source"] == "generate")]
    assert replies.groupby("condition").size().to_dict() == CALLS
    systems = messages[messages["role"] == "system"]
    assert systems.groupby("condition").size().to_dict() == AGENTS  # one system prompt per agent
    assert messages["message_id"].is_unique
    events = analysis.events_df(str(token_logs), quiet=True)
    events["condition"] = events["eval_id"].map(task)
    assert events[events["event"] == "model"].groupby("condition").size().to_dict() == CALLS
    assert events[events["event"] == "info"].groupby("condition").size().to_dict() == INFOS


def test_messages_df_lists_every_call_of_the_grid_once(exported: tuple[Path, Path]) -> None:
    analysis = pytest.importorskip("inspect_ai.analysis", reason="the [inspect] extra is not installed")
    run_dir, out = exported
    data = load_run(run_dir)
    calls = [e for r in data.rows for e in data.transcript(r)["events"] if e["kind"] == "call"]
    messages = analysis.messages_df(str(out), quiet=True)
    replies = messages[(messages["role"] == "assistant") & (messages["source"] == "generate")]
    assert len(replies) == len(calls)
    assert Counter(replies["content"]) == Counter(c["content"] for c in calls)
    assert analysis.samples_df(str(out), quiet=True).shape[0] == len(data.rows) == 12


def test_a_conversation_sent_again_still_counts_each_reply(tmp_path: Path) -> None:
    """The same request twice with the same reply (a re-ask, or one request repeated in a later turn),
    then a call that continues the conversation: three replies, and the shared history once."""
    analysis = pytest.importorskip("inspect_ai.analysis", reason="the [inspect] extra is not installed")
    sent = [{"role": "system", "content": "You recruit."}, {"role": "user", "content": "Who is missing?"}]
    reply = '{"specialists": []}'
    more = [*sent, {"role": "assistant", "content": reply}, {"role": "user", "content": "And now?"}]

    def call(messages: list[dict[str, str]], step: str) -> TranscriptEvent:
        return TranscriptEvent(kind="call", role="recruiter", agent="recruiter", step=step, messages=messages,
                               content=reply, usage=Usage(prompt_tokens=10, completion_tokens=5), model="scripted")

    run_dir = events_run(tmp_path, [call(sent, "recruit"), call(sent, "recruit"), call(more, "recruit")])
    out = tmp_path / "logs"
    assert CliRunner().invoke(app, ["export", str(run_dir), "--format", "inspect", "--out", str(out)]).exit_code == 0
    messages = analysis.messages_df(str(out), quiet=True)
    assert messages.groupby(["role", "source"]).size().to_dict() == {
        ("assistant", "generate"): 3,  # every reply, though the second repeats the first word for word
        ("system", "input"): 1,  # the history the calls share, once
        ("user", "input"): 3}  # "Who is missing?", sent again, and "And now?"


def test_a_slow_call_after_a_quick_one_is_placed_after_it(tmp_path: Path) -> None:
    """A call's time is when its reply came back, and the log places it from `t - latency_s`: a slow
    call that followed a quick one starts after the quick one ended. (The viewer lists an agent's spans
    by their start, so a call placed too early would be shown before the calls that preceded it.)"""
    inner = ScriptedChatCompletionClient(lambda r: "a reply")
    session = QuestionSession(spec=ModelSpec(backend="scripted", cache="off"), inner=inner)
    client = RecordingClient(session)
    client.tag = CallTag(role="specialist", agent="vexillologist", step="turn", round=1, turn=1)

    async def quick_then_slow() -> tuple[float, float, float]:
        before = time.time()
        await client.create([UserMessage(content="first", source="user")])
        between = time.time()
        inner.latency_ms = 300
        client.tag = CallTag(role="specialist", agent="vexillologist", step="turn", round=1, turn=2)
        await client.create([UserMessage(content="second", source="user")])
        return before, between, time.time()

    before, between, after = asyncio.run(quick_then_slow())
    quick, slow = session.events
    eps = 0.002  # latency_s is read on perf_counter and t on the wall clock, which may slew apart a little
    assert slow.latency_s >= 0.3
    assert before - eps <= quick.t - quick.latency_s <= quick.t <= between
    assert between - eps <= slow.t - slow.latency_s <= slow.t <= after
    run_dir = events_run(tmp_path, session.events)
    out = tmp_path / "logs"
    assert CliRunner().invoke(app, ["export", str(run_dir), "--format", "inspect", "--out", str(out)]).exit_code == 0
    (sample,) = next(iter(_logs(out).values())).samples
    first, second = [e for e in sample.events if e.event == "model"]
    assert first.completed is not None and second.completed is not None
    assert first.timestamp <= first.completed <= second.timestamp + timedelta(seconds=eps) <= second.completed
    assert (second.completed - second.timestamp).total_seconds() >= 0.3


def test_cache_hits_are_cache_reads_and_not_tokens_spent(tmp_path: Path) -> None:
    """A reply from medpanel's response cache is a `cache="read"` event that keeps its usage, and counts in
    no `model_usage` or `role_usage` (Inspect's rule for its own cache); the endpoint's prompt-cache reads
    are `input_tokens_cache_read`, apart from the input tokens charged at the full rate."""
    def call(step: str, usage: Usage, hit: bool) -> TranscriptEvent:
        return TranscriptEvent(kind="call", role="specialist", agent="cardiologist", step=step, content="C",
                               messages=[{"role": "user", "content": step}], usage=usage, cache_hit=hit,
                               model="scripted")

    run_dir = events_run(tmp_path, [call("turn", Usage(prompt_tokens=100, completion_tokens=10, cached_tokens=60),
                                         False),
                                    call("again", Usage(prompt_tokens=900, completion_tokens=90), True),
                                    call("last", Usage(prompt_tokens=50, completion_tokens=5), False)])
    (row,) = load_run(run_dir).rows
    assert row.tokens == 165  # medpanel's figure: the two calls sent
    out = tmp_path / "logs"
    assert CliRunner().invoke(app, ["export", str(run_dir), "--format", "inspect", "--out", str(out)]).exit_code == 0
    (ev,) = _logs(out).values()
    (sample,) = ev.samples
    for usage in (sample.model_usage[MODEL], ev.stats.model_usage[MODEL], sample.role_usage["specialist"],
                  ev.stats.role_usage["specialist"]):
        assert (usage.input_tokens, usage.input_tokens_cache_read, usage.output_tokens, usage.total_tokens) == \
            (90, 60, 15, row.tokens)
    first, hit, last = [e for e in sample.events if e.event == "model"]
    assert (first.cache, hit.cache, last.cache) == (None, "read", None)
    assert (hit.output.usage.input_tokens, hit.output.usage.output_tokens) == (900, 90)  # visible, not counted
