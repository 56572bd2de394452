"""A child process of a runner (`run.processes`): `python -m medpanel.experiments.run.member RUN_DIR`.

Started by `processes.Group`, never by hand. Its own entry point rather than a `medpanel` command,
so it imports the runner and nothing of the CLI or the report (a second of CPU less before it
takes its first question). Its part (`MemberSpec`) comes on stdin once the runner's study is
open; its tally and final status go to stdout as JSON lines the runner reads. Exit codes as the
CLI's: 0 the run is complete, 3 stopped, 2 a problem named in one line.
"""

from __future__ import annotations

import os
import signal

# Until the session installs its own handlers (`signals.py`), a Ctrl-C or SIGTERM the runner
# forwards ends this process quietly: it has claimed nothing yet. Set before the imports below,
# which take seconds.
for _sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(_sig, lambda signum, frame: os._exit(3))

import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from medpanel.agents.model.replay import Replay  # noqa: E402
from medpanel.experiments.errors import UserError  # noqa: E402
from medpanel.experiments.run.processes import MemberSpec, member_reporter  # noqa: E402
from medpanel.experiments.run.runner import Runner  # noqa: E402


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
