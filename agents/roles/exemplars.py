"""Where the few-shot methods' exemplars come from, and the rule that keeps them off the test items.

Two sources, chosen by `settings.exemplars`:

- `builtin` (default): `agents/roles/benchmark.exemplars.jsonl`, six questions the medpanel team wrote
  for this purpose (with a one-sentence rationale each). They are no benchmark's items, so they
  cannot be any test question.
- a path to a JSONL file in MedAgentsBench's format (`question`, `options`, `answer_idx`, optional
  `rationale`, `realidx`): a held-apart split of the user's own, e.g. a `train.jsonl`. A file named
  like a test split (`test*.jsonl`) is refused, since MedAgentsBench's test files are what it
  evaluates.

Whatever the source, an exemplar whose normalised stem equals the asked question's is excluded for
that question (and the exclusion is recorded), so a pool that overlaps the run's questions never
shows a question its own gold answer. The kNN selection (MedPrompt) ranks the pool by BM25 over
the stems, through the same bm25s tokeniser as the corpora (`retrieval/bm25_index.py`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cached_property
from importlib import resources
from pathlib import Path

from medpanel.agents.plan import PlanError
from medpanel.agents.types import Question
from medpanel.inputs import InputFileError, read_input_text
from medpanel.retrieval import bm25_index

BUILTIN = "builtin"
BUILTIN_FILE = ("medpanel.agents.roles", "benchmark.exemplars.jsonl")


@dataclass(frozen=True)
class Exemplar:
    eid: str
    question: str
    options: dict[str, str]
    answer: str
    rationale: str = ""

    def block(self, *, with_rationale: bool) -> str:
        opts = "\n".join(f"({k}) {v}" for k, v in self.options.items())
        why = f"\nReasoning: {self.rationale}" if with_rationale and self.rationale else ""
        return f"Question:\n{self.question}\n\nOptions:\n{opts}{why}\nAnswer: {self.answer}"

    def qa_block(self) -> str:
        """The question and its answer's text, no options and no letter (the benchmark's medprompt-3
        shows its kNN examples this way)."""
        return f"Q: {self.question}\nA: {self.options[self.answer]}"


def normalise(text: str) -> str:
    """A stem as compared for overlap: lowercase, whitespace collapsed."""
    return re.sub(r"\s+", " ", text).strip().lower()


def _parse(text: str, where: str) -> list[Exemplar]:
    out: list[Exemplar] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
            options = {str(k): str(v) for k, v in raw["options"].items()}
            answer = str(raw["answer_idx"])
            question = str(raw["question"])
        except (json.JSONDecodeError, KeyError, AttributeError, TypeError) as exc:
            raise PlanError(f"{where}:{lineno}: not an exemplar ({type(exc).__name__}: {exc}); each line needs "
                            "question, options and answer_idx", field="settings.exemplars") from None
        if answer not in options:
            raise PlanError(f"{where}:{lineno}: answer_idx {answer!r} is not one of the options",
                            field="settings.exemplars")
        out.append(Exemplar(eid=str(raw.get("realidx", lineno)), question=question, options=options,
                            answer=answer, rationale=str(raw.get("rationale") or "")))
    if not out:
        raise PlanError(f"{where}: no exemplars in the file", field="settings.exemplars")
    return out


class ExemplarPool:
    """The exemplars of one run, loaded once (`Pipeline.prepare`), read by every worker thread."""

    def __init__(self, source: str) -> None:
        self.source = source
        if source == BUILTIN:
            package, name = BUILTIN_FILE
            text = resources.files(package).joinpath(name).read_text(encoding="utf-8")
            self.items = _parse(text, f"builtin:{name}")
            return
        path = Path(source)
        if re.match(r"test", path.name, flags=re.IGNORECASE):
            raise PlanError(f"{path} looks like a test split; exemplars must come from a split that is not "
                            "evaluated (e.g. train.jsonl), or use exemplars: builtin", field="settings.exemplars")
        try:  # checked first (a FIFO or a device is refused before a byte is read), bounded, UTF-8
            text = read_input_text(path, what="exemplar file",
                                   fix="Check settings.exemplars, or use exemplars: builtin")
        except InputFileError as exc:
            raise PlanError(str(exc), field="settings.exemplars") from None
        self.items = _parse(text, str(path))

    @cached_property
    def _index(self) -> object:
        return bm25_index.build_index([e.question for e in self.items])

    def allowed(self, question: Question) -> tuple[list[Exemplar], list[str]]:
        """The pool less any item with this question's stem; and the excluded ids."""
        stem = normalise(question.text)
        keep = [e for e in self.items if normalise(e.question) != stem]
        return keep, [e.eid for e in self.items if normalise(e.question) == stem]

    def first(self, question: Question, k: int) -> tuple[list[Exemplar], list[str]]:
        """Few-shot: the first k allowed exemplars in file order (the same for every question)."""
        keep, excluded = self.allowed(question)
        return keep[:k], excluded

    def nearest(self, question: Question, k: int) -> tuple[list[Exemplar], list[str]]:
        """MedPrompt's kNN: the k allowed exemplars with the highest BM25 score against the stem;
        ties and zero scores fall back to file order, so the choice is deterministic."""
        keep, excluded = self.allowed(question)
        tokens = bm25_index.tokenize_query(question.text)
        scores: dict[str, float] = {}
        if tokens:
            index = self._index
            rows, vals = index.retrieve([tokens], k=len(self.items), show_progress=False,  # type: ignore[attr-defined]
                                        n_threads=0, return_as="tuple")
            scores = {self.items[r].eid: float(s) for r, s in zip(rows[0].tolist(), vals[0].tolist(), strict=True)}
        order = {e.eid: i for i, e in enumerate(self.items)}
        ranked = sorted(keep, key=lambda e: (-scores.get(e.eid, 0.0), order[e.eid]))
        return ranked[:k], excluded
