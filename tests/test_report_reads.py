"""What `medpanel report` reads: each transcript once, into its row's digest, without the messages sent (no
table, figure or audit reads them), the tables built once for `report --html`, and the question pages' value
markup built in Python exactly as the jinja macro it replaces wrote it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jinja2 import DictLoader, Environment, StrictUndefined

from medpanel.experiments.analysis import digest as digest_mod
from medpanel.experiments.analysis import report as report_mod
from medpanel.experiments.analysis.audit import audit_run
from medpanel.experiments.analysis.digest import digest, read_digests
from medpanel.experiments.analysis.report import read_run_tables
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.store.rundir import load_run, read_transcript
from medpanel.experiments.run.store.transcript_log import record_path
from medpanel.experiments.view import pages, viewer
from medpanel.experiments.view.events import event_view
from medpanel.experiments.view.render import num, pretty, render_event, render_value, safe_url
from tests.rundir_helpers import completed

from .inspect_fixtures import clear_run

SCENARIO = {"name": "reads", "pipeline": "panel", "flags": {"c": [0, 1]},
            "dataset": {"source": "sample", "subsets": ["medqa-style"], "limit": 2},
            "model": {"backend": "scripted"}, "run": {"workers": 2}}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("reads")
    return completed(SCENARIO, tmp).run_dir


def test_the_tables_read_of_each_transcript_is_what_its_whole_validated_record_gives(run_dir: Path) -> None:
    data = load_run(run_dir)
    read = list(read_digests(run_dir, data.rows))
    whole = [digest(row, read_transcript(record_path(run_dir, row.transcript))) for row in data.rows]
    assert read == whole
    assert all(d.calls for d in read) and any(d.trajectory.flips() for d in read)


def test_messages_that_are_not_a_list_of_objects_are_one_user_error(run_dir: Path, tmp_path: Path) -> None:
    row = load_run(run_dir).rows[0]
    doc = json.loads(record_path(run_dir, row.transcript).read_text(encoding="utf-8"))
    doc["events"][0]["messages"] = "hello"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(UserError, match=r"bad\.json: not a medpanel transcript \(events\.0\.messages: "):
        read_transcript(bad, messages=False)
    bad.write_text('{"condition": "c0", "events": [', encoding="utf-8")
    with pytest.raises(UserError, match=r"bad\.json: not valid JSON"):
        read_transcript(bad, messages=False)


def test_the_audit_of_documents_already_read_is_the_audit_of_the_files(run_dir: Path) -> None:
    data = load_run(run_dir)
    read = list(read_digests(run_dir, data.rows))
    assert audit_run(run_dir, data.rows, digests=read) == audit_run(run_dir, data.rows)


def test_report_html_reads_each_transcript_once_for_the_tables_and_builds_them_once(
        run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = load_run(run_dir)
    shared = read_run_tables(run_dir, data.rows, data.record)
    reads: list[str] = []
    real = pages.read_document

    def counting(path: Path) -> Any:
        reads.append(f"{Path(path).name}@{getattr(path, 'offset', '')}")
        return real(path)

    def no_second_build(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("the tables were built again")

    monkeypatch.setattr(pages, "read_document", counting)
    monkeypatch.setattr(viewer, "row_tables", no_second_build)
    monkeypatch.setattr(report_mod, "row_tables", no_second_build)
    monkeypatch.setattr(digest_mod, "read_digest", no_second_build)
    monkeypatch.setattr(digest_mod, "read_with_document", no_second_build)
    viewer.build_site(run_dir, plots=False, n_boot=10000, shared=shared)
    # no read for the tables, the figures or the audit; each page reads its own transcripts whole, once
    expected = [record_path(run_dir, r.transcript) for r in data.rows]
    assert sorted(reads) == sorted(f"{p.name}@{getattr(p, 'offset', '')}" for p in expected)


def test_report_html_decodes_each_transcript_once_for_the_pages_the_tables_and_the_audit(
        run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # One streamed pass: each transcript is decoded once, and that decoding makes its row's digest
    # (the tables, figures, audit) and its question's page; the tables are built once.
    from medpanel.experiments.cli.inspect import report

    data = load_run(run_dir)
    reads: list[str] = []
    builds: list[int] = []
    real_read, real_build = digest_mod.read_document, report_mod.row_tables

    def counting(path: Path) -> Any:
        reads.append(f"{Path(path).name}@{getattr(path, 'offset', '')}")
        return real_read(path)

    def building(*a: Any, **k: Any) -> Any:
        builds.append(1)
        return real_build(*a, **k)

    def second_read(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("a transcript was read a second time")

    monkeypatch.setattr(digest_mod, "read_document", counting)
    monkeypatch.setattr(digest_mod, "read_digest", second_read)
    monkeypatch.setattr(pages, "read_document", second_read)
    monkeypatch.setattr(viewer, "row_tables", building)
    monkeypatch.setattr(report_mod, "row_tables", building)
    report(run_dir, html=True)
    expected = [record_path(run_dir, r.transcript) for r in data.rows]
    assert sorted(reads) == sorted(f"{p.name}@{getattr(p, 'offset', '')}" for p in expected)
    assert builds == [1]
    assert (run_dir / "report" / "index.html").is_file() and (run_dir / "report" / "report.md").is_file()


BEFORE = Path(__file__).parent / "fixtures" / "page_macros_before_render.html.j2"
"""The `value`, `evidence` and `event` macros as the pages used them before render.py built that markup."""


def _old(call: str, **kw: Any) -> str:
    env = Environment(loader=DictLoader({"m": BEFORE.read_text(encoding="utf-8"),
                                         "t": '{% import "m" as m %}' + call}),
                      autoescape=True, undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(pretty=pretty, num=num, safe_url=safe_url)
    env.tests["listlike"] = lambda x: isinstance(x, list | tuple)
    return env.get_template("t").render(**kw)


def _deep(n: int) -> Any:
    return {"k": _deep(n - 1)} if n else ["<leaf>", {"a": 1}]


@pytest.mark.parametrize("v", [
    {"answer": "<script>alert(1)</script>", "confidence": 0.5, "ok": True, "none": None, "n": 3},
    {}, [], [1, "two & three", None, False], [{"a": "<b>"}, ["x", ["y"]]], ("t", 1),
    "short <i>text</i>", "line\nbreak & more", "x" * 161, "y" * 160, 2.5, None, True,
    {"<key>": {"nested": [{"deep": "\"quoted\" 'single'"}]}}, _deep(9), [[]], [{}],
])
def test_render_value_writes_what_the_jinja_macro_wrote(v: Any) -> None:
    assert str(render_value(v)) == _old("{{ m.value(v) }}", v=v)
    assert "<script>" not in str(render_value(v)) and "<leaf>" not in str(render_value(v))


def _event_views(run: Path, messages: str) -> list[dict[str, Any]]:
    out = []
    for row in load_run(run).rows:
        doc = read_transcript(record_path(run, row.transcript))
        for i, e in enumerate(doc["events"]):
            hits = [{"kind": "direct", "detector": "stem<", "score": 0.9, "threshold": 0.5, "detail": "<x>"}]
            leak = {(i, key, n): hits for key in ("evidence", "documents", "passages") for n in range(2)}
            ev = event_view(e, i, "c0", messages, leak)
            ev["diff"].append("first difference: <b> vs <a>")
            if i % 3 == 0:
                ev["flip"] = {"label": "turn 1", "before": "A", "after": "<B>", "direction": "to right",
                              "after_what": "critique & reply"}
            out.append(ev)
    return out


@pytest.mark.parametrize("messages", ["none", "last", "all"])
def test_render_event_writes_what_the_jinja_macros_wrote(run_dir: Path, tmp_path: Path, messages: str) -> None:
    views = _event_views(run_dir, messages) + _event_views(clear_run(tmp_path), messages)
    assert any(v["evidence"] for v in views) and any(v["parsed"] for v in views)
    assert any(v["messages"] for v in views) == (messages != "none")
    for ev in views:
        assert str(render_event(ev)) == _old("{{ m.event(ev) }}", ev=ev)
