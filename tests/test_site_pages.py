"""How `report --html` writes its question pages: each page over its old one, the old pages of
questions it no longer shows removed (also when the build stops on a damaged transcript), a
transcript log's path checked once for all its rows, and an event card's markup, whatever types a
transcript holds, what the jinja macros it replaced wrote."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from markupsafe import Markup

from medpanel.experiments.errors import UserError
from medpanel.experiments.run.store.rundir import load_run, transcript_paths
from medpanel.experiments.run.store.transcript_log import parse_reference
from medpanel.experiments.view import render
from medpanel.experiments.view.events import event_view
from medpanel.experiments.view.render import render_event, render_value
from medpanel.experiments.view.viewer import build_site, page_name

from .inspect_fixtures import grid_run
from .test_report_reads import _old


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return grid_run(tmp_path_factory.mktemp("pages"))


def _pages(run_dir: Path) -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in (run_dir / "report" / "questions").glob("*.html")}


def test_a_rebuild_writes_each_page_over_its_old_one_and_removes_only_pages_of_no_question(
        grid: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(grid, run_dir)
    build_site(run_dir, plots=False, n_boot=50)
    first = _pages(run_dir)
    assert set(first) == {page_name(*r.key) for r in load_run(run_dir).rows}
    gone = run_dir / "report" / "questions" / "medqa__gone-0000000000000000.html"
    gone.write_text("a question the run no longer has", encoding="utf-8")
    kept = run_dir / "report" / "questions" / sorted(first)[0]
    kept.write_text("an old page", encoding="utf-8")
    build_site(run_dir, plots=False, n_boot=50)
    again = _pages(run_dir)
    assert not gone.exists()
    assert set(again) == set(first)
    # the same pages but for each build's own script nonce
    assert {k: v.count("\n") for k, v in again.items()} == {k: v.count("\n") for k, v in first.items()}
    assert "an old page" not in again[kept.name]


def test_a_build_stopped_by_a_damaged_transcript_leaves_no_old_page(grid: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(grid, run_dir)
    build_site(run_dir, plots=False, n_boot=50)
    rows = sorted(load_run(run_dir).rows, key=lambda r: r.key)
    old = _pages(run_dir)
    stale = run_dir / "report" / "questions" / "medqa__gone-0000000000000000.html"
    stale.write_text("old", encoding="utf-8")
    last = rows[-1]
    ref = parse_reference(last.transcript)
    log = run_dir / (ref[0] if ref else last.transcript)
    data = log.read_bytes()
    start = ref[1] if ref else 0
    record = data[start:].replace(b'"format_version":3', b'"format_version":9', 1)
    log.write_bytes(data[:start] + record)  # the last question's transcript is of a format this one cannot read
    with pytest.raises(UserError):
        build_site(run_dir, plots=False, n_boot=50)
    left = _pages(run_dir)
    # what removing every old page first left: the pages written before the damaged one, no other
    assert not stale.exists()
    assert page_name(*last.key) not in left
    assert set(left) <= set(old) and left


def test_a_log_is_checked_to_be_inside_the_run_once_for_all_its_rows(
        grid: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = load_run(grid).rows
    files = {(parse_reference(r.transcript) or (r.transcript,))[0] for r in rows}
    assert len(rows) > len(files)
    resolved: list[Path] = []
    real = Path.resolve

    def counting(self: Path, strict: bool = False) -> Path:
        resolved.append(self)
        return real(self, strict=strict)

    path_of = transcript_paths(grid)
    monkeypatch.setattr(Path, "resolve", counting)
    paths = [path_of(r) for r in rows]
    assert len(resolved) == len(files)
    assert all(p.is_file() for p in paths)


class _Html:
    def __html__(self) -> str:
        return "<i>marked</i>"


@pytest.mark.parametrize("v", [
    MappingProxyType({"<k>": "<v>", "n": [1, 2]}), {1: "one", None: "none", 2.5: ["a"]},
    Markup("<b>already markup</b>"), Markup("long " * 40), [Markup("<i>x</i>"), "y"], (["a"], {"b": 1}),
    [1, ("t",)], ["a", MappingProxyType({"k": "v"})], [True, False, None, 1.0, -3], _Html(), [_Html()],
    {"deep": [[[[[[["<leaf>"]]]]]]]}, {"": ""}, "", "\n", 0, 0.0, float("nan"),
])
def test_values_of_any_type_get_what_the_jinja_macro_wrote(v: Any) -> None:
    assert str(render_value(v)) == _old("{{ m.value(v) }}", v=v)


def _event(**over: Any) -> dict[str, Any]:
    e: dict[str, Any] = {"kind": "call", "role": "specialist", "agent": "cardiologist", "round": 1, "turn": 2,
                         "step": "turn", "messages": [{"role": "user", "content": "q <b>"}], "content": "{}",
                         "parsed": {"answer": "A"}, "usage": {"prompt_tokens": 3, "completion_tokens": 4},
                         "latency_s": 0.5, "model": "m", "data": {}}
    e.update(over)
    return e


@pytest.mark.parametrize("over", [
    {}, {"round": True, "turn": 0}, {"round": 1.0, "turn": 1}, {"round": "1", "turn": None}, {"round": [1], "turn": 2},
    {"round": 0, "turn": 0}, {"agent": "<script>x</script>"}, {"role": "Odd Role!", "step": "<s>"},
    {"kind": "note", "role": "pipeline"}, {"kind": "vote", "content": "B", "data": {"rule": "majority"}},
])
def test_an_event_header_of_any_round_turn_and_agent_is_what_the_macros_wrote(over: dict[str, Any]) -> None:
    for i in range(2):  # the second time from the header kept by the first
        ev = event_view(_event(**over), i, "c0", "last", {})
        assert str(render_event(ev)) == _old("{{ m.event(ev) }}", ev=ev)


def test_a_card_header_is_kept_by_kind_role_and_step_not_by_agent() -> None:
    # A run's specialists are named per question: thousands of agents must not mean thousands of headers.
    render._HEADS.clear()
    for n in range(500):
        render_event(event_view(_event(agent=f"specialist {n}", round=n % 3, turn=n % 2), n, "c1", "last", {}))
    assert len(render._HEADS) == 1
    assert "specialist 499</span>" in str(render_event(event_view(_event(agent="specialist 499"), 0, "c1", "last", {})))
