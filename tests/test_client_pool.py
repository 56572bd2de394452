"""A worker's `ClientPool`: one raw client per model spec and endpoint, found for the plan's own
spec object without serialising it, and a new client for any spec that differs."""

from __future__ import annotations

from typing import Any

import pytest

from medpanel.agents.model.spec import ModelSpec
from medpanel.agents.pipelines import run as run_module
from medpanel.agents.pipelines.run import ClientPool


def _spec(**extra: object) -> ModelSpec:
    return ModelSpec.model_validate({"backend": "openai", "name": "m", "base_url": "http://127.0.0.1:9/v1",
                                     "cache": "off", **extra})


def test_the_same_spec_object_gets_its_client_without_being_serialised(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[ModelSpec] = []

    def build(spec: ModelSpec, base_url: str | None = None) -> object:
        built.append(spec)
        return object()

    monkeypatch.setattr(run_module, "build_client", build)
    pool, spec = ClientPool(), _spec()
    first = pool.get(spec, None)
    dumps: list[int] = []
    original = ModelSpec.model_dump_json

    def dump(self: ModelSpec, **kw: Any) -> str:
        dumps.append(1)
        return original(self, **kw)

    monkeypatch.setattr(ModelSpec, "model_dump_json", dump)
    assert all(pool.get(spec, None) is first for _ in range(5))
    assert dumps == [] and len(built) == 1


def test_a_different_spec_or_endpoint_gets_its_own_client_and_an_equal_one_shares(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_module, "build_client", lambda spec, base_url=None: object())
    pool, spec = ClientPool(), _spec()
    first = pool.get(spec, None)
    seeded = spec.model_copy(update={"seed": 7})  # a repeat's spec
    assert pool.get(seeded, None) is not first
    assert pool.get(spec, "http://127.0.0.1:8/v1") is not first  # another endpoint
    assert pool.get(_spec(), None) is first  # equal settings, another object: the same client
    assert pool.get(spec, None) is first


def test_a_scripted_spec_gets_no_pooled_client() -> None:
    assert ClientPool().get(ModelSpec.model_validate({"backend": "scripted", "name": "s"}), None) is None
