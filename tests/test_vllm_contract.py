"""vLLM as an endpoint: a fake server that answers the way vLLM's OpenAI server does, through the
real HTTP path of a run.

What vLLM sends that OpenAI does not (or sends differently), and what must hold for it:
- replies carry `stop_reason`, `logprobs: null`, `reasoning_content`, `tool_calls: []`,
  `prompt_logprobs`, `kv_transfer_params`, and `usage.prompt_tokens_details: null` (set only with
  `--enable-prompt-tokens-details`): the usage is read as sent, the extras are ignored;
- structured outputs are requested as `response_format: json_schema` (vLLM's guided decoding);
- errors come as `{"object": "error", "message", "type": "BadRequestError", "param", "code"}`
  (older releases) or the same fields inside `{"error": {...}}` (newer ones). A 400 is recorded with
  the message vLLM wrote, after one request: retrying cannot change the answer;
- a prompt over `--max-model-len` is a 400 whose message says "This model's maximum context length
  is N tokens": the question's error is `context_length` with that message, and the run goes on.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.scenario.plan import make_plan
from medpanel.experiments.run.scenario.scenario import load_scenario
from medpanel.experiments.run.store.store import Store

from .conftest import write
from .fake_openai import FakeOpenAI, schema_reply

SERVED = "Qwen/Qwen2.5-7B-Instruct"
MAX_MODEL_LEN = 2048
HUGE = "HUGE-CASE "
"""Marks the question whose prompt is over the model's context."""
REJECTED = "REJECTED-CASE"
"""Marks the question vLLM refuses with an ordinary 400 (an option it does not take)."""


def _tokens(body: dict[str, Any]) -> int:
    # vLLM counts with the model's tokenizer; 4 characters a token is enough for a fake.
    return sum(len(str(m.get("content", ""))) for m in body["messages"]) // 4


def vllm_error(message: str, kind: str, code: int, *, wrapped: bool) -> dict[str, Any]:
    error = {"message": message, "type": kind, "param": None, "code": code}
    return {"error": error} if wrapped else {"object": "error", **error}


class FakeVLLM:
    """Answers like `vllm serve SERVED --max-model-len 2048`: guided JSON, vLLM's reply and error shapes."""

    def __init__(self, *, wrapped_errors: bool) -> None:
        self.wrapped = wrapped_errors
        self.lock = threading.Lock()
        self.usage: list[tuple[int, int]] = []
        self.by_case: dict[str, int] = {}

    def __call__(self, body: dict[str, Any], n: int) -> tuple[int, dict[str, str], Any]:
        text = json.dumps(body["messages"])
        case = HUGE if HUGE in text else REJECTED if REJECTED in text else "ok"
        with self.lock:
            self.by_case[case] = self.by_case.get(case, 0) + 1
        if body.get("model") != SERVED:
            return 404, {}, vllm_error(f"The model `{body.get('model')}` does not exist.", "NotFoundError", 404,
                                       wrapped=self.wrapped)
        prompt = _tokens(body)
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        if prompt + max_tokens > MAX_MODEL_LEN:
            return 400, {}, vllm_error(
                f"This model's maximum context length is {MAX_MODEL_LEN} tokens. However, you requested "
                f"{prompt + max_tokens} tokens ({prompt} in the messages, {max_tokens} in the completion). "
                "Please reduce the length of the messages or completion.", "BadRequestError", 400,
                wrapped=self.wrapped)
        if case == REJECTED:
            return 400, {}, vllm_error("1 validation error for ChatCompletionRequest: logit_bias is not supported",
                                       "BadRequestError", 400, wrapped=self.wrapped)
        fmt = body.get("response_format") or {}
        assert fmt.get("type") == "json_schema", fmt  # vLLM guided decoding takes the schema here
        content = json.dumps(schema_reply(body))
        completion_tokens = 7 + n % 5
        with self.lock:
            self.usage.append((prompt, completion_tokens))
        return 200, {}, {
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": SERVED,
            "choices": [{"index": 0, "logprobs": None, "finish_reason": "stop", "stop_reason": None,
                         "message": {"role": "assistant", "reasoning_content": None, "content": content,
                                     "tool_calls": []}}],
            "usage": {"prompt_tokens": prompt, "total_tokens": prompt + completion_tokens,
                      "completion_tokens": completion_tokens, "prompt_tokens_details": None},
            "prompt_logprobs": None, "kv_transfer_params": None,
        }


def _questions(path: Path) -> Path:
    items = [{"realidx": f"q{i}", "question": f"Synthetic question {i}?", "answer_idx": "ABCD"[i % 4],
              "options": {"A": "a", "B": "b", "C": "c", "D": "d"}} for i in range(4)]
    items.append({"realidx": "huge", "question": HUGE * 1200 + "which is it?", "answer_idx": "A",
                  "options": {"A": "a", "B": "b", "C": "c", "D": "d"}})
    items.append({"realidx": "rejected", "question": f"{REJECTED}: which is it?", "answer_idx": "B",
                  "options": {"A": "a", "B": "b", "C": "c", "D": "d"}})
    return write(path, "".join(json.dumps(x) + "\n" for x in items))


@pytest.mark.parametrize("wrapped", [False, True], ids=["object-error", "error-wrapped"])
def test_a_run_against_vllm(tmp_path: Path, wrapped: bool) -> None:
    data = _questions(tmp_path / "q.jsonl")
    fake = FakeVLLM(wrapped_errors=wrapped)
    with FakeOpenAI(fake) as srv:
        scenario = write(tmp_path / "s.yaml", f"""name: vllm
pipeline: generalist
flags: {{c: [0]}}
dataset: {{source: jsonl, path: {data}}}
model: {{backend: openai, name: "{SERVED}", base_url: "{srv.base_url}",
         max_retries: 3, cache: "off", max_tokens: 160}}
run: {{workers: 2}}
""")
        runner = Runner.create(make_plan(load_scenario(scenario), base_dir=tmp_path), run_dir=tmp_path / "run")
        status = runner.run(install_signals=False)
        requests = list(srv.requests)
    assert status["state"] == "complete"
    store = Store(runner.storage_url, runner.run_dir)
    rows = {r.qid: r for r in store.rows()}
    assert set(rows) == {"q0", "q1", "q2", "q3", "huge", "rejected"}

    # structured outputs go as json_schema, the schema inside it (guided decoding)
    sent = [r for r in requests if HUGE not in json.dumps(r) and REJECTED not in json.dumps(r)]
    assert sent and all(r["response_format"]["type"] == "json_schema"
                        and r["response_format"]["json_schema"]["schema"]["properties"]["answer"]["enum"]
                        for r in sent)
    assert all(r["model"] == SERVED for r in requests)

    # usage is read as vLLM sent it (prompt_tokens_details: null is no error)
    calls = [e for doc in store.iter_transcripts() for e in doc["events"] if e["kind"] == "call" and not e.get("error")]
    assert sorted((e["usage"]["prompt_tokens"], e["usage"]["completion_tokens"]) for e in calls) == sorted(fake.usage)
    for qid in ("q0", "q1", "q2", "q3"):
        assert rows[qid].error is None and rows[qid].answer in {"A", "B", "C", "D"}, rows[qid]
    answered_tokens = sum(rows[q].tokens for q in ("q0", "q1", "q2", "q3"))
    assert answered_tokens == sum(p + c for p, c in fake.usage)

    # the context-length 400: one request, the question's error says what vLLM said
    huge = rows["huge"]
    assert fake.by_case[HUGE] == 1, "a context-length error was retried"
    assert huge.error_kind == "context_length" and not huge.answer
    assert huge.error is not None and f"maximum context length is {MAX_MODEL_LEN} tokens" in huge.error
    assert "{'" not in huge.error, f"the error shows the raw body, not vLLM's message: {huge.error}"

    # an ordinary 400: recorded with vLLM's message, not retried
    rejected = rows["rejected"]
    assert fake.by_case[REJECTED] == 1
    assert rejected.error_kind == "http_400" and rejected.error is not None
    assert "logit_bias is not supported" in rejected.error and "BadRequestError" in rejected.error


@pytest.mark.parametrize(("body", "context"), [
    ({"message": "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.",
      "type": "BadRequestError", "code": 400}, True),  # vLLM
    ({"message": "request (4476 tokens) exceeds the available context size (4096 tokens)",
      "type": "exceed_context_size_error", "code": 400}, True),  # llama-server
    ({"message": "Please reduce the length of the messages.", "type": "invalid_request_error",
      "code": "context_length_exceeded"}, True),  # OpenAI, Azure
    ({"message": "temperature must be non-negative", "type": "BadRequestError", "code": 400}, False),
])
def test_context_overflow_is_told_apart_from_other_400s(body: dict[str, Any], context: bool) -> None:
    import httpx
    import openai

    from medpanel.agents.model.client import describe_error, error_kind
    from medpanel.agents.model.retries import is_retryable

    response = httpx.Response(400, request=httpx.Request("POST", "http://127.0.0.1/v1/chat/completions"))
    exc = openai.BadRequestError(f"Error code: 400 - {body}", response=response, body=body)
    assert error_kind(exc) == ("context_length" if context else "http_400")
    assert not is_retryable(exc)
    assert describe_error(exc) == f"HTTP 400 {body['type']}: {body['message']}"
