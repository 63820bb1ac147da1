"""The micro project: one arithmetic domain of one-digit additions, a 24-item benchmark, the tiny base model
pre-trained for 30 steps. Tests write it with `MICRO.format(name=...)` (conftest's `micro_project` with its model
built once; tests that build no model write it themselves)."""

MICRO = """\
name: {name}
base_model: tiny
seed: 0
domains:
  arithmetic:
    sources:
      - reasoning_gym: basic_arithmetic
        config: {{min_terms: 2, max_terms: 2, max_digits: 1, operators: ["+"], allow_negation: false,
                 allow_parentheses: false}}
    benchmarks:
      - name: add
        reasoning_gym: basic_arithmetic
        config: {{min_terms: 2, max_terms: 2, max_digits: 1, operators: ["+"], allow_negation: false,
                 allow_parentheses: false}}
        size: 24
objectives:
  - arithmetic/add: max
  - cost: min
budget: 2trials
runtime: {{tiny_pretrain_steps: 30, threads: 2}}
"""


def changed_micro(micro_project, mutate=None, raw=None):
    """Write the micro project changed by `mutate(dict)` (or replaced by `raw(text)`); return its path."""
    import yaml

    path = micro_project()
    if raw is not None:
        path.write_text(raw(path.read_text()))
    else:
        data = yaml.safe_load(path.read_text())
        mutate(data)
        path.write_text(yaml.safe_dump(data))
    return path
