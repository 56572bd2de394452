"""Models as a grid axis: two fake endpoints serving two labels, real HTTP, one run.

Who answered what is traced by tokens: each endpoint fills every string of its replies with its own
token, so a request that carries a token carries that model's reply."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import medpanel

from .axes_helpers import endpoint
from .axes_helpers import validate as _validate
from .conftest import write
from .fake_openai import FakeOpenAI


def _text(body: dict[str, Any]) -> str:
    return json.dumps(body.get("messages", []))


def _calls(run: Any) -> list[tuple[str, Any]]:
    return [(t.condition, e) for t in run.transcripts() for e in t.events if e.kind == "call"]


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("axes")
    write(tmp / "terse.md", "TERSE-TOKEN You are the Challenger. Name one weakness or none.\n")
    with FakeOpenAI(endpoint("ALPHA-TOKEN")) as a, FakeOpenAI(endpoint("BETA-TOKEN", last=True)) as b:
        sc = write(tmp / "s.yaml", f"""name: axes
pipeline: generalist
flags: {{c: [0, 1]}}
dataset: {{source: sample, limit: 1}}
models:
  - {{label: alpha, backend: openai, name: fake, base_url: "{a.base_url}"}}
  - {{label: beta, backend: openai, name: fake, base_url: "{b.base_url}"}}
prompt_variants:
  terse: {{challenger: terse.md}}
run: {{workers: 2}}
""")
        result = medpanel.run(sc, runs_dir=tmp / "runs")
        yield result, medpanel.load_run(result.run_dir), a.requests, b.requests


def test_every_condition_runs_under_every_variant_on_every_model(grid: Any) -> None:
    result, run, _, _ = grid
    assert result.complete, result
    want = {f"c{c}{v}@{m}" for c in (0, 1) for v in ("", "+terse") for m in ("alpha", "beta")}
    assert set(run.conditions) == want
    assert Counter(r.condition for r in run.rows) == {slug: 2 for slug in want}  # 2 sample questions each


def test_each_request_went_to_its_own_endpoint_with_its_own_prompt(grid: Any) -> None:
    _, run, to_a, to_b = grid
    # The Challenger's critique reaches the generalist's next request: on its own model only.
    assert any("ALPHA-TOKEN" in _text(r) for r in to_a) and not any("BETA-TOKEN" in _text(r) for r in to_a)
    assert any("BETA-TOKEN" in _text(r) for r in to_b) and not any("ALPHA-TOKEN" in _text(r) for r in to_b)
    for condition, event in _calls(run):
        assert event.data["model_label"] == condition.rsplit("@", 1)[1]
        terse = "TERSE-TOKEN" in json.dumps(event.messages)
        if event.role == "challenger":
            assert terse == ("+terse" in condition), (condition, event.messages[0])
        else:
            assert not terse
    # Both endpoints served the variant's prompt, and only in Challenger calls.
    for requests in (to_a, to_b):
        assert any(r["messages"][0]["content"].startswith("TERSE-TOKEN") for r in requests)


def test_the_cache_never_answers_one_model_with_another_models_reply(grid: Any) -> None:
    _, run, to_a, to_b = grid
    calls = _calls(run)
    paid = Counter(e.data["model_label"] for _, e in calls if not e.cache_hit)
    assert paid == {"alpha": len(to_a), "beta": len(to_b)}
    hits = [(c, e) for c, e in calls if e.cache_hit]
    assert hits  # c0 and c1 (and both variants) share the generalist's first call within one model
    for condition, event in hits:
        own = "ALPHA-TOKEN" if condition.endswith("@alpha") else "BETA-TOKEN"
        assert own in (event.content or "")


def test_the_report_has_per_model_and_interaction_tables(grid: Any) -> None:
    _, run, _, _ = grid
    tables = {t.title: t for t in run.tables().values()}
    side = tables["Accuracy per model (%)"]
    assert side.columns == ["condition", "alpha", "beta"]
    # The two sample questions (limit 1 per subset) are s09 (gold A) and s02 (gold C); alpha answers
    # the first letter (A: 1 of 2), beta the last one (0 of 2), whatever the condition.
    assert {r[0]: r[1:] for r in side.rows} == {c: [50.0, 0.0] for c in ("c0", "c0+terse", "c1", "c1+terse")}
    within = tables["Condition effects within each model (paired)"]
    assert {(r[0], r[1], r[2]) for r in within.rows} >= {("alpha", "c0", "c1"), ("beta", "c0", "c1")}
    inter = tables["Model x condition interaction"]
    row = next(r for r in inter.rows if r[:4] == ["c0", "c1", "alpha", "beta"])
    assert row[5] == 2 and row[6] == 0.0  # the generalist keeps its answer after a critique on both models
    holds = tables["Conclusions on every model"]
    assert holds.columns[-1] == "holds_on_every_model"
    acc = json.loads((run.run_dir / "run.json").read_text())["accommodations"]["models"]
    assert set(acc) == {"alpha", "beta"} and acc["alpha"]["backend"] == "openai"
    assert acc["alpha"]["context_window"] is None  # no small-model limit on an HTTP endpoint
    named = tables["Prompt variant of every condition"]
    assert {r[0]: r[1] for r in named.rows}["c1+terse@beta"] == "terse"


def test_models_with_the_same_name_and_endpoint_keep_their_own_cache(tmp_path: Path) -> None:
    sc = write(tmp_path / "s.yaml", """name: same
pipeline: generalist
flags: {c: [0, 1]}
dataset: {source: sample, limit: 1}
models:
  - {label: one, backend: scripted}
  - {label: two, backend: scripted}
run: {workers: 1}
""")
    run = medpanel.run(sc, runs_dir=tmp_path / "runs").load()
    paid = Counter(e.data["model_label"] for _, e in _calls(run) if not e.cache_hit)
    single = write(tmp_path / "one.yaml", sc.read_text().replace("  - {label: two, backend: scripted}\n", ""))
    alone = medpanel.run(single, runs_dir=tmp_path / "runs").load()
    own = sum(not e.cache_hit for _, e in _calls(alone))
    # The label is part of every cache key: each model pays for its requests as if it ran alone.
    assert paid == {"one": own, "two": own} and own > 0


def test_a_role_routed_to_another_model_sends_its_calls_there(tmp_path: Path) -> None:
    with FakeOpenAI(endpoint("ALPHA-TOKEN")) as a, FakeOpenAI(endpoint("BETA-TOKEN", last=True)) as b:
        sc = write(tmp_path / "s.yaml", f"""name: routed
pipeline: generalist
flags: {{c: [0, 1]}}
dataset: {{source: sample, limit: 1}}
models:
  - {{label: weak, backend: openai, name: small, base_url: "{a.base_url}"}}
  - {{label: strong, backend: openai, name: big, base_url: "{b.base_url}", grid: false}}
roles: {{challenger: {{model: strong}}}}
run: {{workers: 1}}
""")
        run = medpanel.run(sc, runs_dir=tmp_path / "runs").load()
        assert set(run.conditions) == {"c0@weak", "c1@weak"}
        assert b.requests and all(r["model"] == "big" for r in b.requests)
        assert all(r["messages"][0]["content"].startswith("You are the Challenger") for r in b.requests)
        assert not any("You are the Challenger" in _text(r) for r in a.requests)
        # The strong Challenger's critique reaches the weak generalist's reconsideration.
        assert any("BETA-TOKEN" in _text(r) for r in a.requests)
    for _, event in _calls(run):
        assert event.data["model_label"] == ("strong" if event.role == "challenger" else "weak")
        assert event.model == ("big" if event.role == "challenger" else "small")


def test_single_model_scenarios_keep_their_slugs_and_cache_keys(tmp_path: Path) -> None:
    sc = write(tmp_path / "s.yaml", """name: single
pipeline: generalist
flags: {c: [0, 1]}
dataset: {source: sample, limit: 1}
model: {backend: scripted}
""")
    run = medpanel.run(sc, runs_dir=tmp_path / "runs").load()
    assert set(run.conditions) == {"c0", "c1"}
    assert all("model_label" not in e.data for _, e in _calls(run))



BASE = """name: bad
pipeline: generalist
flags: {c: [0, 1]}
dataset: {source: sample, limit: 1}
"""


@pytest.mark.parametrize(("body", "words"), [
    ("models:\n  - {label: 'qwen 7b', backend: scripted}\n", "models.0.label"),
    ("models:\n  - {label: a, backend: scripted}\n  - {label: a, backend: scripted}\n", "models[1].label"),
    ("models:\n  - {label: a, backend: scripted}\nroles: {challenger: {model: b}}\n", "roles.challenger.model"),
    ("models:\n  - {label: a, backend: scripted}\nroles: {oracle: {model: a}}\n", "roles.oracle"),
    ("model: {backend: scripted, name: x}\nmodels:\n  - {label: a, backend: scripted}\n", "both model: and models:"),
], ids=["bad-label", "duplicate-label", "route-to-unknown-label", "unknown-role", "model-and-models"])
def test_bad_model_blocks_are_one_line_and_exit_2(tmp_path: Path, body: str, words: str) -> None:
    rc, err = _validate(write(tmp_path / "s.yaml", BASE + body))
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in err, err


def test_the_interaction_is_the_difference_of_the_paired_differences() -> None:
    from medpanel.experiments.analysis.axes_tables import interaction

    q = ["q1", "q2", "q3", "q4", "q5"]
    # q5 is missing from one cell, so q1..q4 count. Model 1: b - a = +1 on q2 (+25 points); model 2:
    # b - a = -1 on q1 and q3 (-50 points). The difference of differences: -75 points.
    a1, b1 = dict(zip(q, [1, 0, 0, 0, 1], strict=True)), dict(zip(q, [1, 1, 0, 0, 1], strict=True))
    a2, b2 = dict(zip(q, [1, 1, 1, 0, 0], strict=True)), dict(zip(q[:4], [0, 1, 0, 0], strict=True))
    n, dd, low, high = interaction(a1, b1, a2, b2, n_boot=2000)
    assert n == 4 and dd == -75.0 and low <= dd <= high and low < 0


def test_a_models_own_budget_stops_the_run_naming_the_model(tmp_path: Path) -> None:
    sc = write(tmp_path / "s.yaml", """name: budget
pipeline: generalist
flags: {c: [0, 1]}
dataset: {source: sample, limit: 1}
models:
  - {label: cheap, backend: scripted}
  - {label: dear, backend: scripted, budget: {max_calls: 2}}
run: {workers: 1}
""")
    result = medpanel.run(sc, runs_dir=tmp_path / "runs")
    assert result.state == "stopped" and "budget of model dear: max_calls=2" in (result.reason or ""), result
    run = result.load()
    paid = Counter(e.data["model_label"] for _, e in _calls(run) if not e.cache_hit)
    assert paid["dear"] <= 2  # nothing past its limit was recorded


def test_the_question_page_shows_one_condition_on_every_model_side_by_side(grid: Any) -> None:
    from medpanel.experiments.view.viewer import build_site

    _, run, _, _ = grid
    pages = [p for p in build_site(run.run_dir, plots=False, n_boot=200) if p.parent.name == "questions"]
    html = pages[0].read_text()
    assert '<button type="button" data-across="c1+terse">c1+terse</button>' in html
    for model in ("alpha", "beta"):
        assert f'data-condition="c1+terse@{model}" data-across="c1+terse"' in html
    assert "fake (alpha)" in html and "fake (beta)" in html  # every call names the model that served it


def test_a_dead_second_endpoint_stops_the_run_although_the_first_answers(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]  # closed again when the block ends: connections are refused
    with FakeOpenAI(endpoint("ALPHA-TOKEN")) as a:
        sc = write(tmp_path / "s.yaml", f"""name: dead
pipeline: generalist
flags: {{c: [0, 1]}}
dataset: {{source: sample, limit: 1}}
models:
  - {{label: alpha, backend: openai, name: fake, base_url: "{a.base_url}"}}
  - {{label: beta, backend: openai, name: fake, base_url: "http://127.0.0.1:{dead}/v1", max_retries: 0}}
run: {{workers: 1}}
""")
        result = medpanel.run(sc, runs_dir=tmp_path / "runs")
    assert result.state == "stopped", result
    assert "model beta" in (result.reason or "") and f"127.0.0.1:{dead}" in (result.reason or ""), result.reason
    run = result.load()
    # Nothing of beta was recorded as if the questions had failed; alpha's answers are kept.
    assert not [r for r in run.rows if r.condition.endswith("@beta")]
    assert [r for r in run.rows if r.condition.endswith("@alpha") and not r.error]
