"""The evidence-source registry: built-in kinds, a researcher's own source by `module:Class` and by
entry point, and the settings that name them."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from medpanel.agents.types import Condition
from medpanel.experiments.run.scenario.scenario import Scenario
from medpanel.methods.clear.settings import ClearSettings
from medpanel.methods.panel.channels.knowledge import KnowledgeSettings
from medpanel.retrieval import sources
from medpanel.retrieval.errors import SourceConfigError

from .scripted_helpers import Q4, run

PLUGIN = '''
from medpanel.retrieval.evidence import Evidence
from medpanel.retrieval.sources import Source


class FixedSource(Source):
    """Always the same two passages, marked with the query they answered."""

    kind = "fixed"

    def search(self, query, k):
        return [Evidence(text=f"fixed passage {i} for {query[:20]}", title=f"Fixed {i}", doc_id=f"fx-{i}",
                         source="fixed", score=1.0, retriever=self.kind, rank=i) for i in (1, 2)][:k]


class FixedWeb(FixedSource):
    kind = "fixed-web"
    web = True
'''


@pytest.fixture()
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "mysources.py").write_text(textwrap.dedent(PLUGIN), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "mysources"
    sys.modules.pop("mysources", None)


def test_the_built_in_kinds_and_what_they_are() -> None:
    assert {k: (c.web, c.needs_corpus) for k, c in sources.SOURCES.items()} == {
        "corpus": (False, True), "snapshot": (True, True), "tavily": (True, False)}
    assert sources.kinds(web=True) == ["snapshot", "tavily"]
    assert sources.source_class("corpus") is sources.CorpusSource


def test_an_unknown_source_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValidationError, match=r"unknown source 'bing'; use one of corpus, snapshot, tavily"):
        KnowledgeSettings(source="bing")
    with pytest.raises(ValidationError, match=r"'corpus' is not a web source; use one of snapshot, tavily"):
        ClearSettings(dynamic_source="corpus")
    with pytest.raises(SourceConfigError, match=r"cannot import the evidence source 'nomodule:X'"):
        sources.source_class("nomodule:X")


def test_specs_name_the_source_once_for_every_pathway() -> None:
    tav = KnowledgeSettings(source="tavily")
    assert tav.spec() == tav.web_spec() == sources.SourceSpec(kind="tavily")
    local = KnowledgeSettings()  # the packaged quickstart corpus and its offline web
    assert local.spec() == local.local_spec() == sources.SourceSpec(kind="corpus", corpus="quickstart")
    assert local.web_spec() == sources.SourceSpec(kind="snapshot", corpus="quickstart-web")
    clear = ClearSettings(dynamic_source="tavily")
    assert clear.web_spec() == sources.SourceSpec(kind="tavily") and clear.local_spec("dense").retriever == "dense"


def test_a_researchers_own_source_by_module_path_feeds_the_knowledge_channel(plugin: str) -> None:
    cond = Condition(slug="upfront", pipeline="generalist", flags={"variant": "upfront"},
                     settings={"source": f"{plugin}:FixedSource", "k": 2})
    result, _ = run(cond, Q4, lambda r: None)  # scripted replies; the channel's search is what is checked
    brief = next(e for e in result.events if e.step == "brief")
    assert brief.data["retrieved"] == ["fx-1", "fx-2"]
    assert {e["retriever"] for e in brief.data["evidence"]} == {"fixed"}
    assert result.summary["retrievals"] == 1


def test_a_web_source_of_ones_own_is_clears_dynamic_pathway(plugin: str) -> None:
    settings = ClearSettings(dynamic_source=f"{plugin}:FixedWeb")
    assert settings.web_spec() == sources.SourceSpec(kind=f"{plugin}:FixedWeb")
    source = sources.open_source(settings.web_spec())
    assert [e.doc_id for e in source.search("chest pain", 1)] == ["fx-1"]
    with pytest.raises(ValidationError, match="is not a web source"):
        ClearSettings(dynamic_source=f"{plugin}:FixedSource")


def test_an_installed_packages_source_by_entry_point(plugin: str, tmp_path: Path) -> None:
    dist = tmp_path / "mysources-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mysources\nVersion: 0.1\n", encoding="utf-8")
    (dist / "entry_points.txt").write_text("[medpanel.sources]\nfixed = mysources:FixedSource\n", encoding="utf-8")
    assert "fixed" in sources.kinds()
    assert sources.source_class("fixed").__name__ == "FixedSource"
    scenario = Scenario.model_validate({"name": "ep", "settings": {"source": "fixed"}})
    assert KnowledgeSettings.model_validate(scenario.settings).spec().kind == "fixed"
