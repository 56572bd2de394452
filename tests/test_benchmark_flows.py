"""The benchmark context's multi-call methods as MedAgentsBench's code runs them, traced on the scripted
model: who sees what (unique tokens from one reply, looked for in later requests) and how many calls
each stage makes. Every expected number is counted by hand from the benchmark's code, fork
`xk-huang/medagents-benchmark` @56ca11e, folder `baselines/MedPrompt/`; each test names the file and
lines it counts from."""

from __future__ import annotations

import json
from typing import Any

from medpanel.agents.model.scripted import ScriptedRequest, synthesize
from medpanel.agents.model.structured import BRIEF_REASONING, FREE_REASONING
from medpanel.agents.types import Condition

from .scripted_helpers import Q4, run

OPTION_TEXTS = ("Discharge", "Antibiotics", "MRI")  # Q4's options; none is in its stem or in a scripted reply


def method(name: str, **settings: Any) -> Condition:
    return Condition(slug=name, pipeline="benchmark", flags={"variant": name}, settings=settings)


def steps(client: Any) -> list[str]:
    return [r.tag.step for r in client.requests]


def text(r: ScriptedRequest) -> str:
    return "\n".join(str(m["content"]) for m in r.messages)


def stateless(r: ScriptedRequest) -> bool:
    """One user turn and nothing else: no system message, no history (the benchmark's `call_llm`)."""
    return len(r.messages) == 1 and r.messages[0]["role"] == "user"


# -- medprompt: medprompt.py -------------------------------------------------------------------------------


def generating(letters: dict[int, str], reasoning: dict[int, str], pick: Any) -> Any:
    def respond(r: ScriptedRequest) -> Any:
        step = r.tag.step
        if step.startswith("generate_"):
            i = int(step.split("_")[1])
            return {"reasoning": reasoning[i], "answer": letters[i]}
        return {"choice": pick(r)}
    return respond


def shown_solutions(r: ScriptedRequest) -> list[str]:
    """The solutions a choosing call lists, in its order (each block opens with its number)."""
    body = r.last.split("written for it:")[1].split("Weigh these")[0]
    return [block for block in body.split("\n\n") if block.strip()]


def test_medprompt_generates_three_answers_then_three_calls_choose_among_them() -> None:
    """medprompt.py lines 177-198: `num_rounds` = 3 generations of one prompt (build_few_shot_prompt,
    lines 118-147: each kNN example as "Q:" and "A:" answer text, no options; the new question with its
    options, unshuffled); lines 204-236: `vote_count` = 3 calls, each shown the question text alone
    (line 212, no options) and the solutions shuffled (line 205), returning a solution number; line
    238-241: the most chosen solution's answer. 3 + 3 = 6 calls (the extractor calls of lines 235 and
    241 are this project's structured replies)."""
    # The generations say B, C, B; every choosing call picks the solution marked zqgen1, so the answer
    # is C: the chosen solution's letter, not the generations' majority.
    pick_gen1 = lambda r: str(next(n for n, s in enumerate(shown_solutions(r)) if "zqgen1" in s))  # noqa: E731
    result, client = run(method("medprompt"), Q4,
                         generating({0: "B", 1: "C", 2: "B"}, {i: f"zqgen{i}" for i in range(3)}, pick_gen1))
    assert steps(client) == ["generate_0", "generate_1", "generate_2", "choose_0", "choose_1", "choose_2"]
    assert all(stateless(r) for r in client.requests)
    gens, chooses = client.requests[:3], client.requests[3:]
    for r in gens:
        # knn_k = 3 exemplars, each as its question and its answer's text: no options, no rationale
        assert r.last.count("\nA: ") == 3 and "Reasoning:" not in r.last
        assert all(t in r.last for t in OPTION_TEXTS) and "(A) ECG" in r.last  # the new question's own order
        assert "zqgen" not in r.last
    assert len({r.extra["seed"] for r in gens}) == 3  # one prompt, three requests
    assert len({r.last for r in gens}) == 1
    for r in chooses:
        assert Q4.text in r.last and not any(t in r.last for t in OPTION_TEXTS)  # the stem, no options
        assert all(f"zqgen{i}" in r.last for i in range(3)) and len(shown_solutions(r)) == 3
        assert set(r.model.model_fields) == {"choice"}
    assert result.answer == ("C",)
    assert [c["chose"] for c in result.summary["choices"]] == [1, 1, 1]
    vote = next(e for e in result.events if e.kind == "vote")
    assert (vote.content, vote.data["counts"], vote.data["chosen_generation"]) == ("C", {"1": 3}, 1)
    assert [g["answer"] for g in result.summary["generations"]] == [["B"], ["C"], ["B"]]
    assert result.summary["requested_calls"] == 6


def test_medprompt_counts_identical_solutions_as_one_and_ties_go_to_the_first_chosen() -> None:
    """medprompt.py line 101: `answer_mapping` maps a shown number to `solutions.index(solution)`, so
    identical solutions are one candidate; line 238: `Counter.most_common(1)` breaks a tie by the first
    solution counted."""
    # Generations 0 and 2 are identical (zqsame, B), generation 1 differs (zqother, C). The choosing
    # calls pick zqother, then the first zqsame shown, then the last zqsame shown: zqsame 2, zqother 1.
    picks = iter(["other", "same-first", "same-last"])

    def pick(r: ScriptedRequest) -> str:
        shown = shown_solutions(r)
        want = next(picks)
        idx = [n for n, s in enumerate(shown) if ("zqother" if want == "other" else "zqsame") in s]
        return str(idx[-1] if want == "same-last" else idx[0])

    result, _ = run(method("medprompt"), Q4, generating({0: "B", 1: "C", 2: "B"},
                                                        {0: "zqsame", 1: "zqother", 2: "zqsame"}, pick))
    assert [c["chose"] for c in result.summary["choices"]] == [1, 0, 0] and result.answer == ("B",)
    # Three different picks: a tie, won by the first one chosen.
    order = iter([2, 0, 1])
    tie, _ = run(method("medprompt"), Q4, generating({0: "B", 1: "C", 2: "D"}, {i: f"zqgen{i}" for i in range(3)},
                                                     lambda r: (lambda g: str(next(
                                                         n for n, s in enumerate(shown_solutions(r))
                                                         if f"zqgen{g}" in s)))(next(order))))
    assert [c["chose"] for c in tie.summary["choices"]] == [2, 0, 1] and tie.answer == ("D",)


# -- multipersona: multi_persona.py ------------------------------------------------------------------------


def debating(final: str) -> Any:
    def respond(r: ScriptedRequest) -> Any:
        if r.tag.step == "debate":
            return {"reasoning": f"zqthink-r{r.tag.round}-p{r.tag.turn}", "answer": "B"}
        return {"reasoning": "zqsenior", "answer": final}
    return respond


def test_multipersona_is_three_roles_in_two_rounds_of_separate_calls_then_a_decision() -> None:
    """multi_persona.py lines 126-130: three fixed roles; lines 136-178: `num_rounds` = 2 rounds, each role
    one `call_llm` (a lone user message, line 69); round 1 (line 142) sees the question and options, round
    2 (lines 148-159) also each other role's round-1 thinking (not its own, not their answers); lines
    181-194: a final call sees every role's last thinking and answer. 3 x 2 + 1 = 7 calls."""
    result, client = run(method("multipersona"), Q4, debating("D"))
    assert steps(client) == ["debate"] * 6 + ["final_answer"]
    assert all(stateless(r) for r in client.requests)
    first, second, final = client.requests[:3], client.requests[3:6], client.requests[6]
    roles = ["Innovative Medical Thinker - MD", "Critical Medical Analyst - Medical Professor",
             "Clinical Decision Specialist - Medical Researcher"]
    for p, r in enumerate(first, start=1):
        assert f"You are a {roles[p - 1]}" in r.last and "zqthink" not in r.last
        assert all(t in r.last for t in OPTION_TEXTS)
    for p, r in enumerate(second, start=1):
        peers = {q for q in (1, 2, 3) if q != p}
        assert all(f"zqthink-r1-p{q}" in r.last for q in peers) and f"zqthink-r1-p{p}" not in r.last
        assert "final answer" not in r.last and all(t in r.last for t in OPTION_TEXTS)
    assert all(f"zqthink-r2-p{q}" in final.last for q in (1, 2, 3)) and "zqthink-r1" not in final.last
    assert all(f"{role}'s final answer: B" in final.last for role in roles)
    # Every role said B; the senior expert's D is the answer.
    assert result.answer == ("D",) and result.summary["rounds_answers"] == [["B"] * 3, ["B"] * 3]
    assert result.summary["personas"] == roles and result.summary["requested_calls"] == 7


# -- self-refine: self_refine.py ---------------------------------------------------------------------------


def refining(correct: bool | list[bool], answers: list[str]) -> Any:
    verdicts = iter(correct) if isinstance(correct, list) else None
    it = iter(answers)
    n = iter(range(100))

    def respond(r: ScriptedRequest) -> Any:
        if r.tag.step == "review":
            ok = next(verdicts) if verdicts is not None else correct
            return {"explanation": f"zqfeedback-{r.tag.round}", "correct": ok}
        return {"reasoning": f"zqsolution-{next(n)}", "answer": next(it)}
    return respond


def test_self_refine_is_stateless_and_its_review_and_revision_see_no_options() -> None:
    """self_refine.py lines 128-145: one generation (question and options); lines 155-207: `num_rounds` = 3
    x (a review shown `problem=question_text` and the solution, line 157, returning False only if more than
    95 percent confident it is wrong, line 36; if it is judged wrong, a revision shown the question text,
    the solution and the review's feedback, lines 190-194). Every call a lone user message (line 65-66).
    All judged wrong: 1 + 3 x 2 = 7 calls. (`refine_verdict: review`: the review's own verdict decides.)"""
    result, client = run(method("self-refine", refine_verdict="review"), Q4, refining(False, ["B", "C", "D", "A"]))
    assert steps(client) == ["answer", "review", "refine", "review", "refine", "review", "refine"]
    assert all(stateless(r) for r in client.requests)
    assert all(t in client.requests[0].last for t in OPTION_TEXTS)
    reviews, revisions = client.requests[1::2], client.requests[2::2]
    for k, r in enumerate(reviews):
        assert Q4.text in r.last and not any(t in r.last for t in OPTION_TEXTS) and "95 percent" in r.last
        # the newest solution only: the generation's, then each revision's
        assert f"zqsolution-{k}" in r.last and all(f"zqsolution-{j}" not in r.last for j in range(k))
    for k, r in enumerate(revisions, start=1):
        assert not any(t in r.last for t in OPTION_TEXTS)
        assert f"zqfeedback-{k}" in r.last and f"zqsolution-{k - 1}" in r.last and f"zqfeedback-{k - 1}" not in r.last
    assert result.answer == ("A",) and result.summary["stopped"] == "iterations_done"
    assert [i["answer"] for i in result.summary["iterations"]] == [["C"], ["D"], ["A"]]


def test_self_refine_stops_at_the_first_review_that_finds_the_solution_correct() -> None:
    """self_refine.py lines 178-187: a review that returns True ends the loop; the solution it reviewed
    stands. Judged correct at once: 2 calls; at the second review: 4 (`refine_verdict: review`)."""
    result, client = run(method("self-refine", refine_verdict="review"), Q4, refining(True, ["B"]))
    assert steps(client) == ["answer", "review"] and result.answer == ("B",)
    assert result.summary["stopped"] == "judged_correct"
    later, client = run(method("self-refine", refine_verdict="review"), Q4, refining([False, True], ["B", "C"]))
    assert steps(client) == ["answer", "review", "refine", "review"] and later.answer == ("C",)


def parsing(review_says: bool, parser_says: list[bool], answers: list[str]) -> Any:
    """Reviews that say `review_says`; the parser calls' verdicts in turn; the solutions' letters."""
    verdicts, letters, n = iter(parser_says), iter(answers), iter(range(100))

    def respond(r: ScriptedRequest) -> Any:
        if r.tag.step == "review":
            return {"explanation": f"zqreview-{r.tag.round}", "correct": review_says}
        if r.tag.step == "review_parse":
            return {"explanation": f"zqparsed-{r.tag.round}", "review_result": next(verdicts)}
        return {"reasoning": f"zqsolution-{next(n)}", "answer": next(letters)}
    return respond


def test_self_refine_decides_from_a_parser_call_that_is_never_shown_the_review() -> None:
    """self_refine.py line 176 parses each review with `parse_answer(..., explanation=True,
    review_result=True)`; in lines 100-105 the conditional expression binds last, so with `explanation`
    set the prompt is the extractor's opening instruction alone: no review text (nor question, nor
    solution). Its `review_result` decides the stop (178) and its `explanation` is the revision's
    feedback (190-194). Reviews that all say "correct", a parser that says False three times: the loop
    runs on, 1 + 3 x (review + parse + revision) = 10 calls; the parser calls carry no temperature
    (the call passes none, lines 108-114) and each its own seed."""
    result, client = run(method("self-refine"), Q4, parsing(True, [False, False, False], ["B", "C", "D", "A"]))
    assert steps(client) == ["answer"] + ["review", "review_parse", "refine"] * 3
    parses = [r for r in client.requests if r.tag.step == "review_parse"]
    for r in parses:
        assert stateless(r) and "zqreview" not in text(r) and "zqsolution" not in text(r) and Q4.text not in text(r)
        assert r.extra["temperature"] is None
    assert len({r.extra["seed"] for r in parses}) == 3
    revisions = [r for r in client.requests if r.tag.step == "refine"]
    assert all(f"zqparsed-{k}" in r.last and "zqreview" not in r.last for k, r in enumerate(revisions, start=1))
    assert result.answer == ("A",) and result.summary["stopped"] == "iterations_done"
    assert [(i["judged_correct"], i["review_said"]) for i in result.summary["iterations"]] == [(False, True)] * 3
    # The parser's True ends the loop whatever the review said: 3 calls, the first solution stands.
    result, client = run(method("self-refine"), Q4, parsing(False, [True], ["B"]))
    assert steps(client) == ["answer", "review", "review_parse"] and result.answer == ("B",)
    assert result.summary["stopped"] == "judged_correct"


def test_the_review_verdict_is_a_declared_setting_against_the_codes_blind_parser() -> None:
    from medpanel.experiments.analysis.protocol import protocol_line

    line = protocol_line({"name": "r", "pipeline": "self-refine", "settings": {"refine_verdict": "review"}})
    assert "refine_verdict = review (benchmark's code: blind-parser)" in line
    assert "refine_verdict" not in protocol_line({"name": "b", "pipeline": "self-refine"})
    assert "the blind parser call" in protocol_line({"name": "b", "pipeline": "self-refine"})


def test_the_blind_parser_call_differs_by_question_so_a_cache_cannot_decide_them_all(tmp_path: Any) -> None:
    """The parser's request text is the same for every question (it holds no review); each question's
    own seed keeps the cache from answering one question's verdict with another's."""
    from medpanel.agents.model.cache import ResponseCache
    from medpanel.agents.types import Question

    other = Question(dataset="unit", qid="q2", text="A child has a fever. Next step?", options=Q4.options, gold=("A",))
    cache = ResponseCache(tmp_path / "cache")
    _, first = run(method("self-refine"), Q4, parsing(True, [True], ["A"]), cache=cache)
    _, second = run(method("self-refine"), other, parsing(True, [True], ["A"]), cache=cache)
    assert [r.tag.step for r in second.requests] == ["answer", "review", "review_parse"]
    assert first.requests[-1].last == second.requests[-1].last


# -- cot-sc: cot_sc.py -------------------------------------------------------------------------------------


def test_cot_sc_sends_a_sixth_call_that_sees_the_five_letters_and_decides() -> None:
    """cot_sc.py lines 187-202: `num_solutions` = 5 CoT calls, each reduced to its letter (line 192-193);
    line 204 and lines 78-119: a sixth call shown the question, its options and "Solution i:" with each
    letter (line 84), never a sample's reasoning; line 211: its answer is the prediction. 5 + 1 = 6."""
    letters = iter(["B", "A", "A", "B", "C"])

    def respond(r: ScriptedRequest) -> Any:
        if r.tag.step == "aggregate":
            return {"reasoning": "r", "answer": "C"}
        return {"reasoning": f"zqchain-{r.tag.step}", "answer": next(letters)}

    result, client = run(method("cot-sc", n_samples=5, temperature=0.7), Q4, respond)
    assert steps(client) == [f"sample_{i}" for i in range(5)] + ["aggregate"]
    agg = client.requests[-1]
    assert "zqchain" not in text(agg) and all(t in agg.last for t in OPTION_TEXTS)
    assert all(f"Solution {n}:\n{x}" in agg.last for n, x in enumerate(["B", "A", "A", "B", "C"], start=1))
    # The samples' majority is A; the aggregation call's C is the answer.
    assert result.summary["vote"]["answer"] == "A" and result.answer == ("C",)
    assert result.summary["aggregated"] == ["C"] and result.summary["requested_calls"] == 6
    # the majority is recorded as a note; the one vote-or-decision event is the aggregated answer
    finals = [e for e in result.events if e.kind in ("vote", "decision")]
    assert [(e.kind, e.content) for e in finals] == [("decision", "C")]


# -- reply caps: max_tokens as the benchmark's code sets it ---------------------------------------------------


def valid(r: ScriptedRequest) -> Any:
    return synthesize(r.model, r.last) if r.model else "ok"


def test_only_zero_shot_is_capped_as_in_the_benchmarks_code() -> None:
    """zero_shot.py lines 88-94 send `max_tokens=512`; cot.py 68-73, cot_sc.py 68-73 and 135-140,
    self_refine.py 65-71, multi_persona.py 69-75 and medprompt.py 49-55 send none (the gpt-4o branch)."""
    zero, c = run(method("zero-shot"), Q4, lambda r: {"answer": "A"})
    assert zero.answer == ("A",)
    assert [r.extra["max_tokens"] for r in c.requests] == [512]
    for name in ("cot", "cot-sc", "multipersona", "self-refine", "medprompt", "spp", "medprompt-shuffle"):
        _, c = run(method(name), Q4, valid)
        assert c.requests and all(r.extra["max_tokens"] is None for r in c.requests), name
        # an uncapped reply is not asked to keep its reasoning brief (gpt-4o's CoT averaged 412 tokens)
        assert {r.model.model_fields["reasoning"].description for r in c.requests
                if r.model is not None and "reasoning" in r.model.model_fields} == {FREE_REASONING}, name
    _, c = run(method("medprompt", reply_caps="model"), Q4, valid, max_tokens=96)
    assert all("max_tokens" not in r.extra for r in c.requests)  # the model block's cap, as create args set it
    assert c.requests[0].model is not None
    assert c.requests[0].model.model_fields["reasoning"].description == BRIEF_REASONING
    _, c = run(Condition(slug="cot", pipeline="cot"), Q4, valid)  # the baselines keep theirs
    assert "max_tokens" not in c.requests[0].extra and c.requests[0].model is not None
    assert c.requests[0].model.model_fields["reasoning"].description == BRIEF_REASONING


def test_an_uncapped_call_is_posted_without_max_tokens() -> None:
    """`max_tokens: None` reaches the endpoint as no field at all (the OpenAI default), not as a null."""
    import asyncio
    from types import SimpleNamespace

    from medpanel.agents.model.backends import PostedChat

    from .fake_openai import completion

    bodies: list[dict[str, Any]] = []

    async def post(path: str, *, body: dict[str, Any], cast_to: Any, options: Any) -> Any:
        bodies.append(body)
        assert cast_to is bytes  # the body is read raw, under its bound, then parsed
        return json.dumps(completion('{"answer": "A"}')).encode()

    chat = PostedChat(SimpleNamespace(post=post))  # type: ignore[arg-type]
    asyncio.run(chat.create(model="m", messages=[], max_tokens=None, temperature=0.0))
    asyncio.run(chat.create(model="m", messages=[], max_tokens=512))
    assert "max_tokens" not in bodies[0] and bodies[0]["temperature"] == 0.0
    assert bodies[1]["max_tokens"] == 512


def test_self_refine_ends_when_a_revision_is_invalid_and_keeps_the_last_answer() -> None:
    """self_refine.py lines 205-207: a failed revision ends the loop (`break`); the solution before it
    stands (line 218). Here: generate B, review wrong, revision invalid twice (the re-ask): 4 calls."""
    answers = iter(["B", "Z", "Z"])

    def respond(r: ScriptedRequest) -> Any:
        if r.tag.step == "review":
            return {"explanation": "e", "correct": False}
        return {"reasoning": "r", "answer": next(answers)}

    result, client = run(method("self-refine", refine_verdict="review"), Q4, respond)
    assert steps(client) == ["answer", "review", "refine", "refine:reask"]
    assert result.answer == ("B",) and not result.invalid and result.summary["stopped"] == "revision_invalid"


def test_the_protocol_line_declares_what_differs_from_the_benchmarks_code() -> None:
    from medpanel.experiments.analysis.protocol import deviations, protocol_line

    scenario = {"name": "b", "pipeline": "benchmark", "variants": ["medprompt", "cot-sc"],
                "settings": {"knn_k": 5, "temperature": 0.7, "reply_caps": "model"}}
    found = {d.key: (d.value, d.paper, d.source) for d in deviations(scenario)}
    code = "benchmark's code"
    assert found == {"settings.knn_k": (5, 3, code), "settings.temperature": (0.7, 0.0, code),
                     "settings.reply_caps": ("model", "benchmark", code)}
    line = protocol_line(scenario)
    assert "knn_k = 5 (benchmark's code: 3)" in line and "medprompt: kNN by BM25" in line
    assert "cot-sc: each sample its own seed" in line and "few-shot:" not in line  # only the run's methods
    assert "benchmark's code" not in protocol_line({"name": "p", "pipeline": "panel", "flags": {"c": [1]}})
    # a single-method pipeline at the benchmark's values differs by design only
    assert [d.source for d in deviations({"name": "m", "pipeline": "medprompt"})] == []


def test_cot_shares_the_baselines_request_only_when_capped_like_it(tmp_path: Any) -> None:
    from medpanel.agents.model.cache import ResponseCache

    cache = ResponseCache(tmp_path / "cache")
    run(Condition(slug="cot", pipeline="cot"), Q4, lambda r: {"reasoning": "r", "answer": "B"}, cache=cache)
    _, uncapped = run(method("cot"), Q4, lambda r: {"reasoning": "r", "answer": "C"}, cache=cache)
    _, capped = run(method("cot", reply_caps="model"), Q4, lambda r: {"reasoning": "r", "answer": "D"}, cache=cache)
    assert len(uncapped.requests) == 1 and len(capped.requests) == 0  # the latter answered from the cache
