"""Every shipped scenario runs on the scripted backend (`--set model.backend=scripted`, how users and
the docs try a scenario without a model) with every reply parsed, and recruitment happens where the
condition recruits.

The scenarios are read from scenarios/, so a new one is covered without touching this file. Each
runs every condition it declares (pipelines and variants) on 3 of the packaged sample questions
(the free-text sample: one task per dataset), 1 round where its settings have rounds; a scenario
that needs what a test cannot have gets the smallest override that removes the need, the same for
every file:

- a dataset outside the package (MedAgentsBench, a JSONL, the Hub) -> the packaged sample questions;
- a corpus or offline web named through `${MEDPANEL_CORPUS}` / `${MEDPANEL_WEB}` -> the packaged
  `quickstart` / `quickstart-web`;
- a `models:` axis of API endpoints -> the one scripted model; published `references` (a file of
  the benchmark's) and a `budget_match` reference run -> left out (neither changes what is asked).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

# The overrides live with the request recorder, which runs every scenario the same way.
from benchmarks.record_requests import QUESTIONS
from benchmarks.record_requests import overrides as _overrides

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))


def _recruits(condition: dict[str, Any]) -> bool:
    """A condition whose panel recruits specialists: flag r on, or a variant named for it (panel-c1r1)."""
    return condition["flags"].get("r") == 1 or re.search(r"\bc[01]r1", condition["slug"].replace("-", " ")) is not None


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_every_condition_of_a_shipped_scenario_parses_every_scripted_reply(
        path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import medpanel
    from medpanel.experiments.run.scenario.scenario import load_scenario

    monkeypatch.setenv("MEDPANEL_CORPUS", "quickstart")
    monkeypatch.setenv("MEDPANEL_WEB", "quickstart-web")
    monkeypatch.chdir(path.parent)  # files a scenario names are relative to its folder
    scenario = load_scenario(path, _overrides(path))
    result = medpanel.run(scenario, run_dir=tmp_path / "run", workers=2)
    assert result.complete, (result.state, result.reason)
    run = result.load()
    conditions = {c["slug"]: c for c in run.record.model_dump()["conditions"]}
    questions = {(r.dataset, r.qid) for r in run.rows}  # the free-text sample has one task per dataset
    assert len(questions) >= QUESTIONS and len(run.rows) == len(conditions) * len(questions)

    unparsed: list[str] = []
    recruited = dict.fromkeys(conditions, 0)
    for t in run.transcripts():
        assert not t.error, f"{t.condition} {t.question.qid}: {t.error}"
        unparsed += [f"{t.condition} {e.role} {e.step}: {e.error}" for e in t.events
                     if e.kind == "call" and e.parsed is None and (e.error or "").startswith("unparsed reply")]
        found = (t.summary or {}).get("recruited") or 0
        recruited[t.condition] += len(found) if isinstance(found, list) else int(found)
    assert not unparsed, f"{len(unparsed)} unparsed replies, the first: {unparsed[:3]}"
    silent = [slug for slug, c in conditions.items() if _recruits(c) and recruited[slug] == 0]
    assert not silent, f"no recruitment in {len(questions)} questions: {silent}"
