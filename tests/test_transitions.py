"""Answer transitions on hand-built transcripts whose trajectories are known: every count below
was worked out by hand from the events."""

from __future__ import annotations

from typing import Any

import pytest

from medpanel.agents.tables import Table
from medpanel.experiments.analysis.trajectory import NO_POSITION, TIE, columns, trajectory
from medpanel.experiments.analysis.transitions import (
    ATTRIBUTION_COLUMNS,
    CELLS,
    attribution_table,
    net_gain,
    transition_table,
)

from .transition_fixtures import (
    bad_turn,
    brief,
    critique,
    doc,
    ev,
    gate,
    recruitment,
    route,
    trajectories,
    turn,
    vote,
)


def rows_of(table: Table) -> list[dict[str, Any]]:
    return [dict(zip(table.columns, r, strict=True)) for r in table.rows]


def pick(table: Table, **where: Any) -> dict[str, Any]:
    found = [r for r in rows_of(table) if all(r[k] == v for k, v in where.items())]
    assert len(found) == 1, (where, rows_of(table))
    return found[0]


# Q1: B,B -> critique -> A,B (tie) -> (weakness-free critique) A,A -> final A.   gold A: wrong->right
Q1 = doc("c1", "q1", [
    turn("a", 1, "B"), turn("b", 1, "B"), critique(1),
    turn("a", 2, "A"), turn("b", 2, "B"), critique(2, weak=False),
    turn("a", 3, "A"), turn("b", 3, "A"), vote("A"),
], "A")
# Q2: b never answers validly until turn 3; a's turn-3 reply is invalid (keeps A) -> tie -> moderator C.
#     gold A: right->wrong
Q2 = doc("c1", "q2", [
    turn("a", 1, "A"), *bad_turn("b", 1),
    turn("a", 2, "A"), *bad_turn("b", 2),
    *bad_turn("a", 3), turn("b", 3, "C"), vote("C", rule="moderator", tied=["A", "C"]),
], "C")
# Q3: a tie at turn 1; a nephrologist joins and breaks it at turn 2.   gold B: invalid->right
Q3 = doc("c1", "q3", [
    turn("a", 1, "B"), turn("b", 1, "C"), recruitment(1, ["Nephrologist"], trigger="self"),
    turn("a", 2, "B"), turn("b", 2, "C"), turn("nephrologist", 2, "B"), vote("B"),
], "B", gold="B", dataset="pubmedqa")
# Q4: the model call failed during turn 2: an error row with one answered turn.
Q4 = doc("c1", "q4", [turn("a", 1, "A"), turn("b", 1, "A"),
                      ev("call", "specialist", "a", "turn", round=1, turn=2)], "", dataset="pubmedqa",
         error="timeout: the endpoint did not answer")
# The c0 partner: nobody moves.
P1 = doc("c0", "q1", [turn("a", 1, "B"), turn("b", 1, "B"), turn("a", 2, "B"), turn("b", 2, "B"), vote("B")], "B")


def test_trajectory_letters_ties_invalid_turns_and_joiners() -> None:
    t1 = trajectory(Q1)
    assert [s.label for s in t1.stages] == ["r1t1", "r1t2", "r1t3", "final"]
    assert [s.majority for s in t1.stages] == ["B", TIE, "A", "A"]
    assert [s.state for s in t1.stages] == ["wrong", "tie", "right", "right"]
    assert [[x.kind for x in s.before] for s in t1.stages] == [[], ["critique"], [], []]
    assert t1.stages[1].before[0].detail == "missing_differential"

    t2 = trajectory(Q2)
    # b has no position until turn 3; a's invalid turn 3 keeps its A (marked *)
    assert [s.letters() for s in t2.stages[:3]] == ["a=A;b=-*", "a=A;b=-*", "a=A*;b=C"]
    assert [s.majority for s in t2.stages] == ["A", "A", TIE, "C"]
    assert t2.stages[2].cells["a"].status == "invalid" and t2.stages[2].cells["a"].position == "A"
    assert [x.show() for x in t2.final.before] == ["moderator[tie-break call]"]

    t3 = trajectory(Q3)
    assert t3.stages[0].cells.keys() == {"a", "b"}  # the recruit is absent before it joins, not invalid
    assert t3.stages[1].joined == ("nephrologist",)
    assert [s.majority for s in t3.stages] == [TIE, "B", "B"]
    assert [x.show() for x in t3.stages[1].before] == ["recruit[self -> Nephrologist]"]

    t4 = trajectory(Q4)
    # a's turn-2 call failed (a keeps its A, b never spoke); the question errored: no final answer
    assert [s.letters() for s in t4.stages[:2]] == ["a=A;b=A", "a=A*;b=A*"]
    assert [s.majority for s in t4.stages] == ["A", "A", NO_POSITION]
    assert t4.final.state == "error" and len(t4.transitions()) == 1  # nothing leads into a final that never was


def test_reask_that_parses_counts_as_the_turns_answer() -> None:
    d = doc("c1", "r", [turn("a", 1, "B"), turn("b", 1, None), turn("b", 1, "A", step="turn:reask"), vote("A")], "A")
    t = trajectory(d)
    assert t.stages[0].letters() == "a=B;b=A" and t.stages[0].majority == TIE


def test_transition_table_exact_counts() -> None:
    ts = trajectories([Q1, Q2, Q3, Q4, P1])
    table = transition_table(ts, ["c0", "c1"], n_boot=500)
    assert table.columns[3:3 + len(CELLS)] == list(CELLS)
    for r in rows_of(table):
        assert sum(r[c] for c in CELLS) == r["n"]  # every row lands in exactly one cell
    med = pick(table, condition="c1", dataset="medqa")
    assert (med["n"], med["wrong->right"], med["right->wrong"], med["net_gain"]) == (2, 1, 1, 0)
    pub = pick(table, condition="c1", dataset="pubmedqa")
    assert (pub["n"], pub["invalid->right"], pub["errors"], pub["net_gain"]) == (2, 1, 1, 0)
    allc1 = pick(table, condition="c1", dataset="overall")
    assert allc1["n"] == 4 and allc1["net_gain_pts"] == 0.0
    # first majority right on Q2 and Q4 (Q1 wrong, Q3 tied); final right on Q1 and Q3 (Q4 errored)
    assert (allc1["first_acc_%"], allc1["final_acc_%"]) == (50.0, 50.0)
    c0 = pick(table, condition="c0", dataset="overall")
    assert (c0["wrong->wrong"], c0["net_gain"], c0["95%_CI_pts"]) == (1, 0, "n/a")  # one question: no interval
    assert rows_of(table)[0]["condition"] == "c0"  # the order given


def test_attribution_table_exact_counts() -> None:
    table = attribution_table(trajectories([Q1, Q2, Q3, Q4]))
    assert table.columns == ATTRIBUTION_COLUMNS
    assert [r["intervention"] for r in rows_of(table)] == ["critique", "recruit", "moderator", "(none)"]
    crit = pick(table, intervention="critique")
    assert (crit["transitions"], crit["questions"], crit["flips"], crit["to_other_wrong"], crit["agent_changes"],
            crit["nothing_changed_q"]) == (1, 1, 1, 1, 1, 0)
    rec = pick(table, intervention="recruit")
    assert (rec["flips"], rec["to_right"], rec["agent_changes"]) == (1, 1, 0)  # a joiner is no agent change
    mod = pick(table, intervention="moderator")
    assert (mod["flips"], mod["to_other_wrong"]) == (1, 1)  # tie -> C, gold A
    none = pick(table, intervention="(none)")
    # Q1: t2->t3 (tie->A), t3->final; Q2: t1->t2, t2->t3 (A->tie); Q3: t2->final. Q4 errored: nothing.
    assert (none["transitions"], none["questions"], none["flips"]) == (5, 3, 2)
    assert (none["to_right"], none["to_wrong"]) == (1, 1)
    # b's first valid letter (Q2 turn 3) and b's move (Q1 turn 3) are the agent changes
    assert none["agent_changes"] == 2
    assert (none["nothing_changed_q"], none["nothing_changed_%"]) == (1, 33.3)  # only Q3


def test_interventions_brief_recipients_focused_round_upfront_and_undelivered() -> None:
    d = doc("routed", "q", [
        brief(0, ["a", "b"], rnd=0, trigger="upfront"),
        turn("a", 1, "B"), turn("b", 1, "B"), critique(1, gap="logical_inconsistency"),
        route(1, "critique_round", "logical_inconsistency"),
        turn("a", 2, "B"), turn("b", 2, "A"), critique(2, gap="insufficient_evidence"), route(2, "retrieve", "x"),
        gate(2, True), brief(2, []),  # searched, but the brief reached nobody
        gate(2, True), brief(2, ["a", "b"], source="clear", route="keep_local",
                             guard={"outcome": "rejected_no_high"}),
        turn("a", 3, "A"), turn("b", 3, "A"),
        vote("A", rule="majority of information blocks", counts={"A": 1, "B": 2}),  # blocks outvoted the count
    ], "A")
    t = trajectory(d)
    assert [x.show() for x in t.stages[0].before] == ["brief[upfront -> a, b]"]
    assert [x.show() for x in t.stages[1].before] == ["critique[logical_inconsistency]",
                                                     "focused_round[logical_inconsistency]"]
    assert [x.show() for x in t.stages[2].before] == [
        "critique[insufficient_evidence]", "clear_verdict[route keep_local, guard rejected_no_high -> a, b]"]
    assert [x.show() for x in t.final.before] == ["moderator[majority of information blocks]"]
    flips = t.flips()
    assert [(f.label, f.before_majority, f.after_majority, f.direction, f.decisive) for f in flips] == [
        ("r1t2", "B", TIE, "to_other_wrong", False), ("r1t3", TIE, "A", "to_right", True)]
    assert flips[1].event_index == 13  # the first turn-3 event: where the question page puts the marker
    table = attribution_table([t])
    up = [r for r in rows_of(table) if r["intervention"] == "brief"]
    assert up == []  # the upfront brief precedes no transition
    plain = dict(d, events=[*d["events"][:-1], vote("A", rule="majority of information blocks", counts={"A": 2})])
    assert trajectory(plain).final.before == []  # the blocks agreed with the raw count: nothing decided


def test_generalist_self_consistency_and_multi_group_stages() -> None:
    gen = doc("gen", "g", [ev("call", "generalist", "generalist", "initial", parsed={"answer": "B"}),
                           critique(0, rnd=0), brief(0, ["generalist"], rnd=0),
                           ev("call", "generalist", "generalist", "reconsider", parsed={"answer": "A"}),
                           ev("decision", "pipeline", "generalist", "final", data={"answer": ["A"]})], "A")
    t = trajectory(gen)
    assert [(s.label, s.majority) for s in t.stages] == [("initial", "B"), ("reconsider", "A"), ("final", "A")]
    assert [x.kind for x in t.stages[1].before] == ["critique", "brief"]

    sc = doc("sc", "s", [ev("call", "sc", "sampler", f"sample_{i}", parsed={"answer": a})
                         for i, a in enumerate("BAAB")] + [ev("vote", "pipeline", "sc", "vote", data={"rule": "x"}),
                                                           ev("decision", "pipeline", "sc", "final", data={})], "A")
    t = trajectory(sc)
    assert [(s.label, s.majority) for s in t.stages] == [("answer", TIE), ("final", "A")]
    assert set(t.stages[0].cells) == {"sample_0", "sample_1", "sample_2", "sample_3"}

    groups = doc("cal", "m", [
        ev("note", "pipeline", "group_1", "group_start"), turn("x", 1, "B"), turn("y", 1, "B"), critique(1),
        brief(1, ["x"]),
        turn("x", 2, "A"), turn("y", 2, "B"), vote("B", rule="moderator"),
        ev("note", "pipeline", "group_2", "group_start"), turn("x", 1, "A"), turn("z", 1, "A"),
        turn("x", 2, "A"), turn("z", 2, "A"), vote("A"),
        vote("A", rule="majority over all groups")], "A")
    t = trajectory(groups)
    assert [s.letters() for s in t.stages[:2]] == ["g1:x=B;g1:y=B;g2:x=A;g2:z=A", "g1:x=A;g1:y=B;g2:x=A;g2:z=A"]
    assert [s.majority for s in t.stages] == [TIE, "A", "A"]
    assert [x.show() for x in t.stages[1].before] == ["critique[g1: missing_differential]",
                                                     "brief[g1: between_gap -> g1:x]"]
    assert t.final.before == []  # group 1's own tie-break is not the question's decision


def test_net_gain_ci_resamples_questions_not_repeats() -> None:
    def gained(qid: str, repeat: int, gain: bool) -> dict:
        ev_ = [turn("a", 1, "B" if gain else "A"), vote("A")]
        return doc("c", qid, ev_, "A", repeat=repeat)

    once = trajectories([gained("q1", 0, True), gained("q2", 0, False), gained("q3", 0, True)])
    twice = trajectories([gained(q, r, g) for q, g in (("q1", True), ("q2", False), ("q3", True)) for r in (0, 1)])
    a, b = net_gain(once, n_boot=2000), net_gain(twice, n_boot=2000)
    assert (a.gain, b.gain) == (2, 4) and a.points == pytest.approx(66.67, abs=0.01) == b.points
    assert (a.ci_low, a.ci_high) == (b.ci_low, b.ci_high)  # a repeat is no new question
    assert a.ci_low < a.points <= a.ci_high <= 100.0
    all_gain = net_gain(trajectories([gained(f"q{i}", 0, True) for i in range(5)]), n_boot=500)
    assert (all_gain.points, all_gain.ci_low, all_gain.ci_high) == (100.0, 100.0, 100.0)


def test_free_text_rows_are_counted_not_scored() -> None:
    d = doc("clear", "f", [ev("call", "candidate", "parametric", "parametric", parsed={"answer": "Graves disease"}),
                           ev("decision", "verifier", "verifier", "decision", data={"answer": []})], "", gold="",
            options={})
    t = trajectory(d)
    assert not t.scored and t.final.state == "unscored"
    table = transition_table([t], n_boot=100)
    assert pick(table, dataset="overall")["free_text"] == 1
    assert attribution_table([t]).rows == []


def test_export_columns_carry_the_trajectory() -> None:
    cols = columns(trajectory(Q2))
    assert cols["trajectory.path"] == "A > A > tie > C"
    assert cols["trajectory.transition"] == "right->wrong"
    assert (cols["trajectory.flips"], cols["trajectory.flip_stage"], cols["trajectory.flip_index"]) == (2, "final", 4)
    assert cols["trajectory.flip_after"] == "moderator[tie-break call]"
    assert cols["trajectory.s03.letters"] == "a=A*;b=C"
    assert cols["trajectory.s04.label"] == "final" and "trajectory.s05.label" not in cols
    quiet = columns(trajectory(P1))
    assert (quiet["trajectory.flips"], quiet["trajectory.flip_stage"], quiet["trajectory.flip_after"]) == (0, "", "")
    err = columns(trajectory(Q4))
    assert err["trajectory.transition"] == "error" and err["trajectory.flip_stage"] == ""
