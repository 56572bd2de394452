"""CLEAR's aggregation verifier (paper section 2.3.1): reads the evidence bundle and returns a
preliminary answer, a route, a rationale and a confidence. How its reply becomes a verdict (and the
heuristic fallback for an invalid or inconsistent one) is `medpanel.methods.clear.verdict`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, create_model

from medpanel.agents import events
from medpanel.agents.evidence import passages_block, quote_block
from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.structured import letters_type
from medpanel.agents.prompting import Prompts, question_block
from medpanel.methods.clear.bundle import Bundle, label
from medpanel.methods.clear.quality import quality_block
from medpanel.methods.clear.settings import PATHWAYS, Route

PROMPTS = Prompts(__name__)


Confidence = Literal["high", "medium", "low"]


PATHWAY_LABEL = {"parametric": "Parametric pathway (the model's own knowledge, no documents)",
                 "local": "Local pathway (curated local corpus)",
                 "dynamic": "Dynamic pathway (external search)"}



class VerifierReply(BaseModel):
    """The verifier's reply; `verifier_model` narrows `answer` to the question's letters (free text
    where it has no options)."""

    rationale: str = Field(description="Which sources agree or conflict and why, at most 4 sentences.")
    route: Route = Field(description="consensus, keep_parametric, keep_local, accept_dynamic or needs_more_search.")
    answer: str | list[str]
    confidence: Confidence = Field(description="high, medium or low (not a probability).")


def verifier_model(bundle: Bundle) -> type[VerifierReply]:
    q = bundle.question
    if not q.options:
        answer: Any = (str, Field(min_length=1, description="The adjudicated conclusion, at most three sentences."))
    elif q.multi_answer:
        answer = (list[letters_type(q.letters)], Field(min_length=1,  # type: ignore[misc]
                                                       description="All correct option letters."))
    else:
        answer = (letters_type(q.letters), Field(description="The option letter best supported."))
    return create_model("VerifierDecision", __base__=VerifierReply, answer=answer)



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



async def ask(session: QuestionSession, bundle: Bundle, *, local_docs: int, chars: int | None,
              round: int) -> VerifierReply | None:
    """The verifier's parsed reply (a `verifier_model(bundle)` instance), or None when invalid twice."""
    agent = RoleAgent(session, name="verifier", role="verifier", system_message=PROMPTS.render("system"))
    prompt = PROMPTS.render("request", question=question_block(bundle.question), candidates=candidates_block(bundle),
                            local=local_block(bundle, local_docs, chars),
                            dynamic=passages_block(bundle.dynamic, chars), quality=quality_block(bundle.dynamic),
                            followups=followup_note(bundle))
    return await agent.speak(prompt, verifier_model(bundle), step="verify", round=round, act=events.Verdict())
