"""A runner's new study on its own storage: trials a killed runner left RUNNING are closed as
FAILED, the name says which session it is, and the storage's listing is read once."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.study._frozen import FrozenStudy
from optuna.trial import TrialState

from medpanel.experiments.run.execution.study import new_study


def test_a_resumes_study_fails_the_killed_runners_trials_and_takes_the_next_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'study.db'}")
    first = new_study(storage, [0, 1, 2])
    assert first.study_name == "medpanel"
    done, killed = first.ask(), first.ask()
    first.tell(done, 1.0)
    listings: list[int] = []
    original = storage.get_all_studies

    def listing() -> list[FrozenStudy]:
        listings.append(1)
        return original()

    monkeypatch.setattr(storage, "get_all_studies", listing)
    monkeypatch.setattr(optuna, "get_all_study_summaries", lambda *a, **k: pytest.fail("summaries read"))
    second = new_study(storage, [1, 2])
    assert second.study_name == "medpanel-resume-1"
    states = {t.number: t.state for t in first.get_trials(deepcopy=False)}
    assert states == {done.number: TrialState.COMPLETE, killed.number: TrialState.FAIL}
    assert listings == [1]
    third = new_study(storage, [2])
    assert third.study_name == "medpanel-resume-2"
    storage.engine.dispose()
