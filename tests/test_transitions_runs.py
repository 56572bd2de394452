"""Answer transitions on real scripted runs: a c/r 2x2 panel grid through the runner and
the store, whose agents change their letters only after they have seen the Challenger's critique
(traced by a token in their requests), and CLEAR runs for the pathway and guard/audit tables."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from medpanel.agents.model.scripted import ScriptedChatCompletionClient, ScriptedRequest
from medpanel.agents.types import Question
from medpanel.experiments.analysis.digest import digest
from medpanel.experiments.analysis.trajectory import columns
from medpanel.experiments.analysis.transitions import (
    CELLS,
    attribution_table,
    transition_table,
    transition_tables,
)
from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.scenario.plan import Plan
from medpanel.experiments.run.scenario.scenario import Scenario
from medpanel.experiments.run.store.rundir import load_run
from medpanel.methods.clear.transitions import pathway_table, ruling_table
from medpanel.methods.panel.roles.challenger import Critique
from medpanel.methods.panel.roles.recruiter import RecruitCheck
from medpanel.methods.panel.roles.selector import TeamChoice

from .test_clear import Q3, Script, docs, installer, judgement, run_clear, verdict
from .test_transitions import pick, rows_of
from .transition_fixtures import stored_digests, stored_docs, trajectories

TOKEN = "CRIT-7Q2Z"
"""Only the Challenger writes it: an agent whose request carries it has seen the critique."""
OPTS = {"A": "first", "B": "second", "C": "third", "D": "fourth"}
QUESTIONS = [Question(dataset="medqa", qid="alpha", text="Case alpha: which option?", options=OPTS, gold=("A",)),
             Question(dataset="medqa", qid="beta", text="Case beta: which option?", options=OPTS, gold=("B",)),
             Question(dataset="pubmedqa", qid="gamma", text="Case gamma: which option?", options=OPTS, gold=("A",))]
AFTER_CRITIQUE = {"alpha": "A", "beta": "C", "gamma": "A"}
"""Every agent answers B until it has seen a critique, then this: alpha and gamma turn right, beta wrong."""


def respond(r: ScriptedRequest) -> Any:
    seen = json.dumps(r.messages)
    if r.model is Critique:
        return {"material_weakness": True, "gap_type": "missing_differential",
                "challenge": f"{TOKEN}: the differential leaves out a cause."}
    if r.model is RecruitCheck:
        return {"needed": True, "specialty": "Nephrologist", "reason": "renal causes"}
    if r.model is TeamChoice:
        roles = ["Nephrologist"] if r.tag.step.startswith("recruit") else ["Cardiologist", "Neurologist"]
        return {"specialists": [{"role": x, "expertise": "x"} for x in roles]}
    qid = next(q for q in AFTER_CRITIQUE if f"Case {q}" in seen)
    return {"reasoning": "weighed the options", "answer": AFTER_CRITIQUE[qid] if TOKEN in seen else "B"}


@pytest.fixture(scope="module")
def grid_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    scenario = Scenario(name="flips", pipeline="panel", flags={"c": [0, 1], "r": [0, 1]},
                        settings={"rounds": 1, "turns_per_round": 3}, model={"backend": "scripted"},
                        run={"workers": 2})
    plan = Plan(scenario=scenario, conditions=scenario.conditions(), questions=QUESTIONS, repeats=1, shard_size=4)
    runner = Runner.create(plan, run_dir=tmp_path_factory.mktemp("transitions") / "flips")
    runner.client_factory = lambda spec: ScriptedChatCompletionClient(respond)
    assert runner.run(install_signals=False)["state"] == "complete"
    return runner.run_dir


@pytest.fixture(scope="module")
def grid(grid_dir: Path) -> list[dict[str, Any]]:
    data = load_run(grid_dir)
    out = [data.transcript(r) for r in data.rows]
    assert all(d is not None for d in out)
    return [d for d in out if d is not None]


def test_grid_transition_table(grid: list[dict[str, Any]]) -> None:
    table = transition_table(trajectories(grid), ["c0r0", "c0r1", "c1r0", "c1r1"], n_boot=500)
    for cond in ("c0r0", "c0r1"):  # nobody ever sees a critique: nobody moves
        r = pick(table, condition=cond, dataset="overall")
        assert (r["n"], r["right->right"], r["wrong->wrong"], r["net_gain"]) == (3, 1, 2, 0)
    for cond in ("c1r0", "c1r1"):
        r = pick(table, condition=cond, dataset="overall")
        assert (r["n"], r["wrong->right"], r["right->wrong"], r["net_gain"], r["net_gain_pts"]) == (3, 2, 1, 1, 33.3)
        assert (r["first_acc_%"], r["final_acc_%"]) == (33.3, 66.7)
        med = pick(table, condition=cond, dataset="medqa")
        assert (med["wrong->right"], med["right->wrong"], med["net_gain"]) == (1, 1, 0)


def test_grid_attribution_follows_the_critique(grid: list[dict[str, Any]]) -> None:
    table = attribution_table(trajectories(grid), ["c0r0", "c0r1", "c1r0", "c1r1"])
    crit = pick(table, condition="c1r0", intervention="critique")
    # before turns 2 and 3 of each question; the turn-2 flips: alpha and gamma right, beta wrong
    assert (crit["transitions"], crit["questions"], crit["flips"], crit["to_right"], crit["to_wrong"],
            crit["agent_changes"], crit["nothing_changed_q"]) == (6, 3, 3, 2, 1, 6, 0)
    rec0 = pick(table, condition="c0r1", intervention="recruit")  # the recruit joins, sees no critique
    assert (rec0["transitions"], rec0["flips"], rec0["nothing_changed_%"]) == (3, 0, 100.0)
    rec1 = pick(table, condition="c1r1", intervention="recruit")  # it came with the critique: same flips
    assert (rec1["transitions"], rec1["flips"], rec1["to_right"], rec1["to_wrong"]) == (3, 3, 2, 1)
    none = pick(table, condition="c1r0", intervention="(none)")  # last turn -> final vote
    assert (none["transitions"], none["flips"], none["nothing_changed_q"]) == (3, 0, 3)
    assert not [r for r in rows_of(table) if r["condition"].startswith("c0") and r["intervention"] == "critique"]


def test_grid_tables_agree_with_per_question_trajectories(grid: list[dict[str, Any]]) -> None:
    ts = trajectories(grid)
    table = transition_table(ts, n_boot=200)
    for cond in ("c0r0", "c0r1", "c1r0", "c1r1"):
        exported = Counter(columns(t)["trajectory.transition"] for t in ts if t.condition == cond)
        row = pick(table, condition=cond, dataset="overall")
        assert {c: row[c] for c in CELLS if row[c]} == {k.replace("error", "errors"): v for k, v in exported.items()}
    for d, t in zip(grid, ts, strict=True):
        # the letters of each stage are the parsed answers of that turn's calls, read straight off the events
        by_turn: dict[int, dict[str, str]] = {}
        for e in d["events"]:
            if e["kind"] == "call" and e["step"] == "turn":
                by_turn.setdefault(e["turn"], {})[e["agent"]] = e["parsed"]["answer"]
        cols = columns(t)
        for turn, letters in by_turn.items():
            assert cols[f"trajectory.s{turn:02d}.letters"] == ";".join(f"{a}={x}" for a, x in letters.items())
        if d["condition"].startswith("c1"):
            assert cols["trajectory.flip_stage"] == "r1t2" and "critique[missing_differential]" in cols[
                "trajectory.flip_after"]
            if d["condition"] == "c1r1":
                assert "recruit[challenger -> Nephrologist]" in cols["trajectory.flip_after"]
                assert t.stages[1].joined == ("nephrologist",)
        else:
            assert cols["trajectory.flips"] == 0


def test_report_tables_count_a_row_whose_transcript_is_missing(grid_dir: Path) -> None:
    data = load_run(grid_dir)
    lost = next(r for r in data.rows if r.condition == "c1r0" and r.qid == "alpha")
    digests = [digest(r, None if r is lost else data.transcript(r)) for r in data.rows]
    tables = transition_tables(digests, data.conditions, n_boot=200)
    assert [t.title for t in tables] == ["Answer transitions (first-turn majority -> final)",
                                         "What came before each flip (association, not causation)"]
    row = pick(tables[0], condition="c1r0", dataset="overall")
    # alpha's wrong->right is now invalid->right (no events to read), still one of the 3 rows
    assert (row["n"], row["wrong->right"], row["invalid->right"], row["right->wrong"]) == (3, 1, 1, 1)


# -- CLEAR: pathways against the final answer, guard and audit by correctness -------------------


def test_clear_pathways_guard_and_audit_by_correctness(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    install = installer(monkeypatch)
    cases = [
        # (qid, gold, script, dynamic searches): each adjudication's path is fixed by the script
        ("granted_right", "B", Script(p="A", lc="A", d="B", verify=verdict("accept_dynamic", "B")),
         [docs(high=1), docs(high=1)]),
        ("granted_wrong", "A", Script(p="A", lc="A", d="B", verify=verdict("accept_dynamic", "B")),
         [docs(high=1), docs(high=1)]),
        ("no_high", "B", Script(p="A", lc="A", d="B", verify=verdict("accept_dynamic", "B")), [docs(low=2)]),
        ("reopened", "C", Script(p="A", lc="A", d="C", verify=verdict("consensus", "A")),
         [docs(low=1), docs(high=1)]),
        ("kept", "A", Script(p="A", lc="A", d="C", verify=verdict("consensus", "A"),
                             judge=judgement(supports_challenger=False)), [docs(low=1), docs(high=1)]),
        ("local_right", "D", Script(p="A", lc="D", d="B", verify=verdict("keep_parametric", "A")), [docs(low=1)]),
    ]
    results = []
    for qid, gold, script, dyn in cases:
        install(dyn)
        q = Q3.model_copy(update={"qid": qid, "gold": (gold,)})
        results.append((run_clear(q, script).model_copy(update={"condition": "clear-default"}), q))
    stored = stored_docs(results, tmp_path / "run")
    by_qid = {d["question"]["qid"]: d for d in stored}
    assert [by_qid[q]["answer"] for q, *_ in cases] == [["B"], ["B"], ["A"], ["C"], ["A"], ["A"]]

    digests = stored_digests(tmp_path / "run")
    paths = pathway_table(digests)
    assert paths is not None
    par = pick(paths, pathway="parametric")
    # parametric A everywhere: agreed on no_high, kept, local_right; overruled on the other three:
    # granted_right (A wrong, final B right), granted_wrong (A right, final wrong), reopened (A wrong, C right)
    assert (par["n"], par["valid"], par["right"], par["agreed_with_final"], par["overruled"]) == (6, 6, 2, 3, 3)
    assert (par["overruled_right"], par["overruled_to_right"], par["overruled_both_wrong"]) == (1, 2, 0)
    loc = pick(paths, pathway="local")
    assert (loc["right"], loc["overruled"], loc["overruled_right"]) == (3, 4, 2)  # local_right: D overruled by A
    dyn = pick(paths, pathway="dynamic")
    assert (dyn["right"], dyn["agreed_with_final"], dyn["overruled_right"]) == (3, 3, 1)  # no_high: B was right
    assert par["final_right"] == 3

    rulings = ruling_table(digests)
    assert rulings is not None
    granted = pick(rulings, mechanism="guard", outcome="granted")
    assert (granted["questions"], granted["final_right"], granted["default_right"], granted["challenger_right"]) == (
        2, 1, 1, 1)
    missed = pick(rulings, mechanism="guard", outcome="rejected_no_high")
    assert (missed["questions"], missed["final_wrong"], missed["challenger_right"]) == (1, 1, 1)
    reopened = pick(rulings, mechanism="audit", outcome="reopened")
    assert (reopened["questions"], reopened["final_right"], reopened["challenger_right"]) == (1, 1, 1)
    kept = pick(rulings, mechanism="audit", outcome="kept_not_supported")
    assert (kept["final_right"], kept["default_right"], kept["challenger_right"]) == (1, 1, 0)
    quiet = pick(rulings, mechanism="guard", outcome="not_triggered")
    assert (quiet["questions"], quiet["default_right"]) == (3, "-")

    # the same runs' trajectories: pathways -> verdict -> final, the guard's ruling before the final
    ts = {t.qid: t for t in trajectories(stored)}
    assert columns(ts["granted_wrong"])["trajectory.path"] == "A > B > B"
    assert columns(ts["granted_wrong"])["trajectory.flip_after"] == "clear_verdict[route accept_dynamic]"
    assert columns(ts["reopened"])["trajectory.flip_after"] == "follow_up[audit]; audit[reopened]"
    assert columns(ts["no_high"])["trajectory.path"] == "A > B > A"
    assert [t.title for t in transition_tables(digests, n_boot=100)][2:] == [
        "CLEAR pathways against the final answer", "CLEAR guard and audit outcomes by correctness"]
    table = transition_table(list(ts.values()), n_boot=200)
    overall = pick(table, dataset="overall")
    assert (overall["right->wrong"], overall["wrong->right"], overall["right->right"], overall["wrong->wrong"]) == (
        1, 2, 1, 1)
    assert overall["invalid->wrong"] == 1  # local_right: a three-way split has no majority


# -- briefs: who the trajectory says received one is who saw its token --------------------------

BRIEF_TOKEN = "BRIEF-5K8W"


@pytest.fixture()
def corpus(tmp_path: Path) -> str:
    from medpanel.retrieval.corpus import ingest

    from .test_knowledge import DOCS

    f = tmp_path / "docs.jsonl"
    f.write_text("\n".join(json.dumps(d) for d in DOCS), encoding="utf-8")
    ingest([f], "unit", progress=False)
    return "unit"


def brief_respond(r: ScriptedRequest) -> Any:
    seen = json.dumps(r.messages)
    if r.tag.role == "challenger":
        return {"material_weakness": True, "gap_type": "insufficient_evidence",
                "challenge": "The first test is unclear."}
    if r.tag.role == "knowledge_gate":
        return {"retrieve": True, "knowledge_gap": "first test in chest pain", "query": "chest pain ECG first step"}
    if r.tag.role == "curator":
        return {"points": [{"point": f"{BRIEF_TOKEN} fact {i}", "sources": [1]} for i in range(5)]}
    if r.tag.step.startswith("select_specialists"):
        return {"specialists": [{"role": "Cardiologist", "expertise": "heart"},
                                {"role": "Emergency physician", "expertise": "ER"}]}
    if r.tag.step.startswith("recruit_check"):
        return {"needed": True, "specialty": "Radiologist", "reason": "imaging"}
    if r.tag.step.startswith("recruit"):
        return {"specialists": [{"role": "Radiologist", "expertise": "imaging"}]}
    return {"reasoning": "weighed it", "answer": "A" if BRIEF_TOKEN in seen else "B"}


@pytest.mark.parametrize("variant", [None, "ind"])
def test_brief_recipients_are_the_agents_that_saw_it(variant: str | None, corpus: str, tmp_path: Path) -> None:
    from .scripted_helpers import Q4, cond, run

    c = cond("panel", c=1, r=1, k=1)
    c = c.model_copy(update={"flags": {**c.flags, **({"variant": variant} if variant else {})},
                             "settings": {"rounds": 1, "turns_per_round": 3, "corpus": corpus, "k": 3,
                                          "max_recruit_per_turn": 1}})
    result, client = run(c, Q4, brief_respond)
    (d,) = stored_docs([(result, Q4)], tmp_path / "run")
    t = trajectories([d])[0]
    briefs = [x for s in t.stages for x in s.before if x.kind == "brief"]
    assert len(briefs) == 2  # after turns 1 and 2
    first = briefs[0]
    saw = {r.tag.agent for r in client.requests[1:] if BRIEF_TOKEN in json.dumps(r.messages)
           and r.tag.role == "specialist"}
    assert set(first.to) == saw  # every recipient saw the token, and nobody else did
    assert ("radiologist" in first.to) is (variant is None)  # -ind withholds the brief from its recruit
    flip = t.flips()[0]
    assert flip.label == "r1t2" and flip.direction == "to_right"
    assert [x.kind for x in flip.interventions] == ["critique", "brief", "recruit"]
    if variant == "ind":
        assert "radiologist" not in t.stages[1].cells  # an assessor takes no turns
        # the moderator weighs the assessor's B (it never saw the brief) against the panel's A and picks B
        last = t.flips()[-1]
        assert (last.label, last.direction, [x.show() for x in last.interventions]) == (
            "final", "to_wrong", ["moderator[auxiliary: moderator]"])
        assert last.decisive and d["answer"] == ["B"]
    else:
        assert t.stages[1].joined == ("radiologist",) and flip.decisive and d["answer"] == ["A"]
