"""CLEAR's paper tables on hand-made rows: the numbers worked out by hand, and `dataset.parts`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from medpanel.experiments.errors import UserError
from medpanel.experiments.run.store.rows import Row
from medpanel.methods.clear.paper_tables import PAPER_TABLES, table2, table9


def row(cond: str, ds: str, qid: str, answer: str, gold: str, **summary: Any) -> Row:
    base = {"mode": "clear" if cond.startswith("clear") else "direct", "route": "consensus", "follow_ups": 0,
            "revisions": 0}
    return Row(condition=cond, dataset=ds, qid=qid, repeat=0, answer=answer, gold=gold, correct=answer == gold,
               invalid=False, error=None, error_kind=None, calls=1, logical_calls=1, tokens=1, latency_s=0.1,
               summary={**base, **summary}, transcript="t.json")


NEJM = [row("clear-default", "nejm-qa.internal_medicine", "1", "A,C", "A,C", web_source="snapshot"),
        row("clear-default", "nejm-qa.internal_medicine", "2", "A", "A,C", web_source="snapshot"),
        row("clear-default", "nejm-qa.psychiatry", "3", "B", "B", web_source="snapshot"),
        row("clear-default", "nejm-qa.psychiatry", "4", "C", "B", web_source="snapshot"),
        row("direct", "nejm-qa.internal_medicine", "1", "A", "A,C"),
        row("direct", "nejm-qa.internal_medicine", "2", "B", "A,C"),
        row("direct", "nejm-qa.psychiatry", "3", "B", "B"),
        row("direct", "nejm-qa.psychiatry", "4", "B", "B")]


def test_nejm_by_specialty_exact_set_with_any_of_beside_it() -> None:
    t = table2(NEJM, ["direct", "clear-default"])
    assert t is not None and t.columns == ["method", "internal_medicine", "psychiatry", "overall", "overall_any_of",
                                           "n"]
    by = {r[0]: r[1:] for r in t.rows}
    # CLEAR: IM 1 of 2 exact (the partial "A" of A,C is wrong), psychiatry 1 of 2; any_of adds item 2 -> 3/4
    assert by["CLEAR"] == [50.0, 50.0, 50.0, 75.0, 4]
    # Direct: IM 0 of 2 (a partial A and a wrong B), psychiatry 2 of 2; any_of credits item 1 -> 3/4
    assert by["Direct (parametric only)"] == [0.0, 100.0, 50.0, 75.0, 4]


def test_table9_names_the_backend_and_says_when_none_is_live() -> None:
    t = table9(NEJM, ["direct", "clear-default"])
    assert t is not None and "No live web backend is configured" in t.note
    live = [r for r in NEJM if r.condition == "direct"] + [
        row("clear-default", "nejm-qa.internal_medicine", "1", "A,C", "A,C", web_source="tavily")]
    t = table9(live, ["direct", "clear-default"])
    assert t is not None and t.note == "Live web search through tavily." and t.rows[1] == ["CLEAR", "tavily", 1, 100.0]


def test_no_paper_table_without_a_suite_benchmark_or_a_clear_condition() -> None:
    other = [row("clear-default", "medqa-style", "1", "A", "A")]
    direct_only = [r for r in NEJM if r.condition == "direct"]
    for rows in (other, direct_only):
        assert [s.build(rows, ["direct", "clear-default"]) for s in PAPER_TABLES] == [None] * len(PAPER_TABLES)


def _scenario(tmp: Path, dataset: str) -> Path:
    (tmp / "mmlu.jsonl").write_text(
        "".join(json.dumps({"question": f"Q{i}?", "subject": s, "choices": ["a", "b", "c", "d"], "answer": i % 4})
                + "\n" for i in range(6) for s in ("anatomy", "virology")), encoding="utf-8")
    path = tmp / "s.yaml"
    path.write_text("name: s\npipeline: clear\nvariants: [direct]\nsettings: {corpus: quickstart}\n"
                    f"model: {{backend: scripted}}\ndataset:\n{dataset}", encoding="utf-8")
    return path


def test_parts_prefix_their_datasets_and_limit_caps_each(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    from medpanel.experiments.run.scenario.plan import make_plan
    from medpanel.experiments.run.scenario.scenario import load_scenario

    path = _scenario(tmp_path, "  limit: 4\n  parts:\n    - {name: mmlu, preset: mmlu, path: mmlu.jsonl, limit: 5}\n"
                               "    - {name: mine, source: sample, subsets: [medqa-style], limit: 1}\n")
    plan = make_plan(load_scenario(path), base_dir=tmp_path)
    counts: dict[str, int] = {}
    for q in plan.questions:
        counts[q.dataset] = counts.get(q.dataset, 0) + 1
    assert counts == {"mmlu.anatomy": 4, "mine.medqa-style": 1}  # virology is no medical subject
    assert make_plan(load_scenario(path), base_dir=tmp_path, limit=2).questions[0].dataset == "mmlu.anatomy"
    assert len(make_plan(load_scenario(path), base_dir=tmp_path, limit=2).questions) == 3


def test_a_source_beside_parts_is_one_line(tmp_path: Path) -> None:
    from medpanel.experiments.run.scenario.plan import make_plan
    from medpanel.experiments.run.scenario.scenario import load_scenario

    path = _scenario(tmp_path, "  path: x.jsonl\n  parts:\n    - {name: mine, source: sample}\n")
    with pytest.raises(UserError) as e:
        make_plan(load_scenario(path), base_dir=tmp_path, file=str(path))
    assert "path belong to each part" in str(e.value) and "\n" not in str(e.value)


def test_a_missing_part_file_names_the_part_and_the_publisher(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    from medpanel.experiments.run.scenario.plan import make_plan
    from medpanel.experiments.run.scenario.scenario import load_scenario

    path = _scenario(tmp_path, "  parts:\n    - {name: nejm-qa, preset: nejm-qa, path: nowhere}\n")
    with pytest.raises(UserError) as e:
        make_plan(load_scenario(path), base_dir=tmp_path)
    msg = str(e.value)
    assert "dataset.parts[nejm-qa].path: no such file" in msg and "nejm-ai-qa/exams" in msg and "\n" not in msg
