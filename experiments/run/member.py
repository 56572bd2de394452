"""A child process of a runner (`run.processes`): `python -m medpanel.experiments.run.member RUN_DIR`.

Started by `processes.Group`, never by hand. Its own entry point rather than a `medpanel` command,
so it imports the runner and nothing of the CLI or the report (a second of CPU less before it
takes its first question). Its part (`MemberSpec`) comes on stdin once the runner's study is
open; its tally and final status go to stdout as JSON lines the runner reads. Exit codes as the
CLI's: 0 the run is complete, 3 stopped, 2 a problem named in one line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from medpanel.agents.model.replay import Replay
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.processes import MemberSpec, member_reporter
from medpanel.experiments.run.runner import Runner


def main(run_dir: Path) -> int:
    raw = sys.stdin.readline()
    if not raw.strip():
        return 0  # the runner found nothing for this child to do
    spec = MemberSpec.model_validate_json(raw)
    runner = Runner.open(run_dir, member=spec)
    runner.override(**spec.run)
    runner.retry_errors = spec.retry_errors
    runner.replay = Replay(Path(spec.replay), strict=spec.replay_strict) if spec.replay else None
    hook, flush = member_reporter()
    status = runner.run(progress=hook)
    flush(runner.tally)
    sys.stdout.write(json.dumps({"status": status}) + "\n")
    sys.stdout.flush()
    return 0 if status["state"] == "complete" else 3


if __name__ == "__main__":
    try:
        sys.exit(main(Path(sys.argv[1])))
    except UserError as exc:
        sys.stderr.write(f"error: {exc}\n")
        sys.exit(exc.exit_code)
