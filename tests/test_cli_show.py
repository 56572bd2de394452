"""`medpanel show`: what the terminal prints for a transcript (rich markup must never leak or bite)."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from medpanel.experiments.cli import output as cli
from medpanel.experiments.run.store.records import TranscriptRecord


def _doc() -> TranscriptRecord:
    return TranscriptRecord.model_validate({
        "condition": "clear-default", "answer": ["A"], "gold": ["A"], "invalid": False, "correct": True,
        "error": None, "calls": 1, "tokens": 12,
        "question": {"dataset": "medqa", "qid": "q[1]", "text": "Serum [Na+] is 120 [/b] mmol/L. Next step?",
                     "options": {"A": "Fluid restriction [first]", "B": "Hypertonic saline"}, "gold": ["A"]},
        "events": [
            {"kind": "call", "role": "verifier", "agent": "verifier", "step": "verify", "round": 1, "turn": 0,
             "usage": {"prompt_tokens": 10, "completion_tokens": 2}, "latency_s": 0.5, "parsed": None,
             "content": "route [bold]consensus[/bold] [/red] done"},
            {"kind": "decision", "role": "pipeline", "agent": "direct", "step": "decision", "round": 0, "turn": 0,
             "content": "A", "data": {"answer": ["A"], "note": "[italic]kept[/italic]"}},
        ],
    })


@pytest.fixture()
def out(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    buf = io.StringIO()
    monkeypatch.setattr(cli, "console", Console(file=buf, width=200, color_system=None))
    return buf


def test_show_prints_tags_as_text_and_model_text_verbatim(out: io.StringIO) -> None:
    cli.print_transcript(_doc())
    text = out.getvalue()
    # the event line's own emphasis is styling, not literal markup
    assert "[bold]" not in text.split("route")[0] and "[/bold]" not in text.split("route")[0]
    line = next(x for x in text.splitlines() if x.startswith("decision"))
    assert "decision pipeline" in " ".join(line.split()) and "[bold]" not in line
    assert '"note": "[italic]kept[/italic]"' in line  # data is printed as it was recorded
    # model, question and option text are data: brackets stay, and a stray closing tag cannot crash it
    assert "route [bold]consensus[/bold] [/red] done" in text
    assert "Serum [Na+] is 120 [/b] mmol/L" in text and "(A) Fluid restriction [first]" in text
    assert "q[1]" in text.splitlines()[0]


def test_report_tables_print_cells_and_notes_verbatim(out: io.StringIO) -> None:
    from medpanel.agents.tables import Table

    cli.print_table(Table("t", ["condition", "dataset"], [["c1r0", "[medqa]"]], note="rates over [n] rows"))
    text = out.getvalue()
    assert "[medqa]" in text and "rates over [n] rows" in text


def test_report_headers_show_the_description_and_the_protocol_deviations(tmp_path: Any,
                                                                         out: io.StringIO) -> None:
    from pathlib import Path

    from medpanel.agents.model.scripted import ScriptedChatCompletionClient
    from medpanel.experiments.run.execution.runner import Runner
    from medpanel.experiments.run.scenario.plan import make_plan
    from medpanel.experiments.run.scenario.scenario import load_scenario
    from medpanel.experiments.view.viewer import build_site

    f = Path(tmp_path) / "s.yaml"
    f.write_text("name: hdr\ndescription: 'Generalist on the samples. Deviation: temperature = 0.3 to sample.'\n"
                 "pipeline: generalist\nflags: {c: [0]}\ndataset: {source: sample, limit: 1}\n"
                 "model: {backend: scripted, temperature: 0.3}\n", encoding="utf-8")
    runner = Runner.create(make_plan(load_scenario(f), base_dir=Path(tmp_path)), run_dir=Path(tmp_path) / "run")
    runner.client_factory = lambda spec: ScriptedChatCompletionClient()
    assert runner.run(install_signals=False)["state"] == "complete"
    cli.summarise(runner.run_dir, write=False)
    head = out.getvalue().splitlines()[:2]
    assert head[0] == "scenario hdr: Generalist on the samples. Deviation: temperature = 0.3 to sample."
    assert head[1] == "protocol: differs from the papers' protocol: temperature = 0.3 (paper: 0.0)"
    build_site(runner.run_dir, plots=False, n_boot=10)
    html = (runner.run_dir / "report" / "index.html").read_text(encoding="utf-8")
    assert "Deviation: temperature = 0.3 to sample." in html
    assert "<dt>protocol</dt><dd>differs from the papers&#39; protocol: temperature = 0.3 (paper: 0.0)</dd>" in html
