"""The static HTML viewer: files, escaping, diffs between conditions, generic events, serving, Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from medpanel.experiments.errors import UserError
from medpanel.experiments.run.store.rows import Row
from medpanel.experiments.run.store.rundir import load_run
from medpanel.experiments.view.events import event_signature, first_difference, row_facts
from medpanel.experiments.view.viewer import build_site, make_server, page_name, safe_url

from .inspect_fixtures import GRID_QUESTIONS, XSS, XSS_ESCAPED, clear_run, grid_run, real_clear_run, run_rows

CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = grid_run(tmp_path_factory.mktemp("viewer"))
    build_site(run_dir, n_boot=500)
    return run_dir


@pytest.fixture(scope="module")
def clear(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = clear_run(tmp_path_factory.mktemp("viewer-clear"))
    build_site(run_dir, n_boot=500)
    return run_dir


@pytest.fixture(scope="module")
def clear_real(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = real_clear_run(tmp_path_factory.mktemp("viewer-clear-real"))
    build_site(run_dir, n_boot=300)
    return run_dir


def _page(run_dir: Path, dataset: str, qid: str) -> str:
    return (run_dir / "report" / "questions" / page_name(dataset, qid)).read_text(encoding="utf-8")




def test_site_has_index_question_pages_plots_and_audit(grid: Path) -> None:
    report = grid / "report"
    assert (report / "index.html").is_file()
    pages = sorted(p.name for p in (report / "questions").glob("*.html"))
    assert pages == sorted(page_name(q.dataset, q.qid) for q in GRID_QUESTIONS)
    for name in ("accuracy_by_condition", "accuracy_by_dataset", "cost_by_condition", "accuracy_vs_calls"):
        assert (report / "plots" / f"{name}.png").stat().st_size > 1000
        assert (report / "plots" / f"{name}.svg").is_file()
    assert json.loads((report / "leakage.json").read_text())["passages"] == 0
    index = (report / "index.html").read_text()
    for title in ("Accuracy per condition x dataset", "Cost per question", "Paired comparisons",
                  "Retrieval leakage audit"):
        assert title in index
    assert 'src="plots/accuracy_by_condition.png"' in index
    # One table row per result row, each linking to its question page (relative link).
    rows = run_rows(grid)
    assert index.count('<tr class="st-') == len(rows) == 12
    assert f'href="questions/{page_name("medqa", "t1")}#c' in index
    for f in ("condition", "dataset", "status", "recruited", "retrieved", "route", "leak"):
        assert f'data-filter="{f}"' in index


def test_model_reply_script_is_escaped(grid: Path) -> None:
    html = _page(grid, "medqa", "t1")
    assert "I considered" in html  # the planted reply is on the page ...
    assert XSS not in html  # ... never as markup
    assert XSS_ESCAPED in html
    # The only <script> elements are the viewer's own, each carrying the build's nonce.
    scripts = re.findall(r"<script[^>]*>", html)
    assert len(scripts) == 1 and 'nonce="' in scripts[0]
    assert "script-src 'nonce-" in html


def test_dataset_string_is_escaped(grid: Path) -> None:
    html = _page(grid, "medqa", "t2")
    assert "<img src=x" not in html
    assert "&lt;img src=x onerror=&#34;alert(2)&#34;&gt;" in html
    index = (grid / "report" / "index.html").read_text()
    assert "<img src=x" not in index


def test_passage_script_and_javascript_url_are_inert(clear: Path) -> None:
    html = _page(clear, "medqa", "t1")
    assert "Thyroid storm overview." in html
    assert XSS not in html and XSS_ESCAPED in html
    assert 'href="javascript:' not in html
    assert "javascript:alert(3)" in html  # shown as text only
    assert 'href="https://pubmed.ncbi.nlm.nih.gov/10808977/"' in html
    # The brief links to the passage bodies on the same page.
    for anchor in re.findall(r'<a href="#(c\d-e\d+-evidence-\d)">', html):
        assert f'id="{anchor}"' in html


def test_real_clear_run_renders_routes_evidence_and_folded_bundle(clear_real: Path) -> None:
    html = _page(clear_real, "medqa", "t1")
    for slug in ("direct", "rag-bm25", "online", "clear-default"):
        assert f"<h3>{slug}</h3>" in html
    assert "Thyrotoxicosis review" in html and XSS not in html and XSS_ESCAPED in html
    assert 'href="https://www.nih.gov/thyroid"' in html
    assert re.search(r'<span class="badge route">route \w+</span>', html)  # the verifier's route
    assert '<details class="big"><summary>bundle</summary>' in html  # the evidence bundle folds away
    assert "clear-default</b> vs <b>direct</b>" in html
    index = (clear_real / "report" / "index.html").read_text()
    assert index.count('<tr class="st-') == 8
    routes = set(re.findall(r'data-route="(\w*)"', index))
    assert routes - {""}, "no CLEAR route reached the question table"


def test_safe_url_only_allows_http() -> None:
    assert safe_url("https://x.org/a?b=1") == "https://x.org/a?b=1"
    assert safe_url("http://user:secret@host:8080/p") == "http://host:8080/p"
    for bad in ("javascript:alert(1)", "JavaScript:alert(1)", "data:text/html,x", "file:///etc/passwd", "", None,
                "//evil.org/x", "http://"):
        assert safe_url(bad) == ""


def test_clear_events_gate_route_candidates_and_unknown_roles(clear: Path) -> None:
    html = _page(clear, "medqa", "t1")
    assert "graves disease proptosis diagnosis" in html  # the Knowledge Gate's query
    assert "gate fired" in html
    assert "route web" in html and "route parametric" in html
    assert "Sources agree on Graves disease." in html  # the verifier's rationale
    assert '<span class="item">endocrinologist</span>, <span class="item">internist</span>' in html  # received_by
    assert "candidates" in html and "guard" in html and "audit" in html
    # An unknown role and step, with nested data, still shows every field.
    assert "oracle-7" in html and "mystery" in html and "<dt>bar</dt>" in html
    assert "final A" in html and "rule verifier" in html
    # Per-call tokens and latency.
    assert "120+30 tok · 0.25 s" in html


def test_leak_flagged_in_index_and_question_page(clear: Path) -> None:
    index = (clear / "report" / "index.html").read_text()
    leaking = re.findall(r'<tr [^>]*data-condition="clear-default" data-dataset="medqa"[^>]*data-leak="(\w+)"', index)
    assert leaking == ["yes"]
    clean = re.findall(r'<tr [^>]*data-condition="clear-noweb" data-dataset="medqa"[^>]*data-leak="(\w+)"', index)
    assert clean == ["no"]
    html = _page(clear, "medqa", "t1")
    assert "Leakage audit: retrieved passages" in html
    assert "direct leak: stem_match" in html
    assert "Leakage audit" not in _page(clear, "pubmedqa", "p9")


def _ev(role: str, step: str, parsed: dict | None = None, content: str = "", **kw: object) -> dict:
    return {"kind": "call", "role": role, "step": step, "parsed": parsed, "content": content, "data": {}, **kw}


def test_first_difference_ignores_timing_and_cache() -> None:
    a = [_ev("specialist", "turn", {"answer": "A"}), _ev("challenger", "critique", {"material_weakness": False}),
         _ev("specialist", "turn", {"answer": "A"})]
    same = [dict(e, latency_s=9.0, cache_hit=True, agent="other") for e in a]
    assert first_difference(a, same) is None
    changed = [a[0], _ev("challenger", "critique", {"material_weakness": True}), a[2]]
    assert first_difference(a, changed) == 1
    extra = [a[0], _ev("specialist", "recruit_check", {"needed": False}), *a[1:]]
    assert first_difference(a, extra) == 1
    assert first_difference(a, a[:2]) == 2
    note = {"kind": "note", "role": "pipeline", "step": "recruitment", "content": "x", "data": {"recruited": []}}
    assert event_signature(note) != event_signature(dict(note, data={"recruited": ["Cardiologist"]}))


def test_question_page_marks_the_first_difference(grid: Path) -> None:
    html = _page(grid, "medqa", "t1")
    data = load_run(grid)
    docs = {r.condition: data.transcript(r) for r in data.rows if r.key == ("medqa", "t1") and r.condition in
            ("c1r0", "c1r1")}
    i = first_difference(docs["c1r0"]["events"], docs["c1r1"]["events"])
    assert i is not None  # recruitment checks exist only in c1r1
    sig_a = [event_signature(e) for e in docs["c1r0"]["events"]]
    sig_b = [event_signature(e) for e in docs["c1r1"]["events"]]
    assert sig_a[:i] == sig_b[:i] and sig_a[i] != sig_b[i]
    item = re.search(r"<li><b>c1r1</b> vs <b>c1r0</b>:(.*?)</li>", html, re.S)
    assert item is not None
    assert f"first difference at event #{i}" in item.group(1)
    # The listed events exist on the page, outlined and labelled.
    anchors = re.findall(r'href="#(c\d-e\d+)"', item.group(1))
    assert len(anchors) == 2 and all(a.endswith(f"-e{i}") for a in anchors)
    for a in anchors:
        tag = re.search(rf'<div class="ev [^"]*" id="{a}"', html)
        assert tag is not None and " diff" in tag.group(0)
    assert "first difference: c1r1 vs c1r0" in html


def test_rebuild_drops_stale_pages(grid: Path) -> None:
    stale = grid / "report" / "questions" / "stale.html"
    stale.write_text("old")
    build_site(grid, n_boot=200)
    assert not stale.exists()


def test_write_html_report_refuses_non_run_dir(tmp_path: Path) -> None:
    from medpanel.experiments.cli.inspect import write_html_report

    with pytest.raises(UserError, match="not a run directory"):
        write_html_report(tmp_path)


def test_server_is_read_only_and_local(grid: Path) -> None:
    server = make_server(grid / "report", 0)
    host, port = server.server_address[:2]
    assert host == "127.0.0.1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        with urllib.request.urlopen(f"{base}/index.html", timeout=10) as resp:
            assert resp.status == 200 and b'id="qtable"' in resp.read()
        head = urllib.request.Request(f"{base}/index.html", method="HEAD")
        with urllib.request.urlopen(head, timeout=10) as resp:
            assert resp.status == 200
        for req, code in ((urllib.request.Request(f"{base}/index.html", data=b"x", method="POST"), 501),
                          (urllib.request.Request(f"{base}/index.html", method="PUT"), 501),
                          (urllib.request.Request(f"{base}/index.html", method="DELETE"), 501),
                          (urllib.request.Request(f"{base}/questions/"), 404),
                          (urllib.request.Request(f"{base}/../run.json"), 404)):
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(req, timeout=10)
            assert err.value.code == code, req.full_url
        assert (grid / "report" / "index.html").is_file()
    finally:
        server.shutdown()
        server.server_close()


def test_view_command_builds_report_and_prints_url(tmp_path: Path) -> None:
    run_dir = grid_run(tmp_path, questions=GRID_QUESTIONS[2:], name="viewcmd")
    code = ("import sys, typer; from medpanel.experiments.cli.inspect import register; "
            "app = typer.Typer(); register(app); app()")
    proc = subprocess.Popen([sys.executable, "-c", code, "view", str(run_dir), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        url = None
        for line in proc.stdout:
            m = re.search(r"(http://127\.0\.0\.1:\d+/index\.html)", line)
            if m:
                url = m.group(1)
                break
        assert url, "view printed no URL"
        with urllib.request.urlopen(url, timeout=10) as resp:
            assert b"viewcmd" in resp.read()
        assert (run_dir / "report" / "questions" / page_name("pubmedqa", "p1")).is_file()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# -- headless Chromium ---------------------------------------------------------------------------


def _chromium(args: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp / 'profile'}",
           "--virtual-time-budget=3000", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def _screenshot_ok(png: Path) -> None:
    from matplotlib.image import imread

    assert png.is_file() and png.stat().st_size > 20_000, "screenshot missing or tiny"
    pixels = imread(png)
    assert pixels.shape[0] == 2000 and pixels.shape[1] == 1280
    assert float(pixels[..., :3].std()) > 0.05, "screenshot is blank"


@pytest.mark.skipif(not CHROMIUM.exists(), reason="headless Chromium not installed (apt-get install chromium)")
@pytest.mark.parametrize("kind", ["grid", "clear", "clear-real"])
def test_chromium_renders_table_and_transcript(kind: str, grid: Path, clear: Path, clear_real: Path,
                                               tmp_path: Path) -> None:
    run_dir = {"grid": grid, "clear": clear, "clear-real": clear_real}[kind]
    index = (run_dir / "report" / "index.html").resolve().as_uri()
    question = (run_dir / "report" / "questions" / page_name("medqa", "t1")).resolve().as_uri()
    png = tmp_path / "index.png"
    shot = _chromium(["--window-size=1280,2000", f"--screenshot={png}", index], tmp_path)
    assert shot.returncode == 0, shot.stderr[-2000:]
    _screenshot_ok(png)
    dom = _chromium(["--dump-dom", index], tmp_path).stdout
    assert 'data-ready="1"' in dom, "the index script did not run"
    # The four run plots plus the study's forest and interaction figures where the run has them.
    n_plots = len(list((run_dir / "report" / "plots").glob("*.png")))
    assert n_plots >= 4 and f'data-plots-loaded="{n_plots}"' in dom, "plots did not load from file://"
    assert dom.count('<tr class="st-') == len(run_rows(run_dir))
    assert "Accuracy per condition x dataset" in dom
    assert XSS not in dom
    qpng = tmp_path / "question.png"
    shot = _chromium(["--window-size=1280,2000", f"--screenshot={qpng}", question], tmp_path)
    assert shot.returncode == 0, shot.stderr[-2000:]
    _screenshot_ok(qpng)
    qdom = _chromium(["--dump-dom", question], tmp_path).stdout
    assert 'data-ready="1"' in qdom
    assert qdom.count('<div class="ev ') >= 4, "no transcript events rendered"
    assert XSS not in qdom  # the parsed DOM holds the text, never a script element from a reply
    assert len(re.findall(r"<script", qdom)) == 1
    if kind == "clear":
        assert "route web" in qdom and "graves disease proptosis diagnosis" in qdom
    elif kind == "clear-real":
        assert "evidence: 2 passages" in qdom and "format_gate" in qdom
    else:
        assert "critique" in qdom and "material weakness" in qdom.lower()


@pytest.mark.skipif(not CHROMIUM.exists(), reason="headless Chromium not installed (apt-get install chromium)")
def test_chromium_filters_and_sorts_from_the_url(grid: Path, tmp_path: Path) -> None:
    index = (grid / "report" / "index.html").resolve().as_uri()
    dom = _chromium(["--dump-dom", f"{index}#condition=c1r1&sort=tokens:desc"], tmp_path).stdout
    rows = re.findall(r"<tr ([^>]*)>", dom.split('id="qtable"', 1)[1])
    shown = [r for r in rows if " hidden" not in f" {r}"]
    assert len(rows) == 12 and len(shown) == 3
    assert all('data-condition="c1r1"' in r for r in shown)
    assert "3 of 12 shown" in dom
    body = dom.split('id="qtable"', 1)[1].split("<tbody>", 1)[1]
    tokens = [int(t) for t in re.findall(r"<tr [^>]*>(?:<td>.*?</td>){8}<td>(\d+)</td>", body.replace("\n", ""))]
    assert len(tokens) == 12 and tokens == sorted(tokens, reverse=True)
    dom = _chromium(["--dump-dom", f"{index}#status=nonsense"], tmp_path).stdout  # unknown values are ignored
    assert "12 of 12 shown" in dom


def test_chromium_is_where_the_skip_says(tmp_path: Path) -> None:
    # Guards the skip above from silently hiding the browser tests on machines that do have it.
    if shutil.which("chromium") and not CHROMIUM.exists():
        pytest.fail(f"chromium is on PATH at {shutil.which('chromium')} but not at {CHROMIUM}")


@pytest.mark.parametrize("parsed, label, cls", [
    ({"material_weakness": True, "gap_type": "none", "challenge": "x"},
     "material weakness: yes (gap type none)", "warn"),
    ({"material_weakness": True, "gap_type": "missing_expertise", "challenge": "x"},
     "material weakness: yes (missing_expertise)", "warn"),
    ({"material_weakness": False, "gap_type": "missing_differential", "challenge": "x"},
     "material weakness: no (missing_differential)", "ok"),
    ({"material_weakness": False, "gap_type": "none", "challenge": ""}, "material weakness: no", "ok"),
    ({"material_weakness": "no", "gap_type": "none"}, "material weakness: no", "ok"),  # a hand-edited transcript
])
def test_weakness_badge_agrees_with_the_parsed_field(parsed: dict, label: str, cls: str) -> None:
    from medpanel.experiments.view.events import _badges

    badges = dict(_badges(_ev("challenger", "critique", parsed)))
    assert badges.get(label) == cls, badges


def test_question_table_counts_recruits_a_method_lists() -> None:
    # The panel stores its recruits as a count, KAMAC as a list of experts: both filter as a count.
    def row(summary: dict[str, object]) -> Row:
        return Row(condition="kamac", dataset="medqa", qid="q1", repeat=0, answer="A", gold="A", correct=True,
                   invalid=False, error=None, error_kind=None, calls=3, logical_calls=3, tokens=30,
                   latency_s=0.1, summary=summary, transcript="t.json")

    listed = row({"recruited": [{"role": "Cardiologist"}, {"role": "Nephrologist"}]})
    assert row_facts(listed, None)["recruited"] == 2
    assert row_facts(row({"recruited": 3, "recruited_roles": ["Neurologist"]}), None)["recruited"] == 3
    assert row_facts(row({}), None)["recruited"] == 0
