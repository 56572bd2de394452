"""Hand-built run.json records for tests of the report's functions (`RunRecord`, as the readers get it)."""

from __future__ import annotations

from typing import Any

from medpanel.experiments.run.store.records import RunRecord


def run_record(doc: dict[str, Any]) -> RunRecord:
    """`doc` as a run.json: a name, an empty scenario and each condition's pipeline filled in where
    the test leaves them out (the tables read only the parts a test gives)."""
    conditions = [{"pipeline": "panel", **c} for c in doc.get("conditions", [])]
    return RunRecord.model_validate({"name": "test", "scenario": {}, **doc, "conditions": conditions})
