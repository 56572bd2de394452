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
from typing import Any

from medpanel.methods.clear.bundle import Answer, Bundle
from medpanel.methods.clear.pathways import Context
from medpanel.methods.clear.roles import verifier

SOURCE_OF_ROUTE = {"keep_parametric": "parametric", "keep_local": "local", "accept_dynamic": "dynamic"}



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



async def verify(ctx: Context, bundle: Bundle, round: int) -> Verdict:
    s = ctx.settings
    parsed = await verifier.ask(ctx.session, bundle, local_docs=s.verifier_local_docs, chars=s.verifier_passage_chars,
                                round=round)
    if parsed is None:
        return heuristic(bundle, "invalid verifier output (unparseable or unknown route after one re-ask)", round)
    verdict = resolve(parsed, bundle, round)
    if isinstance(verdict, str):
        fallback = heuristic(bundle, verdict, round)
        fallback.verifier_answer = _own(parsed, bundle)
        return fallback
    return verdict


def _own(parsed: verifier.VerifierReply, bundle: Bundle) -> Answer | None:
    ans = parsed.answer
    if not bundle.question.options:
        return (str(ans).strip(),) if str(ans).strip() else None
    return tuple(sorted(set(ans))) if isinstance(ans, list) else (ans,)



def resolve(parsed: verifier.VerifierReply, bundle: Bundle, round: int = 1) -> Verdict | str:
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
    return Verdict(answer=answer, route=route, rationale=parsed.rationale, confidence=parsed.confidence,
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

