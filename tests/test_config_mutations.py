"""Edges of the project YAML's validation (`sro/config.py`) that a mutation sweep (stop 47) found unpinned: each
change named in a test's docstring passed every test of tests/test_config.py and tests/test_start_recipes.py.
Expected messages are the ones `load_project` writes; inputs are the micro project with one change."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sro.config import ConfigError, SourceConfig, load_project

from micro import changed_micro  # tests/micro.py (pytest puts tests/ on sys.path)


def _error(micro_project, mutate=None, raw=None) -> str:
    path = changed_micro(micro_project, mutate, raw)
    with pytest.raises(ConfigError) as e:
        load_project(path, trains=False)
    return str(e.value).removeprefix(f"{path}: ")


def test_two_benchmarks_of_one_name_in_a_domain_are_refused(micro_project):
    """Two benchmarks named `add` in one domain would share the objective key `arithmetic/add` (a count > 2 as
    the test for a repeat let a pair through)."""
    def twice(d):
        bench = d["domains"]["arithmetic"]["benchmarks"]
        bench.append(dict(bench[0]))

    msg = _error(micro_project, twice)
    assert "benchmark names must be unique in a domain; repeated: ['add']" in msg, msg


@pytest.mark.parametrize("at", [[0, 0.5], [0.5, 1]])
def test_a_pruning_fraction_at_either_end_of_a_trial_is_refused(micro_project, at):
    """`pruning.at` lies strictly inside (0, 1): at 0 nothing is trained yet, at 1 the trial is over (`0 <= f`
    or `f <= 1` accepted them)."""
    msg = _error(micro_project, lambda d: d.update(pruning={"at": at}))
    assert f"pruning.at: every fraction must lie strictly between 0 and 1 (got {[float(f) for f in at]})" in msg, msg


def test_pruning_fractions_are_sorted_and_kept_once(micro_project):
    path = changed_micro(micro_project, lambda d: d.update(pruning={"at": [0.5, 0.25, 0.5]}))
    assert load_project(path, trains=False).pruning.at == [0.25, 0.5]


def test_more_than_three_errors_name_three_and_count_the_rest(micro_project):
    """Five unknown keys: three are named, "(and 2 more)" ends the message; four: "(and 1 more)"; three name all
    three and say no more (a changed count or threshold printed another count, or nothing)."""
    msg = _error(micro_project, lambda d: d.update({f"qqq{i}": 1 for i in range(5)}))
    assert msg.count("unknown key") == 3 and msg.endswith(" (and 2 more)"), msg
    assert [k for k in ("qqq0", "qqq1", "qqq2", "qqq3", "qqq4") if f"{k}: unknown key" in msg] == ["qqq0", "qqq1", "qqq2"]
    msg = _error(micro_project, lambda d: d.update({f"qqq{i}": 1 for i in range(4)}))
    assert msg.count("unknown key") == 3 and msg.endswith(" (and 1 more)"), msg
    msg = _error(micro_project, lambda d: d.update({f"qqq{i}": 1 for i in range(3)}))
    assert msg.count("unknown key") == 3 and "more)" not in msg, msg


def test_malformed_yaml_says_where_and_what_the_parser_found(micro_project):
    """The parser's own problem is the message ("expected ',' or ']'..."), not the first line of its whole
    report (`problem and str(e)` printed "while parsing a flow sequence")."""
    msg = _error(micro_project, raw=lambda t: t.replace("seed: 0", "seed: [0"))
    assert msg == "line 4, column 8: malformed YAML (expected ',' or ']', but got ':'); fix the syntax there", msg


def test_a_dataset_path_resolves_against_the_project_folder_only_where_it_exists(tmp_path, monkeypatch):
    """`dataset:` is a local file or folder when one exists at that path beside the project YAML (resolved
    there, whatever the working directory), else an HF hub id, passed on as written; an absolute path is
    kept. A `jsonl:` path always resolves against the project folder."""
    (tmp_path / "rows.jsonl").write_text('{"question": "1+1", "answer": "2"}\n')
    (tmp_path / "folder").mkdir()
    monkeypatch.chdir(Path("/"))
    assert SourceConfig(dataset="rows.jsonl").spec(tmp_path).target == str(tmp_path / "rows.jsonl")
    assert SourceConfig(dataset="folder").spec(tmp_path).target == str(tmp_path / "folder")
    assert SourceConfig(dataset="openai/gsm8k").spec(tmp_path).target == "openai/gsm8k"
    assert SourceConfig(dataset="/data/rows.parquet").spec(tmp_path).target == "/data/rows.parquet"
    assert SourceConfig(dataset="rows.jsonl").spec(None).target == "rows.jsonl"
    assert SourceConfig(jsonl="missing.jsonl").spec(tmp_path).target == str(tmp_path / "missing.jsonl")


def test_a_source_names_the_kinds_it_was_given_or_none(micro_project):
    """A source with two kinds lists both; one with none says "none" (`or` for `and` left the list empty)."""
    msg = _error(micro_project, lambda d: d["domains"]["arithmetic"]["sources"][0].update(jsonl="a.jsonl"))
    assert "a source needs exactly one of reasoning_gym, jsonl, dataset, textworld, env (got reasoning_gym, jsonl)" \
        in msg, msg
    msg = _error(micro_project, lambda d: d["domains"]["arithmetic"]["sources"][0].pop("reasoning_gym"))
    assert "(got none); write e.g. `- reasoning_gym: basic_arithmetic`" in msg, msg


def test_a_project_file_whose_top_level_is_not_a_mapping_is_refused(micro_project):
    msg = _error(micro_project, raw=lambda t: "- name: micro\n- seed: 0\n")
    assert msg == "the top level must be a mapping with name, domains, ...", msg


def test_a_recipe_file_that_is_not_one_hints_at_a_project_only_for_a_project(tmp_path):
    """`read_recipe_file`: a mapping with `domains:` is a project file and the error says `sro search` runs it; a
    mapping without it, or a list, gets no such hint (`or` for `and` gave it to every mapping)."""
    from sro.config import read_recipe_file

    for text, hint in (("name: x\ndomains: {}\n", True), ("lr: 0.1\n", False), ("- 1\n- 2\n", False)):
        path = tmp_path / "r.yaml"
        path.write_text(text)
        with pytest.raises(ConfigError) as e:
            read_recipe_file(path, "r.yaml", "export one")
        msg = str(e.value)
        assert msg.startswith("r.yaml: not a recipe file (it needs `project:` and `recipe:`)") and msg.endswith(
            "; export one"), msg
        assert ("it is a project file, which `sro search` runs" in msg) is hint, text


def test_a_game_benchmarks_size_defaults_to_its_game_count_even_for_one_game():
    """A TextWorld benchmark without `size` plays each of its held-out games once: `games: 1` gives size 1 and
    `games: 2.0` size 2 (a bound of 2 games, or a count > 1, gave the one-game benchmark size 100: a hundred
    greedy replays of one game); a size above the count is refused with both fixes."""
    from sro.config import BenchmarkConfig

    def size(**kw):
        return BenchmarkConfig(name="g", textworld="coin_collector", **kw).size

    assert (size(config={"games": 1}), size(config={"games": 2.0}), size(config={"games": 8})) == (1, 2, 8)
    with pytest.raises(ValueError, match=r"size 3 is more than the benchmark's 2 held-out games \(one greedy episode "
                                         r"each\); set config.games: 3, or size: 2"):
        size(config={"games": 2}, size=3)


def test_the_readmes_reference_yaml_states_every_default_it_shows():
    """The README's annotated project YAML shows the defaults of `runtime`, `designer`, `pruning`, `seed`,
    `base_model`, `budget`, `storage` and `heartbeat_s`: each equals the default a project that leaves the key
    out gets (a changed default passed every test: `tiny_pretrain_steps` 801, `heartbeat_s` 61, ...)."""
    import re

    from sro.config import DesignerConfig, ProjectConfig, PruningConfig, RuntimeConfig

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", readme, re.S) if "heartbeat_s:" in b)
    shown = yaml.safe_load(block)
    for section, model in (("runtime", RuntimeConfig), ("designer", DesignerConfig), ("pruning", PruningConfig)):
        default = model().model_dump()
        assert set(shown[section]) == set(default), section
        for key, value in shown[section].items():
            assert value == pytest.approx(default[key], abs=1e-3), f"{section}.{key}"
    for key in ("seed", "base_model", "budget", "storage", "heartbeat_s"):
        assert shown[key] == ProjectConfig.model_fields[key].default, key


def test_a_missing_required_key_is_named_with_the_fix(micro_project):
    msg = _error(micro_project, lambda d: d.pop("name"))
    assert msg == "name: required key is missing; add it", msg
