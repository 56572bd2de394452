"""`model.batch` against a local fake of the Batch API: the line sent is the direct body byte for
byte, batches go out when full or when the wait expires, a failed line or batch is retried per item
in the next batch, and a queue that stopped mid-batch is collected by the next one, never paid twice."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import openai
import pytest
from autogen_core.models import SystemMessage, UserMessage

from benchmarks.fake_batch import FakeBatch
from benchmarks.fake_server import completion
from medpanel.agents.model import batch_client
from medpanel.agents.model.backends import build_client
from medpanel.agents.model.batch_api import BatchAPI
from medpanel.agents.model.batch_lines import body_sha, jsonl_line
from medpanel.agents.model.batching import BatchQueue
from medpanel.agents.model.client import QuestionSession, RecordingClient
from medpanel.agents.model.errors import BatchUnanswered
from medpanel.agents.model.retries import error_kind
from medpanel.agents.model.spec import BatchSpec, ModelSpec
from medpanel.experiments.run.execution.batches import RunJournal


@pytest.fixture(autouse=True)
def _own_queues(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("MP_KEY", "sk-test")
    batch_client.open_session(None)
    yield
    batch_client.close_session()


def _spec(url: str, **batch: Any) -> ModelSpec:
    settings = {"enabled": True, "max_wait_s": 0.2, "poll_s": 0.05} | batch
    return ModelSpec(backend="openai", name="fake-model", base_url=url, api_key_env="MP_KEY", batch=settings,
                     max_retries=2)


def _messages(i: int) -> list[Any]:
    return [SystemMessage(content="You are a physician. Ünïcode stays as it is."),
            UserMessage(content=f"question {i}: which drug?", source="user")]


def _line_body(raw_line: bytes) -> bytes:
    return raw_line[raw_line.index(b', "body": ') + len(b', "body": '):-1]


def test_a_batch_line_carries_the_body_a_direct_call_posts_byte_for_byte() -> None:
    with FakeBatch(latency_s=0.1) as fake:
        direct = build_client(_spec(fake.base_url).model_copy(update={"batch": BatchSpec()}))
        batched = build_client(_spec(fake.base_url))
        extra = {"response_format": {"type": "json_object"}, "seed": 43, "max_tokens": None}

        async def both() -> None:
            await direct.create(_messages(1), extra_create_args=extra)
            await batched.create(_messages(1), extra_create_args=extra)
            await direct.close()

        asyncio.run(both())
        assert len(fake.direct_raw) == 1 and len(fake.raw_lines) == 1
        assert _line_body(fake.raw_lines[0]) == fake.direct_raw[0]
        line = json.loads(fake.raw_lines[0])
        assert line["method"] == "POST" and line["url"] == "/v1/chat/completions"
        assert "max_tokens" not in line["body"]  # a None override is left out, as in the direct call


def test_batches_go_out_when_full_and_when_the_wait_expires() -> None:
    with FakeBatch(latency_s=0.1) as fake:
        client = build_client(_spec(fake.base_url, max_requests=2, max_wait_s=1.0))

        async def five() -> float:
            start = time.monotonic()
            results = await asyncio.gather(*(client.create(_messages(i)) for i in range(5)))
            assert all(r.content == "{}" for r in results)
            return time.monotonic() - start

        took = asyncio.run(five())
        sizes = [b["request_counts"]["total"] for b in fake.batches.values()]
        assert sizes == [2, 2, 1]  # two full ones at once, the last when its wait expired
        assert took >= 1.0
        assert not fake.direct


def test_a_line_the_endpoint_refused_is_that_calls_status_error_and_the_others_are_answered() -> None:
    def handler(body: dict[str, Any], n: int) -> tuple[int, dict[str, str], Any]:
        if "question 2" in body["messages"][-1]["content"]:
            return 500, {}, {"error": {"message": "overloaded", "type": "server_error"}}
        return 200, {}, completion("fine", 7, 3)

    with FakeBatch(handler, latency_s=0.1) as fake:
        client = build_client(_spec(fake.base_url, max_wait_s=0.3))

        async def three() -> list[Any]:
            return await asyncio.gather(*(client.create(_messages(i)) for i in range(3)), return_exceptions=True)

        out = asyncio.run(three())
        assert [getattr(r, "content", None) for r in out] == ["fine", "fine", None]
        assert isinstance(out[2], openai.InternalServerError) and error_kind(out[2]) == "server_error"
        assert out[0].usage.prompt_tokens == 7 and len(fake.batches) == 1


@pytest.mark.parametrize("ending", ["expired", "failed", "cancelled"])
def test_a_batch_that_ends_unanswered_is_retried_per_item_in_the_next_batch(ending: str) -> None:
    with FakeBatch(latency_s=0.1, fault=lambda n: ending if n == 1 else None,
                   answered_before_expiry=1) as fake:
        spec = _spec(fake.base_url, max_wait_s=0.3)
        session = QuestionSession(spec=spec, inner=build_client(spec))

        async def three() -> list[Any]:
            return await asyncio.gather(*(RecordingClient(session).create(_messages(i)) for i in range(3)))

        asyncio.run(three())
        events = session.events
        assert len(events) == 3 and not any(e.error for e in events)
        first = [e for e in events if e.attempts == 1]
        again = [e for e in events if e.attempts == 2]
        # An expired batch answered its first line; the rest (every line of a failed or cancelled one) went again.
        assert len(first) == (1 if ending == "expired" else 0)
        assert len(again) == 3 - len(first)
        assert {e.data["batch"] for e in again} == {"batch_00002"}
        assert all(e.data["batch"] == "batch_00001" for e in first)
        assert len(fake.batches) == 2 and fake.batches["batch_00001"]["status"] == ending
        assert max(fake.paid.values()) == 1 and sum(fake.paid.values()) == 3


def test_an_unanswered_line_is_a_retryable_kind_named_for_how_its_batch_ended() -> None:
    exc = BatchUnanswered("batch_expired: batch b1 ended expired without answering this request")
    assert error_kind(exc) == "batch_expired"
    from medpanel.agents.model.retries import is_retryable

    assert is_retryable(exc)


def test_the_per_minute_limits_and_the_call_deadline_do_not_apply_to_batch_calls() -> None:
    from medpanel.agents.model.limits import RateLimits

    with FakeBatch(latency_s=1.5) as fake:
        spec = _spec(fake.base_url, max_wait_s=0.05).model_copy(update={"timeout_s": 0.1})
        # One request a minute: a direct second call would wait a minute for its slot.
        session = QuestionSession(spec=spec, inner=build_client(spec), limits=RateLimits(rpm=1))

        async def two() -> None:
            await asyncio.gather(*(RecordingClient(session).create(_messages(i)) for i in range(2)))

        start = time.monotonic()
        asyncio.run(two())
        assert time.monotonic() - start < 20
        assert not any(e.error for e in session.events)  # 1.5 s batch, 0.1 s timeout_s: no deadline hit


def _queue(fake: FakeBatch, journal: RunJournal, **settings: Any) -> BatchQueue:
    spec = _spec(fake.base_url, **settings)
    client = build_client(spec)
    batch_client.open_session(journal)
    return batch_client.queue_for(client, spec.batch)  # type: ignore[arg-type]


def test_a_queue_stopped_mid_batch_leaves_its_record_and_the_next_collects_it_without_paying_twice(
        tmp_path: Path) -> None:
    journal = RunJournal(tmp_path)
    with FakeBatch(latency_s=1.0) as fake:
        first = _queue(fake, journal)
        body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "model": "fake-model"}).encode()
        pending = first.submit(body)
        deadline = time.time() + 10
        while not fake.batches and time.time() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)
        batch_client.close_session()  # the session ends (a kill leaves the same record)
        assert pending.cancelled()
        records = [json.loads((tmp_path / "batches" / n).read_text()) for n in journal.names()]
        assert [(r["batch_id"], r["state"]) for r in records] == [("batch_00001", "submitted")]
        assert all(b"sk-test" not in (tmp_path / "batches" / n).read_bytes() for n in journal.names())
        second = _queue(fake, journal)
        reply = second.submit(body).result(timeout=20)
        assert reply.batch_id == "batch_00001" and reply.status == 200
        assert len(fake.batches) == 1 and list(fake.paid.values()) == [1]
        batch_client.close_session()
        assert json.loads((tmp_path / "batches" / "batch_00001.json").read_text())["state"] == "delivered"
        assert journal.names() == ["batch_00001.json"]  # the downloaded replies went with delivery


def test_replies_downloaded_before_a_kill_answer_the_resumed_calls(tmp_path: Path) -> None:
    journal = RunJournal(tmp_path)
    with FakeBatch(latency_s=0.1) as fake:
        first = _queue(fake, journal)
        body = json.dumps({"messages": [{"role": "user", "content": "hello"}]}).encode()
        future = first.submit(body)
        future.result(timeout=20)
        # As if killed at once: the batch was collected, its reply handed back but never recorded.
        first._done.clear()
        first._closing = True
        batch_client._queues.clear()
        record = json.loads((tmp_path / "batches" / "batch_00001.json").read_text())
        assert record["state"] == "collected"
        second = _queue(fake, journal)
        again = second.submit(body)
        assert again.done() and again.result().batch_id == "batch_00001"  # from disk, no request at all
        assert len(fake.batches) == 1 and list(fake.paid.values()) == [1]
        first.close()
        batch_client.close_session()  # every kept reply was taken: the batch is delivered, its replies gone
        assert json.loads((tmp_path / "batches" / "batch_00001.json").read_text())["state"] == "delivered"
        assert journal.names() == ["batch_00001.json"]


def test_a_batch_created_just_before_a_kill_is_found_by_its_input_file(tmp_path: Path) -> None:
    journal = RunJournal(tmp_path)
    with FakeBatch(latency_s=0.3) as fake:
        body = json.dumps({"messages": [{"role": "user", "content": "created"}]}).encode()
        # What `_send` had written when the kill came: the input file uploaded, the batch created, no id noted.
        api = BatchAPI(base_url=fake.base_url, headers={"Authorization": "Bearer sk-test"}, timeout_s=10)

        async def create() -> str:
            fid = await api.upload(jsonl_line("x-0", body), "f.jsonl")
            await api.create(fid)
            await api.close()
            return fid

        fid = asyncio.run(create())
        journal.save(f"{fid}.json", json.dumps({"endpoint": fake.base_url, "state": "creating",
                                                "input_file_id": fid, "items": {"x-0": body_sha(body)}}).encode())
        queue = _queue(fake, journal)
        reply = queue.submit(body).result(timeout=20)
        assert reply.batch_id == "batch_00001" and len(fake.batches) == 1
        batch_client.close_session()
        assert journal.names() == ["batch_00001.json"]  # the record renamed for its batch, delivered


def test_a_batch_lines_reply_is_bounded_like_a_direct_reply() -> None:
    def handler(body: dict[str, Any], n: int) -> tuple[int, dict[str, str], Any]:
        return 200, {}, completion("x" * 10_000)

    with FakeBatch(handler, latency_s=0.1) as fake:
        client = build_client(_spec(fake.base_url).model_copy(update={"max_reply_bytes": 4096}))
        with pytest.raises(ValueError, match=r"4,096|4096"):
            asyncio.run(client.create(_messages(1)))
