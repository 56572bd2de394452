"""Telling a dead endpoint or a wrong key from questions that failed.

A refused connection, a rejected key (401/403), an unknown model (404), a redirect (never followed)
or a token rate no request fits fails every question the same way: recording each as an error row
would "complete" the run with nothing but errors (and error rows count as done). So until some call
of the session has been answered, a question that fails in one of those ways is held back, not
committed. When `SYSTEMATIC_AFTER` questions have failed the same way, or the session ends with only
such failures, the run stops (resumably) with one line naming the cause and the held questions are
released: a resume after the fix runs them. As soon as any call succeeds, the endpoint works and the
held questions are committed as the ordinary error rows they are.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass

from medpanel.agents.model.spec import ModelSpec
from medpanel.agents.types import Question, QuestionResult, TranscriptEvent
from medpanel.experiments.run.store.storage import Pair

SYSTEMATIC_KINDS = ("connection", "http_401", "http_403", "http_404", "redirect", "over_limit")
"""Failures that say nothing about the question: the endpoint, the key or the model name is wrong,
the endpoint redirects (never followed), or no request fits the token rate."""

SYSTEMATIC_AFTER = 3
"""Questions failing the same systematic way, with no call answered, before the run stops."""


@dataclass
class Held:
    pair: Pair
    result: QuestionResult
    question: Question
    cost_usd: float


class EndpointHealth:
    """Watches a session's calls (`on_event` is a transcript hook) and holds suspect failures."""

    def __init__(self, spec: ModelSpec, base_url: str | None = None, after: int = SYSTEMATIC_AFTER) -> None:
        self.spec = spec
        self.base_url = base_url
        self.after = after
        self.ok = False
        """Some call of this session reached the model and was answered."""
        self._held: list[Held] = []
        self._lock = threading.Lock()

    def on_event(self, event: TranscriptEvent) -> None:
        if not self.ok and event.kind == "call" and not event.error and not event.cache_hit:
            self.ok = True

    def hold(self, held: Held) -> tuple[bool, str | None]:
        """(held back?, the stop reason once the failure is systematic)."""
        kind = held.result.error_kind
        if self.ok or kind not in SYSTEMATIC_KINDS:
            return False, None
        with self._lock:
            if self.ok:
                return False, None
            self._held.append(held)
            same = [h for h in self._held if h.result.error_kind == kind]
        return True, self.cause(same) if len(same) >= self.after else None

    def take_committable(self) -> list[Held]:
        """Held failures to record now that the endpoint has answered (empty while it has not)."""
        if not self.ok:
            return []
        with self._lock:
            out, self._held = self._held, []
        return out

    def take_all(self) -> list[Held]:
        with self._lock:
            out, self._held = self._held, []
        return out

    def verdict(self, held: list[Held]) -> str | None:
        """The stop reason for what is still held at the end of a session, if nothing was answered."""
        if self.ok or not held:
            return None
        kind = Counter(h.result.error_kind for h in held).most_common(1)[0][0]
        return self.cause([h for h in held if h.result.error_kind == kind])

    def cause(self, same: list[Held]) -> str:
        """One line: what is wrong and what to fix, then resume."""
        spec, n = self.spec, len(same)
        url = self.base_url or spec.base_url or ("the embedded model server" if spec.backend == "local"
                                                 else "https://api.openai.com/v1")
        kind = same[0].result.error_kind
        detail = (same[0].result.error or "").split(": ", 1)[-1]
        env = spec.api_key_env or ("AZURE_OPENAI_API_KEY" if spec.backend == "azure" else "OPENAI_API_KEY")
        tail = f"({n} question{'s' * (n != 1)} failed so, no call was answered)"
        if kind == "connection":
            if "refused" in detail.lower():
                what = f"model endpoint {url} refused the connection {tail}. Start the server or fix model.base_url"
            else:
                what = f"model endpoint {url} could not be reached {tail}: {detail[:200]}. Check model.base_url"
        elif kind in ("http_401", "http_403"):
            code = kind.removeprefix("http_")
            what = (f"the endpoint {url} rejected the API key from ${env} ({code}) {tail}. Export a valid key as "
                    f"{env} (model.api_key_env names the variable)")
        elif kind == "redirect":
            what = f"the endpoint {url} redirects every request {tail}: {detail[:300]}"
        elif kind == "over_limit":
            what = f"no request fits the token rate {tail}: {detail[:300]}"
        else:
            what = (f"the endpoint {url} has no model {spec.model_name!r} (404) {tail}. Fix model.name or "
                    "model.base_url")
        return f"{what}, then resume"
