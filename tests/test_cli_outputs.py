"""What `sro show`, `sro report` and a budget say about a study built by hand (no training): a number too large
for a budget, a console that cannot print UTF-8, the hypervolume's negated objectives, a nan score in
trials.json, a late copy of an interrupted trial, a narrow terminal, the front plot's hover (a review, stop 53)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import rich.console
import yaml
from typer.testing import CliRunner

import sro.cli as cli
import sro.ledger as ledger_mod
import sro.report as report
from micro import MICRO
from sro.budget import Budget, BudgetError, Spent
from sro.config import load_project
from sro.ledger import Ledger, TrialRecord
from sro.recipe import Recipe
from sro.space import RecipeSpace

ROOT = Path(__file__).resolve().parents[1]
SPACE = RecipeSpace.from_yaml("version: 1\ndesigner: test\nfixed: {algorithm: grpo}\nparams:\n"
                              "  lr: {kind: float, low: 0.001, high: 0.003, log: true, why: small}\n"
                              "  steps: {kind: int, low: 2, high: 3, why: short}\n")
HUGE = "1" + "0" * 400  # float() reads it as inf


def _study(tmp_path: Path, monkeypatch) -> Path:
    """A run folder as `sro search` leaves it: trial 0 complete (0.95, the front); trial 1 marked interrupted by
    another worker while its own trained on and recorded trial 2, its late copy (0.7); trial 3 collapsed with a
    nan score. Its hypervolume history is stored, so that the commands never load torch to compute it."""
    (tmp_path / "late.yaml").write_text(MICRO.format(name="late"))
    project = load_project(tmp_path / "late.yaml")
    run_dir = tmp_path / "runs" / "late"
    ledger = Ledger(project, run_dir)
    (run_dir / "project.yaml").write_text(yaml.safe_dump(project.portable_dump(), sort_keys=False))
    ledger.put("base_scores", {"arithmetic/add": 0.2})
    recipes = [Recipe(v, dict(SPACE.fixed)) for v in SPACE.sobol(3, seed=0)]
    ledger.finish(ledger.start(recipes[0], SPACE), {"arithmetic/add": 0.95}, {"wall_s": 30.0}, [])
    lost = ledger.start(recipes[1], SPACE)
    with monkeypatch.context() as m:
        m.setattr(ledger_mod, "_alive", lambda pid, started=None: False)  # its worker reads as dead
        Ledger(project, run_dir).recover()
    ledger.finish(lost, {"arithmetic/add": 0.7}, {"wall_s": 50.0}, [])  # it was only suspended: a late copy
    ledger.end_early(ledger.start(recipes[2], SPACE), "collapsed", {"arithmetic/add": float("nan")},
                     {"wall_s": 5.0}, [], "training collapsed")
    ledger.put("hypervolume", {"trials": [0, 2], "objectives": [list(o) for o in project.objective_directions()],
                               "stated": {}, "hypervolume": [6.0, 6.05], "ref_point": [0.675, -52.0]})
    assert [(r.number, r.state, r.late_of) for r in ledger.records()] == [
        (0, "complete", None), (1, "interrupted", None), (2, "complete", 1), (3, "collapsed", None)]
    return run_dir


def _sro(*args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", **env}
    return subprocess.run([sys.executable, "-m", "sro.cli", *args], env=environ, capture_output=True, text=True,
                          encoding="utf-8", errors="replace", timeout=120)


def _shown(monkeypatch, width: int, data: dict, records: list[TrialRecord], info: dict) -> list[str]:
    """`sro show`'s lines at a terminal `width` wide, over a study read through a stub of `_load`."""
    out = io.StringIO()
    monkeypatch.setattr(cli, "console", rich.console.Console(file=out, width=width))
    monkeypatch.setattr(report, "_load", lambda run_dir: (data, records, info))
    r = CliRunner().invoke(cli.app, ["show", "anywhere"])
    assert r.exit_code == 0, r.output
    return out.getvalue().splitlines()


# ---- 1. a budget too large to count ----------------------------------------------------------------------


@pytest.mark.parametrize("unit", ["trials", "h", "gpu-h"])
def test_a_budget_too_large_to_count_is_refused_in_one_line(unit):
    """Hundreds of digits read as inf: `int(inf)` was an OverflowError traceback for trials, and `h` gave an
    endless wall-time limit. Now a `BudgetError` names the number and a finite example."""
    with pytest.raises(BudgetError, match=rf"^budget '100000\.\.\.000{unit}' \(a 401-digit number\) is too large "
                                          rf"to be a limit; write a finite one, e\.g\. 20{unit}$"):
        Budget.parse(f"{'2h' if unit == 'trials' else '6trials'},{HUGE}{unit}")  # the term named, of two
    assert Budget.parse("1" + "0" * 300 + "trials").trials == int(1e300)  # large, but a number


def test_a_huge_budget_on_the_command_line_or_in_the_project_exits_2(tmp_path):
    """Both ways in: `--budget` (exit 1 with a traceback) and the project's `budget:` key (the same, from the
    validator, which let the OverflowError through)."""
    for budget_key, flag in ((f"{HUGE}trials", []), ("2trials", ["--budget", f"{HUGE}trials"])):
        path = tmp_path / "big.yaml"
        path.write_text(MICRO.format(name="big").replace("budget: 2trials", f"budget: {budget_key}"))
        r = CliRunner().invoke(cli.app, ["search", str(path), *flag, "--runs", str(tmp_path / "runs")])
        said = " ".join(r.output.split())
        assert r.exit_code == 2 and "is too large to be a limit" in said and "Traceback" not in said, r.output


# ---- 2. a console without UTF-8; the report's encoding ---------------------------------------------------


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_show_prints_ascii_stand_ins_where_the_console_cannot_encode_its_marks(tmp_path, monkeypatch, encoding):
    """✔, — and the sparkline's bars were a UnicodeEncodeError traceback (exit 1) with PYTHONIOENCODING=ascii or
    a latin-1 locale, for `sro show`, the table that ends a search, and `sro --help`."""
    run_dir = _study(tmp_path, monkeypatch)
    r = _sro("show", str(run_dir), PYTHONIOENCODING=encoding)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    lines = [" ".join(line.replace("|", " ").split()) for line in r.stdout.splitlines()]
    assert "0 complete 0.950 30 * +" in lines, r.stdout
    assert any(line.startswith("front (*): trials 0 - no other complete trial") for line in lines), r.stdout
    assert any(line.startswith("hypervolume after each complete trial: *# 6.05") for line in lines), r.stdout
    assert "inferred from the trials, so it moves as they come: compare values within one history" in \
        " ".join(r.stdout.split())  # the point is no project's (a review, stop 57)
    assert _sro("show", str(run_dir)).stdout.count("✔") == 2  # UTF-8 as before
    assert _sro("--help", PYTHONIOENCODING=encoding).returncode == 0  # `show`'s help had a ✔


def test_the_report_is_written_in_utf8_in_a_c_locale_and_a_failed_write_leaves_no_temporary_file(tmp_path,
                                                                                                 monkeypatch):
    """`write_whole` wrote in the locale's encoding: an ASCII locale failed on the report's `·` (exit 1), and left
    `report.html.tmp...` behind, as any failed write did."""
    from evaluators.files import write_whole

    run_dir = _study(tmp_path, monkeypatch)
    r = _sro("report", str(run_dir), LC_ALL="C", LANG="C", PYTHONUTF8="0", PYTHONCOERCECLOCALE="0")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "base model <b>tiny</b> · " in (run_dir / "report.html").read_text(encoding="utf-8")
    assert sorted(p.name for p in run_dir.glob("*.tmp*")) == []
    with pytest.raises(UnicodeEncodeError):
        write_whole(tmp_path / "x.txt", "a lone surrogate \udc80 encodes in no encoding")
    assert list(tmp_path.glob("x.txt*")) == []


# ---- 3. the hypervolume's negated objectives ------------------------------------------------------------


def test_show_names_the_objectives_the_hypervolume_negates(monkeypatch):
    """`sro show` said "cost negated" whatever the objectives: here an ECE is the negated one and there is no
    cost objective. It names the minimized objectives, as the report does."""
    data = {"name": "ece", "objectives": [{"x/e": "min"}, {"x/s": "max"}]}
    records = [TrialRecord(0, "complete", Recipe({"lr": 1e-3}), scores={"x/e": 0.3, "x/s": 0.5}, cost={"wall_s": 1.0})]
    info = {"base_scores": {}, "spent": Spent(), "overlap": {}, "lower": ["x/e"],
            "hypervolume": {"hypervolume": [0.1], "ref_point": [-0.545, 0.16]}}
    said = " ".join(" ".join(_shown(monkeypatch, 200, data, records, info)).split())
    assert "(reference point [-0.545, 0.16], x/e negated; inferred from the trials" in said and "cost negated" not in said, said
    assert report.negated([("a/x", "max"), ("cost", "min")]) == "cost negated"
    assert report.negated([("a/x", "max")]) == "none negated"


# ---- 4. trials.json is JSON ----------------------------------------------------------------------------


def test_trials_json_writes_a_nan_score_as_null(tmp_path, monkeypatch):
    """A collapsed trial's nan score was written `NaN`, which no strict JSON reader (Node's JSON.parse) takes."""
    run_dir = _study(tmp_path, monkeypatch)
    report.write_report(run_dir)

    def refuse(constant: str) -> None:
        raise AssertionError(f"trials.json holds {constant}, which is not JSON")

    trials = json.loads((run_dir / "trials.json").read_text(encoding="utf-8"), parse_constant=refuse)
    assert trials[3]["state"] == "collapsed" and trials[3]["scores"] == {"arithmetic/add": None}


# ---- 5. a late copy -------------------------------------------------------------------------------------


def test_a_late_copy_is_linked_to_the_trial_it_supersedes_and_counted_once(tmp_path, monkeypatch):
    """Trial 1 showed as interrupted (as if to be run again) and nothing tied it to trial 2, its late result; the
    report counted both, the budget (`counted`) one."""
    import html

    run_dir = _study(tmp_path, monkeypatch)
    r = _sro("show", str(run_dir))
    lines = [" ".join(line.replace("│", " ").split()) for line in r.stdout.splitlines()]
    assert r.returncode == 0 and "late: 3 trials" in lines, r.stdout
    assert "1 superseded by trial 2 - 0" in lines, r.stdout
    assert ("trial 2 is trial 1's late result (another worker had marked it interrupted while it trained on): "
            "counted once") in " ".join(lines)
    page = " ".join(html.unescape(report.write_report(run_dir).read_text(encoding="utf-8")).split())
    assert "2 complete / 3 trials" in page
    assert "superseded by trial 2 (its late result)" in page and "complete (late result of trial 1)" in page
    trials = json.loads((run_dir / "trials.json").read_text(encoding="utf-8"))
    assert [t["late_of"] for t in trials] == [None, None, 1, None]


# ---- 6. a narrow terminal -------------------------------------------------------------------------------


@pytest.mark.parametrize("width", [40, 50, 200])
def test_a_narrow_terminal_never_splits_a_number_and_keeps_the_state(monkeypatch, width):
    """At 40 columns every column folded: 0.950 was `0.9` over `50`. The number columns do not wrap (their
    headers fold), and the state, the text column, keeps room to wrap in."""
    data = {"name": "narrow", "objectives": [{"arithmetic/add": "max"}, {"cost": "min"}]}
    records = [TrialRecord(0, "complete", Recipe({}), scores={"arithmetic/add": 0.95}, cost={"wall_s": 30.0}),
               TrialRecord(1, "failed", Recipe({}), message="out of memory"),
               TrialRecord(2, "complete", Recipe({}), scores={"arithmetic/add": 0.7}, cost={"wall_s": 50.0})]
    info = {"base_scores": {"arithmetic/add": 0.2}, "spent": Spent(), "overlap": {}, "lower": [], "hypervolume": {}}
    lines = _shown(monkeypatch, width, data, records, info)
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in lines if line.startswith("│")]
    assert all(len(line) <= width for line in lines), "\n".join(lines)
    assert [row[2] for row in cells if row[2]] == ["0.200", "0.950", "-", "0.700"], "\n".join(lines)
    state = " ".join(row[1] for row in cells if row[1])
    assert state == "complete failed complete", "\n".join(lines)


def test_at_80_columns_only_the_headers_the_fit_needs_fold():
    """Every number column's header folded to its numbers' width once the table was too wide: at 80 columns
    `trial` read `tria/l` and `front` `fron/t` in a table that fitted with one header folded (a walkthrough, stop
    54). Now the header with the most to give narrows first, by what the table lacks, and the others stay whole."""
    from rich.table import Table

    t = Table()
    headers = ["trial", "state", "gcd/gcd_heldout", "parity/parity_heldout", "cost s", "front", "beats"]
    for i, h in enumerate(headers):
        t.add_column(h, justify="right", no_wrap=i != 1)
    for row in (["0", "complete", "0.000", "1.000", "20", "*", ""], ["1", "interrupted", "-", "-", "36", "", ""]):
        t.add_row(*row)
    con = rich.console.Console(file=io.StringIO(), width=80)
    cli._narrow(t, con)
    con.print(t)
    lines = con.file.getvalue().splitlines()
    assert all(len(line) <= 80 for line in lines), "\n".join(lines)
    header = " ".join(" ".join(line.replace("┃", " ").split()) for line in lines if line.startswith("┃"))
    for whole in ("trial", "state", "gcd/gcd_heldout", "cost s", "front", "beats"):
        assert whole in header, "\n".join(lines)
    # since stop 58 the one header that narrows breaks after its marks, its words whole: no column folds
    rows = [[c.strip() for c in line.split("┃")[1:-1]] for line in lines if line.startswith("┃")]
    assert " ".join(filter(None, list(zip(*rows))[3])) == "parity/ parity_ heldout", "\n".join(lines)
    assert [c.max_width for c in t.columns].count(None) == 7


def test_at_80_columns_the_quickstart_table_keeps_every_word_whole(monkeypatch):
    """At 80 columns the quickstart's table read `multi/plica/tion/mult_/heldo/ut` (the header folded at its
    numbers' width) and `interrupt/ed` (rich took the room from the state column, counting a header's space as
    room). Now a benchmark's header breaks after its domain's slash and the state keeps its longest word."""
    keys = ["arithmetic/arith_heldout", "multiplication/mult_heldout"]
    data = {"name": "quickstart", "objectives": [{k: "max"} for k in keys] + [{"cost": "min"}]}
    records = [TrialRecord(i, state, Recipe({}), scores=dict.fromkeys(keys, 0.3) if state == "complete" else {},
                           cost={"wall_s": 12.0}) for i, state in enumerate(["complete", "interrupted", "pruned"])]
    info = {"base_scores": dict.fromkeys(keys, 0.03), "spent": Spent(), "overlap": {}, "lower": [], "hypervolume": {}}
    lines = _shown(monkeypatch, 80, data, records, info)
    table = [line for line in lines if line[:1] in "┃│"]
    assert all(len(line) <= 80 for line in lines), "\n".join(lines)
    header = [[c.strip() for c in line.split("┃")[1:-1]] for line in table if line.startswith("┃")]
    assert [" ".join(filter(None, col)) for col in zip(*header)][2:4] == [
        "arithmetic/ arith_ heldout", "multiplication/ mult_heldout"], "\n".join(lines)
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in table if line.startswith("│")]
    assert [row[1] for row in cells] == ["", "complete", "interrupted", "pruned"], "\n".join(lines)


@pytest.mark.parametrize("text, width, lines", [
    ("multiplication/mult_heldout", 16, ["multiplication/", "mult_heldout"]),
    ("multiplication/mult_heldout", 5, ["multiplication/", "mult_", "heldout"]),  # a piece wider stays whole
    ("agent/coin_heldout.auroc (no objective)", 19, ["agent/coin_heldout.", "auroc (no", "objective)"]),
    ("trial", 3, ["trial"]), ("cost s", 80, ["cost s"])])
def test_a_header_breaks_after_its_marks_only(text, width, lines):
    assert cli._at_marks(text, width) == lines


# ---- 7. the front plot's hover --------------------------------------------------------------------------


def test_the_rings_of_the_pareto_front_hover_with_the_trial_and_its_scores():
    """The ringed front trace had no text: hovering a ring showed x and y alone, not which trial it was."""
    recs = [TrialRecord(n, "complete", Recipe({}), {"a/x": x, "a/y": y}, {"wall_s": c})
            for n, (x, y, c) in enumerate([(0.9, 0.1, 3.0), (0.2, 0.05, 4.0), (0.1, 0.9, 5.0)])]
    fig = report.front_figure(recs, [("a/x", "max"), ("a/y", "max")], {})
    trials, ring = (next(t for t in fig.data if t.name == n) for n in ("trials", "Pareto front"))
    assert list(ring.text) == ["trial 2, cost 5s", "trial 0, cost 3s"]  # in the order of x, as the line
    assert ring.hovertemplate == trials.hovertemplate == "%{text}<br>%{x:.3f}, %{y:.3f}<extra></extra>"


# ---- `sro show`'s caps and a file for a run folder (a coverage review, stop 54) ---------------------------

# --- 8. cli.py:305-311, 325-328: `sro show` lists at most 5 failures, then a count; and pruning's savings ----

def test_show_lists_five_failures_then_a_count_and_what_pruning_saved(monkeypatch):
    data = {"name": "many", "objectives": [{"a/b": "max"}]}
    failed = [TrialRecord(i, "failed", Recipe({"lr": 1e-3 * (i + 1)}), message=f"ValueError: bad {i}\ntrace")
              for i in range(7)]
    pruned = TrialRecord(7, "pruned", Recipe({"lr": 9e-3}), scores={"a/b": 0.1},
                         cost={"wall_s": 3.0, "saved_steps": 12.0, "saved_s": 40.0})
    info = {"base_scores": {}, "spent": Spent(), "overlap": {}, "lower": [], "hypervolume": {}}
    lines = _shown(monkeypatch, 200, data, [*failed, pruned], info)
    said = " ".join(" ".join(lines).split())
    assert [ln for ln in lines if " failed: " in ln] == [f"trial {i} failed: ValueError: bad {i}" for i in range(5)]
    assert "... and 2 more failed trials; `sro report anywhere` lists every one" in said
    assert "pruning stopped 1 trial(s) early, saving 12 training steps (~40 s)" in said


# --- 9. report.py:60-61: `sro show FILE` says it is a file, in one line, exit 2 ----------------------------

def test_show_and_report_on_a_file_say_it_is_a_file(tmp_path):
    f = tmp_path / "trials.json"
    f.write_text("[]")
    for verb in ("show", "report"):
        r = CliRunner().invoke(cli.app, [verb, str(f)])
        assert r.exit_code == 2 and f"{f} is a file; pass a run folder, runs/<name>" in " ".join(r.output.split())


def test_a_search_whose_budget_went_on_its_set_up_says_a_rerun_spends_more_on_trials(monkeypatch):
    """`sro search --budget 1s` pre-trained, scored and designed, then ended with `no trial yet: \\`sro search\\` on
    the project runs them`: the command just run (a review, stop 58). `sro show` keeps its hint."""
    data = {"name": "p", "objectives": [{"a/x": "max"}]}
    info = {"base_scores": {"a/x": 0.1}, "spent": Spent(), "overlap": {}, "lower": [], "hypervolume": {}}
    out = io.StringIO()
    monkeypatch.setattr(cli, "console", rich.console.Console(file=out, width=300))
    monkeypatch.setattr(report, "_load", lambda run_dir: (data, [], info))
    cli._show_table(Path("runs/p"), searched=True)
    assert ("no trial yet: the set-up (benchmarks, the base model, the space) took the budget; it is kept, so a rerun "
            "with a larger --budget spends it on trials") in out.getvalue()
    assert "no trial yet: `sro search` on the project runs them" in "\n".join(_shown(monkeypatch, 300, data, [], info))
