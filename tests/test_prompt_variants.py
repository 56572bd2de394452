"""Prompt variants as a grid axis, and the two shipped scenarios run on fake endpoints.

Who was sent which prompt is traced by the variants' own words in the requests the endpoint got."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

import medpanel

from .axes_helpers import endpoint
from .axes_helpers import validate as _validate
from .conftest import ROOT, write
from .fake_openai import FakeOpenAI

TERSE = (ROOT / "scenarios" / "prompts" / "challenger.terse.md").read_text()
STRICT_WORDS = "Look for the single most serious weakness"


def _calls(run: Any) -> list[tuple[str, Any]]:
    return [(t.condition, e) for t in run.transcripts() for e in t.events if e.kind == "call"]


@pytest.fixture(scope="module")
def sensitivity(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("prompts")
    with FakeOpenAI(endpoint("ONE-TOKEN", last=True)) as srv:
        result = medpanel.run(ROOT / "scenarios" / "prompt_sensitivity.yaml", runs_dir=tmp / "runs", limit=1,
                              workers=2, model={"backend": "openai", "name": "fake", "base_url": srv.base_url,
                                                "max_tokens": 256})
        yield result, medpanel.load_run(result.run_dir), srv.requests


def test_every_condition_runs_under_the_shipped_prompts_and_each_variant(sensitivity: Any) -> None:
    result, run, _ = sensitivity
    assert result.complete, result
    assert set(run.conditions) == {f"c{c}{v}" for c in (0, 1) for v in ("", "+terse-challenger", "+strict-challenger")}


def test_each_challenger_request_carries_its_variants_prompt(sensitivity: Any) -> None:
    _, run, requests = sensitivity
    challenger = [(c, e) for c, e in _calls(run) if e.role == "challenger" and e.step == "critique"]
    assert {c for c, _ in challenger} == {"c1", "c1+terse-challenger", "c1+strict-challenger"}
    for condition, event in challenger:
        system, request = event.messages[0]["content"], event.messages[-1]["content"]
        assert (system == TERSE.strip()) == (condition == "c1+terse-challenger")
        assert (STRICT_WORDS in request) == (condition == "c1+strict-challenger")
        assert not event.cache_hit  # a different prompt is a different request: never another variant's reply
    # What the endpoint received, not only what the transcript says.
    assert sum(r["messages"][0]["content"] == TERSE.strip() for r in requests) == 2  # 2 sample questions
    assert sum(STRICT_WORDS in json.dumps(r["messages"]) for r in requests) == 2
    # Roles a variant does not touch share their requests across variants: the cache answers them.
    assert any(e.cache_hit for c, e in _calls(run) if e.role == "generalist")


def test_run_json_keeps_every_variants_text_and_hash_and_the_report_names_them(sensitivity: Any) -> None:
    _, run, _ = sensitivity
    meta = json.loads((run.run_dir / "run.json").read_text())
    terse = meta["scenario"]["prompt_variants"]["terse-challenger"]["challenger.system"]
    assert terse["text"] == TERSE and terse["sha256"] == hashlib.sha256(TERSE.encode()).hexdigest()
    assert terse["file"].endswith("prompts/challenger.terse.md")
    tables = {t.title: t for t in run.tables().values()}
    named = {r[0]: (r[1], r[2]) for r in tables["Prompt variant of every condition"].rows}
    assert named["c0"] == ("default", "shipped prompts")
    assert named["c1+terse-challenger"] == ("terse-challenger", f"challenger.system {terse['sha256'][:12]}")
    assert named["c1+strict-challenger"][1].startswith("challenger.request ")
    assert tables["Accuracy per prompt variant (%)"].columns == ["condition", "default", "terse-challenger",
                                                                "strict-challenger"]
    within = tables["Condition effects within each prompt variant (paired)"]
    assert {(r[0], r[1], r[2]) for r in within.rows} == {(v, "c0", "c1") for v in
                                                          ("default", "terse-challenger", "strict-challenger")}
    assert len(tables["Prompt variant x condition interaction"].rows) == 2
    assert "Conclusions on every prompt variant" in tables


def test_a_resume_uses_the_stored_prompt_not_the_file(tmp_path: Path) -> None:
    prompt = write(tmp_path / "mine.md", "MINE-TOKEN Challenger: find one weakness.\n")
    sc = write(tmp_path / "s.yaml", """name: stored
pipeline: generalist
flags: {c: [1]}
prompts: {challenger: mine.md}
dataset: {source: sample, limit: 1}
model: {backend: scripted}
""")
    result = medpanel.run(sc, runs_dir=tmp_path / "runs", max_calls=1)
    assert result.state == "stopped"
    prompt.unlink()
    run = medpanel.resume(result.run_dir, max_calls=1000).load()
    firsts = [e for _, e in _calls(run) if e.role == "challenger"]
    assert firsts and all(e.messages[0]["content"] == "MINE-TOKEN Challenger: find one weakness." for e in firsts)


def test_the_transfer_scenario_runs_to_a_complete_report_on_two_endpoints(tmp_path: Path) -> None:
    with FakeOpenAI(endpoint("ALPHA-TOKEN")) as a, FakeOpenAI(endpoint("BETA-TOKEN", last=True)) as b:
        models = [{"label": "gpt-4o-mini", "backend": "openai", "name": "gpt-4o-mini", "base_url": a.base_url},
                  {"label": "qwen-7b", "backend": "openai", "name": "qwen", "base_url": b.base_url}]
        result = medpanel.run(ROOT / "scenarios" / "transfer.yaml", runs_dir=tmp_path / "runs", limit=1, workers=2,
                              models=models, dataset={"source": "sample", "subsets": None, "path": None},
                              settings={"rounds": 1, "turns_per_round": 1, "k": 2})
        assert a.requests and b.requests
    assert result.complete, result
    run = result.load()
    seven = ["c0r0", "c0r1", "c1r0", "c1r1", "c1r0k1", "c1r1k1", "c1r1k1-ind"]
    assert set(run.conditions) == {f"{c}@{m}" for c in seven for m in ("gpt-4o-mini", "qwen-7b")}
    assert not any(r.error for r in run.rows)
    tables = {t.title: t for t in run.tables().values()}
    assert [r[0] for r in tables["Accuracy per model (%)"].rows] == seven
    inter = tables["Model x condition interaction"]
    assert {(r[0], r[1]) for r in inter.rows} >= {("c0r0", "c1r0"), ("c1r0", "c1r0k1"), ("c1r0k1", "c1r1k1-ind")}
    assert "Conclusions on every model" in tables



@pytest.mark.parametrize(("prompts", "text", "words"), [
    ("prompts: {challenger: nowhere.md}", None, ["nowhere.md", "prompts.challenger"]),
    ("prompts: {challenger.request: p.md}", "{question}\n{trace}\n{answer}",
     ["p.md", "{answer}", "prompts.challenger.request"]),
    ("prompts: {challenger.request: p.md}", "{question} only", ["p.md", "{trace}", "prompts.challenger.request"]),
    ("prompt_variants: {short: {challenger: p.md}}", "Be {brief}.",
     ["p.md", "{brief}", "prompt_variants.short.challenger"]),
    ("prompts: {oracle: p.md}", "text", ["oracle", "prompts.oracle"]),
    ("prompts: {challenger.request: p.md}", "{question} {trace", ["p.md", "prompts.challenger.request"]),
    ("prompt_variants: {Short Form: {challenger: p.md}}", "text", ["Short Form", "prompt_variants"]),
], ids=["missing-file", "unknown-field", "missing-field", "unknown-field-in-variant", "unknown-role",
        "broken-template", "bad-variant-name"])
def test_bad_prompt_overrides_are_one_line_and_exit_2(tmp_path: Path, prompts: str, text: str | None,
                                                      words: list[str]) -> None:
    if text is not None:
        write(tmp_path / "p.md", text)
    sc = write(tmp_path / "s.yaml", f"""name: bad
pipeline: generalist
flags: {{c: [0, 1]}}
dataset: {{source: sample, limit: 1}}
model: {{backend: scripted}}
{prompts}
""")
    rc, err = _validate(sc)
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert all(w in lines[0] for w in words), lines[0]
