"""The example methods of examples/: a method of one's own gets the answer transition and
attribution tables by marking its answers with typed acts, and by nothing else.

`second_opinion` names none of the steps the built-in methods use: its stages come from its
`AnswerAt` acts alone, and the same transcripts without those acts have no stages at all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import medpanel
from medpanel.experiments.analysis.trajectory import trajectory

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


@pytest.fixture(scope="module")
def second_opinion(tmp_path_factory: pytest.TempPathFactory) -> medpanel.Run:
    import sys

    sys.path.insert(0, str(EXAMPLES))
    try:
        result = medpanel.run(EXAMPLES / "second_opinion.yaml", model={"backend": "scripted"}, limit=3, workers=1,
                              run_dir=tmp_path_factory.mktemp("so") / "run")
    finally:
        sys.path.remove(str(EXAMPLES))
    assert result.complete, (result.state, result.reason)
    return result.load()


def _docs(run: medpanel.Run) -> list[dict[str, Any]]:
    return [t.model_dump(mode="json") for t in run.transcripts()]


def test_its_stages_are_its_typed_answers(second_opinion: medpanel.Run) -> None:
    docs = _docs(second_opinion)
    assert {d["condition"] for d in docs} == {"x0", "x1"} and len(docs) == 12
    for doc in docs:
        t = trajectory(doc)
        want = ["alone", "final"] if doc["condition"] == "x0" else ["alone", "exchange", "final"]
        assert t.kind == "debate" and [s.label for s in t.stages] == want, doc["condition"]
        assert set(t.stages[0].cells) == {"attending", "colleague"}
        first = {e["agent"]: e["parsed"]["answer"] for e in doc["events"] if e["step"] == "opinion"}
        assert {n: c.position for n, c in t.stages[0].cells.items()} == {n: ",".join(a) for n, a in first.items()}


def test_a_split_settled_by_the_attending_is_a_moderator_intervention(second_opinion: medpanel.Run) -> None:
    splits = 0
    for doc in _docs(second_opinion):
        t = trajectory(doc)
        last = t.stages[-2]
        split = len({c.position for c in last.cells.values()}) > 1
        splits += split
        kinds = [(i.kind, i.detail) for i in t.stages[-1].before]
        assert kinds == ([("moderator", "attending on a split")] if split else []), doc["qid"]
    assert splits, "the scripted run has no split to settle: the test shows nothing"


def test_without_its_acts_the_same_transcripts_have_no_stages(second_opinion: medpanel.Run) -> None:
    for doc in _docs(second_opinion):
        for e in doc["events"]:
            e["act"] = None
        t = trajectory(doc)
        assert t.kind == "empty" and [s.label for s in t.stages] == ["final"]


def test_the_report_has_its_transition_and_attribution_tables(second_opinion: medpanel.Run) -> None:
    tables = second_opinion.tables()
    rows = {(r[0], r[1]): r for r in tables["answer_transitions"].rows}
    assert rows[("x0", "overall")][2] == 6 and rows[("x1", "overall")][2] == 6
    first_acc = tables["answer_transitions"].columns.index("first_acc_%")
    assert all(isinstance(r[first_acc], float) for r in rows.values())
    flips = {(r[0], r[1]) for r in tables["what_came_before_each_flip"].rows}
    assert ("x1", "moderator") in flips or ("x0", "moderator") in flips
