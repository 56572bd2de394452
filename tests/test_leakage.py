"""Leakage detectors on a written corpus of planted leaks and near-misses, and the run-level audit."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from medpanel.experiments.analysis.audit import audit_run, evidence_items, load_provenance, read_leakage
from medpanel.experiments.cli.inspect import register
from medpanel.experiments.errors import UserError
from medpanel.retrieval.leakage import (
    QuestionProbe,
    Thresholds,
    identifiers,
    longest_common_substring,
    ngram_overlap,
    normalize,
)

from .inspect_fixtures import OPTIONS, STEM, clear_run, run_rows

ETHICS_STEM = ("A junior orthopaedic surgery resident is completing a carpal tunnel repair with the department "
               "chairman as the attending physician. During the case, the resident inadvertently cuts a flexor "
               "tendon. The attending tells the resident to leave this complication out of the operative report. "
               "Which of the following is the correct next action for the resident to take?")
ETHICS_OPTIONS = {"A": "Disclose the error to the patient and put it in the operative report",
                  "B": "Tell the attending that he cannot fail to disclose this mistake",
                  "C": "Report the physician to the ethics committee", "D": "Refuse to dictate the operative report"}
PROVENANCE = {"pmid": "10808977", "title": "Can tailored interventions increase mammography use among HMO women?",
              "url": "https://www.ncbi.nlm.nih.gov/pmc/articles/PMC1234567/"}

_words = STEM.split()
# Every 10th word changed: runs of 9 words, so no 8-gram-rich copy and no 80-character run survives.
_EVERY_TENTH = " ".join("zzz" if i % 10 == 9 else w for i, w in enumerate(_words))
# Every 12th word changed: runs of 11 words keep 42% of the 8-grams, yet no run reaches 80 characters.
_EVERY_12TH = " ".join("zzz" if i % 12 == 11 else w for i, w in enumerate(_words))

# (id, question, fields, detectors that must fire). An empty set is a near-miss that must stay silent.
CORPUS: list[tuple[str, str, dict[str, Any], set[str]]] = [
    ("stem-verbatim", "thyroid", {"text": "Forum post: " + STEM[:100] + " ... anyone know?"}, {"stem_match"}),
    ("stem-reformatted", "thyroid", {"text": STEM[:100].upper().replace(",", " ;").replace(" ", "  ")},
     {"stem_match"}),
    ("stem-whole", "thyroid", {"text": STEM}, {"stem_match", "ngram_overlap"}),
    ("stem-near-miss", "thyroid", {"text": "Case: " + STEM[:70] + " and the usual workup followed."}, set()),
    ("boilerplate", "thyroid", {"text": "Which of the following is the most likely diagnosis? A woman comes to "
                                        "the physician because of palpitations; Graves disease is common."}, set()),
    ("ngram-edited-copy", "thyroid", {"text": _EVERY_12TH}, {"ngram_overlap"}),
    ("ngram-near-miss", "thyroid", {"text": _EVERY_TENTH}, set()),
    ("options-list", "thyroid", {"text": "Options: (A) Graves disease (B) Hashimoto thyroiditis (C) Toxic "
                                         "multinodular goiter (D) Subacute granulomatous thyroiditis"},
     {"option_recovery"}),
    ("options-three-of-four", "thyroid", {"text": "Graves disease, Hashimoto thyroiditis and toxic multinodular "
                                                  "goiter are common causes."}, set()),
    ("options-scattered", "thyroid", {"text": "Graves disease is autoimmune. " + "Filler sentence about iodine. " * 12
                                      + "Hashimoto thyroiditis causes hypothyroidism. " + "More filler text. " * 12
                                      + "Toxic multinodular goiter affects older adults. " + "Even more. " * 12
                                      + "Subacute granulomatous thyroiditis is painful."}, set()),
    ("gold-verbatim", "ethics", {"text": "Best practice: disclose the error to the patient, and put it in the "
                                         "operative report."}, {"gold_text"}),
    ("gold-near-miss", "ethics", {"text": "Disclose the error to the patient and document it in the chart."}, set()),
    ("short-gold", "thyroid", {"text": "Graves disease is the commonest cause of hyperthyroidism."}, set()),
    ("upstream-pmid", "pubmed", {"doc_id": "PMID:10808977", "title": "x", "text": "abstract"}, {"upstream_source"}),
    ("upstream-url", "pubmed", {"doc_id": "w1", "url": "https://pubmed.ncbi.nlm.nih.gov/10808977/", "text": "a"},
     {"upstream_source"}),
    ("upstream-pmc", "pubmed", {"doc_id": "w2", "url": "http://ncbi.nlm.nih.gov/pmc/articles/PMC1234567", "text": "a"},
     {"upstream_source"}),
    ("upstream-title", "pubmed", {"doc_id": "web-9", "title": "Can tailored interventions increase mammography "
                                                             "use among HMO women", "text": "abstract"},
     {"upstream_source"}),
    ("pmid-prefix", "pubmed", {"doc_id": "PMID:1080897", "text": "abstract"}, set()),
    ("pmid-longer", "pubmed", {"doc_id": "PMID:108089770", "url": "https://pubmed.ncbi.nlm.nih.gov/10808978/",
                               "text": "abstract"}, set()),
    ("title-near-miss", "pubmed", {"doc_id": "web-10", "title": "Can tailored interventions increase mammography "
                                                               "use among older women?", "text": "abstract"}, set()),
]


def _probes() -> dict[str, QuestionProbe]:
    return {"thyroid": QuestionProbe(text=STEM, options=OPTIONS, gold=("A",)),
            "ethics": QuestionProbe(text=ETHICS_STEM, options=ETHICS_OPTIONS, gold=("A",)),
            "pubmed": QuestionProbe(text="Does tailoring improve mammography uptake in HMO members?",
                                    options={"A": "yes", "B": "no", "C": "maybe"}, gold=("A",),
                                    provenance=PROVENANCE)}


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "planted.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        for doc_id, question, fields, expect in CORPUS:
            fh.write(json.dumps({"id": doc_id, "question": question, "expect": sorted(expect), **fields}) + "\n")
    return path


@pytest.mark.parametrize("doc_id", [c[0] for c in CORPUS])
def test_each_detector_fires_on_its_plant_and_not_on_near_misses(corpus_file: Path, doc_id: str) -> None:
    records = {json.loads(line)["id"]: json.loads(line) for line in corpus_file.read_text().splitlines()}
    rec = records[doc_id]
    fields = {k: v for k, v in rec.items() if k not in ("question", "expect", "id")}
    fields.setdefault("doc_id", rec["id"])
    hits = _probes()[rec["question"]].check(fields)
    assert {h.detector for h in hits} == set(rec["expect"]), [h.detail for h in hits]


def test_no_provenance_means_no_upstream_check() -> None:
    probe = QuestionProbe(text="Does tailoring improve mammography uptake in HMO members?", options={"A": "yes"})
    assert probe.check({"doc_id": "PMID:10808977", "title": PROVENANCE["title"], "text": "x"}) == []


def test_source_abstract_whose_title_is_the_question_counts_as_upstream() -> None:
    # PubMedQA: the question is the abstract's title. Retrieving that abstract is upstream-source
    # retrieval (CLEAR Tables 6-7), unless the options or the gold text come with it.
    title = PROVENANCE["title"]
    probe = QuestionProbe(text=title, options={"A": "yes", "B": "no", "C": "maybe"}, provenance=PROVENANCE)
    hits = probe.check({"doc_id": "PMID:10808977", "title": title, "text": "Telephone counseling ..."})
    assert {h.detector for h in hits} == {"stem_match", "upstream_source"}
    assert {h.kind for h in hits} == {"upstream"}
    unsourced = QuestionProbe(text=title, options={"A": "yes", "B": "no", "C": "maybe"})
    assert [h.kind for h in unsourced.check({"doc_id": "x", "title": title, "text": "..."})] == ["direct"]
    ethics = QuestionProbe(text=ETHICS_STEM, options=ETHICS_OPTIONS, gold=("A",), provenance={"pmid": "1"})
    with_gold = ethics.check({"doc_id": "PMID:1", "text": ETHICS_STEM + " " + ETHICS_OPTIONS["A"]})
    assert {h.kind for h in with_gold if h.detector != "upstream_source"} == {"direct"}


def test_thresholds_move_the_boundary() -> None:
    near_miss = {"text": "Case: " + STEM[:70]}
    assert QuestionProbe(text=STEM, options=OPTIONS).check(near_miss) == []
    loose = QuestionProbe(text=STEM, options=OPTIONS, thresholds=Thresholds(stem_min_chars=50))
    assert [h.detector for h in loose.check(near_miss)] == ["stem_match"]


def test_longest_common_substring_matches_brute_force() -> None:
    rng = random.Random(7)

    def brute(a: str, b: str) -> int:
        return max((k for i in range(len(a)) for j in range(len(b))
                    for k in range(1, min(len(a) - i, len(b) - j) + 1) if a[i:i + k] == b[j:j + k]), default=0)

    for _ in range(150):
        a = "".join(rng.choice("abc") for _ in range(rng.randint(0, 25)))
        b = "".join(rng.choice("abc") for _ in range(rng.randint(0, 25)))
        found = longest_common_substring(a, b)
        assert len(found) == brute(a, b) and (not found or (found in a and found in b)), (a, b)


def test_normalize_and_identifiers() -> None:
    assert normalize("  Free-T4, ELEVATED!\n") == "free t4 elevated"
    ids = identifiers({"doc_id": "PMID:00123", "url": "https://www.Example.org/a/?q=1",
                       "title": "A Title", "doi": "10.1000/XYZ."})
    assert ids["pmid"] == {"123"} and ids["url"] == {"example.org/a?q=1"} and ids["doi"] == {"10.1000/xyz"}
    shared, containment, jaccard = ngram_overlap("a b c d e f g h i", "a b c d e f g h", n=8)
    assert (shared, containment) == (1, 0.5) and 0 < jaccard < 1


# -- the run-level audit ------------------------------------------------------------------------------




def test_evidence_found_under_every_key() -> None:
    event = {"data": {"evidence": [{"text": "a"}], "documents": [{"text": "b"}, "not a dict"],
                      "passages": [{"text": "c"}], "other": [{"text": "d"}]}}
    assert [(k, i) for k, i, _ in evidence_items(event)] == [("evidence", 0), ("documents", 0), ("passages", 0)]


def test_audit_counts_hits_per_dataset_and_condition(tmp_path: Path) -> None:
    run_dir = clear_run(tmp_path)
    prov = tmp_path / "prov.jsonl"
    prov.write_text(json.dumps({"dataset": "pubmedqa", "qid": "p9", "pmid": 10808977}) + "\n")
    doc = audit_run(run_dir, run_rows(run_dir), provenance=load_provenance(run_dir, prov))
    cells = {(s["dataset"], s["condition"]): s for s in doc["summary"]}
    assert cells[("medqa", "clear-default")]["direct_questions"] == 1
    assert cells[("medqa", "clear-default")]["direct_rate"] == 1.0
    assert cells[("medqa", "clear-noweb")]["direct_questions"] == 0
    # Upstream only where provenance names the source: p9's source PMID is in both conditions' briefs.
    for cond in ("clear-default", "clear-noweb"):
        assert cells[("pubmedqa", cond)]["upstream_questions"] == 1
        assert cells[("pubmedqa", cond)]["direct_questions"] == 0
        assert cells[("medqa", cond)]["upstream_questions"] == 0
    assert cells[("medqa", "clear-default")]["passages"] == 3
    hit = next(h for h in doc["hits"] if h["dataset"] == "medqa")
    assert hit["doc_id"] == "web-3" and hit["role"] == "curator" and hit["event"] == 1
    assert {x["detector"] for x in hit["hits"]} == {"stem_match", "ngram_overlap"}


def test_audit_cli_writes_json_and_strict_exit(tmp_path: Path) -> None:
    run_dir = clear_run(tmp_path)
    app = typer.Typer()
    register(app)
    res = CliRunner().invoke(app, ["audit", str(run_dir)])
    assert res.exit_code == 0, res.output
    assert "Retrieval leakage audit" in res.output and "No provenance was given" in res.output
    doc = read_leakage(run_dir)
    assert doc is not None and doc["passages"] == 10 and len(doc["hits"]) == 1
    assert CliRunner().invoke(app, ["audit", str(run_dir), "--strict"]).exit_code == 1
    # Thresholds given on the command line are used and remembered by later rebuilds (the viewer's).
    res = CliRunner().invoke(app, ["audit", str(run_dir), "--ngram-containment", "0.9", "--stem-chars", "500"])
    assert res.exit_code == 0
    doc = read_leakage(run_dir)
    assert doc is not None and doc["thresholds"]["stem_min_chars"] == 500
    fired = {x["detector"]: x for x in doc["hits"][0]["hits"]}
    assert fired["stem_match"]["threshold"] < 500  # a whole-stem copy fires on the share-of-stem rule
    assert fired["ngram_overlap"]["threshold"] == 0.9
    from medpanel.experiments.analysis.audit import refresh_leakage

    again = refresh_leakage(run_dir, run_rows(run_dir))
    assert again["thresholds"]["ngram_min_containment"] == 0.9
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    res = CliRunner().invoke(app, ["audit", str(run_dir), "--provenance", str(bad)])
    assert isinstance(res.exception, UserError) and "line 1" in str(res.exception)
