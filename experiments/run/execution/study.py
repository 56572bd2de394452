"""The Optuna study a session works through: a GridSampler over shards of the run's pairs.

A resume on one machine opens a new study whose grid is the shards still to do (a GridSampler
whose points were all visited stops after one trial, see `runner.py`); shared storage keeps one
study that every worker loads; a child process of the runner (`processes.py`) loads its runner's.
"""

from __future__ import annotations

from medpanel.experiments.run.sources.quiet import no_widget_notice

with no_widget_notice():  # optuna imports tqdm.auto: see quiet.py
    import optuna
    from optuna.trial import TrialState


def member_study(storage: optuna.storages.RDBStorage, grid: list[int], name: str, index: int) -> optuna.Study:
    """A member's: its runner's study `name` over the same grid (the GridSampler checks it); another
    seed (its index), so its random pick among the unvisited shards is not the runner's."""
    sampler = optuna.samplers.GridSampler({"shard": grid}, seed=index)
    return optuna.load_study(study_name=name, storage=storage, sampler=sampler)


def shared_study(storage: optuna.storages.RDBStorage, grid: list[int]) -> optuna.Study:
    """Shared storage's: every worker loads the one study; the GridSampler hands each shard to one
    trial number, claims keep pairs exclusive, and helping picks up what a finished grid leaves."""
    sampler = optuna.samplers.GridSampler({"shard": grid}, seed=0)
    return optuna.create_study(study_name="medpanel", storage=storage, sampler=sampler,
                               direction="maximize", load_if_exists=True)


def new_study(storage: optuna.storages.RDBStorage, grid: list[int]) -> optuna.Study:
    """A runner's on its own storage: a new study over the shards still to do."""
    sampler = optuna.samplers.GridSampler({"shard": grid}, seed=0)
    # The storage's own listing, read once: `get_all_study_summaries` copied every trial of every
    # study (for best values nobody reads here), and it was called twice.
    studies = storage.get_all_studies()
    names = {s.study_name for s in studies}
    for earlier in studies:
        # Trials left RUNNING belong to a runner that was killed: close them as FAILED.
        for t in storage.get_all_trials(earlier._study_id, deepcopy=False, states=(TrialState.RUNNING,)):
            storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
    name = "medpanel" if "medpanel" not in names else f"medpanel-resume-{len(names)}"
    return optuna.create_study(study_name=name, storage=storage, sampler=sampler, direction="maximize")
