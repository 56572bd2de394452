"""medpanel: LLM specialist panels with a meta-level Challenger, knowledge and specialist
recruitment, and CLEAR cross-source evidence adjudication, run as reproducible ablations.

The code lives in three folders installed under this namespace: `medpanel.agents` (roles,
pipelines, model backends), `medpanel.retrieval` (corpora, retrievers, evidence sources) and
`medpanel.experiments` (scenarios, runner, reports, viewer, CLI). This module is the public face:

- `run(scenario, **overrides)` (`if_exists="resume"` goes on with a `run_dir` that holds the run),
  `resume(run_dir)` and `load_run(run_dir)`, whose `Run` gives `tables()` by name, tidy
  `to_pandas()` and `calls()` frames (see `medpanel.api`, docs/python-api.md);
- what a method of your own is made of: `Pipeline`, `ConditionPlan`, `PipelineSettings`,
  `Summary`, `Outcome`, `register_pipeline`; a role's agent, `RoleAgent`, with `answer_model`
  (whose replies are `AnswerReply`s), `letters_of` and `format_question`; the `QuestionSession`
  every call of a question goes through; `TableSpec`/`Table` for its report tables; the typed acts
  its events carry (`AnswerAt`, `Critique`, `Brief`, `Recruitment`, `FocusedRound`, `GroupStart`,
  `Vote`; an evidence adjudication's `PathwayAnswer`, `Verdict`, `FollowUpSearch`, `Ruling`; `Act`
  is their union), from which the answer transition tables are built;
- evidence sources of your own: `Source`, `SourceSpec`, `register_source`.

docs/architecture.md says which room holds what.
"""

from importlib import metadata as _metadata
from typing import TYPE_CHECKING

from medpanel.plugins.lazy_names import lazy_names

if TYPE_CHECKING:

    from medpanel.agents.events import (
        Act,
        AnswerAt,
        Brief,
        Critique,
        FocusedRound,
        FollowUpSearch,
        GroupStart,
        PathwayAnswer,
        Recruitment,
        Ruling,
        Verdict,
        Vote,
    )
    from medpanel.agents.model.agent import RoleAgent
    from medpanel.agents.model.client import QuestionSession
    from medpanel.agents.model.structured import AnswerReply, answer_model, letters_of
    from medpanel.agents.pipelines.base import Outcome, Pipeline, PipelineSettings
    from medpanel.agents.pipelines.registry import register as register_pipeline
    from medpanel.agents.plan import ConditionPlan, PlanError
    from medpanel.agents.prompting import format_question
    from medpanel.agents.summary import Summary
    from medpanel.agents.tables import Table, TableSpec
    from medpanel.agents.types import Condition, Question, TranscriptEvent
    from medpanel.api import Run, RunResult, load_run, resume, run
    from medpanel.experiments.errors import UserError
    from medpanel.retrieval.sources import Source, SourceSpec, register_source

# Where each public name lives. They are imported on first use (PEP 562), so that `import
# medpanel.experiments.cli` and other sub-packages do not pay for AutoGen, openai and scipy just to
# print `--help` or a report.
_NAMES: dict[str, tuple[str, str]] = {
    **{name: ("medpanel.agents.events", name) for name in
       ("Act", "AnswerAt", "Brief", "Critique", "FocusedRound", "FollowUpSearch", "GroupStart", "PathwayAnswer",
        "Recruitment", "Ruling", "Verdict", "Vote")},
    "Condition": ("medpanel.agents.types", "Condition"),
    "ConditionPlan": ("medpanel.agents.plan", "ConditionPlan"),
    "Outcome": ("medpanel.agents.pipelines.base", "Outcome"),
    "Pipeline": ("medpanel.agents.pipelines.base", "Pipeline"),
    "PipelineSettings": ("medpanel.agents.pipelines.base", "PipelineSettings"),
    "PlanError": ("medpanel.agents.plan", "PlanError"),
    "Question": ("medpanel.agents.types", "Question"),
    "QuestionSession": ("medpanel.agents.model.client", "QuestionSession"),
    "RoleAgent": ("medpanel.agents.model.agent", "RoleAgent"),
    "Run": ("medpanel.api", "Run"),
    "RunResult": ("medpanel.api", "RunResult"),
    "Source": ("medpanel.retrieval.sources", "Source"),
    "SourceSpec": ("medpanel.retrieval.sources", "SourceSpec"),
    "Summary": ("medpanel.agents.summary", "Summary"),
    "Table": ("medpanel.agents.tables", "Table"),
    "TableSpec": ("medpanel.agents.tables", "TableSpec"),
    "TranscriptEvent": ("medpanel.agents.types", "TranscriptEvent"),
    "UserError": ("medpanel.experiments.errors", "UserError"),
    "AnswerReply": ("medpanel.agents.model.structured", "AnswerReply"),
    "answer_model": ("medpanel.agents.model.structured", "answer_model"),
    "format_question": ("medpanel.agents.prompting", "format_question"),
    "letters_of": ("medpanel.agents.model.structured", "letters_of"),
    "load_run": ("medpanel.api", "load_run"),
    "register_pipeline": ("medpanel.agents.pipelines.registry", "register"),
    "register_source": ("medpanel.retrieval.sources", "register_source"),
    "resume": ("medpanel.api", "resume"),
    "run": ("medpanel.api", "run"),
}


if not TYPE_CHECKING:  # the type checker reads the imports above, where a misspelt name is an error
    __getattr__, __dir__ = lazy_names(globals(), _NAMES)


try:
    __version__ = _metadata.version("medpanel")
except _metadata.PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+local"

__all__ = [
    "Act",
    "AnswerAt",
    "AnswerReply",
    "Brief",
    "Condition",
    "ConditionPlan",
    "Critique",
    "FocusedRound",
    "FollowUpSearch",
    "GroupStart",
    "Outcome",
    "PathwayAnswer",
    "Pipeline",
    "PipelineSettings",
    "PlanError",
    "Question",
    "QuestionSession",
    "Recruitment",
    "RoleAgent",
    "Ruling",
    "Run",
    "RunResult",
    "Source",
    "SourceSpec",
    "Summary",
    "Table",
    "TableSpec",
    "TranscriptEvent",
    "UserError",
    "Verdict",
    "Vote",
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
