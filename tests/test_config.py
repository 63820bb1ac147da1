from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from sro.budget import Budget, BudgetError, Spent
from sro.config import ConfigError, load_project

from micro import changed_micro  # tests/micro.py (pytest puts tests/ on sys.path)

ROOT = Path(__file__).resolve().parents[1]


def test_quickstart_loads():
    p = load_project(ROOT / "search_spaces" / "quickstart.yaml")
    assert p.name == "quickstart"
    assert p.benchmark_keys() == ["arithmetic/arith_heldout", "multiplication/mult_heldout"]
    assert p.objective_directions()[-1] == ("cost", "min")


def _err(micro_project, mutate=None, raw=None) -> str:
    """Write the micro project changed by `mutate(dict)` (or replaced by `raw` text); return the error."""
    path = changed_micro(micro_project, mutate, raw)
    with pytest.raises(ConfigError) as e:
        load_project(path)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg
    return msg


def _src(d):
    return d["domains"]["arithmetic"]["sources"][0]


def test_unknown_key(micro_project):
    msg = _err(micro_project, lambda d: d.update(sede=1))
    assert "sede: unknown key; did you mean 'seed'?" in msg
    msg = _err(micro_project, lambda d: d["domains"]["arithmetic"]["benchmarks"][0].update(sizes=3))
    assert "domains.arithmetic.benchmarks[0].sizes: unknown key; did you mean 'size'?" in msg
    msg = _err(micro_project, lambda d: d.update(runtime={"zzz": 1}))
    assert "runtime.zzz: unknown key; known keys here: device, eval_batch_size" in msg
    # the nearest spelling of `gpu` is 'cpu', the opposite of what was meant (a review, stop 58)
    msg = _err(micro_project, lambda d: d.update(runtime={"device": "gpu"}))
    assert "(got 'gpu'; did you mean 'cuda'?)" in msg


def test_budget_without_unit(micro_project):
    msg = _err(micro_project, lambda d: d.update(budget=10))
    assert "budget: budget needs a unit, e.g. 20m, 2h or 8trials (got 10)" in msg


def test_wrong_type(micro_project):
    msg = _err(micro_project, lambda d: d["domains"]["arithmetic"]["benchmarks"][0].update(size="many"))
    assert "domains.arithmetic.benchmarks[0].size" in msg


def test_unknown_generator_suggests(micro_project):
    msg = _err(micro_project, lambda d: _src(d).update(reasoning_gym="basic_arithmetc"))
    assert "domains.arithmetic.sources[0].reasoning_gym" in msg
    assert "did you mean 'basic_arithmetic'" in msg


def test_unknown_generator_config_field(micro_project):
    msg = _err(micro_project, lambda d: _src(d)["config"].update(max_digit=1))
    assert "sources[0].config.max_digit" in msg and "has no config field 'max_digit'" in msg
    assert "max_digits" in msg


def test_generator_rejects_config(micro_project):
    msg = _err(micro_project, lambda d: _src(d)["config"].update(min_terms=5))
    assert "rejects this config" in msg


def test_seed_in_generator_config_is_refused(micro_project):
    msg = _err(micro_project, lambda d: _src(d)["config"].update(seed=3))
    assert "disjoint" in msg


def test_objective_names_missing_benchmark(micro_project):
    msg = _err(micro_project, lambda d: d.update(objectives=[{"arithmetic/ad": "max"}]))
    assert "objectives[0]" in msg and "did you mean 'arithmetic/add'" in msg


def test_objectives_need_a_benchmark_and_name_each_once(micro_project):
    msg = _err(micro_project, lambda d: d.update(objectives=[{"cost": "min"}]))  # the report crashed on it
    assert "objectives name only the cost; name at least one benchmark" in msg and "arithmetic/add" in msg
    msg = _err(micro_project, lambda d: d.update(objectives=[{"arithmetic/add": "max"}, {"arithmetic/add": "max"}]))
    assert "objectives name arithmetic/add more than once" in msg


def test_reference_point_names_an_objective(micro_project):
    msg = _err(micro_project, lambda d: d.update(reference_point={"arithmetic/ad": 0.2}))
    assert "reference_point names 'arithmetic/ad'" in msg and "did you mean 'arithmetic/add'" in msg


def test_reference_point_loads(micro_project):
    path = micro_project(extra="reference_point: {arithmetic/add: 0.2, cost: 600}\n")
    assert load_project(path).reference_point == {"arithmetic/add": 0.2, "cost": 600.0}


def test_bad_budget_in_yaml(micro_project):
    msg = _err(micro_project, lambda d: d.update(budget="soon"))
    assert "budget" in msg and "cannot parse" in msg


def test_malformed_yaml(micro_project):
    msg = _err(micro_project, raw=lambda t: t.replace("seed: 0", "seed: [0"))
    assert "malformed YAML" in msg and "line" in msg


def test_missing_jsonl_file(micro_project):
    msg = _err(micro_project, lambda d: d["domains"]["arithmetic"].update(sources=[{"jsonl": "nowhere.jsonl"}]))
    assert "sources[0].jsonl" in msg and "nowhere.jsonl" in msg


def test_source_needs_one_kind(micro_project):
    msg = _err(micro_project, lambda d: _src(d).update(jsonl="a.jsonl"))
    assert "exactly one of" in msg


def test_textworld_unknown_family(micro_project):
    msg = _err(micro_project, lambda d: d["domains"]["arithmetic"].update(
        sources=[{"textworld": "coin_colector"}], benchmarks=[{"name": "add", "textworld": "coin_collector"}]))
    assert "sources[0].textworld: unknown textworld game family 'coin_colector'; did you mean 'coin_collector'?" in msg


@pytest.mark.parametrize("text,field,value", [
    ("10m", "wall_s", 600.0), ("90s", "wall_s", 90.0), ("2h", "wall_s", 7200.0), ("6trials", "trials", 6),
    ("1trial", "trials", 1), ("8gpu-h", "gpu_h", 8.0), ("5Mtok", "tokens", 5e6),
    ("2hours", "wall_s", 7200.0), ("1 hour", "wall_s", 3600.0), ("2hrs", "wall_s", 7200.0),
    ("30mins", "wall_s", 1800.0), ("5 minutes", "wall_s", 300.0), ("45seconds", "wall_s", 45.0),
    ("2gpu-hours", "gpu_h", 2.0), ("1 GPU-hour", "gpu_h", 1.0),
    ("1h30m", "wall_s", 5400.0), ("1 hour 30 minutes", "wall_s", 5400.0), ("2h15m30s", "wall_s", 8130.0),
])
def test_budget_parse(text, field, value):
    assert getattr(Budget.parse(text), field) == value


@pytest.mark.parametrize("text", ["", "10", "ten minutes", "5parsecs", "-3m", "0trials", "2h,3h", "0.5trials", "1.5trials",
                                  "1h30trials", "1h30"])
def test_budget_rejects(text):
    with pytest.raises(BudgetError):
        Budget.parse(text)


@pytest.mark.parametrize("text,message", [
    ("2h,30m", "budget '2h,30m' limits the wall time twice ('2h' and '30m'); keep one, e.g. '2h'"),
    ("3trials, 4trial", "budget '3trials, 4trial' limits the trials twice ('3trials' and '4trial')"),
    ("1Mtok,5ktok", "limits the training tokens twice ('1Mtok' and '5ktok')"),
    ("1h30m,20m", "limits the wall time twice ('1h30m' and '20m')"),
])
def test_budget_names_a_limit_given_twice_in_the_users_words(text, message):
    with pytest.raises(BudgetError, match=re.escape(message)):
        Budget.parse(text)


def test_a_bare_M_budget_is_ambiguous_not_minutes():
    """`5M` beside `5Mtok` in the help was read as 5 minutes, silently (a review, stop 37)."""
    with pytest.raises(BudgetError, match=re.escape("budget '5M' is ambiguous: write 5m for minutes, or 5Mtok")):
        Budget.parse("5M")
    assert Budget.parse("5m").wall_s == 300.0 and Budget.parse("5Min").wall_s == 300.0


def test_budget_accounting():
    b = Budget.parse("10m,3trials")
    assert b.exhausted(Spent(wall_s=100, trials=2)) is None
    assert "3/3 trials" in b.exhausted(Spent(wall_s=100, trials=3))
    # other workers' running trials count against a trial budget, so N workers do not overshoot it
    assert b.exhausted(Spent(wall_s=100, trials=2, running=1)) == "2/3 trials done and 1 running in other workers"
    assert "wall time" in b.exhausted(Spent(wall_s=601, trials=1))
    assert b.remaining_wall_s(Spent(wall_s=500)) == 100
    assert b.fraction_used(Spent(wall_s=300, trials=1)) == pytest.approx(0.5)
    assert b.fraction_used(Spent(wall_s=100, trials=1, running=1)) == pytest.approx(2 / 3)  # as exhausted counts
    # and the seconds running trials have trained so far count against a wall-clock budget
    w = Budget.parse("10m")
    assert w.exhausted(Spent(wall_s=500, trials=1, running=2, running_wall_s=80)) is None
    assert w.remaining_wall_s(Spent(wall_s=500, running=2, running_wall_s=80)) == 20
    assert w.exhausted(Spent(wall_s=500, trials=1, running=2, running_wall_s=110)) == \
        "610s of 600s wall time spent (110s of it by 2 trial(s) still training)"
    assert w.fraction_used(Spent(wall_s=240, trials=1, running=1, running_wall_s=60)) == pytest.approx(0.5)


def test_bad_project_name(micro_project):
    msg = _err(micro_project, lambda d: d.update(name="my run"))
    assert "name" in msg and "letters, digits" in msg
    assert "name (a folder under runs/) is empty" in _err(micro_project, lambda d: d.update(name=""))


@pytest.mark.parametrize("domain", ["math/easy", "", "my domain"])
def test_a_domain_name_is_a_plain_name(micro_project, domain):
    """A domain's name starts its benchmarks' keys: `math/easy` made `math/easy/b`, which the per-domain
    lookups did not find (review, stop 30)."""
    msg = _err(micro_project, lambda d: d.update(domains={domain: next(iter(d["domains"].values()))}))
    assert (f"domain name {domain!r} may only use letters, digits, _ . -" if domain else
            "domain name is empty; give one of letters, digits, _ . -") in msg


def test_metric_defaults_by_kind_and_must_fit_it(micro_project, tmp_path):
    path = micro_project()
    data = yaml.safe_load(path.read_text())
    data["domains"]["arithmetic"]["benchmarks"][0].pop("metric", None)
    data["domains"]["agent"] = {"sources": [{"textworld": "coin_collector"}],
                                "benchmarks": [{"name": "coins", "textworld": "coin_collector", "size": 2}]}
    data["objectives"] = []
    # a textworld benchmark without a metric scores success; a single-turn one, accuracy
    from sro.config import BenchmarkConfig
    assert BenchmarkConfig.model_validate(data["domains"]["agent"]["benchmarks"][0]).metric == "success"
    assert BenchmarkConfig.model_validate(data["domains"]["arithmetic"]["benchmarks"][0]).metric == "accuracy"
    msg = _err(micro_project, lambda d: d["domains"]["arithmetic"]["benchmarks"][0].update(metric="success"))
    assert "benchmarks[0]" in msg and "metric 'success' does not apply to a reasoning_gym benchmark; use accuracy" in msg
    # more held-out episodes than held-out games would replay the same games greedily: refused, with the fix
    big = {"name": "coins", "textworld": "coin_collector", "size": 50, "config": {"level": 2}}
    with pytest.raises(ValueError, match=r"size 50 is more than the benchmark's 8 held-out games .*set config.games: 50"):
        BenchmarkConfig.model_validate(big)
    assert BenchmarkConfig.model_validate({**big, "config": {"level": 2, "games": 50}}).size == 50
    # without a size: one episode per game (it used to be 100, and the project written to the run folder
    # then failed this very check when `sro show`, `report` or `export` read it back)
    assert BenchmarkConfig.model_validate({k: v for k, v in big.items() if k != "size"}).size == 8
    assert BenchmarkConfig.model_validate({"name": "b", "reasoning_gym": "basic_arithmetic"}).size == 100
    # `games: 2.0` (a YAML float) is 2 games, as the game source reads it (it was size 100, unchecked)
    no_size = {k: v for k, v in big.items() if k != "size"}
    assert BenchmarkConfig.model_validate({**no_size, "config": {"games": 2.0}}).size == 2
    with pytest.raises(ValueError, match=r"size 50 is more than the benchmark's 2 held-out games"):
        BenchmarkConfig.model_validate({**big, "config": {"games": 2.0}})
    # games below 1 is left to the source's check (it said "more than the benchmark's -2 held-out games; set size: -2")
    assert BenchmarkConfig.model_validate({**big, "config": {"games": -2}}).size == 50
    from sro.config import ProjectConfig


    agent = {"name": "a", "domains": {"agent": {"sources": [{"textworld": "coin_collector"}], "benchmarks": [
        {"name": "coins", "textworld": "coin_collector", "config": {"level": 2}}]}}}
    dumped = ProjectConfig.model_validate(agent).portable_dump()
    assert ProjectConfig.model_validate(dumped).domains["agent"].benchmarks[0].size == 8


def test_mixing_textworld_and_single_turn_domains_is_refused(micro_project):
    """Refused naming one multi-turn and one single-turn entry by key path (it named no key)."""
    msg = _err(micro_project, lambda d: d["domains"].update(agent={
        "sources": [{"textworld": "coin_collector"}],
        "benchmarks": [{"name": "coins", "textworld": "coin_collector", "size": 2}]}))
    assert ("domains.agent.sources[0] (textworld: coin_collector) is multi-turn and domains.arithmetic.sources[0] "
            "(reasoning_gym: basic_arithmetic) is single-turn; a project cannot yet mix the two") in msg
    assert "put the agent domains and the single-turn ones in separate projects" in msg
    # a textworld benchmark in a single-turn domain too (it used to pass, and fail mid-search)
    msg = _err(micro_project, lambda d: d["domains"]["arithmetic"]["benchmarks"].append(
        {"name": "coins", "textworld": "coin_collector", "size": 2}))
    assert "domains.arithmetic.benchmarks[1] (textworld: coin_collector) is multi-turn" in msg
    # one agent domain with a single-turn source
    msg = _err(micro_project, lambda d: d.update(domains={"agent": {
        "sources": [{"textworld": "coin_collector"}, {"reasoning_gym": "basic_arithmetic"}],
        "benchmarks": [{"name": "coins", "textworld": "coin_collector", "size": 2}]}}, objectives=[]))
    assert "multi-turn and domains.agent.sources[1] (reasoning_gym: basic_arithmetic) is single-turn" in msg
    assert "move the multi-turn entries and the single-turn ones into separate projects" in msg
    assert "agent domains" not in msg  # there is no agent domain to move out (a review, stop 35)


def test_a_relative_sqlite_storage_is_read_from_the_projects_folder(micro_project, tmp_path, monkeypatch):
    """`storage: sqlite:///studies/x.db` names a file beside the project, as `jsonl:` paths do, whatever
    the working directory (it was read from there: a rerun from another folder began a second study)."""
    path = micro_project("rel", "storage: sqlite:///studies/x.db\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    project = load_project(path)
    assert project.storage == f"sqlite:///{(tmp_path / 'studies' / 'x.db').resolve()}"
    assert project.portable_dump()["storage"] == project.storage  # what runs/<name>/project.yaml keeps
    from sro.ledger import Ledger

    Ledger(project, tmp_path / "runs" / "rel")  # a search's open makes the file's folder
    assert (tmp_path / "studies" / "x.db").is_file() and not (elsewhere / "studies").exists()
    absolute = load_project(micro_project("abs", f"storage: sqlite:///{tmp_path}/a.db\n"))
    assert absolute.storage == f"sqlite:///{tmp_path}/a.db"


def test_storage_must_be_a_url(micro_project):
    msg = _err(micro_project, lambda d: d.update(storage="notaurl"))
    assert "storage: storage 'notaurl' is not an SQLAlchemy URL" in msg and "sqlite:///" in msg
    msg = _err(micro_project, lambda d: d.update(storage="postgres://db.example/sro"))  # SQLAlchemy 1.3's spelling
    assert "no database kind 'postgres'" in msg and "postgresql+psycopg://" in msg
    msg = _err(micro_project, lambda d: d.update(storage="postgresql+pg8000://db.example/sro"))
    assert "its database driver is not installed (No module named 'pg8000')" in msg and "sro[postgres]" in msg


def test_folder_instead_of_project_file(tmp_path):
    with pytest.raises(ConfigError, match="is a folder; pass the path of a project YAML"):
        load_project(tmp_path)


def test_portable_dump_makes_jsonl_paths_absolute(micro_project, tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.jsonl").write_text('{"question": "1+1", "answer": "2"}\n')
    path = micro_project()
    data = yaml.safe_load(path.read_text())
    data["domains"]["arithmetic"]["sources"] = [{"jsonl": "data/x.jsonl"}]
    path.write_text(yaml.safe_dump(data))
    dumped = load_project(path).portable_dump()
    src = dumped["domains"]["arithmetic"]["sources"][0]
    assert src == {"jsonl": str((tmp_path / "data" / "x.jsonl").resolve()), "config": {}}
    # read back from another folder, it names the same file
    from sro.config import project_from_data
    other = tmp_path / "elsewhere"
    other.mkdir()
    again = project_from_data(dumped, other, "x")
    assert again.domains["arithmetic"].sources[0].spec(again.base_dir).target == src["jsonl"]


def test_missing_local_base_model_folder(micro_project):
    msg = _err(micro_project, lambda d: d.update(base_model="/nonexistent/model"))
    assert "base_model: /nonexistent/model: no such folder" in msg


def test_a_relative_base_model_path_is_read_from_the_projects_folder(micro_project, tmp_path, monkeypatch):
    """`base_model: ./mymodel` next to the project YAML, as `jsonl:` paths are (it was read from the
    working directory, so the same command worked from one folder and not from another); the run
    folder's copy of the project holds the absolute path."""
    (tmp_path / "mymodel").mkdir()
    for f in ("config.json", "tokenizer.json"):  # what save_pretrained() writes (a folder without them is refused)
        (tmp_path / "mymodel" / f).write_text("{}")
    path = micro_project("rel")
    path.write_text(path.read_text().replace("base_model: tiny", "base_model: ./mymodel"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    project = load_project(path)
    assert project.base_model == str((tmp_path / "mymodel").resolve())
    assert yaml.safe_load(yaml.safe_dump(project.portable_dump()))["base_model"] == project.base_model
    # `models/mine` without ./ there is that folder, not a hub id (it was sent to the hub, read from the cwd)
    (tmp_path / "models").mkdir()
    (tmp_path / "mymodel").rename(tmp_path / "models" / "mine")
    path.write_text(path.read_text().replace("./mymodel", "models/mine"))
    assert load_project(path).base_model == str((tmp_path / "models" / "mine").resolve())
    path.write_text(path.read_text().replace("models/mine", "./nomodel"))
    with pytest.raises(ConfigError, match=r"base_model: ./nomodel: no such folder \(.*nomodel; a relative"):
        load_project(path)


def test_calibration_metrics_of_a_textworld_benchmark_and_their_directions(micro_project):
    from sro.config import ProjectConfig

    agent = {"sources": [{"textworld": "coin_collector"}],
             "benchmarks": [{"name": "win", "textworld": "coin_collector", "size": 2},
                            {"name": "ece", "textworld": "coin_collector", "size": 2, "metric": "ece"},
                            {"name": "auroc", "textworld": "coin_collector", "size": 2, "metric": "auroc"},
                            {"name": "ece0", "textworld": "coin_collector", "size": 2, "metric": "first_ece"}]}
    proj = ProjectConfig.model_validate({"name": "a", "domains": {"agent": agent}})
    # the default objectives follow each metric's direction: ECE (and Brier) improve downwards
    assert proj.objective_directions() == [("agent/win", "max"), ("agent/ece", "min"), ("agent/auroc", "max"),
                                           ("agent/ece0", "min"), ("cost", "min")]
    assert proj.lower_is_better() == {"agent/ece", "agent/ece0"}
    # an objective stated against its metric's direction would search for the worst model
    for key, wrong, fix in (("agent/ece", "max", "agent/ece: min"), ("agent/win", "min", "agent/win: max")):
        with pytest.raises(ValueError, match=f"improves towards .* values; write `{fix}`"):
            ProjectConfig.model_validate({"name": "a", "domains": {"agent": agent}, "objectives": [{key: wrong}]})
    msg = _err(micro_project, lambda d: d.update(objectives=[{"arithmetic/add": "max"}, {"cost": "max"}]))
    assert "(top level)" not in msg and ".yaml: objectives[1]: cost: max, but the cost improves towards lower values; write `cost: min`" in msg
    msg = _err(micro_project, lambda d: d["domains"]["arithmetic"]["benchmarks"][0].update(metric="ece"))
    assert "metric 'ece' does not apply to a reasoning_gym benchmark; use accuracy" in msg


def test_beats_base_reads_lower_is_better_keys():
    from sro.ledger import beats_base

    base = {"a/win": 0.5, "a/ece": 0.2}
    assert beats_base({"a/win": 0.6, "a/ece": 0.1}, base, lower={"a/ece"})
    assert not beats_base({"a/win": 0.6, "a/ece": 0.3}, base, lower={"a/ece"})
    assert not beats_base({"a/win": 0.6, "a/ece": 0.1}, base)  # read as higher-is-better, 0.1 < 0.2 loses
    assert not beats_base({"a/win": 0.6}, base, lower={"a/ece"})  # a missing score never beats


def test_a_rollout_backend_this_machine_cannot_run_is_refused_when_the_project_loads(micro_project, monkeypatch):
    """`rollout_backend: vllm` without vLLM or a GPU loaded, and every trial of the search then failed
    the same way until the budget ran out; docs/trainers.md promises a one-line error."""
    import importlib.util

    import torch

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "vllm" else real(name, *a))
    msg = _err(micro_project, lambda d: d["runtime"].update(rollout_backend="vllm"))
    assert "runtime.rollout_backend: rollout backend 'vllm' needs the optional extra: pip install 'sro[vllm]'" in msg
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "vllm" else real(name, *a))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    msg = _err(micro_project, lambda d: d["runtime"].update(rollout_backend="vllm"))
    assert "runtime.rollout_backend: rollout backend 'vllm' needs a CUDA GPU; use rollout_backend: hf" in msg
    # `sro design` trains nothing: the space of a GPU project may be designed on a laptop
    path = micro_project()
    path.write_text(path.read_text().replace("runtime: {", "runtime: {rollout_backend: vllm, "))
    assert load_project(path, trains=False).runtime.rollout_backend == "vllm"


def test_a_misspelt_required_key_is_reported_as_the_unknown_key_with_its_fix(micro_project):
    """`benchmark:` for `benchmarks:` was reported as "benchmarks: required key is missing (and 1 more)",
    the did-you-mean hidden in the one more."""
    dom = "domains.arithmetic"
    msg = _err(micro_project, lambda d: d["domains"]["arithmetic"].update(
        benchmark=d["domains"]["arithmetic"].pop("benchmarks")))
    assert msg.endswith(f"{dom}.benchmark: unknown key; did you mean 'benchmarks'?")  # its "missing" not said
    # a bad value beside it is named too (it was "(and 1 more)", unnamed; a walkthrough, stop 34)
    msg = _err(micro_project, lambda d: d["domains"]["arithmetic"]["benchmarks"][0].update(metric="acuracy", sise=3))
    assert ("benchmarks[0].sise: unknown key; did you mean 'size'?; domains.arithmetic.benchmarks[0].metric: "
            "Input should be 'accuracy', " in msg and "(got 'acuracy'; did you mean 'accuracy'?)" in msg), msg
    msg = _err(micro_project, lambda d: d.update(nmae=d.pop("name")))
    assert "nmae: unknown key; did you mean 'name'?" in msg


def test_a_local_base_model_folder_that_holds_no_saved_model(micro_project, tmp_path):
    """An empty `base_model: ./mymodel` folder loaded, and loading it failed later inside transformers
    with a message cut mid-sentence ("Couldn't instantiate the backend tokenizer from one of: ")."""
    (tmp_path / "mymodel").mkdir()
    msg = _err(micro_project, lambda d: d.update(base_model="./mymodel"))
    assert ("base_model: ./mymodel has no config.json/tokenizer files (" in msg
            and "save the model (and its tokenizer) there with save_pretrained(), or give an HF model id" in msg)
    (tmp_path / "mymodel" / "config.json").write_text("{}")
    assert "base_model: ./mymodel has no tokenizer files (" in _err(micro_project, lambda d: d.update(
        base_model="./mymodel"))
    (tmp_path / "model.bin").write_text("x")
    assert "base_model: ./model.bin is a file, not a model folder" in _err(micro_project, lambda d: d.update(
        base_model="./model.bin"))


def test_a_recipe_file_passed_as_a_project_says_to_train_it(micro_project, tmp_path):
    """An exported recipe given to `sro design`/`sro search` was "name: required key is missing; add it
    (and 5 more)"."""
    project = yaml.safe_load(micro_project().read_text())
    path = tmp_path / "t1.yaml"
    path.write_text(yaml.safe_dump({"project": project, "recipe": {"values": {"lr": 1e-3}, "fixed": {}}}))
    with pytest.raises(ConfigError) as e:
        load_project(path)
    assert str(e.value) == (f"{path}: this is a recipe file (`project:` and `recipe:`, as `sro export` writes it), "
                            f"not a project; run `sro train {path}` on it, or pass a project YAML")


def test_a_key_given_twice_a_dotted_name_and_an_infinite_reference_point_are_refused(micro_project):
    """A review at stop 37: a second `arithmetic:` domain replaced the first silently (PyYAML keeps the last
    value), `name: ..` wrote the run outside runs/, and `reference_point: {cost: .inf}` made every hypervolume
    inf and every window a stall."""
    msg = _err(micro_project, raw=lambda t: t.replace("domains:\n", "domains:\n  arithmetic: {}\n", 1))
    assert "key 'arithmetic' appears twice in one mapping (first at line" in msg and "line " in msg, msg
    msg = _err(micro_project, raw=lambda t: t + "seed: 3\n")
    assert "key 'seed' appears twice" in msg
    for name in ("..", ".", "-x"):
        msg = _err(micro_project, lambda d, n=name: d.update(name=n))
        assert "may not be only dots or start with '-'" in msg, msg
    msg = _err(micro_project, lambda d: d.update(reference_point={"cost": float("inf")}))
    assert "reference_point.cost: inf is not a finite number" in msg, msg
    from sro.space import RecipeSpace, SpaceError

    with pytest.raises(SpaceError, match="key 'lr' appears twice"):
        RecipeSpace.from_yaml("params:\n  lr: {kind: float, low: 0.1, high: 1}\n  lr: {kind: float, low: 0.2, high: 1}\n")


def test_an_infinite_designer_timeout_and_an_empty_plugin_entry_are_refused(micro_project):
    """A review at stop 53: `designer.timeout_s: .inf` passed, then crashed the LLM designer's wait for the answer
    (`Thread.join(inf)`: OverflowError); `plugins: [""]` was "ValueError: Empty module name" at a line of SRO's
    own code."""
    for v in ("inf", "nan"):
        msg = _err(micro_project, lambda d, v=v: d.update(designer={"timeout_s": float(v)}))
        assert f"designer.timeout_s: {v} is not a finite number of seconds; give the longest wait" in msg, msg
    for entry in ("", "  "):
        msg = _err(micro_project, lambda d, e=entry: d.update(plugins=[e]))
        assert f"plugins[0]: the entry is empty ({entry!r}); give a module name on the Python path" in msg, msg


def test_a_yes_for_a_count_is_refused_not_read_as_one(micro_project):
    """`size: true` was a one-item benchmark and `seed: true` seed 1: pydantic's lax int takes a bool (a review,
    stop 37)."""
    msg = _err(micro_project, lambda d: d["domains"]["arithmetic"]["benchmarks"][0].update(size=True))
    assert "domains.arithmetic.benchmarks[0].size" in msg and "must be a whole number, not true" in msg, msg
    msg = _err(micro_project, lambda d: d.update(seed=True))
    assert "seed" in msg and "must be a whole number, not true" in msg, msg


def test_a_run_folders_database_or_space_given_as_the_project_says_what_it_is(tmp_path):
    """`sro search runs/NAME/study.db` said "not UTF-8 text; save the file as UTF-8", and `.../space.yaml` listed
    every project key three times (a review, stop 57)."""
    import sqlite3

    db = tmp_path / "study.db"
    sqlite3.connect(db).execute("create table t (x)").connection.close()
    with pytest.raises(ConfigError, match=r"study.db: this is a study's database \(SQLite\), not a project; pass "
                                          r"the project YAML \(a run folder keeps a copy as .*project.yaml\)"):
        load_project(db)
    space = tmp_path / "space.yaml"
    space.write_text("version: 1\nparams:\n  lr: {kind: float, low: 0.001, high: 0.01, log: true}\n")
    with pytest.raises(ConfigError, match=r"space.yaml: this is a search space \(`params:`, as `sro design` writes "
                                          r"it\), not a project; pass the project YAML") as e:
        load_project(space)
    assert "known keys" not in str(e.value)


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["objectives"].append("cost"), "objectives[2]: an objective is `cost: max` or `cost: min`, a mapping "
                                               "(got 'cost')"),
    (lambda d: d.update(domains={}), "domains: give at least one domain: `domains: {NAME: {sources: [...], "
                                     "benchmarks: [...]}}`"),
    (lambda d: d.update(runtime={"threads": -1}), "runtime.threads: Input should be greater than 0 (got -1)"),
])
def test_a_project_error_says_how_to_fix_it_or_what_it_got(micro_project, mutate, message):
    """pydantic's words alone: "Input should be a valid dictionary (got 'cost')", "Dictionary should have at least 1
    item after validation, not 0", "Input should be greater than 0" (a review, stop 57)."""
    assert message in _err(micro_project, mutate)


@pytest.mark.parametrize("text, message", [
    ("-1m", "budget '-1m' must be positive"), ("-2trials", "budget '-2trials' must be positive"),
    ("0", "budget '0' must be positive"),
    ("5", "budget '5' needs a unit: 5m for minutes, 5trials, 5gpu-h or 5Mtok"),
    ("2h,1.5", "budget '1.5' needs a unit: 1.5m for minutes"),
])
def test_a_negative_or_unitless_budget_says_so(text, message):
    """Both read 'cannot parse budget' with the list of units (a review, stop 38)."""
    with pytest.raises(BudgetError, match=re.escape(message)):
        Budget.parse(text)


def test_exponent_floats_read_as_numbers_in_every_file_a_person_writes(micro_project, tmp_path):
    """PyYAML (YAML 1.1) read `1e-4` as the text '1e-4': a space.yaml categorical `choices: [1e-4, 3e-4]` gave
    the trainer the string (the trial failed on "must be a number"), and the recipe file, the space's bounds
    and the trainer's hint each had their own conversion until stop 39. `sro.yaml_strict` reads YAML 1.2's
    exponent floats as numbers, and its dumper quotes a string that would read as one, so a file written and
    read back is the same data."""
    from sro import yaml_strict
    from sro.space import RecipeSpace

    got = yaml_strict.safe_load("a: 1e-4\nb: 5e3\nc: 1.5e4\nd: .5e4\ne: -2E+3\nf: 1.0e-4\ng: '1e3'\n"
                                "h: [x1e3, 1e, e5, 12, 0.5, .inf]\n")
    assert got == {"a": 1e-4, "b": 5000.0, "c": 15000.0, "d": 5000.0, "e": -2000.0, "f": 1e-4, "g": "1e3",
                   "h": ["x1e3", "1e", "e5", 12, 0.5, float("inf")]}
    assert all(type(got[k]) is float for k in "abcdef") and type(got["h"][3]) is int
    assert yaml.safe_load("a: 1e-4") == {"a": "1e-4"}  # PyYAML's own loader is left as it is
    data = {"s": "1e3", "t": "2.5e-4", "n": 1e-4, "u": "x"}
    text = yaml_strict.safe_dump(data, sort_keys=False)
    assert "'1e3'" in text and "'2.5e-4'" in text and yaml_strict.safe_load(text) == data
    space = RecipeSpace.from_yaml("params:\n  lr: {kind: categorical, choices: [1e-4, 3e-4]}\n"
                                  "  beta: {kind: float, low: 1e-3, high: 1e-1, log: true}\n")
    assert space.param("lr").choices == [1e-4, 3e-4] and space.param("beta").low == 1e-3
    assert RecipeSpace.from_yaml(space.to_yaml()).to_dict() == space.to_dict()
    path = micro_project("expo", "start_recipes:\n  - {values: {lr: 5e-4, steps: 2}}\n")
    assert load_project(path).start_recipes[0]["values"]["lr"] == 5e-4


def test_a_project_saved_in_another_encoding_is_named_with_its_line_and_a_bom_is_read(micro_project):
    """A project saved as Latin-1 (`# café` in a comment) was a `UnicodeDecodeError` traceback; now a
    `ConfigError` names the file, the byte and its line, and says to save it as UTF-8. A UTF-8 file with a
    byte-order mark (as some Windows editors save one) loads as it is."""
    path = micro_project()
    text = path.read_text(encoding="utf-8")
    path.write_bytes(text.encode("utf-8") + "# café\n".encode("latin-1"))
    with pytest.raises(ConfigError) as e:
        load_project(path)
    lines = text.count("\n") + 1
    assert str(e.value) == f"{path}: not UTF-8 text (byte 0xe9 on line {lines}); save the file as UTF-8"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8") + "# café\n".encode("utf-8"))
    assert load_project(path).name == load_project(micro_project()).name


def test_a_recipe_file_saved_in_another_encoding_is_a_config_error(tmp_path):
    from sro.config import read_recipe_file

    path = tmp_path / "r.yaml"
    path.write_bytes("project: p\n# réglé\nrecipe: {values: {}}\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"^r\.yaml: not UTF-8 text \(byte 0xe9 on line 2\); save the file as UTF-8$"):
        read_recipe_file(path, "r.yaml")
