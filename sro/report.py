"""`runs/<name>/report.html`: the Pareto front of the domain scores (base model marked), the hypervolume, which
parameters moved each objective (`sro.importance`), learning curves and the trial table — one self-contained
file (plotly.js inlined) that opens offline."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go
import yaml
from jinja2 import Template
from markupsafe import Markup

from evaluators.files import write_whole
from sro.config import SOURCE_KINDS
from sro.importance import Importances, parameter_importances
from sro.ledger import TrialRecord, counted
from sro.pareto import front_numbers
from sro.pruning import saved_budget
from sro.recipe import SOURCE_PREFIX
from sro.space import RecipeSpace, SpaceError
from sro import yaml_strict

_PAGE = Template(autoescape=True, source="""<!doctype html>
<html><head><meta charset="utf-8"><title>SRO report: {{ name }}</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1200px}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f3f3f3}tr.front{background:#e6eefb}tr.failed{color:#a33}tr.interrupted{color:#888}tr.base{font-weight:bold}td.l{text-align:left}
tr.superseded{color:#888}
.note{color:#555}
</style></head><body>
<h1>SRO search: {{ name }}</h1>
<p class="note">base model <b>{{ base_model }}</b> · {{ n_complete }} complete / {{ n_total }} trials ·
objectives: {{ objectives }} · budget spent: {{ spent }} · cost: a trial's wall seconds, from loading the base
model to the end of its held-out scoring</p>
<h2>Base model (held-out)</h2><p>{{ base_line }}</p>{% if overlap_line %}<p class="note">{{ overlap_line }}</p>{% endif %}
<h2>Pareto front</h2><p class="note">{{ front_note }}</p>{{ front_div }}
<h2>Hypervolume</h2><p class="note">{{ hv_note }}</p>{{ hv_div }}{% if pruning_line %}<p class="note">{{ pruning_line }}</p>{% endif %}
<h2>What moved each objective</h2><p class="note">{{ importance_note }}</p>{{ importance_div }}
<h2>Learning curves</h2>{{ curve_div }}
<h2>Trials</h2><p class="note">blue rows are Pareto-optimal over all objectives (<code>*</code> in
<code>sro show</code>); ✔ marks a trial that beats the base model on every benchmark (green in <code>sro show</code>);
grey rows were interrupted (their worker stopped before they finished), red ones failed.</p>
<table><tr>{% for h in header %}<th>{{ h }}</th>{% endfor %}</tr>
{% for row, cls in rows %}<tr class="{{ cls }}">{% for c, left in row %}<td{% if left %} class="l"{% endif %}>{{ c }}</td>{% endfor %}</tr>
{% endfor %}</table>
</body></html>""")
"""Autoescaped (a base model id or a categorical value from an edited space.yaml reached the page as HTML until
stop 30); the plotly divs go in as `Markup`."""


def _load(run_dir: Path) -> tuple[dict, list[TrialRecord], dict]:
    from sro.config import ProjectConfig
    from sro.ledger import Ledger

    from pydantic import ValidationError

    proj_path = run_dir / "project.yaml"
    if not proj_path.is_file():
        if not run_dir.exists():
            raise FileNotFoundError(f"{run_dir}: no such folder; pass a run folder, runs/<name>")
        if not run_dir.is_dir():
            raise FileNotFoundError(f"{run_dir} is a file; pass a run folder, runs/<name>")
        runs = sorted(str(p.parent) for p in run_dir.glob("*/project.yaml"))
        hint = f"; its run folders: {', '.join(runs[:5])}" if runs else "; is it a folder written by `sro search`?"
        raise FileNotFoundError(f"{run_dir} has no project.yaml{hint}")
    try:
        data = yaml_strict.safe_load(yaml_strict.read(proj_path))  # UTF-8, as `write_whole` writes it
        project = ProjectConfig.model_validate(data)
    except (yaml.YAMLError, ValidationError) as e:  # e.g. cut short by a kill while it was written
        first = str(e).strip().splitlines()[0]
        raise FileNotFoundError(f"{proj_path} is not a readable project ({type(e).__name__}: {first}); rerun "
                                "`sro search` with the project file, which writes it again") from None
    ledger = Ledger(project, run_dir, create=False)  # writes nothing to the study but a killed write's rollback (nor makes one where there is none)

    records = ledger.records()
    hv = ledger.get("hypervolume", {})
    objectives = [list(o) for o in project.objective_directions()]
    stated = {k: float(v) for k, v in (project.reference_point or {}).items()}
    if (sorted(hv.get("trials", [])) != sorted(r.number for r in records if r.state == "complete")
            or hv.get("objectives") != objectives or hv.get("stated") != stated):
        # a kill after a trial's result left the stored history a trial short, or the project's objectives or
        # reference_point changed since (it was shown computed at the old one, a review at stop 38): computed
        # from the trials (only then: it loads torch, which these commands otherwise never do)
        from sro.optimizer.hypervolume import hypervolume_history

        hv = hypervolume_history(records, project.objective_directions(), project.reference_point)
    info = {"base_scores": ledger.get("base_scores", {}), "spent": ledger.spent(records),
            "overlap": ledger.get("overlap", {}), "lower": project.lower_is_better(), "hypervolume": hv,
            "space": _space(ledger)}
    return data, records, info


def _space(ledger) -> RecipeSpace | None:
    """The study's latest space (for the importances' parameter scales), or None where none can be read (a study
    of an earlier release, or a space that no longer loads): the importances then read the scales off the trials."""
    try:
        return ledger.shared_space()
    except (SpaceError, yaml.YAMLError):
        return None


def superseded_by(records: Sequence[TrialRecord]) -> dict[int, int]:
    """Trial number → the number of the late copy that supersedes it: the result its worker recorded after
    another worker had marked it interrupted (`TrialRecord.late_of`). `sro show` and the report showed the trial
    as interrupted, to be run again, and counted both (a review, stop 53); the budget counts them once (`counted`)."""
    return {r.late_of: r.number for r in records if r.late_of is not None}


def negated(objectives: Sequence[tuple[str, str]]) -> str:
    """Which objectives the hypervolume's maximization frame negates (the minimized ones), for its notes."""
    return f"{', '.join(k for k, d in objectives if d == 'min') or 'none'} negated"


def _finite(v: object) -> object:
    """`v` with every nan or infinite float as None: `json.dumps` wrote `NaN`, which is no JSON (Node's
    `JSON.parse` refused trials.json; a review, stop 53)."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


def drawn_axes(objectives: Sequence[tuple[str, str]]) -> tuple[str, str]:
    """The front plot's x and y: the first two benchmarks, or the first one against cost."""
    keys = [k for k, _ in objectives if k != "cost"]
    return keys[0], keys[1] if len(keys) > 1 else "cost"


def other_benchmarks(score_keys: Sequence[str], base: dict[str, float]) -> list[str]:
    """Benchmarks the base model was scored on that are no objective: "beats the base model" reads them too,
    so the trial tables (the report's, `sro show`'s) show them (stop 38)."""
    return [k for k in base if k not in score_keys]


def front_figure(records: list[TrialRecord], objectives: list[tuple[str, str]], base: dict[str, float]) -> go.Figure:
    """The first two benchmarks (or the first one against cost): every complete trial, the Pareto front
    over *all* objectives ringed (the same trials as the table's front: a front recomputed on the two
    drawn axes disagreed with it for three or more objectives), and the base model (at cost 0)."""
    done = [r for r in records if r.state == "complete"]
    x_key, y_key = drawn_axes(objectives)
    fig = go.Figure()
    if done:
        pts = np.array([[r.value(x_key), r.value(y_key)] for r in done])
        on_front = front_numbers(done, objectives)
        front = np.array([r.number in on_front for r in done])
        costs = [r.cost.get("wall_s", 0.0) for r in done]
        text = [f"trial {r.number}, cost {c:.0f}s" for r, c in zip(done, costs)]
        fig.add_trace(go.Scatter(
            x=pts[:, 0], y=pts[:, 1], mode="markers", name="trials",
            marker=dict(size=11, color=costs, colorscale="Viridis", showscale=True,
                        colorbar=dict(title="cost (s)"), line=dict(width=1, color="#333")),
            text=text, hovertemplate="%{text}<br>%{x:.3f}, %{y:.3f}<extra></extra>"))
        order = np.argsort(pts[front, 0])
        drawn_is_all = {k for k, _ in objectives} == {x_key, y_key}  # a staircase only when the axes are it
        fig.add_trace(go.Scatter(x=pts[front, 0][order], y=pts[front, 1][order],
                                 mode="lines+markers" if drawn_is_all else "markers",
                                 name="Pareto front" if drawn_is_all else "Pareto front (all objectives)",
                                 # the corners the front attains: up or down first where x is maximized,
                                 # across first where it is minimized ("hv" everywhere drew corners no
                                 # trial reaches, better than every trial; review, stop 30)
                                 line=dict(color="#2a7", width=2,
                                           shape="vh" if dict(objectives).get(x_key, "max") == "max" else "hv"),
                                 marker=dict(size=19, symbol="circle-open", color="#2a7", line=dict(width=2)),
                                 # the trials' hover: a ring showed x and y alone, not which trial it rings
                                 # (a review, stop 53)
                                 text=np.array(text)[front][order].tolist(),
                                 hovertemplate="%{text}<br>%{x:.3f}, %{y:.3f}<extra></extra>"))
    if x_key in base and (y_key in base or y_key == "cost"):
        fig.add_trace(go.Scatter(x=[base[x_key]], y=[base.get(y_key, 0.0)], mode="markers+text", name="base model",
                                 text=["base"], textposition="top center",
                                 marker=dict(symbol="star", size=18, color="crimson")))
    fig.update_layout(xaxis_title=x_key, yaxis_title=y_key if y_key != "cost" else "cost (wall s)",
                      height=480, margin=dict(t=40), legend=dict(orientation="h", y=1.08, x=0))
    return fig


def hypervolume_figure(history: dict) -> go.Figure:
    """The study's hypervolume after each complete trial (`sro.optimizer.hypervolume.hypervolume_history`)."""
    fig = go.Figure(go.Scatter(x=history.get("trials", []), y=history.get("hypervolume", []), mode="lines+markers",
                               line=dict(shape="hv", color="#2a7"), name="hypervolume"))
    fig.update_layout(xaxis_title="trial", yaxis_title="dominated hypervolume", height=320, margin=dict(t=20))
    return fig


def curve_figure(records: list[TrialRecord]) -> go.Figure:
    fig = go.Figure()
    for r in records:
        if not r.curve:
            continue
        fig.add_trace(go.Scatter(x=[c.get("samples", i) for i, c in enumerate(r.curve)],
                                 y=[c.get("reward", float("nan")) for c in r.curve],
                                 mode="lines", name=f"trial {r.number}"))
    fig.update_layout(xaxis_title="training samples", yaxis_title="mean training reward", height=380,
                      margin=dict(t=20))
    return fig


def source_labels(project: dict[str, Any]) -> dict[str, str]:
    """`src.<domain>.<i>` → that weight's name with its source (`src.arithmetic.0 (reasoning_gym:
    chain_sum)`): the report named a source weight by its index alone (a review, stop 57)."""
    out = {}
    for d, dom in (project.get("domains") or {}).items():
        for i, src in enumerate((dom or {}).get("sources") or []):
            kind = next((k for k in SOURCE_KINDS if isinstance(src, dict) and src.get(k) is not None), None)
            if kind is not None:
                out[f"{SOURCE_PREFIX}{d}.{i}"] = f"{SOURCE_PREFIX}{d}.{i} ({kind}: {src[kind]})"
    return out


def importance_figure(imp: Importances, labels: dict[str, str] | None = None) -> go.Figure:
    """One bar group per objective: each assessed parameter's fraction of that objective's variance explained by
    its main effect (`sro.importance`), the parameters ordered by their largest fraction, the largest on top;
    a parameter named by `labels` where it has one (`source_labels`); a conditional one's bar is its fraction within
    the trials where it is active, and says so."""
    labels = dict(labels or {})
    labels.update({k: f"{labels.get(k, k)} (within its {n} trials)" for k, n in imp.active_in.items()})
    shares_of = {key: {**shares, **imp.within.get(key, {})} for key, shares in imp.by_objective.items()}
    order = sorted({k for v in shares_of.values() for k in v},
                   key=lambda k: max(v.get(k, 0.0) for v in shares_of.values()))
    fig = go.Figure([go.Bar(y=[labels.get(k, k) for k in order], x=[shares.get(k, 0.0) for k in order],
                            orientation="h", name=key,
                            hovertemplate="%{y}: %{x:.2f} of " + key + "'s variance<extra></extra>")
                     for key, shares in shares_of.items()])
    fig.update_layout(barmode="group", xaxis_title="fraction of the objective's variance explained (main effect)",
                      xaxis_range=[0, 1], height=max(260, 60 + 28 * len(order) * max(1, len(imp.by_objective))),
                      margin=dict(t=20, l=160), legend=dict(orientation="h", y=1.08, x=0))
    return fig


def importance_note(imp: Importances) -> str:
    """What the importance figure is made of, or why there is none."""
    if not imp.by_objective:
        return f"not estimated: {imp.note}"
    parts = [f"fANOVA (Optuna's evaluator) over {imp.trials} complete trials; rough below ~20"]
    if imp.active_in:
        parts.append("assessed within the complete trials where they are active (their share of the variance there, "
                     "beside the parameters those trials share): "
                     + ", ".join(f"{k} ({n} trials)" for k, n in sorted(imp.active_in.items())))
    if left := [k for k in imp.left_out if k not in imp.active_in]:
        parts.append(f"left out (not in every complete trial, or one value throughout): {', '.join(left)}")
    if imp.note:
        parts.append(imp.note)
    return "; ".join(parts)


def _fmt(v: object) -> object:
    if isinstance(v, float):
        return f"{v:.4g}"
    return v


def write_report(run_dir: str | Path) -> Path:
    run_dir = Path(run_dir)
    data, records, info = _load(run_dir)
    base = info["base_scores"]
    objectives = [next(iter(o.items())) for o in data["objectives"]]
    score_keys = [k for k, _ in objectives if k != "cost"]
    front = front_numbers(records, objectives)
    # what any trial searched, and a setting the trials ran at different fixed values (a redesign fixed it): each
    # cell is the trial's value, searched or fixed (a v2 trial's fixed lr was a blank; a review, stop 37)
    fixed_keys = {k for r in records for k in r.recipe.fixed}
    params = sorted({k for r in records for k in r.recipe.values}
                    | {k for k in fixed_keys if len({repr(r.recipe.get(k)) for r in records}) > 1})
    others = other_benchmarks(score_keys, base)
    labels = source_labels(data)
    header = (["trial", "state", "✔"] + score_keys + [f"{k} (no objective)" for k in others] + ["cost s", "samples"]
              + [labels.get(p, p) for p in params])
    late = superseded_by(records)
    late_of = {new: old for old, new in late.items()}
    rows = []
    if base:  # the base model's row, as `sro show` has it
        rows.append(([(c, False) for c in ["base", "", ""] + [_fmt(base.get(k, "")) for k in score_keys + others]
                      + [""] * (2 + len(params))], "base"))
    for r in records:
        # why a trial ended early, in its row (only a failed one said it; a review, stop 38)
        why = r.message.splitlines()[0][:80] if r.state != "complete" and r.message else ""
        state = f"{r.state}: {why}" if why else r.state
        if r.number in late:  # not to be run again: its worker trained on and recorded its result later
            state = f"superseded by trial {late[r.number]} (its late result)"
        elif r.number in late_of:
            state += f" (late result of trial {late_of[r.number]})"
        row = [r.number, state, "✔" if r.beats(base, info["lower"]) else ""]
        row += [r.scores.get(k, "") for k in score_keys + others]
        row += [r.cost.get("wall_s", 0.0), int(r.cost.get("samples", 0))]
        row += [r.recipe.get(p, "") for p in params]
        # green was the front here and "beats the base model" in `sro show`; an interrupted trial was red like a
        # failed one, though only its worker stopped (a review, stop 57)
        cls = ("front" if r.number in front else "superseded" if r.number in late else
               "failed" if r.state == "failed" else r.state if r.state == "interrupted" else "")
        # text left-aligned, numbers right (a formatted float was a string, so numbers were left-aligned)
        rows.append(([(_fmt(c), isinstance(c, str) and i > 2) for i, c in enumerate(row)], cls))
    drawn = drawn_axes(objectives)
    front_note = ("no complete trial yet" if not any(r.state == "complete" for r in records) else
                  f"drawn: {' against '.join(drawn)}" + (f"; the front is over all {len(objectives)} objectives "
                                                         f"({', '.join(k for k, _ in objectives)})"
                                                         if len(objectives) > len(drawn) else ""))
    front_div = front_figure(records, objectives, base).to_html(include_plotlyjs=True, full_html=False)
    curve_div = curve_figure(records).to_html(include_plotlyjs=False, full_html=False)
    hv = info["hypervolume"] or {}
    hv_div = hypervolume_figure(hv).to_html(include_plotlyjs=False, full_html=False)
    stated = data.get("reference_point") or {}
    how = ("10% of each objective's range below its worst observed value" if not stated else
           f"the project's reference_point for {', '.join(sorted(stated))}"
           + (", 10% of the range below the worst observed value for the others"
              if set(stated) < {k for k, _ in objectives} else ""))
    hv_note = (f"of the complete trials, objectives in the maximization frame ({negated(objectives)}), reference point "
               f"{[round(v, 4) for v in hv.get('ref_point', [])]}: {how}" if hv.get("trials") else "no complete trial yet")
    try:
        imp = parameter_importances(records, objectives, info.get("space"))
    except Exception as e:  # noqa: BLE001 -- the rest of the report matters more than this section
        imp = Importances(note=f"the estimate failed ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
    importance_div = (importance_figure(imp, labels).to_html(include_plotlyjs=False, full_html=False)
                      if imp.by_objective else "")
    saved = saved_budget(records)
    spent = info["spent"]
    page = _PAGE.render(
        name=data["name"], base_model=data.get("base_model", "tiny"),
        n_complete=sum(r.state == "complete" for r in records),
        n_total=len(counted(records)),  # a superseded trial and its late copy: one trial, as the budget counts
        objectives=", ".join(f"{k} ({d})" for k, d in objectives),
        spent=f"{spent.wall_s:.0f}s wall, {spent.trials} trials",
        base_line="  ·  ".join(f"{k}: {v:.3f}" for k, v in base.items()) or "(not scored yet)",
        overlap_line="; ".join(f"{k}: {v:.0%} of questions also occur in training (other seeds)"
                               for k, v in info["overlap"].items() if v > 0),
        front_div=Markup(front_div), curve_div=Markup(curve_div), hv_div=Markup(hv_div), hv_note=hv_note,
        front_note=front_note, importance_div=Markup(importance_div), importance_note=importance_note(imp),
        pruning_line=(f"pruning stopped {saved['trials']:.0f} trial(s) early, saving {saved['steps']:.0f} training "
                      f"steps (~{saved['seconds']:.0f} s)" if saved["trials"] else ""), header=header, rows=rows)
    out = run_dir / "report.html"
    try:
        write_whole(out, page)  # whole: a kill while writing leaves the last report, not half of one
        write_whole(run_dir / "trials.json", json.dumps(_finite(
            [{"number": r.number, "state": r.state, "scores": r.scores, "cost": r.cost,
              "recipe": r.recipe.to_dict(), "message": r.message, "late_of": r.late_of} for r in records]),
            indent=1, default=str, allow_nan=False))
    except OSError as e:  # a read-only copy of a run folder: its study was read, the report has nowhere to go
        from sro.config import ConfigError

        raise ConfigError(f"cannot write the report into {run_dir} ({e.strerror or e}): copy the run folder "
                          "somewhere writable, or read its trials with `sro show`") from None
    return out


def sparkline(values: Sequence[float]) -> str:
    """A one-line text plot of a non-negative series (for `sro show`), at most 60 characters."""
    if not values:
        return ""
    step = max(1, -(-len(values) // 60))
    vals = [values[i] for i in sorted({*range(0, len(values), step), len(values) - 1})]  # the latest always
    hi = max(values)  # over the whole series (the latest was dropped past 60 values: review, stop 30)
    bars = "▁▂▃▄▅▆▇█"
    return "".join(bars[min(7, int(7 * v / hi))] if hi > 0 else bars[0] for v in vals)
