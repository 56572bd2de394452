"""Model backends over the real OpenAI-compatible HTTP path, the cache key, retries and secrets."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from medpanel.agents.model.backends import BackendError, ModelSpec, build_client
from medpanel.agents.model.cache import ResponseCache, cache_key
from medpanel.agents.pipelines.run import run_question
from medpanel.agents.types import Condition

from .fake_openai import FakeOpenAI, completion
from .scripted_helpers import Q4, cond, run

ANSWER = json.dumps({"reasoning": "ECG first", "answer": "A"})


def _run(spec: ModelSpec, condition: Condition | None = None, cache: ResponseCache | None = None):
    return asyncio.run(run_question(condition or cond("generalist", c=0), Q4, spec, cache=cache))


@pytest.mark.parametrize(("mode", "expected"), [("json_schema", "json_schema"), ("json_object", "json_object")])
def test_openai_client_smoke(mode: str, expected: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pinned autogen-ext + openai pair sends each structured-output mode correctly."""
    monkeypatch.setenv("MP_TEST_KEY", "sk-secret-test-key-123")
    with FakeOpenAI(lambda body, n: (200, {}, completion(ANSWER))) as srv:
        spec = ModelSpec(backend="openai", name="fake-model", base_url=srv.base_url, api_key_env="MP_TEST_KEY",
                         structured_output=mode, cache="off")
        result = _run(spec)
    assert result.answer == ("A",) and result.correct
    body = srv.requests[0]
    assert body["response_format"]["type"] == expected
    schema = body["response_format"].get("json_schema", {}).get("schema") or body["response_format"]["schema"]
    assert schema["properties"]["answer"]["enum"] == ["A", "B", "C", "D"]
    assert body["temperature"] == 0 and body["seed"] == 42
    assert srv.headers[0]["authorization"] == "Bearer sk-secret-test-key-123"
    event = result.events[0]
    assert event.usage.prompt_tokens == 10 and event.latency_s > 0
    assert "sk-secret" not in result.model_dump_json()


def test_prompt_mode_sends_no_response_format() -> None:
    with FakeOpenAI(lambda body, n: (200, {}, completion(f"Sure! ```json\n{ANSWER}\n```"))) as srv:
        spec = ModelSpec(backend="openai", name="m", base_url=srv.base_url, structured_output="prompt", cache="off")
        result = _run(spec)
    assert "response_format" not in srv.requests[0]
    assert result.answer == ("A",)


def test_transient_errors_are_retried_with_backoff_then_succeed() -> None:
    def handler(body: dict[str, Any], n: int):
        if n == 1:
            return 429, {"retry-after": "0"}, {"error": {"message": "slow down"}}
        if n == 2:
            return 500, {}, {"error": {"message": "boom"}}
        return 200, {}, completion(ANSWER)

    with FakeOpenAI(handler) as srv:
        result = _run(ModelSpec(backend="openai", name="m", base_url=srv.base_url, cache="off"))
    assert result.answer == ("A",) and len(srv.requests) == 3
    assert result.events[0].attempts == 3 and result.calls == 3


def test_persistent_failure_becomes_an_error_row() -> None:
    with FakeOpenAI(lambda body, n: (503, {}, {"error": {"message": "down"}})) as srv:
        result = _run(ModelSpec(backend="openai", name="m", base_url=srv.base_url, max_retries=2, cache="off"))
    assert result.error_kind == "server_error" and not result.correct and result.answer == ()
    assert len(srv.requests) == 3


def test_truncated_json_body_is_a_bad_response() -> None:
    with FakeOpenAI(lambda body, n: (200, {}, '{"id": "x", "choices": [')) as srv:
        result = _run(ModelSpec(backend="openai", name="m", base_url=srv.base_url, max_retries=1, cache="off"))
    assert result.error and len(srv.requests) == 2


def test_missing_key_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MP_ABSENT_KEY", raising=False)
    spec = ModelSpec(backend="openai", name="gpt-4o-mini", api_key_env="MP_ABSENT_KEY")
    with pytest.raises(BackendError, match="MP_ABSENT_KEY"):
        build_client(spec)


def test_the_request_sent_is_the_request_recorded() -> None:
    """What the transcript shows is byte for byte what the endpoint received (no SDK rewriting)."""
    with FakeOpenAI(lambda body, n: (200, {}, completion(ANSWER))) as srv:
        spec = ModelSpec(backend="openai", name="fake-model", base_url=srv.base_url, cache="off", max_tokens=77)
        result = _run(spec, cond("generalist", c=1))
    calls = [e for e in result.events if e.kind == "call"]
    assert len(calls) == len(srv.requests) >= 2
    for event, body in zip(calls, srv.requests, strict=True):
        assert body["messages"] == event.messages
        assert body["model"] == "fake-model" and body["max_tokens"] == 77
    assert srv.paths[0] == "/v1/chat/completions"


def test_azure_posts_to_the_deployment_route_with_its_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MP_AZURE_KEY", "azure-secret-1")
    with FakeOpenAI(lambda body, n: (200, {}, completion(ANSWER))) as srv:
        endpoint = srv.base_url.removesuffix("/v1")
        spec = ModelSpec(backend="azure", name="my-gpt4o", base_url=endpoint, api_key_env="MP_AZURE_KEY",
                         api_version="2024-10-21", cache="off")
        result = _run(spec)
    assert result.answer == ("A",), result.error
    assert srv.paths[0] == "/openai/deployments/my-gpt4o/chat/completions?api-version=2024-10-21"
    assert srv.headers[0]["api-key"] == "azure-secret-1"


def test_a_worker_reuses_one_client_and_its_connection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Clients are built per worker loop, not per question, and keep their connection alive."""
    import medpanel.agents.pipelines.run as run_module
    from medpanel.experiments.run.execution.runner import Runner
    from medpanel.experiments.run.scenario.plan import make_plan
    from medpanel.experiments.run.scenario.scenario import Scenario

    built: list[Any] = []

    def counting(spec: ModelSpec, *, base_url: str | None = None) -> Any:
        client = build_client(spec, base_url=base_url)
        built.append(client)
        return client

    monkeypatch.setattr(run_module, "build_client", counting)
    with FakeOpenAI(lambda body, n: (200, {}, completion(ANSWER))) as srv:
        data = tmp_path / "q.jsonl"
        data.write_text("".join(json.dumps({"realidx": f"q{i}", "question": f"Question {i}?", "answer_idx": "A",
                                            "options": {"A": "a", "B": "b"}}) + "\n" for i in range(8)))
        scenario = Scenario.model_validate({
            "name": "pool", "pipeline": "generalist", "flags": {"c": [0]},
            "dataset": {"source": "jsonl", "path": str(data)},
            "model": {"backend": "openai", "name": "fake-model", "base_url": srv.base_url, "cache": "off"},
            "run": {"workers": 1, "shard_size": 8}})
        runner = Runner.create(make_plan(scenario, base_dir=tmp_path), run_dir=tmp_path / "run")
        assert runner.run(install_signals=False)["state"] == "complete"
    assert len(srv.requests) == 8
    assert len(built) == 1, f"{len(built)} clients built for 8 questions"
    assert len(set(srv.client_ports)) == 1, "the connection was not reused"
    assert built[0].is_closed(), "the worker's client was left open"


def _key(**over: Any) -> str:
    base = {"model": "m", "backend": "openai", "base_url": "u", "temperature": 0.0, "seed": 42, "max_tokens": 10,
            "mode": "json_schema", "schema": None, "messages": [{"role": "user", "content": "hi"}]}
    return cache_key({**base, **over})


def test_cache_key_covers_model_endpoint_and_sampling() -> None:
    k = _key()
    assert k == _key()
    for change in ({"model": "m2"}, {"base_url": "u2"}, {"temperature": 0.7}, {"seed": 1}, {"max_tokens": 11},
                   {"mode": "prompt"}, {"messages": [{"role": "user", "content": "hi!"}]}):
        assert _key(**change) != k, change


def test_two_models_sharing_a_cache_do_not_share_answers(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "cache")
    with FakeOpenAI(lambda body, n: (200, {}, completion(ANSWER))) as srv:
        a = _run(ModelSpec(backend="openai", name="model-a", base_url=srv.base_url), cache=cache)
        b = _run(ModelSpec(backend="openai", name="model-b", base_url=srv.base_url), cache=cache)
        a2 = _run(ModelSpec(backend="openai", name="model-a", base_url=srv.base_url), cache=cache)
    assert len(srv.requests) == 2
    assert not a.events[0].cache_hit and not b.events[0].cache_hit and a2.events[0].cache_hit
    assert a2.calls == 0 and a2.logical_calls == 1 and a2.answer == a.answer


def test_concurrent_identical_requests_are_answered_once(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "cache")
    results = []

    def worker() -> None:
        results.append(run(cond("generalist", c=0), Q4, lambda r: {"reasoning": "x", "answer": "B"}, cache=cache,
                           latency_ms=50)[0])

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.calls for r in results) == [0, 0, 0, 1]
    assert all(r.answer == ("B",) for r in results)


def test_json_object_mode_caps_free_text_strings_for_the_embedded_model() -> None:
    from medpanel.agents.model.structured import cap_strings
    from medpanel.methods.panel.roles.challenger import Critique

    capped = cap_strings(Critique.model_json_schema(), 240)
    assert capped["properties"]["challenge"]["maxLength"] == 240
    assert "maxLength" not in capped["properties"]["gap_type"]  # enums stay as they are
    assert ModelSpec(backend="local").string_cap == 240 and ModelSpec(backend="openai").string_cap is None
    with FakeOpenAI(lambda body, n: (200, {}, completion(ANSWER))) as srv:
        _run(ModelSpec(backend="openai", name="m", base_url=srv.base_url, structured_output="json_object",
                       max_string_chars=50, cache="off"))
    assert srv.requests[0]["response_format"]["schema"]["properties"]["reasoning"]["maxLength"] == 50
