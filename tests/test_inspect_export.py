"""`medpanel export --format inspect`: real Inspect AI logs, read back and served by `inspect view`."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from medpanel.experiments.cli.main import app
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.rundir import load_run

from .inspect_fixtures import grid_run

log = pytest.importorskip("inspect_ai.log", reason="the [inspect] extra is not installed")
CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("inspect")
    run_dir = grid_run(base)  # the panel's c/r 2x2 grid: c1 conditions have Challenger messages
    out = base / "logs"
    res = CliRunner().invoke(app, ["export", str(run_dir), "--format", "inspect", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "4 Inspect logs written" in res.output
    return run_dir, out


def test_every_log_reads_back_with_the_runs_counts_scores_and_usage(exported: tuple[Path, Path]) -> None:
    run_dir, out = exported
    data = load_run(run_dir)
    files = sorted(out.glob("*.eval"))
    assert len(files) == len(data.conditions) == 4
    seen = set()
    for f in files:
        ev = log.read_eval_log(str(f))
        cond = ev.eval.metadata["condition"]
        seen.add(cond)
        rows = {f"{r.dataset}:{r.qid}": r for r in data.rows if r.condition == cond}
        assert ev.status == "success"
        assert len(ev.samples) == len(rows) == ev.results.total_samples == 3
        assert ev.eval.metadata["commit"] == data.meta["git"]["commit"]
        assert ev.eval.metadata["config"]["scenario"]["flags"] == {"c": [0, 1], "r": [0, 1]}
        want = {"correct": "C", "wrong": "I", "invalid": "N", "error": "N"}
        total_in = total_out = 0
        for s in ev.samples:
            row = rows[str(s.id)]
            assert s.scores["choice"].value == want[row.status]
            assert s.output.completion == row.answer
            assert s.target == row.gold
            assert s.choices and s.input.startswith("Question:")
            doc = data.transcript(row)
            events = doc["events"]
            # one message per event, in order, after the question; role and agent kept in metadata
            assert len(s.messages) == len(events) + 1
            assert [m.metadata["agent"] for m in s.messages[1:]] == [e["agent"] for e in events]
            assert [m.metadata["medpanel_role"] for m in s.messages[1:]] == [e["role"] for e in events]
            calls = [e for e in events if e["kind"] == "call"]
            p = sum(e["usage"]["prompt_tokens"] for e in calls)
            c = sum(e["usage"]["completion_tokens"] for e in calls)
            assert s.model_usage["scripted"].input_tokens == p and s.model_usage["scripted"].output_tokens == c
            assert s.metadata["tokens"] == row.tokens and s.metadata["calls"] == row.calls
            total_in, total_out = total_in + p, total_out + c
            if cond.startswith("c1"):
                assert any(m.metadata["medpanel_role"] == "challenger" for m in s.messages[1:])
            else:
                assert all(m.metadata["medpanel_role"] != "challenger" for m in s.messages[1:])
        assert ev.stats.model_usage["scripted"].input_tokens == total_in
        assert ev.stats.model_usage["scripted"].output_tokens == total_out
        acc = sum(r.correct for r in rows.values()) / len(rows)
        assert ev.results.scores[0].metrics["accuracy"].value == pytest.approx(acc)
        assert Counter(s.scores["choice"].value for s in ev.samples)["C"] == sum(r.correct for r in rows.values())
    assert seen == set(data.conditions)


def test_without_a_run_dir_it_is_a_user_error(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["export", str(tmp_path / "nope"), "--format", "inspect"])
    assert isinstance(res.exception, UserError) and "does not exist" in str(res.exception)
    assert not (tmp_path / "nope").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return bytes(resp.read())


@pytest.mark.skipif(not CHROMIUM.exists() or not shutil.which("inspect", path=str(Path(sys.executable).parent)),
                    reason="headless Chromium or the inspect command is missing")
def test_inspect_view_serves_the_logs_and_a_sample_shows_the_challenger(exported: tuple[Path, Path],
                                                                        tmp_path: Path) -> None:
    _, out = exported
    port = _free_port()
    inspect_cmd = str(Path(sys.executable).parent / "inspect")
    server = subprocess.Popen([inspect_cmd, "view", "--host", "127.0.0.1", "--port", str(port), "--log-dir", str(out)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                listing = json.loads(_get(f"{base}/api/logs"))
                break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail("inspect view did not start")
        names = sorted(Path(urllib.parse.urlparse(f["name"]).path).name for f in listing["files"])
        assert names == sorted(p.name for p in out.glob("*.eval"))
        c1r1 = next(p for p in out.glob("*.eval") if "-c1r1-" in p.name)
        # The sample exactly as the viewer receives it from its own API.
        served = json.loads(_get(f"{base}/api/logs/{urllib.parse.quote(str(c1r1), safe='')}"))
        sample = next(s for s in served["samples"] if s["id"] == "medqa:t1")
        challenger = [m for m in sample["messages"] if (m.get("metadata") or {}).get("medpanel_role") == "challenger"]
        assert challenger and challenger[0]["role"] == "assistant" and challenger[0]["content"]
        # The sample page, rendered by the viewer's own app in headless Chromium.
        page = f"{base}/#/logs/{c1r1.name}/samples/sample/medqa%3At1/1/messages"
        flags = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=8000"]
        png = tmp_path / "sample.png"
        shot = subprocess.run([*flags, "--window-size=1280,1000", f"--screenshot={png}", page],
                              capture_output=True, text=True, timeout=60)
        assert shot.returncode == 0, shot.stderr[-2000:]
        from matplotlib.image import imread

        pixels = imread(png)
        assert pixels.shape[:2] == (1000, 1280) and float(pixels[..., :3].std()) > 0.02, "blank screenshot"
        dom = subprocess.run([*flags, "--dump-dom", page], capture_output=True, text=True, timeout=60).stdout
        # The viewer's app ran and routed to this log's sample medqa:t1 and its Messages tab. Headless
        # Chromium's app does not fetch the sample's body within the budget here (its server sees only
        # /api/logs and /api/app-config), so the pane reads "No messages": the Challenger message
        # is checked above in the JSON the same server serves to the app.
        assert 'id="messages-contents"' in dom and "Sample medqa:t1 (Epoch 1)" in dom
        assert c1r1.name.split("+")[-1].split("_", 1)[1] in dom  # the breadcrumb names the exported file
    finally:
        server.terminate()
        server.wait(timeout=10)
