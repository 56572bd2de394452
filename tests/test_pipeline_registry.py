"""The built-in pipelines come through the `medpanel.pipelines` entry-point group a user's package
uses, so the run room imports no method; the registry keeps its names, messages and order."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from medpanel.agents.pipelines import registry
from medpanel.agents.pipelines.base import Pipeline

ROOT = Path(__file__).resolve().parents[1]

BUILT_IN = {"panel", "generalist", "calibrated", "clear", "baseline", "direct", "cot", "sc", "benchmark", "zero-shot",
            "few-shot", "cot-sc", "multipersona", "self-refine", "medprompt", "medagents", "mdagents", "kamac",
            "multiagent"}


def test_every_built_in_pipeline_is_an_entry_point_of_the_group_a_users_pipeline_uses() -> None:
    entries = {e.name: e.value for e in metadata.entry_points(group=registry.ENTRY_POINTS)}
    assert BUILT_IN <= entries.keys()
    assert all(entries[name].startswith("medpanel.") for name in BUILT_IN)
    assert not BUILT_IN & registry.PIPELINES.keys()  # nothing built in is registered by import
    assert BUILT_IN <= set(registry.known())


@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_each_built_in_name_gives_a_fresh_pipeline(name: str) -> None:
    first, second = registry.get_pipeline(name), registry.get_pipeline(name)
    assert isinstance(first, Pipeline) and first is not second


def test_a_variant_keeps_its_own_kind() -> None:
    assert registry.get_pipeline("cot").kind == "cot"  # type: ignore[attr-defined]
    assert registry.get_pipeline("medprompt").method == "medprompt"  # type: ignore[attr-defined]


def test_a_record_that_names_no_pipeline_reads_the_panels_tables_first() -> None:
    names = registry.built_in()
    assert names[0] == "panel" and BUILT_IN <= set(names)


def test_the_run_room_imports_no_method_room() -> None:
    # A fresh interpreter: resolving a built-in name loads its method room only then, through the entry point.
    code = ("import sys; from medpanel.experiments.run.execution import runner; "
            "print(sorted(m for m in sys.modules if m.startswith('medpanel.methods.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_metadata_without_medpanels_own_pipelines_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    registry.own.cache_clear()
    monkeypatch.setattr(metadata, "entry_points", lambda **_kw: [])
    try:
        with pytest.raises(registry.UnknownPipeline, match="reinstall it, make setup or pip install -e") as info:
            registry.get_pipeline("panel")
        assert "\n" not in str(info.value)
    finally:
        monkeypatch.undo()
        registry.own.cache_clear()


def test_an_unknown_name_is_one_line_naming_the_built_in_ones() -> None:
    with pytest.raises(registry.UnknownPipeline) as info:
        registry.get_pipeline("no-such-method")
    message = str(info.value)
    assert "\n" not in message and "'no-such-method'" in message
    assert "kamac" in message and "module:ClassName" in message


def test_a_methods_own_prompts_take_the_keys_users_write() -> None:
    from medpanel.experiments.run.scenario import axes

    parts = axes.prompt_parts()
    for key in ("challenger.system", "planner.system", "kamac.talk", "mdagents.triage", "medagents.vote",
                "benchmark.medprompt", "multipersona.debate", "baseline.cot"):
        assert key in parts, key
    assert len(parts) == len(set(parts))
    assert axes.prompt_parts()["kamac.talk"].read_text(encoding="utf-8") == \
        (ROOT / "methods" / "kamac" / "roles" / "kamac.talk.md").read_text(encoding="utf-8")
