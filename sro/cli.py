"""The `sro` command line: search, design, report, show, export, train.

Every user error (bad YAML, unknown generator, bad budget, missing run folder) prints one line
`error: ...` and exits 2 — no traceback. A search ended by repeated environment failures exits 1;
Ctrl-C 130, SIGTERM 143 (finished trials kept).
"""

from __future__ import annotations

import codecs
import os
import re
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from sro import yaml_strict

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="SRO: search post-training recipes for language models.")
console = Console()
err_console = Console(stderr=True)


_REPORTED = ("torch", "transformers", "botorch", "optuna", "reasoning-gym", "textworld")


def _version(value: bool) -> None:
    """`sro --version`: SRO's release and those of the libraries a result depends on, read from the
    installed packages' metadata (nothing is imported), for a bug report or a figure's environment."""
    if not value:
        return
    from importlib.metadata import PackageNotFoundError, version

    def of(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    console.print(f"sro {of('sro')} (" + ", ".join(f"{n} {of(n)}" for n in _REPORTED) + ")", highlight=False, soft_wrap=True)
    raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="print SRO's version and its libraries', then exit")] = False) -> None:
    """SRO: search post-training recipes for language models."""


_ASCII = str.maketrans({"✔": "+", "—": "-", "…": "...", "·": "-", "→": "->",
                        **dict(zip("▁▂▃▄▅▆▇█", "_.,-=+*#"))})
"""ASCII stand-ins for the marks SRO prints (the green mark, dashes, the sparkline's bars)."""


def _stand_in(e: UnicodeError) -> tuple[str, int]:
    """The `sro-ascii` codec error handler: what a console cannot print, as SRO's ASCII stand-ins (`?` for
    any other character)."""
    if not isinstance(e, UnicodeEncodeError):
        raise e
    bad = e.object[e.start:e.end]
    return bad.translate(_ASCII).encode("ascii", "replace").decode("ascii"), e.end


codecs.register_error("sro-ascii", _stand_in)


def _printable_everywhere() -> None:
    """Standard output and error print what their encoding lacks as ASCII stand-ins: with `PYTHONIOENCODING=ascii`
    or a latin-1 locale, `sro --help`, `sro show` and a search at its last table ended in a UnicodeEncodeError
    traceback (a review, stop 53). A UTF-8 console, nearly every one, prints as before."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):  # a real text stream (not a test's capture)
            stream.reconfigure(errors="sro-ascii")


def _fail(msg: str, code: int = 2) -> None:
    err_console.print(f"[red]error:[/] {escape(msg)}", highlight=False, soft_wrap=True)  # text, not markup
    raise typer.Exit(code)


def _check_runs(runs: Path, study: bool = True) -> None:
    """`--runs` names the folder that holds run folders; a run folder itself there started a study nested
    inside it, with a base model of its own (a review, stop 28). `study=False`: `sro train`'s model cache."""
    from sro.config import ConfigError

    for p in (runs, *runs.parents):  # was a NotADirectoryError traceback (a walkthrough, stop 34)
        try:
            there = p.exists() or p.is_symlink()
        except PermissionError:  # a parent that cannot be searched: was a PermissionError traceback
            raise ConfigError(f"--runs {runs}: {p} cannot be read (permission denied); pass a folder you "
                              "can write, e.g. --runs runs") from None
        if not there:
            continue
        if not p.exists():  # a link to nothing: mkdir said FileExistsError (a review, stop 35)
            raise ConfigError(f"--runs {runs}: {p} is a link to {os.readlink(p)}, which does not exist; "
                              "make that folder or pass another")
        if not p.is_dir():
            raise ConfigError(f"--runs {runs}: {p} is a file; pass a folder (it is made if missing), "
                              f"e.g. --runs runs")
        if not os.access(p, os.W_OK | os.X_OK):
            raise ConfigError(f"--runs {runs}: {p} is not writable by this user; pass a folder you can "
                              "write, e.g. --runs runs")
        break
    if study and (runs / "project.yaml").is_file():  # (a study.db alone may be a `storage:` URL's file)
        raise ConfigError(f"--runs {runs} is a run folder (it holds project.yaml); pass the folder that holds it: "
                          f"--runs {runs.parent}")


def _user_errors():
    from sro.budget import BudgetError
    from sro.config import ConfigError
    from sro.space import SpaceError
    from evaluators.registry import UnknownNameError
    from evaluators.games import GameGenerationError
    from trainers.models import ModelLoadError

    return (ConfigError, BudgetError, SpaceError, UnknownNameError, ModelLoadError, FileNotFoundError,
            GameGenerationError)


@app.command()
def search(
    project: Annotated[Path, typer.Argument(metavar="PROJECT", help="project YAML (see search_spaces/quickstart.yaml)")],
    budget: Annotated[Optional[str], typer.Option(help="total for the study: 10m, 2h, 6trials, 8gpu-h, 5Mtok; "
                                                     "default: the project's `budget`")] = None,
    optimizer: Annotated[str, typer.Option(help="proposer of recipes: botorch (multi-objective BO, qLogNEHVI "
                                                "over evidence-built candidates), random (Sobol baseline), "
                                                "tpe or nsga2 (Optuna's samplers, for comparison)")] = "botorch",
    pruning: Annotated[Optional[bool], typer.Option("--pruning/--no-pruning", help="stop trials whose "
                                                    "intermediate results are dominated by earlier trials at the "
                                                    "same fraction of their steps; default: the project's "
                                                    "`pruning.enabled` (on)")] = None,
    runs: Annotated[Path, typer.Option(help="folder that holds the run folders (<name>/) and the model "
                                            "cache (.cache/)")] = Path("runs"),
) -> None:
    """Search recipes for PROJECT until the budget is spent; rerun to resume (finished trials are kept)."""
    from sro.budget import Budget
    from sro.config import ConfigError, load_project

    try:
        proj = load_project(project)
        b = Budget.parse(budget if budget is not None else proj.budget)  # bad input fails before the seconds of importing the search
        from sro.proposers import PROPOSERS
        from sro.search import on_sigterm, run_search

        PROPOSERS.get(optimizer)
        _check_runs(runs)
        if (why := proj.designer.missing_key()) is not None:  # was a warning minutes later, then the rules
            raise ConfigError(f"{project}: {why}")
        on_sigterm()
        summary = run_search(proj, b, runs, optimizer, console, pruning=pruning)
    except _user_errors() as e:
        _fail(str(e))
        return
    except KeyboardInterrupt as e:
        from sro.search import Terminated

        _fail(f"search {'stopped by ' + str(e) if isinstance(e, Terminated) else 'interrupted'}; finished trials "
              "are kept — rerun the same command to resume", 143 if isinstance(e, Terminated) else 130)
        return
    except Exception as e:
        from sro.ledger import STORAGE_ERRORS, storage_failure, study_url
        from sro.search import RepeatedFailure

        if isinstance(e, STORAGE_ERRORS):  # an outage that outlived the retries: was a traceback (stop 37)
            _fail(storage_failure(e, study_url(proj, runs / proj.name)), 1)
        if not isinstance(e, RepeatedFailure):
            raise
        _fail(str(e), 1)  # the environment, not the input
        return
    _show_table(summary.run_dir, searched=True)
    base = summary.base_scores
    winners = [r for r in summary.trials if r.beats(base, proj.lower_is_better())]
    console.print(f"{len(winners)} trial(s) beat the base model on every held-out benchmark"
                  + (f": {', '.join(str(r.number) for r in winners)}" if winners else ""))
    if summary.report:
        console.print(f"report: {summary.report}")


@app.command()
def design(
    project: Annotated[Path, typer.Argument(metavar="PROJECT", help="project YAML (see search_spaces/quickstart.yaml)")],
    budget: Annotated[Optional[str], typer.Option(help="the budget the space is sized for; default: the "
                                                     "project's `budget`")] = None,
    runs: Annotated[Path, typer.Option(help="folder that holds the run folders (<name>/) and the model "
                                            "cache (.cache/)")] = Path("runs"),
) -> None:
    """Design PROJECT's recipe space and write runs/<name>/space.yaml for review; `sro search` then uses it."""
    from sro.budget import Budget
    from sro.config import ConfigError, load_project

    try:
        proj = load_project(project, trains=False)  # designing trains nothing: a GPU project designs on a laptop
        b = Budget.parse(budget if budget is not None else proj.budget)  # before the seconds of importing torch
        from sro.designer.design import design_space, last_version
        from sro.executor import SearchContext
        from sro.search import _written_space

        _check_runs(runs)
        if (why := proj.designer.missing_key()) is not None:
            raise ConfigError(f"{project}: {why}")
        run_dir = runs / proj.name
        written = _written_space(run_dir)  # a malformed one: a SpaceError naming the file
        previous = last_version(run_dir, written)
        ctx = SearchContext.prepare(proj, runs / ".cache", log=console.print)
        from sro.progress import status_for

        with status_for(console)("measuring the base model on the sources and designing the space ..."):
            space, path = design_space(proj, run_dir, b, ctx, log=err_console.print, version=previous + 1,
                                       unless=written)
    except _user_errors() as e:
        _fail(str(e))
        return
    t = Table(title=f"{proj.name}: space v{space.version} by the {space.designer} designer")
    for h in ("parameter", "range", "why"):
        t.add_column(h, overflow="fold")
    for p in space.params:
        # a categorical's choices in braces: a list of two numbers read as a range (a review, stop 38)
        rng = (f"[{p.low:g}, {p.high:g}]{' log' if p.log else ''}" if p.kind in ("float", "int") else
               "one of {" + ", ".join(map(str, p.choices)) + "}")
        when = (" when " + " and ".join(f"{k} in {{{', '.join(map(str, v))}}}" for k, v in p.condition.items())
                if p.condition else "")  # was the dict's repr: `when {'algorithm': ['proas']}` (a review, stop 57)
        t.add_row(p.name, rng + when, p.rationale)
    for sx in space.simplexes:
        t.add_row(sx.name, "simplex: " + ", ".join(sx.members), sx.rationale)
    console.print(t)
    from sro.search import _start_recipes
    from sro.start_recipes import StartRecipeError

    try:  # a start recipe this space refuses was found only by the search (a review, stop 57)
        _start_recipes(proj, space, run_dir, [], console.print, notes=False)
    except StartRecipeError as e:
        err_console.print(f"[yellow]warning[/]: {escape(str(e))}; `sro search` refuses it until the space or the "
                          "start recipe is mended", highlight=False, soft_wrap=True)  # a path whole, as `_fail`'s
    # the same flags, or the copied command searches ./runs (or another budget) and ignores this space
    import shlex

    flags = ([f"--budget {shlex.quote(budget)}"] if budget else []) + (
        [f"--runs {shlex.quote(str(runs))}"] if runs != Path("runs") else [])
    hint = " ".join([f"sro search {shlex.quote(str(project))}", *flags])
    said = (f"wrote {path}" if path is not None else
            f"the same space as {run_dir / 'space.yaml'} (v{space.version}), which is kept; nothing written")
    console.print(escape(f"{said}; edit it if you like, then run `{hint}`"), highlight=False, soft_wrap=True)


@app.command()
def report(run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="runs/<name>")]) -> None:
    """Write RUN_DIR/report.html (Pareto front, hypervolume, what moved each objective, curves, trials; offline).

    It writes RUN_DIR/trials.json too (every trial, from the study)."""
    from sro.report import write_report

    try:
        out = write_report(run_dir)
    except _user_errors() as e:
        _fail(str(e))
        return
    console.print(f"report: {out}")


def _over(t: Table, con: Console) -> int:
    """How many characters `t` is wider than `con` (0: it fits) with each column at the least rich gives it: a
    number column (`no_wrap`) as wide as its longest line, up to its `max_width` (a header folds; rich shrinks no
    such column), a text column at its `min_width`. rich's own minimum let a header's space stand for room the
    text column then paid for: `interrupt/ed` at 80 columns (a review, stop 57)."""
    from rich.cells import cell_len

    def least(c) -> int:
        if not c.no_wrap:  # its longest word, as rich measures it
            return c.min_width or max((cell_len(w) for cell in (c.header, *c.cells) for w in str(cell).split()),
                                      default=1)
        w = max((cell_len(line) for cell in (c.header, *c.cells) for line in str(cell).splitlines()), default=0)
        return w if c.max_width is None else min(w, c.max_width)

    _, right, _, left = t.padding
    edges = (2 if t.box and t.show_edge else 0) + (len(t.columns) - 1 if t.box else 0)
    return max(0, sum(least(c) + left + right for c in t.columns) + edges - con.width)


def _wide(t: Table, con: Console) -> bool:
    """Whether `t` cannot fit `con` (`_over`)."""
    return _over(t, con) > 0


PIECES = re.compile(r"[^/_.\- ]*[/_.\- ]?")
"""A header's pieces: each ends after a `/`, `_`, `.`, `-` or space, where a line may break (`_at_marks`)."""


def _at_marks(text: str, width: int) -> list[str]:
    """`text`'s lines at most `width` wide where breaking after a `/`, `_`, `.`, `-` or space can make them so: a
    benchmark's name `multiplication/mult_heldout` as `multiplication/` over `mult_heldout`, its words whole."""
    lines = [""]
    for piece in PIECES.findall(text)[:-1]:  # findall ends with an empty match
        if lines[-1] and len(lines[-1]) + len(piece.rstrip()) > width:
            lines[-1] = lines[-1].rstrip()
            lines.append("")
        lines[-1] += piece
    return [line.rstrip() for line in lines]


def _narrow(t: Table, con: Console) -> None:
    """Fit `t` to a terminal narrower than it. Its number columns (`no_wrap`, never split: at 40 columns 0.950
    was 0.9 over 50, a review at stop 53) narrow their headers, the one with the most to give first and only by
    what the table is too wide (folding every header to its numbers' width made `trial` `tria/l` at 80 columns
    in a table that fitted with one header folded: a walkthrough, stop 54), at most down to their numbers' width:
    first by breaking a header after a `/`, `_`, `.`, `-` or space; where that is not enough, by folding it
    mid-word (`multi/plica/tion` at 80 columns was a fold where a break after the slash fitted: a review, stop
    57), after the cells have lost their padding. The text columns keep their longest word (`min_width`) until
    last, when they split their words rather than the table lose its edge."""
    cols = [c for c in t.columns if c.no_wrap]
    floor = {id(c): max(len(str(cell)) for cell in (*c.cells, "1234")) for c in cols}  # a header: 4 characters a line

    def longest(lines: list[str]) -> int:
        return max(map(len, lines), default=0)

    def width(c) -> int:
        return c.max_width if c.max_width is not None else longest(str(c.header).splitlines())

    def whole(c) -> int:  # as narrow as its header gets with its words whole
        return max(floor[id(c)], longest([piece.rstrip() for piece in PIECES.findall(str(c.header))]))

    for c in t.columns:  # a text column keeps its words whole: rich shrank the state first, `interrupt/ed` at 80
        if not c.no_wrap and c.min_width is None:
            c.min_width = max((len(w) for cell in (c.header, *c.cells) for w in str(cell).split()), default=0) or None

    while (over := _over(t, con)) and (breakable := [c for c in cols if whole(c) < width(c)]):
        c = max(breakable, key=lambda c: width(c) - whole(c))
        lines = _at_marks(" ".join(str(c.header).splitlines()), max(whole(c), width(c) - over))
        c.header = Text("\n".join(lines), overflow="fold", no_wrap=False)
    if _wide(t, con):
        t.padding = (0, 0)
    while (over := _over(t, con)) and cols:
        c = max(cols, key=lambda c: width(c) - floor[id(c)])
        if width(c) <= floor[id(c)]:
            break
        # half its header at least, so that a fold leaves two even lines, not `parity_heldou` over `t`
        c.max_width = max(floor[id(c)], min(width(c) - over, -(-width(c) // 2)))
    for c in t.columns:
        if _wide(t, con) and not c.no_wrap:
            c.min_width = None


def _show_table(run_dir: Path, searched: bool = False) -> None:
    """`searched`: printed at the end of `sro search`, whose budget may have gone on its set-up."""
    from sro.ledger import counted
    from sro.pareto import front_numbers
    from sro.pruning import saved_budget
    from sro.report import _load, negated, other_benchmarks, sparkline, superseded_by

    data, records, info = _load(run_dir)
    base = info["base_scores"]
    objectives = [next(iter(o.items())) for o in data["objectives"]]
    keys = [k for k, _ in objectives if k != "cost"]
    # until stop 38 a hidden benchmark made a cheaper, better-looking trial not green, and nothing said why
    others = other_benchmarks(keys, base)
    front = front_numbers(records, objectives)
    late = superseded_by(records)
    t = Table(title=f"{data['name']}: {len(counted(records))} trials")  # a late copy's trial once, as the budget
    for h in ["trial", "state", *keys, *(f"{k} (no objective)" for k in others), "cost s", "front", "beats"]:
        # a long benchmark name wraps, not cut to `arithmetic/…`; a number never does: at 40 columns 0.950 was
        # 0.9 over 50 (a review, stop 53), so the state column (text) is the one that narrows
        t.add_column(Text(h, overflow="fold", no_wrap=False),
                     justify="right", overflow="fold", no_wrap=h != "state")
    if base:
        t.add_row("base", "", *[f"{base.get(k, float('nan')):.3f}" for k in keys + others], "", "", "", style="bold")
    for r in records:
        state = f"running on {r.worker}" if r.state == "running" else r.state  # which worker, with several
        if r.number in late:  # it read as interrupted, to be run again (a review, stop 53)
            state = f"superseded by trial {late[r.number]}"
        beats = r.beats(base, info["lower"])
        t.add_row(str(r.number), state, *[f"{r.scores[k]:.3f}" if k in r.scores else "-" for k in keys + others],
                  f"{r.cost.get('wall_s', 0):.0f}", "*" if r.number in front else "", "✔" if beats else "",
                  style="green" if beats else None)
    _narrow(t, console)
    console.print(t)
    if not records:  # after a search, its own command was the hint (`--budget 1s`; a review, stop 58)
        console.print("no trial yet: the set-up (benchmarks, the base model, the space) took the budget; it is kept, "
                      "so a rerun with a larger --budget spends it on trials" if searched else
                      "no trial yet: `sro search` on the project runs them", highlight=False)
    for old, new in sorted(late.items()):
        console.print(f"trial {new} is trial {old}'s late result (another worker had marked it interrupted while it "
                      "trained on): counted once", highlight=False)
    failed = [r for r in records if r.state == "failed"]
    for r in failed[:5]:  # why, in one line each (it was in the report only)
        console.print(f"trial {r.number} failed: {(r.message or 'no message').splitlines()[0][:160]}",
                      style="red", highlight=False, markup=False)  # exception text: '[/dev/x]' is no markup
    if len(failed) > 5:
        console.print(f"... and {len(failed) - 5} more failed trials; `sro report {run_dir}` lists every one",
                      style="red", highlight=False, markup=False)
    if front:
        console.print(f"front (*): trials {', '.join(map(str, sorted(front)))} — no other complete trial is at least "
                      "as good on every objective and better on one", highlight=False)
    hv = info.get("hypervolume") or {}
    if hv.get("hypervolume"):
        # the minimized objectives are negated, as the report says: "cost negated" was printed where the
        # negated one was an ECE and the project had no cost objective (a review, stop 53)
        # an inferred point moves with the trials: 1.04 after 2 trials read 0.82 in the next run (a review, stop 57)
        stated, others = hv.get("stated") or {}, [k for k, _ in objectives if k not in (hv.get("stated") or {})]
        inferred = "" if not others else (
            f"; {'for ' + ', '.join(others) + ' ' if stated else ''}inferred from the trials, so it moves as they come: "
            "compare values within one history, not across runs")
        console.print(f"hypervolume after each complete trial: {sparkline(hv['hypervolume'])} "
                      f"{hv['hypervolume'][-1]:.4g} (reference point {[round(v, 4) for v in hv['ref_point']]}, "
                      f"{negated(objectives)}{inferred})", highlight=False)
        if hv["hypervolume"][-1] == 0 and hv.get("stated"):
            console.print(f"the hypervolume is 0: no complete trial is better than the project's reference_point "
                          f"{hv['stated']} on every objective", style="yellow", highlight=False, markup=False)
    saved = saved_budget(records)
    if saved["trials"]:
        console.print(f"pruning stopped {saved['trials']:.0f} trial(s) early, saving {saved['steps']:.0f} training "
                      f"steps (~{saved['seconds']:.0f} s)", highlight=False)


@app.command()
def show(run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="runs/<name>")]) -> None:
    """Print RUN_DIR's trials as a table (green, ✔: beats the base model on every benchmark; *: on the Pareto front)."""
    try:
        _show_table(run_dir)
    except _user_errors() as e:
        _fail(str(e))


@app.command()
def export(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="runs/<name>")],
    trial: Annotated[int, typer.Option(help="trial number")],
    out: Annotated[Optional[Path], typer.Option(help="where to write (default: stdout)")] = None,
    force: Annotated[bool, typer.Option("--force", help="overwrite --out if it exists")] = False,
) -> None:
    """Write one trial's recipe as a standalone YAML that `sro train` accepts."""
    from sro.report import _load

    try:
        data, records, _ = _load(run_dir)
    except _user_errors() as e:
        _fail(str(e))
        return
    match = [r for r in records if r.number == trial]
    if not match:
        _fail(f"{run_dir} has no trial {trial}; trials: {', '.join(str(r.number) for r in records) or 'none'}")
    r = match[0]
    doc = {"project": data, "recipe": r.recipe.to_dict(), "scores": r.scores, "trial": r.number, "state": r.state}
    if r.state != "complete":  # its scores are a partial training's, or none (a pruned, stopped or failed trial)
        doc["message"] = (r.message or "").splitlines()[0] if r.message else r.state
        # on stderr: stdout is the file (a review, stop 58: an interrupted trial was exported without a word)
        err_console.print(f"note: trial {r.number} is not complete ({r.state}): the file holds its recipe and "
                          + ("the scores of its partial training" if r.scores else "no scores"), highlight=False)
    text = yaml_strict.safe_dump(doc, sort_keys=False)
    if out:
        if out.is_dir():
            _fail(f"cannot write {out}: it is a folder; pass --out a file path such as {out / f'trial{r.number}.yaml'}")
            return
        if out.exists() and not force:  # a mistyped --out must not replace a project file or another recipe
            _fail(f"{out} exists; pass --force to overwrite it, or another --out")
            return
        try:
            if (f := _file_in_the_way(out)) is not None:
                _fail(f"cannot write {out}: {f} is a file, not a folder; pass --out a writable file path")
                return
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text, encoding="utf-8")
        except OSError as e:
            _fail(f"cannot write {out}: {e.strerror or e}; pass --out a writable file path")
            return
        console.print(f"wrote {out}")
    else:
        sys.stdout.write(text)


@app.command()
def train(
    recipe: Annotated[Path, typer.Argument(metavar="RECIPE", help="a recipe YAML written by `sro export`")],
    runs: Annotated[Path, typer.Option(help="folder for the model cache")] = Path("runs"),
    out: Annotated[Optional[Path], typer.Option(
        help="save the trained model and tokenizer as this folder (save_pretrained, with the recipe as "
             "sro-recipe.yaml), one that `base_model:` and from_pretrained load")] = None,
    force: Annotated[bool, typer.Option("--force", help="replace --out if it exists")] = False,
) -> None:
    """Run one recipe outside a search and print its held-out scores next to the base model's."""
    from sro.config import ConfigError, project_from_data, read_recipe_file
    from sro.executor import SearchContext, TrialFailed, run_trial, trainer_config
    from sro.recipe import Recipe

    try:
        doc = read_recipe_file(recipe, str(recipe))
        proj = project_from_data(doc["project"], recipe.parent, f"{recipe}: project")
        rec = Recipe.from_dict(doc["recipe"])
        _check_recipe_keys(rec, proj, recipe)
        _check_runs(runs, study=False)
        _check_model_out(out, force)  # before any training: a mistyped --out must not cost the run
        # a bad recipe fails here, before the base model is scored, naming the file and the key
        trainer_config(rec, proj.seed, None, where=str(recipe), multi_turn=proj.multi_turn)
        from trainers.models import ModelLoadError, pick_device

        try:  # `device: cuda` without a GPU was found after the tiny model's pre-training (a review, stop 37)
            pick_device(proj.runtime.device)
        except ModelLoadError as e:
            raise ConfigError(f"{recipe}: project.runtime.device: {e}") from None
        both = sorted(k for k in set(rec.values) & set(rec.fixed) if rec.values[k] != rec.fixed[k])
        if both:  # values win (`Recipe.get`), which a hand edit of fixed: would not expect (a review, stop 38)
            console.print(f"note: {recipe}: " + "; ".join(f"recipe.values.{k}={rec.values[k]!r} is used, not "
                                                          f"recipe.fixed.{k}={rec.fixed[k]!r}" for k in both),
                          style="yellow", highlight=False, markup=False)
        if doc.get("state", "complete") != "complete":  # exported from a pruned, stopped or failed trial
            why = doc.get("message") if doc.get("message") not in (None, "", doc["state"]) else None
            console.print(f"note: {recipe} is trial {doc.get('trial', '?')}'s recipe ({doc['state']} in its search"
                          f"{': ' + str(why) if why else ''}); training it again", style="yellow", highlight=False,
                          markup=False)
        ctx = SearchContext.prepare(proj, runs / ".cache", log=console.print)
        console.print("scoring the base model on the held-out benchmarks ...")
        base = ctx.score_base(warn=lambda m: console.print(f"[yellow]{m}[/]", highlight=False))
        saved: list[Path] = []

        def keep(model, tok) -> None:
            from trainers.models import save_model

            try:
                saved.append(save_model(model, tok, out, recipe.read_text(encoding="utf-8")))
            except OSError as e:
                raise ConfigError(f"cannot save the trained model as {out}: {e.strerror or e}; pass --out a "
                                  "writable folder path") from None
            console.print(f"saved the trained model as {out}", highlight=False)

        of = f"/{rec.get('steps')}" if rec.get("steps") is not None else ""  # of how many (a review, stop 57)
        result = run_trial(rec, ctx, on_step=lambda s, m: console.print(
            f"step {s}{of}: reward {m.get('reward', float('nan')):.3f}", highlight=False) if s % 5 == 0 else None,
            on_trained=keep if out is not None else None)
    except (*_user_errors(), TrialFailed) as e:
        _fail(str(e))
        return
    recorded = doc.get("scores") if isinstance(doc.get("scores"), dict) else {}  # what the search measured
    t = Table(title=f"recipe {rec.key}")
    for h in ("benchmark", "base", "trained", *(["in its search"] if recorded else [])):
        t.add_column(h, justify="right")
    for k, v in result.scores.items():
        was = recorded.get(k)
        t.add_row(k, f"{base[k]:.3f}", f"{v:.3f}", *([f"{was:.3f}" if isinstance(was, (int, float)) else "-"]
                                                     if recorded else []))
    console.print(t)
    # an SFT stage the recipe did not run printed as a row of zeros (a review, stop 38)
    shown = {k: v for k, v in result.metrics.items() if not (k.startswith("sft_") and not result.metrics.get("sft_steps"))}
    if shown:
        console.print("  ".join(f"{k}={v:.4g}" for k, v in shown.items()), highlight=False)
    for note in result.notes:
        console.print(f"[yellow]{note}[/]", highlight=False)
    if saved:
        console.print(f"model: {saved[0]} (`base_model: {saved[0].resolve()}` in a project loads it)", highlight=False)


def _check_model_out(out: Path | None, force: bool) -> None:
    """`sro train --out`: a folder path that is free, or `--force`d, checked before anything trains."""
    from sro.config import ConfigError

    if out is None:
        return
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: is a file; pass a folder path for the model")
    if out.exists() and any(out.iterdir()) and not force:  # another model, or a project folder
        raise ConfigError(f"--out {out}: exists and is not empty; pass --force to replace it, or another --out")
    if (f := _file_in_the_way(out)) is not None:
        raise ConfigError(f"--out {out}: {f} is a file, not a folder; pass a writable folder path")


def _file_in_the_way(out: Path) -> Path | None:
    """The nearest existing parent of `out` where it is a file, not a folder (so `out` cannot be made), or None."""
    f = next((p for p in out.parents if p.exists()), None)
    return f if f is not None and not f.is_dir() else None


def _check_recipe_keys(rec, proj, path: Path) -> None:
    """A recipe key that no part of a trial reads (a typo such as `lrr`) is an error, not silently ignored."""
    from sro.config import ConfigError
    from sro.executor import unread_keys, weight_problem

    unknown, hints = unread_keys(set(rec.values) | set(rec.fixed), proj)
    if unknown:
        raise ConfigError(f"{path}: recipe: no part of a trial reads {hints}; fix or remove "
                          f"{'it' if len(unknown) == 1 else 'them'}")
    if (problem := weight_problem(rec, proj)) is not None:
        raise ConfigError(f"{path}: recipe: {problem}")


def main() -> None:
    _printable_everywhere()
    app()


if __name__ == "__main__":
    main()
