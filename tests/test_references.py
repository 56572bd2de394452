"""Published runs as paired references: reading the published file, pairing a run against it, and
refusing a reference that is not the run's questions (or is not a reference file) before any call."""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections import Counter
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from medpanel import api
from medpanel.agents.model.scripted import ScriptedChatCompletionClient, ScriptedRequest
from medpanel.agents.types import Question
from medpanel.experiments.analysis.report import build_tables
from medpanel.experiments.cli.main import main
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.scenario.plan import make_plan
from medpanel.experiments.run.scenario.scenario import load_scenario
from medpanel.experiments.run.sources.references import References, read_file, resolve
from medpanel.experiments.run.store.rows import Row
from medpanel.experiments.run.store.rundir import load_record
from medpanel.methods.benchmark.references import load, pairings, reference_tables, write_reference_forest
from tests.run_records import run_record

from .conftest import MEDAGENTSBENCH as DATA
from .conftest import ROOT, write

PUBLISHED = DATA / "published_predictions.jsonl.gz"
needs_data = pytest.mark.skipif(not PUBLISHED.is_file(), reason="the shared MedAgentsBench data is not here")


@needs_data
def test_reading_the_published_file_reproduces_every_row_of_reference_results() -> None:
    ref = read_file(PUBLISHED)
    with (DATA / "reference_results.csv").open(encoding="utf-8") as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == 321
    for row in table:
        items = [i for i in ref.runs[(row["model"], row["method"])].values() if i.dataset == row["dataset"]]
        assert sum(i.correct for i in items) == int(row["n_correct"]), row
        # The logged tokens too, where the run logged them (AFlow and SPO log a cost: 0 in the csv).
        assert sum(i.prompt_tokens or 0 for i in items) == int(row["prompt_tokens"]), row
        assert sum(i.completion_tokens or 0 for i in items) == int(row["completion_tokens"]), row
    assert sum(len(v) for v in ref.runs.values()) == 30_727 and len(ref.runs) == 36
    assert {i.realidx for i in ref.runs[("gpt-4o", "spo")].values()} >= {"0", "5"}  # realidx read as str


# -- a scripted run paired against two references -------------------------------------------------

# Six questions, gold A. The scripted model answers A where the stem says "easy" (q1-q4), else B.
QUESTIONS = [{"realidx": str(i), "question": f"Question {i}: {'easy' if i <= 4 else 'hard'} case. Best step?",
              "options": {"A": "w", "B": "x", "C": "y", "D": "z"}, "answer_idx": "A"} for i in range(1, 7)]
# Reference "tok": right on q1, q2, q5; wrong on q3, q4 (C); no letter on q6. Tokens logged.
# Reference "usd": right on q3 only; it logs a cost instead of tokens (as SPO and AFlow do).
TOK = {"1": "A", "2": "A", "3": "C", "4": "C", "5": "A", "6": None}
USD = {"1": "B", "2": "B", "3": "A", "4": "B", "5": "B", "6": "B"}


def _item(method: str, realidx: str, predicted: str | None, **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "method": method, "dataset": "medqa", "realidx": realidx, "predicted": predicted,
            "gold": "A", "correct": predicted == "A", "prompt_tokens": None, "completion_tokens": None,
            "cost_usd": None, "time_s": 1.0, **extra}


def reference_file(path: Path, *, gz: bool = True, realidx_offset: int = 0) -> Path:
    lines = [_item("tok", str(int(k) + realidx_offset), p, prompt_tokens=100, completion_tokens=50)
             for k, p in TOK.items()]
    lines += [_item("usd", str(int(k) + realidx_offset), p, cost_usd=0.01) for k, p in USD.items()]
    data = "".join(json.dumps(x) + "\n" for x in lines).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


SCENARIO = """name: refs
pipeline: benchmark
variants: [zero-shot]
dataset: {{source: jsonl, path: medqa.jsonl}}
model: {{backend: scripted}}
run: {{workers: 1}}
references:
  file: ${{MP_TEST_REFS:-{file}}}
  runs: [{runs}]
"""
RUNS = "{model: gpt-4o, method: tok}, {model: gpt-4o, method: usd, label: spo-like}"


def workspace(tmp_path: Path, *, runs: str = RUNS, file: str = "refs/published.jsonl.gz", **kw: Any) -> Path:
    (tmp_path / "refs").mkdir(exist_ok=True)
    reference_file(tmp_path / "refs" / "published.jsonl.gz", **kw)
    write(tmp_path / "medqa.jsonl", "".join(json.dumps(q) + "\n" for q in QUESTIONS))
    return write(tmp_path / "s.yaml", SCENARIO.format(file=file, runs=runs))


def answer_easy(req: ScriptedRequest) -> dict[str, Any]:
    letter = "A" if "easy case" in req.last else "B"
    fields = set(req.model.model_json_schema()["properties"]) if req.model is not None else {"answer"}
    return {"reasoning": "r", "answer": letter} if "reasoning" in fields else {"answer": letter}


def test_a_scripted_run_pairs_with_each_reference_as_counted_by_hand(tmp_path: Path) -> None:
    """Run (zero-shot) right on q1-q4. Against "tok" (right on q1, q2, q5): condition_only = q3, q4 = 2,
    ref_only = q5 = 1, n = 6, diff = (4 - 3) / 6 = +16.7 pts, McNemar p = 2 * P(X <= 1 | 3) = 1.
    Against "usd" (right on q3): condition_only = q1, q2, q4 = 3, ref_only = 0, diff = +50.0 pts,
    p = 2 * (1/2)^3 = 0.25, Holm over the two: min(1, 2 * 0.25) = 0.5 and max(0.5, 1) = 1."""
    path = workspace(tmp_path)
    res = api.run(path, run_dir=tmp_path / "run", client_factory=lambda spec: ScriptedChatCompletionClient(answer_easy))
    assert res.state == "complete"
    meta = load_record(tmp_path / "run")
    # run.json records the file as resolved from the scenario's folder, and its digest.
    refs = meta.scenario["references"]
    assert refs["file"] == str((tmp_path / "refs" / "published.jsonl.gz").resolve()) and len(refs["sha256"]) == 64
    rows = res.load().rows
    assert sorted(r.qid for r in rows if r.correct) == ["1", "2", "3", "4"]
    tables = {t.title: t for t in build_tables(rows, meta, n_boot=500)}
    paired = tables["Paired against the published references"]
    cols = paired.columns
    got = {line[cols.index("reference")]: line for line in paired.rows}
    tok, usd = got["gpt-4o/tok (published)"], got["spo-like"]
    for line in (tok, usd):
        assert line[cols.index("condition")] == "zero-shot" and line[cols.index("n")] == 6
    assert (tok[cols.index("condition_only")], tok[cols.index("ref_only")]) == (2, 1)
    assert (usd[cols.index("condition_only")], usd[cols.index("ref_only")]) == (3, 0)
    assert tok[cols.index("diff_pts")] == 16.7 and usd[cols.index("diff_pts")] == 50.0
    assert tok[cols.index("mcnemar_p")] == 1.0 and usd[cols.index("mcnemar_p")] == 0.25
    assert usd[cols.index("p_holm")] == 0.5 and tok[cols.index("p_holm")] == 1.0
    assert usd[cols.index("verdict")] == "no detectable difference"
    # The Table 7-shape rows: the logged outcome, tokens and USD, labelled as not run here.
    pub = tables["Published references (published, not run here; the seed's Table 7 shape)"]
    pc = pub.columns
    rows_by = {line[0]: line for line in pub.rows}
    t, u = rows_by["gpt-4o/tok (published)"], rows_by["spo-like"]
    assert t[pc.index("pooled_%")] == 50.0 and t[pc.index("invalid")] == 1 and t[pc.index("n")] == 6
    assert t[pc.index("tokens/q")] == 150.0 and t[pc.index("sent_usd/q")] == f"{(100 * 2.5 + 50 * 10) / 1e6:.5f}"
    assert u[pc.index("pooled_%")] == round(100 / 6, 1) and u[pc.index("tokens/q")] == "-"
    assert u[pc.index("sent_usd/q")] == "0.01000"
    # The forest plot of the same pairs.
    files = write_reference_forest(rows, meta, ["zero-shot"], tmp_path / "plots", n_boot=200)
    assert {f.name for f in files} == {"forest_references.png", "forest_references.svg"}


def test_pairing_is_per_repeat_and_holm_counts_every_comparison() -> None:
    def row(cond: str, qid: str, rep: int, correct: bool) -> Row:
        return Row(condition=cond, dataset="medqa", qid=qid, repeat=rep, answer="A" if correct else "B", gold="A",
                   correct=correct, invalid=False, error=None, error_kind=None, calls=1, logical_calls=1, tokens=1,
                   latency_s=0.0, summary={}, transcript="")

    rows = [row(c, q, rep, (q in "123") == (c == "a")) for c in "ab" for q in "123456" for rep in (0, 1)]
    ref_rows = [row("ref", q, 0, q in "12") for q in "123456"]
    from medpanel.methods.benchmark.references import Reference

    ref = Reference("ref", "m", "x", ref_rows, missing=0, tokens_logged=False, usd="")
    found = pairings(rows, ["a", "b"], [ref], n_boot=200)
    assert [(p.condition, p.repeat) for p in found] == [("a", 0), ("b", 0), ("a", 1), ("b", 1)]
    assert all(p.result.m == 4 for p in found)
    a0 = found[0].result.contrast
    assert (a0.b_only, a0.a_only) == (1, 0)  # a right on 1-3, ref on 1-2: only q3 is discordant
    b0 = found[1].result.contrast
    assert (b0.b_only, b0.a_only) == (3, 2)  # b right on 4-6, ref on 1-2


# -- refusals: one line, exit 2, before any model call --------------------------------------------


def invoke(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            main(argv)
            rc = 0
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
    return rc, err.getvalue()


def refused(tmp_path: Path, path: Path, *needles: str) -> str:
    rc, err = invoke(["run", str(path), "--run-dir", str(tmp_path / "run")])
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err and not (tmp_path / "run").exists()  # nothing ran, no run directory
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_a_reference_that_is_not_the_runs_questions_is_refused_naming_how_many_matched(tmp_path: Path) -> None:
    # The reference's realidx are 4..9: three of the run's six questions (4, 5, 6) match.
    path = workspace(tmp_path, realidx_offset=3)
    refused(tmp_path, path, "gpt-4o/tok (published) holds 3 of this run's 6 questions by dataset and realidx",
            "references.runs[0]", "allow_missing")
    # None match: the count is 0, and allow_missing does not pair on nothing.
    path = workspace(tmp_path, realidx_offset=100)
    text = path.read_text().replace("  runs:", "  allow_missing: true\n  runs:")
    refused(tmp_path, write(path, text), "holds 0 of this run's 6 questions")


def test_allow_missing_pairs_on_the_questions_both_have(tmp_path: Path) -> None:
    path = workspace(tmp_path, realidx_offset=3)
    write(path, path.read_text().replace("  runs:", "  allow_missing: true\n  runs:"))
    plan = make_plan(load_scenario(path), base_dir=tmp_path, file=str(path))
    assert plan.scenario.references is not None and plan.scenario.references.allow_missing


def test_a_gold_letter_that_differs_is_not_a_match() -> None:
    spec = References(file=str(PUBLISHED), runs=[{"model": "gpt-4o", "method": "zero_shot"}])  # type: ignore[list-item]
    if not PUBLISHED.is_file():
        pytest.skip("the shared MedAgentsBench data is not here")
    items = read_file(PUBLISHED).runs[("gpt-4o", "zero_shot")]
    item = items[("medqa", next(k for d, k in items if d == "medqa"))]
    wrong = "B" if item.gold != "B" else "C"
    q = Question(dataset="medqa", qid=item.realidx, text="x", options={"A": "a", "B": "b", "C": "c"}, gold=(wrong,))
    with pytest.raises(UserError, match=r"holds 0 of this run's 1 questions .*\(1 more share dataset and realidx"):
        resolve(spec, [q], base_dir=None, file="s.yaml")


@pytest.mark.parametrize("case", ["missing", "folder", "not gzip or json", "damaged gzip", "bad line", "no field",
                                  "repeated item", "unknown model", "unknown method", "pinned digest"])
def test_bad_reference_files_are_one_line_and_exit_2(tmp_path: Path, case: str) -> None:
    path = workspace(tmp_path)
    ref = tmp_path / "refs" / "published.jsonl.gz"
    good = gzip.decompress(ref.read_bytes()).decode()
    expect = {"missing": "no such reference file", "folder": "is a folder", "not gzip or json": "neither gzip nor",
              "damaged gzip": "damaged gzip", "bad line": "line 2 is not JSON",
              "no field": "line 1: gold: Field required",
              "repeated item": "line 13 repeats gpt-4o/tok medqa 1", "unknown model": "the file's models are gpt-4o",
              "unknown method": "gpt-4o's methods are tok, usd", "pinned digest": "not the 00"}[case]
    if case == "missing":
        ref.unlink()
    elif case == "folder":
        ref.unlink()
        ref.mkdir()
    elif case == "not gzip or json":
        ref.write_bytes(b"\xff\xfe\x00binary")
    elif case == "damaged gzip":
        ref.write_bytes(gzip.compress(good.encode())[:40])
    elif case == "bad line":
        lines = good.splitlines()
        ref.write_bytes(gzip.compress(("\n".join([lines[0], "{not json", *lines[2:]]) + "\n").encode()))
    elif case == "no field":
        first = json.loads(good.splitlines()[0])
        del first["gold"]
        ref.write_bytes(gzip.compress((json.dumps(first) + "\n" + good).encode()))
    elif case == "repeated item":
        ref.write_bytes(gzip.compress((good + good.splitlines()[0] + "\n").encode()))
    elif case == "unknown model":
        path = write(path, path.read_text().replace("{model: gpt-4o, method: tok}", "{model: gpt-5, method: tok}"))
    elif case == "unknown method":
        path = write(path, path.read_text().replace("method: tok}", "method: cot}"))
    elif case == "pinned digest":
        path = write(path, path.read_text().replace("  runs:", "  sha256: '" + "0" * 64 + "'\n  runs:"))
    line = refused(tmp_path, path, expect)
    assert ("published.jsonl.gz" in line) or ("s.yaml" in line)


def test_a_plain_jsonl_reference_and_an_env_path_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = workspace(tmp_path)
    plain = reference_file(tmp_path / "elsewhere.jsonl", gz=False)
    monkeypatch.setenv("MP_TEST_REFS", str(plain))
    plan = make_plan(load_scenario(path), base_dir=tmp_path, file=str(path))
    assert plan.scenario.references is not None and plan.scenario.references.file == str(plain.resolve())


def test_a_run_without_references_gets_no_reference_tables_and_a_moved_file_gets_a_note(tmp_path: Path) -> None:
    assert reference_tables([], [], run_record({})) == []
    meta = {"scenario": {"references": {"file": str(tmp_path / "gone.jsonl.gz"),
                                        "runs": [{"model": "gpt-4o", "method": "spo"}]}}}
    refs, note = load([], run_record(meta))
    assert refs == [] and "no such reference file" in note
    (table,) = reference_tables([], [], run_record(meta))
    assert "references left out" in table.rows[0][0]


@needs_data
def test_the_shipped_scenario_names_published_runs_that_exist() -> None:
    sc = load_scenario(ROOT / "scenarios" / "published_references.yaml")
    assert sc.references is not None
    ref = read_file((ROOT / "scenarios" / sc.references.file).resolve())
    assert all((r.model, r.method) in ref.runs for r in sc.references.runs)
    counts = Counter(len(ref.runs[(r.model, r.method)]) for r in sc.references.runs)
    assert counts == {862: len(sc.references.runs)}


def test_a_reference_labelled_like_a_condition_is_refused(tmp_path: Path) -> None:
    path = workspace(tmp_path, runs="{model: gpt-4o, method: tok, label: zero-shot}")
    refused(tmp_path, path, "'zero-shot' is also a condition of this scenario", "references.runs[0].label")


def test_the_report_leaves_out_an_item_whose_gold_letter_differs(tmp_path: Path) -> None:
    ref = reference_file(tmp_path / "r.jsonl.gz")  # every item's gold is A
    rows = [Row(condition="c", dataset="medqa", qid=q, repeat=0, answer="A", gold=g, correct=g == "A", invalid=False,
                error=None, error_kind=None, calls=1, logical_calls=1, tokens=1, latency_s=0.0, summary={},
                transcript="") for q, g in (("1", "A"), ("2", "B"), ("3", "A"))]
    meta = {"scenario": {"references": {"file": str(ref), "runs": [{"model": "gpt-4o", "method": "tok"}]}}}
    (loaded,), _ = load(rows, run_record(meta))
    assert sorted(r.qid for r in loaded.rows) == ["1", "3"] and loaded.missing == 1
