"""The aggregation verifier (paper section 2.3.1) and its documented heuristic fallback.

The verifier reads the bundle and returns (preliminary answer, route, rationale, confidence). The
route decides the answer where it names a source: `keep_parametric`, `keep_local` and
`accept_dynamic` take that pathway's answer, `consensus` takes the answer at least two pathways
share, `needs_more_search` keeps the verifier's own best answer as preliminary. The verifier's own
answer field is always recorded.

Invalid output (no parseable reply after the one re-ask, a route outside the five) or a route
that contradicts the candidates (`keep_local` when the local pathway has no answer, `consensus`
when no two pathways agree) falls back to this heuristic, and the verdict is marked
`fallback: true` with the reason:

| order | condition (p, l, d = parametric, local, dynamic answers) | route             | confidence        |
|-------|---------------------------------------------------------|-------------------|-------------------|
| 1     | p == l                                                  | consensus (p)     | high              |
| 2     | l == d                                                  | consensus (l)     | high if n_high>=1 |
|       |                                                         |                   | else medium       |
| 3     | p == d and n_high >= 1                                  | consensus (p)     | medium            |
| 4     | l is valid                                              | keep_local        | low               |
| 5     | p is valid                                              | keep_parametric   | low               |
| 6     | d is valid                                              | accept_dynamic    | low               |
| 7     | no valid candidate                                      | needs_more_search | low; no answer:   |
|       |                                                         |                   | invalid, never a  |
|       |                                                         |                   | default letter    |

Like the authors' code it leans on the local answer when sources conflict. Free-text candidates
rarely match word for word, so there rules 4-7 usually decide.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field, create_model

from medpanel.agents.channels.knowledge import passages_block, quote_block
from medpanel.agents.clear.bundle import Answer, Bundle
from medpanel.agents.clear.pathways import Context, question_block
from medpanel.agents.clear.quality import quality_block
from medpanel.agents.clear.settings import PATHWAYS, Route
from medpanel.agents.model.agent import RoleAgent, render
from medpanel.agents.model.structured import letters_type

Confidence = Literal["high", "medium", "low"]
SOURCE_OF_ROUTE = {"keep_parametric": "parametric", "keep_local": "local", "accept_dynamic": "dynamic"}
PATHWAY_LABEL = {"parametric": "Parametric pathway (the model's own knowledge, no documents)",
                 "local": "Local pathway (curated local corpus)",
                 "dynamic": "Dynamic pathway (external search)"}


@dataclass
class Verdict:
    """o = (a, z, j, gamma) plus how it was reached."""

    answer: Answer | None
    route: str
    rationale: str
    confidence: str
    round: int = 1
    fallback: bool = False
    fallback_reason: str = ""
    verifier_answer: Answer | None = None
    """What the verifier itself answered (may differ from the route's source answer)."""
    notes: list[str] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        return {"round": self.round, "route": self.route, "answer": list(self.answer) if self.answer else None,
                "verifier_answer": list(self.verifier_answer) if self.verifier_answer else None,
                "rationale": self.rationale, "confidence": self.confidence, "fallback": self.fallback,
                "fallback_reason": self.fallback_reason, "notes": self.notes}


def verifier_model(bundle: Bundle) -> type[BaseModel]:
    q = bundle.question
    if not q.options:
        answer: Any = (str, Field(min_length=1, description="The adjudicated conclusion, at most three sentences."))
    elif q.multi_answer:
        answer = (list[letters_type(q.letters)], Field(min_length=1,  # type: ignore[misc]
                                                       description="All correct option letters."))
    else:
        answer = (letters_type(q.letters), Field(description="The option letter best supported."))
    return create_model(
        "VerifierDecision",
        rationale=(str, Field(description="Which sources agree or conflict and why, at most 4 sentences.")),
        route=(Route, Field(description="consensus, keep_parametric, keep_local, accept_dynamic or "
                                        "needs_more_search.")),
        answer=answer,
        confidence=(Confidence, Field(description="high, medium or low (not a probability).")),
    )


def label(bundle: Bundle, answer: Answer | None) -> str:
    """An answer as the prompts show it: letters with their option text, or the free-text conclusion."""
    if answer is None:
        return "no valid answer"
    q = bundle.question
    if not q.options:
        return answer[0][:600]
    return " + ".join(f"({a}) {q.options.get(a, '?')}" for a in answer)


def candidates_block(bundle: Bundle) -> str:
    parts = []
    for p in PATHWAYS:
        c = bundle.candidates.get(p)
        if c is None:
            continue
        head = PATHWAY_LABEL[p]
        if p == "local":
            head += f", {len(c.evidence)} passages"
        if p == "dynamic":
            n = bundle.counts
            head += (f", {len(c.evidence)} documents: n_high={n['n_high']} n_medium={n['n_medium']} "
                     f"n_low={n['n_low']}")
        parts.append(f"{head}\nAnswer: {label(bundle, c.answer)}\nReasoning: {c.reasoning[:500] or '-'}")
    return quote_block("candidates", "\n\n".join(parts))


def followup_note(bundle: Bundle) -> str:
    if not bundle.followups:
        return ""
    n_initial = len(bundle.candidates["dynamic"].evidence) if "dynamic" in bundle.candidates else 0
    queries = "; ".join(f.query for f in bundle.followups)
    return (f"Targeted follow-up searches so far: {len(bundle.followups)} (queries: {queries[:400]}). "
            f"External documents after P{n_initial} came from them.\n")


def local_block(bundle: Bundle, n: int, chars: int | None) -> str:
    # Local passages are numbered L1.. so they cannot be confused with the external P1.. of the tiers.
    return passages_block(bundle.local[:n], chars).replace('<passage id="P', '<passage id="L')


async def verify(ctx: Context, bundle: Bundle, round: int) -> Verdict:
    s = ctx.settings
    agent = RoleAgent(ctx.session, name="verifier", role="verifier", system_message=render("clear_verifier"))
    prompt = render("clear_verify_request", question=question_block(bundle.question),
                    candidates=candidates_block(bundle),
                    local=local_block(bundle, s.verifier_local_docs, s.verifier_passage_chars),
                    dynamic=passages_block(bundle.dynamic, s.verifier_passage_chars),
                    quality=quality_block(bundle.dynamic), followups=followup_note(bundle))
    parsed = await agent.speak(prompt, verifier_model(bundle), step="verify", round=round)
    if parsed is None:
        return heuristic(bundle, "invalid verifier output (unparseable or unknown route after one re-ask)", round)
    verdict = resolve(parsed, bundle, round)
    if isinstance(verdict, str):
        fallback = heuristic(bundle, verdict, round)
        fallback.verifier_answer = _own(parsed, bundle)
        return fallback
    return verdict


def _own(parsed: Any, bundle: Bundle) -> Answer | None:
    ans = parsed.answer
    if not bundle.question.options:
        return (str(ans).strip(),) if str(ans).strip() else None
    return tuple(sorted(set(ans))) if isinstance(ans, list) else (ans,)


def resolve(parsed: Any, bundle: Bundle, round: int = 1) -> Verdict | str:
    """The verdict a valid reply stands for, or the reason it contradicts the candidates."""
    route, own = parsed.route, _own(parsed, bundle)
    answer: Answer | None = own
    notes: list[str] = []
    if route in SOURCE_OF_ROUTE:
        source = SOURCE_OF_ROUTE[route]
        if bundle.answer(source) is None:
            return f"route {route} names the {source} pathway, which has no valid answer"
        if not bundle.freetext:
            answer = bundle.answer(source)
            if answer != own:
                notes.append(f"verifier answered {own} but route {route} selects the {source} answer {answer}")
    elif route == "consensus" and not bundle.freetext:
        answer = bundle.majority()
        if answer is None:
            return "route consensus, but no two pathways agree"
        if answer != own:
            notes.append(f"verifier answered {own}; the consensus answer is {answer}")
    return Verdict(answer=answer, route=route, rationale=str(parsed.rationale), confidence=parsed.confidence,
                   round=round, verifier_answer=own, notes=notes)


def heuristic(bundle: Bundle, reason: str, round: int = 1) -> Verdict:
    """The fallback of the module docstring's table."""
    p, lc, d = (bundle.answer(x) for x in ("parametric", "local", "dynamic"))
    high = bundle.counts["n_high"] >= 1

    def v(answer: Answer | None, route: str, confidence: str, rule: str) -> Verdict:
        return Verdict(answer=answer, route=route, rationale=f"heuristic fallback, rule {rule}", confidence=confidence,
                       round=round, fallback=True, fallback_reason=reason)

    if p is not None and p == lc:
        return v(p, "consensus", "high", "1: parametric == local")
    if lc is not None and lc == d:
        return v(lc, "consensus", "high" if high else "medium", "2: local == dynamic")
    if p is not None and p == d and high:
        return v(p, "consensus", "medium", "3: parametric == dynamic with a high-quality source")
    if lc is not None:
        return v(lc, "keep_local", "low", "4: local answer")
    if p is not None:
        return v(p, "keep_parametric", "low", "5: parametric answer")
    if d is not None:
        return v(d, "accept_dynamic", "low", "6: dynamic answer")
    return v(None, "needs_more_search", "low", "7: no valid candidate")
