"""AfriMed-QA's several-answer items keep their whole answer set, are asked select-all and scored as
exact sets, as NEJM-QA's are, with any-of named beside it in Table 8. The file is in the publisher's
CSV schema (intron-innovation/AfriMed-QA data/sample_10.csv: its 30 columns, `answer_options` JSON
text keyed option1..option5, `correct_answer` the key or several joined by commas, an unused fifth
slot written `n/a`); the questions are the team's own, not the publisher's, the golds worked out by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from medpanel.agents.prompting import format_question
from medpanel.methods.clear.paper_tables import table4, table8

from .test_clear_benchmark_files import AFRI_HEADER, _afri, _csv, _load
from .test_clear_paper_tables import row

pytest.importorskip("datasets", reason="the [hf] extra is not installed")


def _file(tmp: Path) -> Path:
    five = {"option1": "Ceftriaxone", "option2": "Amoxicillin", "option3": "Artemether-lumefantrine",
            "option4": "Metronidazole", "option5": "Oral rehydration salts"}
    return _csv(tmp / "afrimedqa_v2.csv", AFRI_HEADER, [
        _afri("a1", "mcq", "First-line treatment of uncomplicated falciparum malaria?", five, "option3"),
        _afri("a2", "mcq", "Which of these drugs inhibit angiotensin-converting enzyme?", {
            "option1": "Lisinopril", "option2": "Losartan, an angiotensin receptor blocker",
            "option3": "Enalapril", "option4": "Ramipril",
            "option5": "Captopril, the first of the class"}, "option1,option3,option4,option5"),
        _afri("a3", "saq", "Describe the management of severe malaria.", "", ""),
        _afri("a4", "mcq", "A deep dog bite on a child's forearm from an unvaccinated stray: what else is needed?", {
            "option1": "oral paracetamol", "option2": "rabies post-exposure prophylaxis", "option3": "iron supplements",
            "option4": "vitamin D", "option5": "n/a"}, "option2"),
        _afri("a5", "mcq", "Which are beta-lactams?", five, "option1, option2")])


def test_several_answer_items_keep_their_set_and_every_item_is_asked_select_all(tmp_path: Path) -> None:
    qs = _load(_file(tmp_path), "afrimedqa")
    # by hand: option3 -> C; option1,3,4,5 -> A,C,D,E; the saq row is not read; option2 -> B; "option1, option2"
    assert [(q.qid, q.gold) for q in qs] == [("a1", ("C",)), ("a2", ("A", "C", "D", "E")), ("a4", ("B",)),
                                             ("a5", ("A", "B"))]
    # The publisher marks no item as several-answer, so every one is asked select-all: telling the
    # several-answer ones apart would tell the agents something of the answer.
    assert all(q.multi_answer for q in qs)
    assert all("Select ALL correct options." in format_question(q) for q in qs)
    assert list(qs[2].options) == ["A", "B", "C", "D"]  # the `n/a` fifth slot is no option (the publisher drops it)
    assert qs[1].options["E"] == "Captopril, the first of the class"


def test_table_8_scores_afrimedqa_as_exact_sets_with_any_of_named_beside() -> None:
    rows = [row("clear-default", "afrimedqa", "a1", "C", "C"),
            row("clear-default", "afrimedqa", "a2", "A,C,D,E", "A,C,D,E"),
            row("clear-default", "afrimedqa", "a4", "B,C", "B"),       # a correct option, not the set
            row("clear-default", "afrimedqa", "a5", "A", "A,B"),       # part of the set
            row("direct", "afrimedqa", "a1", "D", "C"),
            row("direct", "afrimedqa", "a2", "C", "A,C,D,E"),
            row("direct", "afrimedqa", "a4", "B", "B"),
            row("direct", "afrimedqa", "a5", "B,A", "A,B"),              # the set, in another order
            row("clear-default", "medbullets", "m1", "A", "A"), row("direct", "medbullets", "m1", "B", "A")]
    t = table8(rows, ["direct", "clear-default"])
    assert t is not None and t.columns == ["method", "medbullets", "afrimedqa", "afrimedqa_any_of", "mean", "n"]
    by = {r[0]: r[1:] for r in t.rows}
    # CLEAR: exact 2/4 = 50.0, any-of 4/4 = 100.0; the mean is over the exact columns: (100 + 50) / 2
    assert by["CLEAR"] == [100.0, 50.0, 100.0, 75.0, 5]
    # Direct: exact a4, a5 = 50.0; any-of a2, a4, a5 = 75.0; mean (0 + 50) / 2
    assert by["Direct (parametric only)"] == [0.0, 50.0, 75.0, 25.0, 5]
    assert "afrimedqa_any_of credits any correct option" in (t.note or "")
    t4 = table4(rows, ["direct", "clear-default"])
    assert t4 is not None and "afrimedqa_any_of" not in t4.columns
