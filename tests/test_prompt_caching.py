"""Prompt caching: stable parts first in every request, cached prompt tokens recorded and priced."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from medpanel.agents.model.spec import ModelSpec
from medpanel.agents.pipelines.run import run_question
from medpanel.agents.types import TranscriptEvent, Usage
from medpanel.experiments.analysis.report import cost_table
from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.scenario.plan import make_plan
from medpanel.experiments.run.scenario.scenario import load_scenario
from medpanel.experiments.run.store.store import Store
from medpanel.experiments.run.store.transcript_log import record_path
from medpanel.experiments.run.tracking.budget import Price, cache_saving, event_cost

from .conftest import write
from .fake_openai import FakeOpenAI, completion, schema_reply
from .scripted_helpers import Q4, cond


def _text(messages: list[dict[str, Any]]) -> str:
    """A request's prompt as a prefix cache sees it: the messages in order."""
    return "".join(f"<{m['role']}:{m.get('name', '')}>{m['content']}" for m in messages)


def _lcp(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class PrefixCachingServer:
    """Answers valid replies and says, as vLLM/OpenAI do, how many prompt tokens its prefix cache
    served: the longest prefix this request shares with any earlier one (4 characters a token)."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.cached: dict[str, int] = {}
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any], n: int) -> tuple[int, dict[str, str], Any]:
        prompt = _text(body["messages"])
        with self.lock:
            shared = max((_lcp(prompt, s) for s in self.seen), default=0)
            self.seen.append(prompt)
            cached = shared // 4
            self.cached[json.dumps(body["messages"], sort_keys=True)] = cached
        reply = completion(json.dumps(schema_reply(body)), prompt_tokens=len(prompt) // 4, completion_tokens=12)
        reply["usage"]["prompt_tokens_details"] = {"cached_tokens": cached}
        return 200, {}, reply


def _panel_requests(slug_flags: dict[str, int]) -> list[dict[str, Any]]:
    with FakeOpenAI(PrefixCachingServer()) as srv:
        spec = ModelSpec(backend="openai", name="fake-model", base_url=srv.base_url, cache="off")
        result = asyncio.run(run_question(cond("panel", **slug_flags), Q4, spec))
        assert result.error is None
        return list(srv.requests)


def _leading_paragraphs_found(a: str, b: str) -> int:
    """Length of the longest run of a's leading paragraphs that occurs anywhere in b: what a
    stable-first order would let the two share as a prefix."""
    paras = a.split("\n\n")
    best = 0
    for j in range(1, len(paras) + 1):
        head = "\n\n".join(paras[:j])
        if head not in b:
            break
        best = len(head)
    return best


@pytest.mark.parametrize("flags", [{"c": 1, "r": 1}, {"c": 1, "r": 0}])
def test_consecutive_requests_of_one_agent_share_the_longest_prefix(flags: dict[str, int]) -> None:
    requests = _panel_requests(flags)
    by_agent: dict[str, list[list[dict[str, Any]]]] = {}
    for body in requests:  # the requests as the endpoint received them
        messages = body["messages"]
        assert messages[0]["role"] == "system"  # the most stable part goes first
        by_agent.setdefault(messages[0]["content"], []).append(messages)
    multi = {k: v for k, v in by_agent.items() if len(v) > 1}
    assert len(multi) >= 3, "the panel's specialists and the Challenger each send several requests"
    checked = 0
    for chain in multi.values():
        first_user = chain[0][1]["content"]
        # The question and its options open the first request, before any round or turn.
        assert first_user.startswith("Question:\n" + Q4.text)
        assert first_user.index(Q4.options["D"]) < first_user.find("Round ") or "Round " not in first_user
        for a, b in itertools.pairwise(chain):
            # Earlier turns are never rewritten or moved: only the last message of a may differ.
            assert b[:len(a) - 1] == a[:-1]
            last_a, at_b = a[-1]["content"], b[len(a) - 1]["content"]
            shared = _lcp(last_a, at_b)
            assert shared >= _leading_paragraphs_found(last_a, at_b), (last_a[:200], at_b[:200])
            # And as prompt text: the shared prefix runs at least through all of a's earlier messages.
            assert _lcp(_text(a), _text(b)) >= len(_text(a[:-1]))
            checked += 1
    assert checked >= 10


def test_challenger_requests_put_the_growing_discussion_before_the_changing_instruction() -> None:
    requests = _panel_requests({"c": 1, "r": 0})
    critiques = [b["messages"] for b in requests if "Challenger" in b["messages"][0]["content"]]
    assert len(critiques) >= 3
    for a, b in itertools.pairwise(critiques):
        last_a, last_b = a[-1]["content"], b[-1]["content"]
        instruction = last_a.rindex("Review the reasoning")
        # The changing instruction comes after the question and the discussion, not before them.
        assert last_a.index(Q4.options["D"]) < last_a.index("-- Turn 1 --") < instruction
        # Everything before a's instruction (question, options, the discussion so far) is b's prefix.
        assert last_b.startswith(last_a[:instruction].rstrip())


PRICES = {"fake-model": Price(input=2.0, output=8.0, cached_input=0.5)}


def test_cached_input_is_priced_at_its_rate_hand_computed() -> None:
    event = TranscriptEvent(kind="call", role="r", agent="a", model="fake-model",
                            usage=Usage(prompt_tokens=1000, completion_tokens=100, cached_tokens=600))
    # 400 uncached x $2 + 600 cached x $0.50 + 100 out x $8, per million tokens.
    assert event_cost(event, PRICES) == pytest.approx((400 * 2 + 600 * 0.5 + 100 * 8) / 1e6) == pytest.approx(0.0019)
    assert cache_saving(event, PRICES) == pytest.approx(600 * 1.5 / 1e6)
    # No cached_input price: cached tokens cost what input costs, and nothing is saved.
    plain = {"fake-model": Price(input=2.0, output=8.0)}
    assert event_cost(event, plain) == pytest.approx(0.0028) and cache_saving(event, plain) == 0.0


def test_cached_tokens_recorded_per_call_in_transcripts_totals_and_cost_table(tmp_path: Path) -> None:
    server = PrefixCachingServer()
    data = write(tmp_path / "q.jsonl", "".join(
        json.dumps({"realidx": f"q{i}", "question": f"Synthetic question number {i}?",
                    "options": {"A": "a", "B": "b", "C": "c", "D": "d"}, "answer_idx": "A"}) + "\n" for i in range(3)))
    with FakeOpenAI(server) as srv:
        f = write(tmp_path / "s.yaml", f"""name: caching
pipeline: panel
flags: {{c: [1], r: [0]}}
dataset: {{source: jsonl, path: {data}}}
model: {{backend: openai, name: fake-model, base_url: "{srv.base_url}", cache: "off"}}
run: {{workers: 2, prices: {{fake-model: {{input: 2.0, output: 8.0, cached_input: 0.5}}}}}}
""")
        runner = Runner.create(make_plan(load_scenario(f), base_dir=tmp_path), run_dir=tmp_path / "run")
        assert runner.run(install_signals=False)["state"] == "complete"
    store = Store(runner.storage_url, runner.run_dir)
    rows = store.rows()
    assert len(rows) == 3 and not [r for r in rows if r.error]
    total = 0
    for row in rows:
        doc = json.loads(record_path(runner.run_dir, row.transcript).read_text())
        calls = [e for e in doc["events"] if e["kind"] == "call"]
        for e in calls:  # each call carries what the endpoint said for exactly its request
            assert e["usage"]["cached_tokens"] == server.cached[json.dumps(e["messages"], sort_keys=True)]
        cached = sum(e["usage"]["cached_tokens"] for e in calls)
        saved = sum(e["usage"]["cached_tokens"] * 1.5 / 1e6 for e in calls)
        cost = sum(((e["usage"]["prompt_tokens"] - e["usage"]["cached_tokens"]) * 2.0
                    + e["usage"]["cached_tokens"] * 0.5 + e["usage"]["completion_tokens"] * 8.0) / 1e6 for e in calls)
        assert doc["cached_tokens"] == row.cached_tokens == cached
        assert doc["cache_saved_usd"] == pytest.approx(saved) and row.cache_saved_usd == pytest.approx(saved)
        assert row.cost_usd == pytest.approx(cost)
        total += cached
    assert total > 0, "a panel resends its prefix: the fake prefix cache must have served some of it"
    table = cost_table(rows, ["c1r0"])
    line = dict(zip(table.columns, table.rows[0], strict=True))
    assert line["prompt_cached_tokens_per_q"] == round(total / 3, 1)
    assert line["prompt_cache_saved_usd"] == pytest.approx(total * 1.5 / 1e6, abs=1e-6)
