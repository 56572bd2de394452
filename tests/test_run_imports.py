"""`medpanel run`'s way to its first question imports no corpus store and no web client: a run
without retrieval never uses them, and their imports were a fifth of a second of every process's
start (the runner's and each child's of `run.processes`). `medpanel.retrieval` loads its names on
first use. Each check runs in a fresh interpreter, so what another test imported hides nothing."""

from __future__ import annotations

import pytest

import medpanel.retrieval as retrieval

from .import_probe import loaded_after

NOT_ON_THE_RUN_PATH = {
    "httpx": "the web search backends and the local server's launch poll",
    "medpanel.retrieval.corpus": "the corpus store (bm25s + ChromaDB)",
    "medpanel.retrieval.search": "the web search backends",
    "medpanel.retrieval.retrievers": "the retrievers",
    "chromadb": "the dense index",
    "bm25s": "the sparse index",
}


def _loaded_after(code: str) -> list[str]:
    return loaded_after(code, sorted(NOT_ON_THE_RUN_PATH))


def test_the_run_command_and_its_runner_import_no_corpus_or_web_client() -> None:
    found = _loaded_after("""
        import typer
        from medpanel.experiments.cli.main import app
        typer.main.get_command(app).get_command(None, "run")
        import medpanel.experiments.cli.run
        import medpanel.experiments.run.execution.runner
        import medpanel.retrieval.errors
    """)
    assert found == [], {m: NOT_ON_THE_RUN_PATH[m] for m in found}


def test_the_panels_pipeline_imports_no_web_client() -> None:
    # The panel's knowledge channel imports the sources (corpus and web) for its settings; the web
    # client is imported by a Tavily search only.
    found = _loaded_after("""
        from medpanel.agents.pipelines.registry import get_pipeline
        get_pipeline("panel")
        from medpanel.retrieval.search import SnapshotSearch, TavilySearch
    """)
    assert "httpx" not in found, found


def test_a_retrieval_name_loads_its_own_submodule() -> None:
    assert _loaded_after("from medpanel.retrieval import RetrievalError") == []
    assert "medpanel.retrieval.corpus" in _loaded_after("from medpanel.retrieval import ingest")


@pytest.mark.parametrize("name", retrieval.__all__)
def test_every_public_name_is_its_submodules_object(name: str) -> None:
    module = __import__(f"medpanel.retrieval.{retrieval._MODULE_OF[name]}", fromlist=[name])
    assert getattr(retrieval, name) is getattr(module, name)
    assert name in dir(retrieval)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'retriever'"):
        retrieval.retriever  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(ImportError):
        exec("from medpanel.retrieval import nothing_here", {})
