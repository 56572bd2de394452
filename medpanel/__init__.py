"""medpanel: LLM specialist panels with a meta-level Challenger, knowledge and specialist
recruitment, and CLEAR cross-source evidence adjudication, run as reproducible ablations.

The code lives in three folders installed under this namespace: `medpanel.agents` (roles,
pipelines, model backends), `medpanel.retrieval` (corpora, retrievers, evidence sources) and
`medpanel.experiments` (scenarios, runner, reports, viewer, CLI). This module is the public face:

- `run(scenario, **overrides)`, `resume(run_dir)` and `load_run(run_dir)` (see `medpanel.api`);
- what a method of your own is made of: `Pipeline`, `ConditionPlan`, `PipelineSettings`,
  `Summary`, `Outcome`, `register_pipeline`; a role's agent, `RoleAgent`, with `answer_model`,
  `letters_of` and `format_question`; the `QuestionSession` every call of a question goes
  through; `TableSpec`/`Table` for its report tables;
- evidence sources of your own: `Source`, `SourceSpec`, `register_source`.

docs/architecture.md says which room holds what.
"""

from importlib import metadata as _metadata

from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.structured import answer_model, letters_of
from medpanel.agents.pipelines.base import ConditionPlan, Outcome, Pipeline, PipelineSettings, PlanError, Summary
from medpanel.agents.pipelines.registry import register as register_pipeline
from medpanel.agents.prompting import format_question
from medpanel.agents.tables import Table, TableSpec
from medpanel.agents.types import Condition, Question, TranscriptEvent
from medpanel.api import Run, RunResult, load_run, resume, run
from medpanel.experiments.errors import UserError
from medpanel.retrieval.sources import Source, SourceSpec, register_source

try:
    __version__ = _metadata.version("medpanel")
except _metadata.PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+local"

__all__ = [
    "Condition",
    "ConditionPlan",
    "Outcome",
    "Pipeline",
    "PipelineSettings",
    "PlanError",
    "Question",
    "QuestionSession",
    "RoleAgent",
    "Run",
    "RunResult",
    "Source",
    "SourceSpec",
    "Summary",
    "Table",
    "TableSpec",
    "TranscriptEvent",
    "UserError",
    "__version__",
    "answer_model",
    "format_question",
    "letters_of",
    "load_run",
    "register_pipeline",
    "register_source",
    "resume",
    "run",
]
