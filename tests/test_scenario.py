"""Scenario validation: good files expand to conditions; bad ones give one line naming the fix."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from medpanel.experiments.errors import UserError
from medpanel.experiments.run.scenario.runspec import RunSpec, updated
from medpanel.experiments.run.scenario.scenario import DatasetSpec, load_scenario, slug_for

from .conftest import ROOT, write


def test_shipped_scenarios_validate() -> None:
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        sc = load_scenario(path)
        assert sc.conditions(), path


def test_flag_grid_expands_to_stable_slugs(tmp_path: Path) -> None:
    f = write(tmp_path / "s.yaml", "name: g\npipeline: panel\nflags: {r: [0, 1], c: [0, 1]}\n"
                                   "variants: [c1r1k1-ind]\n")
    slugs = [c.slug for c in load_scenario(f).conditions()]
    # c comes before r whatever the order in the file, so slugs mean the same in every table.
    assert slugs == ["c0r0", "c0r1", "c1r0", "c1r1", "c1r1k1-ind"]
    ind = load_scenario(f).conditions()[-1]
    assert ind.flags == {"c": 1, "r": 1, "k": 1, "variant": "ind"}
    assert slug_for({"c": 1, "r": 0, "k": 1}) == "c1r0k1"


def test_env_interpolation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MP_TEST_MODEL", "gpt-test")
    f = write(tmp_path / "s.yaml", "name: e\nmodel: {backend: openai, name: '${MP_TEST_MODEL}', "
                                   "base_url: '${MP_UNSET_URL:-http://127.0.0.1:9/v1}'}\n")
    sc = load_scenario(f)
    assert sc.model.name == "gpt-test"
    assert sc.model.base_url == "http://127.0.0.1:9/v1"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("name: x\nflags: {c: [0, 1]\n", "malformed YAML"),
        ("name: x\ndatset: {limit: 3}\n", "datset"),
        ("name: x\nmodel:\n  backend: local\n  temprature: 0\n", "model.temprature"),
        ("name: x\nrun: {workers: many}\n", "run.workers"),
        ("name: x\nmodel: {backend: gemini}\n", "unknown backend 'gemini'"),
        ("name: x\nmodel: {name: '${MP_NOT_SET_ANYWHERE}'}\n", "MP_NOT_SET_ANYWHERE"),
        ("flags: {c: [0, 1]}\n", "name"),
    ],
)
def test_bad_files_name_file_field_and_fix(tmp_path: Path, body: str, expected: str) -> None:
    f = write(tmp_path / "bad.yaml", body)
    with pytest.raises(UserError) as info:
        load_scenario(f)
    msg = str(info.value)
    assert str(f) in msg and expected in msg
    assert "\n" not in msg


def test_unknown_key_lists_valid_keys_and_line(tmp_path: Path) -> None:
    f = write(tmp_path / "bad.yaml", "name: x\nmodel:\n  backend: local\n  temprature: 0\n")
    with pytest.raises(UserError) as info:
        load_scenario(f)
    msg = str(info.value)
    assert "(line 4)" in msg and "temperature" in msg


def test_cli_validate_bad_file_exits_2_with_one_line(tmp_path: Path) -> None:
    f = write(tmp_path / "bad.yaml", "name: x\nrun: {wrkers: 2}\n")
    proc = subprocess.run([sys.executable, "-m", "medpanel", "validate", str(f)], capture_output=True, text=True)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "run.wrkers" in lines[0] and "Traceback" not in proc.stderr


def test_cli_validate_missing_data_dir(tmp_path: Path) -> None:
    f = write(tmp_path / "s.yaml", "name: x\ndataset: {source: medagentsbench, path: nowhere}\n")
    proc = subprocess.run([sys.executable, "-m", "medpanel", "validate", str(f)], capture_output=True, text=True)
    assert proc.returncode == 2 and "nowhere" in proc.stderr and "Traceback" not in proc.stderr


def test_cli_validate_prints_conditions_and_count() -> None:
    proc = subprocess.run([sys.executable, "-m", "medpanel", "validate", str(ROOT / "scenarios/quickstart.yaml")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "c0, c1" in proc.stdout and "questions (12)" in proc.stdout


def test_set_overrides_dotted_keys(tmp_path: Path) -> None:
    f = write(tmp_path / "s.yaml", "name: x\npipeline: panel\nsettings: {rounds: 3}\n")
    sc = load_scenario(f, ["settings.rounds=1", "model.max_tokens=128", "run.workers=2"])
    assert sc.settings["rounds"] == 1 and sc.model.max_tokens == 128 and sc.run.workers == 2
    with pytest.raises(UserError, match="KEY=VALUE"):
        load_scenario(f, ["settings.rounds"])
    with pytest.raises(UserError, match=r"model\.max_tokns"):
        load_scenario(f, ["model.max_tokns=1"])


# -- hostile and mistaken scenarios -----------------------------------------------------------------


def test_an_alias_bomb_is_refused_before_it_expands(tmp_path: Path) -> None:
    # Nine levels of nine aliases: 9^9 (387 million) strings once expanded, in 600 bytes.
    levels = ["l0: &l0 [x, x, x, x, x, x, x, x, x]"] + [
        f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    f = write(tmp_path / "bomb.yaml", "name: bomb\nsettings:\n  " + "\n  ".join(levels) + "\n")
    started = time.perf_counter()
    with pytest.raises(UserError) as info:
        load_scenario(f)
    # Expanded, the bomb is 387 million strings (minutes and gigabytes): refused long before that.
    assert time.perf_counter() - started < 30
    msg = str(info.value)
    assert str(f) in msg and "aliases" in msg and "10,000 values" in msg and "\n" not in msg


def test_modest_anchors_and_merge_keys_still_load(tmp_path: Path) -> None:
    f = write(tmp_path / "s.yaml", "name: x\npipeline: panel\nsettings: &s {rounds: 2}\n"
                                   "model: &m {backend: scripted, max_tokens: 64}\n")
    sc = load_scenario(f)
    assert sc.settings == {"rounds": 2} and sc.model.max_tokens == 64
    # A key written next to a merge (`<<: *anchor`) overrides the merged one: that is no duplicate.
    f = write(tmp_path / "m.yaml", "name: x\npipeline: panel\nsettings:\n  <<: {rounds: 3, turns_per_round: 2}\n"
                                   "  rounds: 1\n")
    assert load_scenario(f).settings == {"rounds": 1, "turns_per_round": 2}


def test_a_duplicate_key_is_refused_with_both_lines(tmp_path: Path) -> None:
    f = write(tmp_path / "s.yaml", "name: x\nrun:\n  max_calls: 5\n  workers: 1\n  max_calls: 900\n")
    with pytest.raises(UserError) as info:
        load_scenario(f)
    msg = str(info.value)
    assert "line 5" in msg and "'max_calls' appears twice (first on line 3)" in msg and str(f) in msg
    with pytest.raises(UserError, match="appears twice"):
        load_scenario(write(tmp_path / "t.yaml", "name: a\nname: b\n"))


def test_a_key_given_twice_with_set_takes_the_last_value(tmp_path: Path) -> None:
    f = write(tmp_path / "s.yaml", "name: x\nrun: {workers: 4}\n")
    assert load_scenario(f, ["run.workers=3", "run.workers=2"]).run.workers == 2
    with pytest.raises(UserError, match=r"--set.*appears twice"):
        load_scenario(f, ["run={workers: 1, workers: 2}"])
    with pytest.raises(UserError, match=r"--set.*malformed YAML"):
        load_scenario(f, ["run.workers=[1,"])


@pytest.mark.parametrize("values", ["[0, 2, -1]", "[0, 2]", "[-1]", "[0, maybe]", "['1']"])
def test_binary_flags_take_only_0_and_1(tmp_path: Path, values: str) -> None:
    f = write(tmp_path / "s.yaml", f"name: x\npipeline: generalist\nflags: {{c: {values}}}\n")
    with pytest.raises(UserError) as info:
        load_scenario(f)
    assert "flags.c takes 0 (off) or 1 (on)" in str(info.value) and "(line 3)" in str(info.value)


def test_string_valued_variant_flags_and_booleans_stay_valid(tmp_path: Path) -> None:
    f = write(tmp_path / "s.yaml", "name: x\npipeline: panel\nflags: {c: [false, true], r: [1], k: [1], "
                                   "variant: [ind]}\n")
    assert [c.slug for c in load_scenario(f).conditions()] == ["c0r1k1-ind", "c1r1k1-ind"]


def test_a_flag_grid_larger_than_the_limit_is_refused_before_expanding(tmp_path: Path) -> None:
    flags = ", ".join(f"f{chr(97 + i)}: [0, 1]" for i in range(24))  # 16.7 million conditions
    f = write(tmp_path / "s.yaml", f"name: x\nflags: {{{flags}}}\n")
    started = time.perf_counter()
    with pytest.raises(UserError, match="16,777,216 conditions; a scenario may have at most 1,024"):
        load_scenario(f)
    assert time.perf_counter() - started < 30  # expanding 16.7 million conditions would take minutes


def test_a_compare_pair_must_name_conditions_of_the_scenario(tmp_path: Path) -> None:
    f = write(tmp_path / "s.yaml", "name: x\npipeline: panel\nflags: {c: [0, 1], r: [0, 1]}\n"
                                   "compare: [[c0r0, c1r0], [c1r0, c1r2]]\n")
    with pytest.raises(UserError) as info:
        load_scenario(f)
    msg = str(info.value)
    assert "compare[1]" in msg and "'c1r2'" in msg and "c0r0, c0r1, c1r0, c1r1" in msg and "(line 4)" in msg
    f = write(tmp_path / "t.yaml", "name: x\nflags: {c: [0, 1]}\ncompare: [[c1, c1]]\n")
    with pytest.raises(UserError, match="with itself"):
        load_scenario(f)


def test_size_limits_name_the_limit(tmp_path: Path) -> None:
    big = write(tmp_path / "big.yaml", "name: x\n#" + "x" * 2_000_000 + "\n")
    with pytest.raises(UserError, match="at most 1,000,000"):
        load_scenario(big)
    with pytest.raises(UserError, match="at most 100,000 are allowed"):
        load_scenario(write(tmp_path / "s.yaml", "name: x\ndescription: " + "y" * 150_000 + "\n"))
    with pytest.raises(UserError, match="more than 10,000 values"):
        load_scenario(write(tmp_path / "l.yaml", "name: x\nsettings: {a: [" + "1, " * 20_000 + "1]}\n"))
    with pytest.raises(UserError, match="deeper than 32 levels"):
        load_scenario(write(tmp_path / "d.yaml", "name: x\nsettings: " + "[" * 40 + "]" * 40 + "\n"))


def test_unreadable_scenarios_are_one_line(tmp_path: Path) -> None:
    cases = {"latin1.yaml": ("name: caf\xe9\n".encode("latin-1"), "not UTF-8 text (byte 0xe9 on line 1)"),
             "img.png": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)), "a binary file, not text")}
    for name, (body, expected) in cases.items():
        (tmp_path / name).write_bytes(body)
        with pytest.raises(UserError) as info:
            load_scenario(tmp_path / name)
        assert expected in str(info.value) and name in str(info.value)
    with pytest.raises(UserError, match="is a folder, not a scenario"):
        load_scenario(tmp_path)
    # A UTF-8 byte-order mark (Windows editors) is not a mistake.
    (tmp_path / "bom.yaml").write_bytes(b"\xef\xbb\xbfname: bom\n")
    assert load_scenario(tmp_path / "bom.yaml").name == "bom"


@pytest.mark.parametrize(("url", "expected"), [("::::", "Could not parse"), ("nosuch://x", "Can't load plugin"),
                                               ("postgresql://me:hunter2@h:port/db", "invalid literal")])
def test_a_storage_url_is_checked_when_the_scenario_loads(tmp_path: Path, url: str, expected: str) -> None:
    f = write(tmp_path / "s.yaml", f"name: x\nrun: {{storage: '{url}'}}\n")
    with pytest.raises(UserError) as info:
        load_scenario(f)
    msg = str(info.value)
    assert expected in msg and "run.storage" in msg and "not a storage URL" in msg
    assert "hunter2" not in msg  # the password never reaches a message


def test_cli_overrides_meet_the_yaml_bounds_and_name_the_option() -> None:
    run = RunSpec()
    for name, value, option in [("workers", 0, "--workers"), ("max_calls", -5, "--max-calls"),
                                ("max_wall_s", -1.0, "--max-wall-s"), ("repeats", 0, "--repeat"),
                                ("requests_per_minute", 0.0, "--rpm"), ("max_errors", -1, "--max-errors")]:
        with pytest.raises(UserError) as info:
            updated(run, {name: value}, block="run")
        assert str(info.value).startswith(f"{option}: ") and f"run.{name}" in str(info.value)
    with pytest.raises(UserError, match=r"^--limit: "):
        updated(DatasetSpec(), {"limit": 0}, block="dataset")
    assert updated(run, {"workers": 2, "max_calls": None}, block="run").workers == 2
    assert updated(run, {"max_calls": None}, block="run") is run


SHIPPED = sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_every_shipped_scenario_keeps_the_papers_settings_or_declares_why_not(path: Path) -> None:
    from medpanel.experiments.analysis.protocol import deviations, undeclared
    from medpanel.experiments.run.scenario.scenario import load_scenario

    sc = load_scenario(path)
    found = deviations(sc.model_dump())
    missing = undeclared(sc.description, found)
    assert not missing, (f"{path.name} deviates from the papers' protocol without saying so in its description: "
                         f"{', '.join(map(str, missing))} (write 'Deviation: <name> = <value> because ...')")


def test_protocol_deviations_are_found_and_must_be_declared() -> None:
    from medpanel.experiments.analysis.protocol import deviations, undeclared

    sc = {"name": "x", "pipeline": "panel", "flags": {"c": [1], "r": [0], "k": [1]},
          "settings": {"rounds": 1, "k": 8}, "model": {"temperature": 0.2, "seed": None}}
    found = {d.key: (d.value, d.paper) for d in deviations(sc)}
    assert found == {"settings.rounds": (1, 3), "settings.k": (8, 16), "model.temperature": (0.2, 0.0),
                     "model.seed": (None, 42)}
    assert len(undeclared("Panel on MedQA.", deviations(sc))) == 4
    declared = "Deviation: rounds = 1, k = 8, temperature = 0.2 and seed = None, to fit a laptop."
    assert undeclared(declared, deviations(sc)) == []
    assert [d.key for d in undeclared("Deviation: rounds = 1 and k = 16.", deviations(sc))] == [
        "model.temperature", "model.seed", "settings.k"]  # a declaration names the value in force
    # defaults count: a panel that sets nothing keeps the protocol
    assert deviations({"name": "y", "pipeline": "panel", "flags": {"c": [0, 1]}}) == []


def test_channels_scenario_runs_c1r0_beside_the_knowledge_conditions_3x3() -> None:
    from medpanel.agents.model.scripted import ScriptedRequest
    from medpanel.experiments.run.scenario.plan import make_plan

    from .scripted_helpers import Q4, run

    path = Path(__file__).resolve().parents[1] / "scenarios" / "channels.yaml"
    sc = load_scenario(path, ["dataset.source=sample", "dataset.path=null", "dataset.subsets=null",
                                   "settings.corpus=quickstart"])
    plan = make_plan(sc, base_dir=path.parent)
    conds = {c.slug: c for c in plan.conditions}
    assert list(conds) == ["c1r0", "c1r0k1", "c1r1k1", "c1r1k1-ind"]
    assert ("c1r0", "c1r0k1") in [tuple(p) for p in sc.compare]
    assert sc.settings["rounds"] == 3 and sc.settings["turns_per_round"] == 3 and sc.settings["k"] == 16

    def respond(r: ScriptedRequest) -> object:
        if r.tag.step.startswith("select_specialists"):
            return {"specialists": [{"role": "Cardiologist", "expertise": "heart"},
                                    {"role": "Internist", "expertise": "all"}]}
        if r.tag.role == "challenger":
            return {"material_weakness": True, "gap_type": "insufficient_evidence", "challenge": "which test?"}
        if r.tag.role == "knowledge_gate":
            return {"retrieve": True, "knowledge_gap": "first test", "query": "chest pain ECG"}
        if r.tag.role == "curator":
            return {"points": [{"point": f"fact {i}", "sources": [1]} for i in range(5)]}
        return {"reasoning": "thinks", "answer": "A"}

    plain, _ = run(conds["c1r0"], Q4, respond)
    knowledge, _ = run(conds["c1r0k1"], Q4, respond)
    turns = [e for e in plain.events if e.kind == "call" and e.step == "turn"]
    assert len(turns) == 2 * 9  # two specialists, 3 rounds x 3 turns
    assert not any(e.role == "knowledge_gate" for e in plain.events) and "queries_written" not in plain.summary
    assert sum(e.step == "gate" for e in knowledge.events) == 8  # after every turn but the last
    assert knowledge.summary["queries_written"] == 8


def test_self_assessment_scenario_starts_from_one_agent_like_kamac() -> None:
    from medpanel.agents.model.scripted import ScriptedRequest
    from medpanel.agents.types import Condition
    from medpanel.methods.panel.settings import PanelSettings

    from .scripted_helpers import Q4, run

    sc = load_scenario(Path(__file__).resolve().parents[1] / "scenarios" / "self_assessment.yaml")
    s = PanelSettings.model_validate(sc.settings)
    assert s.initial_specialists == 1 and s.self_assessment and (s.rounds, s.turns_per_round) == (3, 3)
    assert "KAMAC" in sc.description and "initial_specialists = 1" in sc.description

    def respond(r: ScriptedRequest) -> object:
        if r.tag.step.startswith("select_specialists"):
            return {"specialists": [{"role": "Cardiologist", "expertise": "heart"}]}
        if r.tag.step.startswith("recruit_check"):
            return {"needed": False, "specialty": "", "reason": "enough"}
        return {"reasoning": "thinks", "answer": "A"}

    [cond] = [Condition(slug=c.slug, pipeline="panel", flags=c.flags, settings=sc.settings) for c in sc.conditions()]
    result, _ = run(cond, Q4, respond)
    assert result.summary["initial_panel"] == ["Cardiologist"] and result.summary["final_panel_size"] == 1
    assert sum(e.step == "recruit_check" for e in result.events) == 1  # asked once, after the first turn


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_no_shipped_scenario_fixes_a_small_model_accommodation(path: Path) -> None:
    # An explicit value wins on every backend, so a shipped scenario that set one would cut passages
    # or strings on a real endpoint too; the backend's own default covers the embedded model.
    sc = load_scenario(path)
    fixed = {k for k in ("passage_chars", "verifier_passage_chars") if k in sc.settings}
    fixed |= {f"model.{k}" for k in ("max_string_chars", "context_window") if getattr(sc.model, k) is not None
              and k in sc.model.model_fields_set}
    assert not fixed, f"{path.name} fixes {sorted(fixed)} for every backend"
