"""MedRBench cases as free-text tasks: the published JSON files, read offline.

MedRBench (MAGIC-AI4Med/MedRBench, `data/MedRBench/`) ships two JSON files, each one object keyed
by the case's PMC id:

- `diagnosis_957_cases_with_rare_disease_491.json`: `generate_case` holds `case_summary`,
  `differential_diagnosis`, `final_diagnosis` and `diagnosis_results` (the reference diagnosis);
- `treatment_496_cases_with_rare_disease_165.json`: `generate_case` holds `case_summary`,
  `treatment_planning_analysis` and `treatment_plan_results` (the reference plan);

beside `raw_case` (the case report itself), `body_category`, `disorder_category`, `receive_time`
and `checked_rare_disease`. The stage of a file is the reference it carries. The agents see the
case summary only (the benchmark's own inference prompts send `case_summary` alone); the
reference, the differential, the analysis and the raw report stay here for the judge
(`roles/medrjudge.py`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from medpanel.agents.types import Question

Stage = Literal["diagnosis", "treatment"]
STAGES: tuple[Stage, ...] = ("diagnosis", "treatment")
DATASETS: dict[Stage, str] = {"diagnosis": "medrbench-diagnosis", "treatment": "medrbench-treatment"}
"""The run's dataset name of each stage (Table 3's columns)."""
REFERENCE: dict[Stage, str] = {"diagnosis": "diagnosis_results", "treatment": "treatment_plan_results"}
PUBLISHED_ANALYSIS = "published_analysis"
"""What a treatment grade records as its `support` when the judge read the case's published
treatment-planning analysis (no live web search): the judge writes it, Table 3's note reads it."""
PUBLISHED = ("MedRBench is published at https://github.com/MAGIC-AI4Med/MedRBench (data/MedRBench/"
             "diagnosis_957_cases_with_rare_disease_491.json and treatment_496_cases_with_rare_disease_165.json)")

_ASK: dict[Stage, str] = {
    "diagnosis": "Study this patient case and give the final diagnosis. Reply with the diagnosis only.",
    "treatment": "Study this patient case and give the treatment plan you would select for this patient. "
                 "Reply with the treatment plan only.",
}


class MedRCase(BaseModel):
    """One MedRBench case: what the agents are asked, and what only the judge reads."""

    stage: Stage
    qid: str
    summary: str
    reference: str
    """`diagnosis_results` or `treatment_plan_results`: the judge's reference answer."""
    analysis: str = ""
    """Treatment: `treatment_planning_analysis`, the judge's supporting information."""
    body_category: list[str] = []
    rare: bool = False

    @property
    def dataset(self) -> str:
        return DATASETS[self.stage]

    @property
    def key(self) -> str:
        return f"{self.dataset}__{self.qid}"

    def text(self) -> str:
        return f"{_ASK[self.stage]}\n\nPatient case:\n{self.summary.strip()}"

    def question(self) -> Question:
        return Question(dataset=self.dataset, qid=self.qid, text=self.text(), options={}, gold=())


class CaseFileError(ValueError):
    """A MedRBench file that is not in the published layout; the message names file, case and fix."""


def _text(value: Any, where: str, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise CaseFileError(f"{where}: {field} is {'missing' if value is None else repr(value)[:40]}, not text. "
                            "Every MedRBench case needs it (the published files have it)")
    return value


def is_medrbench(data: Any) -> bool:
    """The published layout: an object of cases, each with a `generate_case` object."""
    return (isinstance(data, dict) and bool(data)
            and all(isinstance(v, dict) and isinstance(v.get("generate_case"), dict) for v in data.values()))


def read_medrbench(file: Path, data: Any | None = None) -> list[MedRCase]:
    """Every case of one MedRBench file, in file order (`data`: the file already parsed)."""
    if data is None:
        try:
            data = json.loads(file.read_text(encoding="utf-8-sig"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise CaseFileError(f"{file}: not JSON ({exc}). Give MedRBench's published JSON file") from None
    if not is_medrbench(data):
        raise CaseFileError(f"{file}: not MedRBench's layout (an object of PMC id -> {{generate_case: {{...}}}}). "
                            f"{PUBLISHED}")
    cases: list[MedRCase] = []
    for pmc, case in data.items():
        where = f"{file} (case {pmc})"
        gen = case["generate_case"]
        stages = [s for s in STAGES if REFERENCE[s] in gen]
        if len(stages) != 1:
            raise CaseFileError(f"{where}: generate_case has {'both' if stages else 'neither'} diagnosis_results "
                                "and treatment_plan_results; a published case has exactly one")
        stage = stages[0]
        rare = case.get("checked_rare_disease") or []
        cases.append(MedRCase(
            stage=stage, qid=str(pmc).strip(), summary=_text(gen.get("case_summary"), where, "case_summary"),
            reference=_text(gen.get(REFERENCE[stage]), where, REFERENCE[stage]),
            analysis=str(gen.get("treatment_planning_analysis") or ""),
            body_category=[str(b) for b in case.get("body_category") or []], rare=bool(rare)))
    return cases
