"""CLEAR's settings and its named conditions (baselines, variants and the follow-up ablation)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from medpanel.agents.freetext.files import WHERE_PUBLISHED
from medpanel.agents.freetext.tasks import SAMPLE_RUBRICS
from medpanel.agents.model.spec import ModelSpec
from medpanel.agents.settings import PipelineSettings
from medpanel.retrieval.quickstart import web_corpus_for
from medpanel.retrieval.sources import OFFLINE_WEB, CorpusSource, SourceSpec, kinds, source_class

Route = Literal["consensus", "keep_parametric", "keep_local", "accept_dynamic", "needs_more_search"]
ROUTES: tuple[str, ...] = ("consensus", "keep_parametric", "keep_local", "accept_dynamic", "needs_more_search")
Pathway = Literal["parametric", "local", "dynamic"]
PATHWAYS: tuple[Pathway, ...] = ("parametric", "local", "dynamic")
Kind = Literal["direct", "rag", "online", "clear"]



class Mode(BaseModel):
    """What one named condition runs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Kind
    retriever: str | None = None
    """Overrides `settings.retriever` (rag-bm25, rag-dense)."""
    dual: bool = False
    """A second model (`settings.assessor_model`) assesses the dynamic evidence."""
    qpis: bool = False
    """Query planning and iterative search for the dynamic pathway."""
    follow_up: bool | None = None
    """Overrides `settings.follow_up` (the follow-up ablation)."""


MODES: dict[str, Mode] = {
    "direct": Mode(kind="direct"),
    "rag-bm25": Mode(kind="rag", retriever="bm25"),
    "rag-dense": Mode(kind="rag", retriever="dense"),
    "online": Mode(kind="online"),
    "clear-default": Mode(kind="clear"),
    "clear-dual": Mode(kind="clear", dual=True),
    "clear-qpis": Mode(kind="clear", qpis=True),
    "clear-no-followup": Mode(kind="clear", follow_up=False),
}
"""Condition name -> what it runs. A condition without a variant is `clear-default`."""


class ClearSettings(PipelineSettings):
    """The `settings:` block of a `pipeline: clear` scenario."""

    corpus: str = "quickstart"
    """Local corpus NAME (or folder) of the local pathway; `quickstart` is ingested on first use."""
    retriever: Literal["bm25", "dense", "hybrid"] = "bm25"
    """Local retriever (the paper uses BM25; any retriever of the retrieval layer works)."""
    k: int = Field(default=16, ge=1, le=100)
    """Local passages per question (the paper's k=16)."""
    dynamic_source: str = OFFLINE_WEB
    """The dynamic pathway's web source (`medpanel.retrieval.sources`): `snapshot` (the offline web
    of `dynamic_corpus`), `tavily` (live search; needs TAVILY_API_KEY), or `module:Class` for your own."""
    dynamic_corpus: str | None = None
    """The offline web of `dynamic_source: snapshot`: a URL-bearing corpus of its own, never the
    local `corpus` (a run that would use one index, or shared documents, as both is refused).
    Default: the packaged `quickstart-web` when `corpus` is `quickstart`; required otherwise."""
    dynamic_k: int = Field(default=8, ge=1, le=20)
    """Dynamic documents per search (the paper's 8)."""
    passage_chars: int | None = Field(default=None, ge=100)
    """Characters of each passage shown to the candidate pathways. Unset: 600 on the embedded model,
    whole passages on every other backend."""
    verifier_local_docs: int = Field(default=6, ge=0, le=32)
    """Local passages shown to the verifier (the dynamic ones are all shown)."""
    verifier_passage_chars: int | None = Field(default=None, ge=100)
    """Characters of each passage shown to the verifier, the judge and the response generator.
    Unset: 400 on the embedded model, whole passages on every other backend."""
    llm_quality: bool = True
    """One backbone call labels every dynamic document high/medium/low (the paper's default, A.2),
    starting from the domain table's prior; the table is the fallback. `false`: the table alone."""
    assessor_model: ModelSpec | None = None
    """The second model of `clear-dual` (it assesses the dynamic evidence). Required by that variant."""
    follow_up: bool = True
    """Targeted follow-up search; `false` is the paper's Table 5 ablation (also variant clear-no-followup)."""
    max_follow_ups: int = Field(default=2, ge=0, le=10)
    """Follow-up searches per question, all purposes together (guard, audit, needs_more_search)."""
    followup_k: int | None = Field(default=None, ge=1, le=20)
    """Documents per follow-up search; `dynamic_k` when unset."""
    qpis_max_rounds: int = Field(default=3, ge=1, le=6)
    """clear-qpis: search rounds before the bundle is declared final."""
    qpis_max_queries: int = Field(default=3, ge=1, le=6)
    """clear-qpis: sub-queries per round."""
    qpis_max_docs: int = Field(default=16, ge=1, le=64)
    """clear-qpis: dynamic documents kept after merging all rounds."""
    grader_model: ModelSpec | None = None
    """Free text: the grader (LLM judge of rubric items and MedRBench answers), a role with its own
    calls in the cost ledger. The backbone when unset."""
    rubric_file: str | list[str] | None = None
    """Free text: the tasks' grading keys, the same file or folder as `dataset.path`: JSONL of rubric
    tasks (HealthBench's layout; `sample` = the packaged set) and MedRBench JSON files. No grading when unset.
    A run with free-text `dataset.parts` sets it to their files (a list), each part graded by its own."""

    @field_validator("rubric_file")
    @classmethod
    def _rubrics_exist(cls, v: str | list[str] | None) -> str | list[str] | None:
        for path in [v] if isinstance(v, str) else v or []:
            if path != SAMPLE_RUBRICS and not Path(path).expanduser().exists():
                raise ValueError(f"rubric file {path!r} not found. Give the free-text file or folder (relative to "
                                 f"the current directory) or `{SAMPLE_RUBRICS}`. Nothing is downloaded: "
                                 f"{WHERE_PUBLISHED}")
        return v

    def for_backend(self, spec: ModelSpec) -> ClearSettings:
        """These settings with the passage lengths in force for `spec` (see `ModelSpec.accommodation`)."""
        return self.model_copy(update={
            "passage_chars": spec.accommodation("passage_chars", self.passage_chars),
            "verifier_passage_chars": spec.accommodation("verifier_passage_chars", self.verifier_passage_chars)})

    @field_validator("dynamic_source")
    @classmethod
    def _web_source(cls, v: str) -> str:
        if not source_class(v).web:
            raise ValueError(f"dynamic_source {v!r} is not a web source; use one of {', '.join(kinds(web=True))}")
        return v

    def local_spec(self, retriever: str | None = None) -> SourceSpec:
        """The local pathway's corpus (`retriever` of a rag-* condition, else the setting)."""
        return SourceSpec(kind=CorpusSource.kind, corpus=self.corpus, retriever=retriever or self.retriever)

    def web_spec(self) -> SourceSpec:
        """The dynamic pathway's source (its corpus resolved when it reads one: the offline web)."""
        corpus = self.snapshot_corpus if source_class(self.dynamic_source).needs_corpus else None
        return SourceSpec(kind=self.dynamic_source, corpus=corpus)

    @model_validator(mode="after")
    def _web_is_not_local(self) -> ClearSettings:
        if (source_class(self.dynamic_source).needs_corpus and self.dynamic_corpus is not None
                and self.dynamic_corpus == self.corpus):
            raise ValueError(f"settings.dynamic_corpus is the local corpus {self.corpus!r}: the offline web must be a "
                             f"corpus of its own (e.g. the MedQuAD pages, with the PubMed abstracts as the local "
                             f"corpus; docs/methods/knowledge.md: Retrieval corpora)")
        return self

    @property
    def snapshot_corpus(self) -> str:
        web = web_corpus_for(self.corpus, self.dynamic_corpus)
        if web is None:
            raise ValueError(f"the offline web needs a corpus of its own: set settings.dynamic_corpus to a "
                             f"URL-bearing corpus other than the local {self.corpus!r} (docs/methods/knowledge.md: "
                             "Retrieval corpora)")
        return web

    @property
    def follow_k(self) -> int:
        return self.followup_k or self.dynamic_k


def mode_of(variant: object) -> Mode:
    if variant is None or variant == "":
        return MODES["clear-default"]
    return MODES[str(variant)]
