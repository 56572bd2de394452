"""What a fresh interpreter has imported after running some code: the import-path tests' probe (a
test's own process has imported too much to tell)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterable


def loaded_after(code: str, modules: Iterable[str]) -> list[str]:
    """Those of `modules` that a fresh interpreter has imported after running `code`: the module
    itself or any submodule of it, in the order given."""
    probe = textwrap.dedent(f"""
        import sys
        {code}
        watched = {list(modules)!r}
        loaded = {{name.split(".")[0] for name in sys.modules}} | set(sys.modules)
        print("LOADED", ",".join(m for m in watched if m in loaded or any(k.startswith(m + ".") for k in sys.modules)))
    """)
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.strip().splitlines()[-1]
    assert line.startswith("LOADED"), proc.stdout
    return [m for m in line.removeprefix("LOADED").strip().split(",") if m]
