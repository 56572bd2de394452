"""The control flow of the benchmark context's multi-call single-model methods, each as the
MedAgentsBench code runs it (`baselines/MedPrompt/*.py` of the benchmark's repository), and the two
named variants that keep the original papers' shape (`spp`, `medprompt-shuffle`).

| method | calls / question (defaults) | follows |
|---|---|---|
| `cot-sc` | `n_samples` CoT samples + 1 aggregation (6) | `cot_sc.py` `run` / `ensemble_solutions` |
| `multipersona` | 3 roles x `persona_rounds` + 1 decision (7) | `multi_persona.py` `run` |
| `spp` | 3 + `persona_rounds` in one conversation (5) | Wang et al.'s Solo Performance Prompting |
| `self-refine` | 1 + per round review, parse, revise; no revision after "correct" (3 to 10) | `self_refine.py` `run` |
| `medprompt` | `medprompt_generations` + `medprompt_choices` (6) | `medprompt.py` `run` (medprompt-3) |
| `medprompt-shuffle` | `shuffles` (5) | Nori et al.'s choice-shuffle ensemble |

Each function records what it did in `facts` (the summary) and returns the answer's letters, empty
when the method ends without a valid answer (the question is then invalid, never defaulted).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence
from typing import Any

from medpanel.agents.events import Vote
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.structured import letters_of
from medpanel.agents.pipelines.tally import vote
from medpanel.agents.roles.exemplars import ExemplarPool
from medpanel.agents.summary import Fact
from medpanel.agents.types import Question, TranscriptEvent
from medpanel.methods.baselines.pipeline import SEED_STRIDE, BaselinePipeline, BaselineSummary, SampleVote
from medpanel.methods.benchmark.roles import benchmark, multipersona
from medpanel.methods.benchmark.settings import BenchmarkSettings

Overrides = Mapping[str, Any]


class Iteration(Fact):
    """self-refine: one review (and its revision, unless the verdict judged the solution correct)."""

    iteration: int
    judged_correct: bool
    """The verdict that decided (the blind parser's, by default; the review's own under `refine_verdict: review`)."""
    review_said: bool | None = None
    """The review's own verdict (what the benchmark's parser is never shown)."""
    answer: list[str] | None = None
    """The revision's letters; None when it was invalid (then `fell_back`: the last answer stands)."""
    fell_back: bool | None = None


class Member(Fact):
    """medprompt's shuffle ensemble: one member, its option order, its letters as shown and as asked."""

    i: int
    order: list[str]
    """The original letters in the order the member was shown them."""
    shown: list[str] | None
    answer: list[str] | None


class Generation(Fact):
    """medprompt: one valid generation's letters."""

    i: int
    answer: list[str]


class Choice(Fact):
    """medprompt: one choosing call's order of generations and the generation it chose."""

    i: int
    order: list[int]
    chose: int | None


class BenchmarkSummary(BaselineSummary):
    """What a benchmark method did for one question: each flow below sets its own facts."""

    exemplar_source: str | None = None
    exemplars: list[str] | None = None
    excluded_exemplars: list[str] | None = None
    personas: list[str] | None = None
    iterations: list[Iteration] | None = None
    stopped: str | None = None
    members: list[Member] | None = None
    generations: list[Generation] | None = None
    """medprompt: each valid generation's letters."""
    choices: list[Choice] | None = None
    """medprompt: each choosing call's order of generations and the generation it chose."""
    rounds_answers: list[list[str | None]] | None = None
    """multipersona: each round's letters per role."""
    aggregated: list[str] | None = None
    """cot-sc: the aggregation call's answer (`vote` holds the samples' majority, for comparison)."""


def seeded_order(n: int, key: str) -> list[int]:
    """0..n-1 shuffled by a hash of `key`: the same order for the same key on every machine."""
    order = list(range(n))
    random.Random(int(hashlib.sha256(key.encode()).hexdigest(), 16)).shuffle(order)
    return order


def permutation(question: Question, seed: int, i: int) -> list[str]:
    """Shuffle member i's option order: the letters shuffled by (model seed, question, i)."""
    letters = list(question.letters)
    return [letters[k] for k in seeded_order(len(letters), f"{seed}/{question.dataset}/{question.qid}/{i}")]


def shuffled(question: Question, order: list[str]) -> tuple[Question, dict[str, str]]:
    """The question with option texts in `order` under the original letters; shown letter -> original."""
    letters = question.letters
    options = {shown: question.options[orig] for shown, orig in zip(letters, order, strict=True)}
    back = dict(zip(letters, order, strict=True))
    return question.model_copy(update={"options": options, "gold": ()}), back


def first_most_common(votes: Sequence[int | None]) -> int | None:
    """The most voted index; a tie goes to the one voted for first (what `Counter.most_common(1)` returns
    in `medprompt.py` line 238). Unparsed votes do not count."""
    counts: dict[int, int] = {}
    for v in votes:
        if v is not None:
            counts[v] = counts.get(v, 0) + 1
    return max(counts, key=lambda k: counts[k]) if counts else None


async def cot_sc(question: Question, session: QuestionSession, settings: BenchmarkSettings, caps: Overrides,
                 facts: BenchmarkSummary) -> tuple[str, ...]:
    """`n_samples` CoT samples, then a sixth call shown the question and their letters decides."""
    out = await BaselinePipeline("sc")._self_consistency(question, session, settings, overrides=dict(caps),
                                                         decide=False)
    facts.add(out.summary, without={"method"})
    samples = out.summary.samples if isinstance(out.summary, BaselineSummary) else None
    letters = [", ".join(s.answer) for s in samples or [] if s.answer]
    if not letters:  # no sample to aggregate: nothing for the sixth call to see
        facts.aggregated = None
        return ()
    parsed = await benchmark.cot_sc_aggregate(session, question, letters, caps)
    answer = letters_of(parsed) if parsed is not None else ()
    facts.aggregated = list(answer) or None
    return answer


async def multipersona_debate(question: Question, session: QuestionSession, settings: BenchmarkSettings,
                              caps: Overrides, facts: BenchmarkSummary) -> tuple[str, ...]:
    """Three fixed roles x `persona_rounds` separate calls, then the senior expert's decision."""
    roles = multipersona.ROLES
    last: list[tuple[str, str]] = []  # (reasoning, letters) per role, the round before
    rounds: list[list[str | None]] = []
    for r in range(1, settings.persona_rounds + 1):
        now: list[tuple[str, str]] = []
        for i in range(len(roles)):
            peers = [(roles[j], last[j][0]) for j in range(len(roles)) if j != i] if last else []
            parsed = await multipersona.speak(session, question, index=i, round=r, peers=peers, overrides=caps)
            if parsed is None:
                now.append((multipersona.NO_REPLY, "none"))
            else:
                now.append((parsed.reasoning, ", ".join(letters_of(parsed))))
        rounds.append([a if a != "none" else None for _, a in now])
        last = now
    parsed = await multipersona.decide(session, question, [(roles[i], t, a) for i, (t, a) in enumerate(last)],
                                       caps)
    facts.personas, facts.rounds_answers = list(roles), rounds
    return letters_of(parsed) if parsed is not None else ()


async def spp(question: Question, session: QuestionSession, settings: BenchmarkSettings, caps: Overrides,
              facts: BenchmarkSummary) -> tuple[str, ...]:
    """Solo Performance Prompting: personas, brainstorm, `persona_rounds` collaborations, the answer."""
    solver = benchmark.PersonaSolver(session, question, caps)
    found = await solver.identify()
    personas = found.personas if found is not None else []
    facts.personas = personas
    # An unparsed persona list still lets the model go on as "the relevant experts" (recorded above).
    names = ", ".join(personas) if personas else "the relevant experts"
    await solver.brainstorm(names)
    for r in range(1, settings.persona_rounds + 1):
        await solver.collaborate(names, round=r, rounds=settings.persona_rounds)
    parsed = await solver.final()
    return letters_of(parsed) if parsed is not None else ()


async def self_refine(question: Question, session: QuestionSession, settings: BenchmarkSettings,
                      caps: Overrides, facts: BenchmarkSummary) -> tuple[str, ...]:
    """Generate; then up to `refine_iterations` x (review; revise unless the verdict is "correct").

    The verdict and the revision's feedback come, as in the benchmark's code, from a parser call that
    is never shown the review (`refine_verdict: blind-parser`, `Refiner.parse_review`), or from the
    review's own reply (`refine_verdict: review`)."""
    refiner = benchmark.Refiner(session, question, caps)
    parsed = await refiner.generate()
    iterations: list[Iteration] = []
    if parsed is None:
        facts.iterations, facts.stopped = iterations, "generation_invalid"
        return ()
    solution, answer = benchmark.solution_text(parsed), letters_of(parsed)
    blind = settings.refine_verdict == "blind-parser"
    stopped = "iterations_done"
    for it in range(1, settings.refine_iterations + 1):
        review = await refiner.review(solution, it)
        if review is None:
            stopped = "review_unparsed"
            break
        correct, feedback = review.correct, review.explanation
        if blind:
            verdict = await refiner.parse_review(it)
            if verdict is None:
                stopped = "review_parse_invalid"
                break
            correct, feedback = verdict.review_result, verdict.explanation
        if correct and settings.refine_stop_early:
            iterations.append(Iteration(iteration=it, judged_correct=True, review_said=review.correct))
            stopped = "judged_correct"
            break
        revised = await refiner.revise(solution, feedback, it)
        if revised is None:  # the benchmark ends its loop when a revision fails; the last answer stands
            iterations.append(Iteration(iteration=it, judged_correct=correct, review_said=review.correct, answer=None,
                                        fell_back=True))
            stopped = "revision_invalid"
            break
        solution, answer = benchmark.solution_text(revised), letters_of(revised)
        iterations.append(Iteration(iteration=it, judged_correct=correct, review_said=review.correct,
                                    answer=list(answer), fell_back=False))
    facts.iterations, facts.stopped = iterations, stopped
    return answer


async def medprompt(question: Question, session: QuestionSession, settings: BenchmarkSettings, pool: ExemplarPool,
                    caps: Overrides, facts: BenchmarkSummary) -> tuple[str, ...]:
    """medprompt-3: `medprompt_generations` answers with the kNN examples, then `medprompt_choices` calls
    that each pick one solution from a shuffled list; the most picked solution's letter is the answer."""
    shots, excluded = pool.nearest(question, settings.knn_k)
    facts.exemplar_source, facts.exemplars = settings.exemplars, [e.eid for e in shots]
    facts.excluded_exemplars = excluded
    base = session.spec.seed or 0
    solutions: list[tuple[int, str, tuple[str, ...]]] = []  # (generation, text, letters)
    for i in range(settings.medprompt_generations):
        # One prompt for every generation: its own seed keeps them three requests, not one cache hit.
        parsed = await benchmark.medprompt_generate(session, question, shots, i=i,
                                                    overrides={**caps, "seed": base + i * SEED_STRIDE})
        if parsed is not None:
            solutions.append((i, benchmark.solution_text(parsed), letters_of(parsed)))
    facts.generations = [Generation(i=i, answer=list(a)) for i, _, a in solutions]
    if not solutions:
        facts.choices = []
        return ()
    texts = [t for _, t, _ in solutions]
    # Identical solutions are one candidate, as `solutions.index(solution)` makes them (line 101).
    canonical = [texts.index(t) for t in texts]
    picks: list[int | None] = []
    choices: list[Choice] = []
    for j in range(settings.medprompt_choices):
        order = seeded_order(len(texts), f"{base}/{question.dataset}/{question.qid}/choose/{j}")
        pick = await benchmark.medprompt_choose(session, question, [texts[k] for k in order], i=j, overrides=caps)
        chosen = canonical[order[int(pick)]] if pick is not None else None
        picks.append(chosen)
        choices.append(Choice(i=j, order=[solutions[k][0] for k in order],
                              chose=solutions[chosen][0] if chosen is not None else None))
    best = first_most_common(picks)
    answer = solutions[best][2] if best is not None else ()
    facts.choices = choices
    counts: dict[str, int] = {}
    for c in choices:
        if c.chose is not None:
            counts[str(c.chose)] = counts.get(str(c.chose), 0) + 1
    # The vote is over generations (counts keyed by generation); its content is the chosen one's letters.
    session.record(TranscriptEvent(kind="vote", role="pipeline", agent="medprompt", step="vote",
                                   content=",".join(answer) or "invalid",
                                   data={"rule": "most_chosen_first_chosen_on_tie", "counts": counts,
                                         "picks": [c.chose for c in choices],
                                         "chosen_generation": solutions[best][0] if best is not None else None},
                                   act=Vote(rule="most_chosen_first_chosen_on_tie", counts=counts)))
    return answer


async def medprompt_shuffle(question: Question, session: QuestionSession, settings: BenchmarkSettings,
                            pool: ExemplarPool, caps: Overrides, facts: BenchmarkSummary) -> tuple[str, ...]:
    """Nori et al.: `shuffle_knn_k` kNN exemplars with reasoning; `shuffles` members, each with its own
    seeded option order, mapped back to the original letters before a majority vote."""
    shots, excluded = pool.nearest(question, settings.shuffle_knn_k)
    base = session.spec.seed or 0
    members: list[Member] = []
    answers: list[tuple[str, ...] | None] = []
    for i in range(settings.shuffles):
        order = permutation(question, base, i)
        view, back = shuffled(question, order)
        parsed = await benchmark.medprompt_shuffle_member(session, view, shots, i=i, seed=base + i * SEED_STRIDE,
                                                          overrides=caps)
        shown = letters_of(parsed) if parsed is not None else ()
        original = tuple(sorted(back[x] for x in shown)) if shown else None
        answers.append(original)
        members.append(Member(i=i, order=order, shown=list(shown) or None,
                              answer=list(original) if original else None))
    result = vote(answers)
    session.record(TranscriptEvent(kind="vote", role="pipeline", agent="medprompt", step="vote",
                                   content=result["answer"] or "invalid",
                                   data={**result, "members": [m.answer for m in members]}, act=Vote.of(result)))
    facts.exemplar_source, facts.exemplars = settings.exemplars, [e.eid for e in shots]
    facts.excluded_exemplars, facts.members, facts.vote = excluded, members, SampleVote(**result)
    return tuple(result["answer"].split(",")) if result["answer"] else ()
