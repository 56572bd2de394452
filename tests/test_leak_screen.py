"""The Challenger's answer screen on the phrasings medical questions ask for: the team's labelled set
(benchmarks/leak_screen.yaml) at its targets, the screen's families one by one, its redaction, and a
screened critique counted in the result and the report's protocol line."""

from __future__ import annotations

from typing import Any

from benchmarks.bench_leak_screen import FALSE_POSITIVE_TARGET, RECALL_TARGET, SETS, figures, load
from medpanel.agents.model.scripted import ScriptedRequest
from medpanel.agents.types import Question
from medpanel.experiments.analysis.protocol import protocol_line
from medpanel.experiments.run.store.rows import Row
from medpanel.methods.panel.protocol import screened_critiques
from medpanel.methods.panel.roles.challenger import Critique, leaks, screen

from .scripted_helpers import cond, run

THYROID = {"A": "Graves disease", "B": "Toxic adenoma", "C": "Painless thyroiditis", "D": "Subacute thyroiditis",
           "E": "Factitious thyrotoxicosis"}
UTI = {"A": "Oral nitrofurantoin", "B": "Oral ciprofloxacin (Cipro)", "C": "Intravenous ceftriaxone",
       "D": "Oral amoxicillin", "E": "Fosfomycin"}
VESSEL = {"A": "Left anterior descending artery", "B": "Left circumflex artery", "C": "Right coronary artery",
          "D": "Posterior descending artery"}
BLOOD = {"A": "O", "B": "A", "C": "B", "D": "AB"}
RASH10 = dict(zip("ABCDEFGHIJ", ["Psoriasis", "Atopic dermatitis", "Seborrhoeic dermatitis", "Tinea corporis",
                                 "Pityriasis rosea", "Lichen planus", "Secondary syphilis", "Contact dermatitis",
                                 "Nummular eczema", "Drug eruption"], strict=True))


def test_the_labelled_set_reaches_the_targets() -> None:
    items = load(SETS[0])
    assert len(items) >= 150 and len({i.set for i in items}) >= 15
    assert abs(sum(i.leak for i in items) - len(items) / 2) <= len(items) * 0.05  # half leaks, half clean
    assert any(len(i.options) == 10 for i in items)  # the screen follows whatever letters a question has
    fig = figures(items)
    wrong = "\n".join(f"{'missed' if m.leak else 'flagged'}: {m.text}" for m in fig.misses)
    assert fig.recall >= RECALL_TARGET, wrong
    assert fig.false_positive <= FALSE_POSITIVE_TARGET, wrong


def test_the_stems_own_ask_answered_leaks() -> None:
    assert leaks("The most likely diagnosis is Graves disease.", THYROID)
    assert leaks("The most appropriate treatment in this patient is oral ciprofloxacin (Cipro).", UTI)
    assert leaks("The best next step is oral nitrofurantoin.", UTI)
    assert leaks("The most appropriate pharmacotherapy is fosfomycin.", UTI)
    assert leaks("The affected vessel is the left circumflex artery.", VESSEL)
    assert leaks("The culprit is the circumflex.", VESSEL)  # a distinctive part of the option's text
    assert leaks("Cipro is the drug of choice here.", UTI)


def test_orders_and_recommendations_leak() -> None:
    for text in ("Start nitrofurantoin.", "She should receive intravenous ceftriaxone.", "Prescribe fosfomycin.",
                 "Switch to B.", "Why not just give fosfomycin?", "Put her on oral amoxicillin."):
        assert leaks(text, UTI), text


def test_bare_conclusions_leak() -> None:
    for text in ("Clearly C.", "E.", "This is subacute thyroiditis.", "Graves disease, given the exophthalmos.",
                 "Subacute thyroiditis explains everything."):
        assert leaks(text, THYROID), text


def test_letter_valued_options_leak_and_the_article_is_no_option() -> None:
    assert leaks("The patient's blood type is AB.", BLOOD)
    assert leaks("Her blood type is A.", BLOOD)
    assert leaks("She must be group O.", BLOOD)
    assert not leaks("A transfusion reaction would not explain the antibody screen.", BLOOD)
    assert not leaks("Is a weak D variant possible here?", BLOOD)
    assert not leaks("Both anti-A and anti-B were detected, which nobody explained.", BLOOD)


def test_any_letter_of_the_option_set_counts_and_only_those() -> None:
    assert leaks("The most likely diagnosis is H.", RASH10)
    assert leaks("I.", RASH10) and leaks("Choose J.", RASH10)
    assert not leaks("I would ask what the palms and soles showed.", RASH10)  # the pronoun
    assert not leaks("Choose K.", RASH10)  # no option K
    assert not leaks("The most likely diagnosis is H.", THYROID)  # five options: H is no letter


def test_a_targeted_challenge_passes_where_a_verdict_on_the_same_option_leaks() -> None:
    pairs = [  # (clean challenge, the verdict beside it)
        ("The radioiodine uptake was never discussed.", "The low radioiodine uptake points to painless thyroiditis."),
        ("Which finding separates Graves disease from painless thyroiditis?", "The answer is painless thyroiditis."),
        ("How does the proposed mechanism explain a non-tender gland?", "This is classic painless thyroiditis."),
        ("Nobody excluded factitious thyrotoxicosis, yet thyroglobulin was not measured.",
         "Factitious thyrotoxicosis is the best fit."),
        ("The team settled on Graves disease without the uptake scan.", "The diagnosis here is Graves' disease."),
    ]
    for clean, verdict in pairs:
        assert not leaks(clean, THYROID), clean
        assert leaks(verdict, THYROID), verdict
    assert not leaks("Was a fluoroquinolone's tendon risk weighed for a 78-year-old?", UTI)  # a drug class
    assert leaks("A fluoroquinolone such as ciprofloxacin is the right choice.", UTI)


def test_the_screen_drops_the_leaking_sentence_and_keeps_the_challenge() -> None:
    text = ("The team never weighed the uptake scan. The most likely diagnosis is Graves disease. "
            "Which finding separates thyroiditis from Graves disease?")
    critique = Critique(material_weakness=True, gap_type="missing_differential", challenge=text)
    screened, redacted = screen(critique, THYROID)
    assert redacted
    assert screened.challenge == ("The team never weighed the uptake scan. Which finding separates thyroiditis "
                                  "from Graves disease?")


def test_a_critique_in_the_stems_phrasing_is_reasked_and_counted() -> None:
    q = Question(dataset="unit", qid="u1", text="A woman has dysuria and flank pain. Most appropriate treatment?",
                 options=UTI, gold=("C",))
    leaking = "The most appropriate treatment in this patient is oral ciprofloxacin (Cipro)."
    replies = iter([leaking, "REWRITE: was the flank pain weighed?"])

    def responder(r: ScriptedRequest) -> Any:
        if r.tag.role == "challenger":
            return {"material_weakness": True, "gap_type": "insufficient_evidence", "challenge": next(replies)}
        return {"reasoning": "reasons", "answer": "A"}

    result, client = run(cond("generalist", c=1), q, responder)
    first = next(e for e in result.events if e.role == "challenger")
    assert first.data["answer_leak"] is True and first.data["rewrite_requested"] is True
    assert [e.step for e in result.events if e.role == "challenger"] == ["critique", "critique:rewrite"]
    assert "ciprofloxacin (Cipro)" not in client.requests[-1].last and "REWRITE" in client.requests[-1].last
    assert result.summary["critiques_screened"] == 1


def test_the_panel_screens_its_critiques_through_the_same_screen() -> None:
    q = Question(dataset="unit", qid="t1", text="Palpitations, weight loss and low uptake. Most likely diagnosis?",
                 options=THYROID, gold=("C",))

    def responder(r: ScriptedRequest) -> Any:
        if r.tag.step.startswith("select_specialists"):
            return {"specialists": [{"role": "Endocrinologist", "expertise": "thyroid"},
                                    {"role": "Nuclear physician", "expertise": "uptake"}]}
        if r.tag.role == "challenger":
            return {"material_weakness": True, "gap_type": "missing_differential",
                    "challenge": "The uptake was ignored. The most likely diagnosis is painless thyroiditis."}
        return {"reasoning": f"{r.tag.agent} reasons", "answer": "A"}

    condition = cond("panel", c=1, r=0)
    condition = condition.model_copy(update={"settings": {"rounds": 1, "turns_per_round": 2}})
    result, client = run(condition, q, responder)
    reviews = [e for e in result.events if e.role == "challenger" and e.step == "critique"]
    assert reviews and all(e.data.get("answer_leak") for e in reviews)
    assert result.summary["critiques_screened"] == len(reviews)
    later = [r.last for r in client.requests if r.tag.role == "specialist"]
    assert any("The uptake was ignored." in text for text in later)
    assert not any("most likely diagnosis is painless thyroiditis" in text for text in later)


def _row(condition: str, qid: str, screened: int = 0, error: str | None = None) -> Row:
    return Row(condition=condition, dataset="d", qid=qid, repeat=0, answer="A", gold="A", correct=True,
               invalid=False, error=error, error_kind=None, calls=1, logical_calls=1, tokens=1, latency_s=0.0,
               summary={"critiques_screened": screened} if screened else {}, transcript="")


def test_the_protocol_line_gives_each_conditions_screened_rate() -> None:
    # c1: 8 questions, critiques screened on two (1 and 2 critiques), one error row counted as a question;
    # c0 has no Challenger: not listed. By hand: 2/8 = 25.0%, 3 critiques.
    rows = [_row("c0", f"q{i}") for i in range(8)]
    rows += [_row("c1", "q0", 1), _row("c1", "q1", 2)] + [_row("c1", f"q{i}") for i in range(2, 7)]
    rows.append(_row("c1", "q7", error="timeout"))
    assert screened_critiques(rows, ["c0", "c1"]) == ("Challenger critiques screened for a named answer: "
                                                     "c1 2/8 questions (25.0%, 3 critiques)")
    line = protocol_line({"name": "s", "pipeline": "generalist", "flags": {"c": [0, 1]}}, rows, ["c0", "c1"])
    assert line.endswith("; Challenger critiques screened for a named answer: c1 2/8 questions (25.0%, 3 critiques)")
    clean = [_row("c1", f"q{i}") for i in range(4)]
    assert "screened" not in protocol_line({"name": "s", "pipeline": "generalist"}, clean)
