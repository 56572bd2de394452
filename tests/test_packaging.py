"""pyproject ships every package and every data file of the three code folders.

`pip install .` copies only the packages listed in `[tool.setuptools] packages` and the data files
their `package-data` globs match: a new room (a folder with an __init__.py) or a prompt file that
no glob covers would be missing from a non-editable install while every test of an editable one
passes. So the lists are checked against the folders here.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]
CODE = {"agents": "medpanel.agents", "retrieval": "medpanel.retrieval", "experiments": "medpanel.experiments",
        "methods": "medpanel.methods",
        "medpanel": "medpanel"}


def _config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]


def _packages() -> dict[str, Path]:
    """Every package folder of the code folders, by its import name (the links in medpanel/ skipped)."""
    out: dict[str, Path] = {}
    for folder, name in CODE.items():
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            rel = init.parent.relative_to(ROOT / folder)
            if folder == "medpanel" and rel.parts and (ROOT / folder / rel.parts[0]).is_symlink():
                continue  # medpanel/agents etc. are links to the code folders
            out[".".join([name, *rel.parts])] = init.parent
    return out


def test_every_package_folder_is_listed_with_its_folder() -> None:
    config = _config()
    found = _packages()
    assert sorted(config["packages"]) == sorted(found)
    for name, folder in found.items():
        assert ROOT / config["package-dir"][name] == folder, name


def test_every_data_file_is_matched_by_a_package_data_glob() -> None:
    config = _config()
    found = _packages()
    globs = config["package-data"]
    missing = []
    for name, folder in found.items():
        for path in folder.iterdir():
            if (path.is_dir() and (path / "__init__.py").exists()) or path.name.startswith((".", "__pycache__")):
                continue
            files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
            for f in files:
                if f.suffix in (".py", ".pyc") or "__pycache__" in f.parts:
                    continue
                rel = f.relative_to(folder).as_posix()
                if not any(fnmatch.fnmatch(rel, g) for g in globs.get(name, [])):
                    missing.append(f"{name}: {rel}")
    assert not missing, f"not shipped by pip install .: {missing}"
