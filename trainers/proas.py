"""ProAS: reference-graph credit shaping for multi-turn agents (ALGORITHMS.md §2).

Episode-level reward and GRPO's critic-free group baseline, plus an *agentic reference graph* of
state-action edges e = (φ(s), κ(a)) with a validity v(e) ∈ [0, 1], built from the environment's
rules (an inadmissible command has v = 0), walkthroughs (edges of the reference solution have
v = 1) and rollouts distilled over the last W iterations (v = (n⁺ + a)/(n⁺ + n⁻ + a + b) once
n⁺ + n⁻ ≥ n_min); an admissible command off the reference solution gets v_off until distilled;
unknown edges get v_unk. Then per step t of episode i with group advantage A_i:

- Masking Unreasonable Incentives (A_i > 0): Â_{i,t} = A_i·g_{i,t}, g = v (soft) or 1[v ≥ θ_v] (hard);
  optionally rescaled so the episode keeps its total positive credit, moved onto its valid steps.
- Asymmetric Penalty Redistribution (A_i < 0): with t_1 < … < t_K the first K deviations (v < θ_v),
  q_{t_k} = ρ^{k−1}/Z, Â_{i,t} = A_i·((1 − λ) + λ·T_i·q_t); the total penalty A_i·T_i is unchanged.

With λ = 0 and v ≡ 1 this is GRPO exactly. Closest published: GraphGPO (arXiv 2605.26684),
GiGPO (arXiv 2505.10978), TRIAGE (arXiv 2606.32017).
"""

from __future__ import annotations

import hashlib
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class ProASConfig:
    """Knobs of ProAS (declared for the designer in `trainers.algorithms`)."""

    graph_source: str = "both"
    """Where validity comes from: rules (admissible commands + walkthroughs), distilled (rollout
    statistics), or both."""
    theta_v: float = 0.5
    """θ_v: a step is a deviation when v < θ_v; the hard gate keeps steps with v ≥ θ_v."""
    v_unk: float = 1.0
    """Validity of an edge the graph knows nothing about (1 = neutral: plain GRPO credit)."""
    v_off: float = 1.0
    """Validity of an admissible command other than the reference solution's next one, at a state where
    that is known (the walkthrough from this state), until the distilled estimate has n_min
    occurrences. 1 = neutral (another route may be as good); below θ_v such a command is a deviation,
    so a failed episode's penalty can move onto its first wrong turn, not only onto invalid commands."""
    n_min: int = 4
    """Occurrences an edge needs in the window before its distilled estimate is used."""
    window: int = 8
    """W: iterations of rollouts the distilled estimate counts over."""
    prior_a: float = 1.0
    """a: pseudo-count of successes in the distilled estimate."""
    prior_b: float = 1.0
    """b: pseudo-count of failures in the distilled estimate."""
    lam: float = 0.5
    """λ: share of a failed episode's penalty moved onto its first deviations."""
    k_dev: int = 2
    """K: how many first deviations share the moved penalty."""
    rho: float = 0.5
    """ρ: decay of the moved penalty over the K deviations (q ∝ ρ^{k−1})."""
    gate: str = "hard"
    """soft (g = v) or hard (g = 1[v ≥ θ_v]) masking in successful episodes."""
    rescale: bool = False
    """Keep a successful episode's total credit by moving it onto its valid steps."""
    corrupt: float = 0.0
    """Share of graph edges whose validity is flipped (v → 1 − v): a robustness probe, 0 in use."""

    def __post_init__(self) -> None:
        problems = []
        if self.graph_source not in ("rules", "distilled", "both"):
            problems.append(f"graph_source must be rules, distilled or both (got {self.graph_source!r})")
        if self.gate not in ("soft", "hard"):
            problems.append(f"gate must be soft or hard (got {self.gate!r})")
        for name in ("theta_v", "v_unk", "v_off", "lam", "corrupt"):
            if not 0.0 <= float(getattr(self, name)) <= 1.0:
                problems.append(f"{name} must be in [0, 1] (got {getattr(self, name)})")
        if not 0.0 < self.rho <= 1.0:
            problems.append(f"rho must be in (0, 1] (got {self.rho})")
        for name in ("k_dev", "window", "n_min"):  # one by name: a recipe's error says which (proas.window)
            if not getattr(self, name) >= 1:
                problems.append(f"{name} must be >= 1 (got {getattr(self, name)})")
        for name in ("prior_a", "prior_b"):
            if not getattr(self, name) > 0:
                problems.append(f"{name} must be > 0 (got {getattr(self, name)})")
        if problems:
            raise ValueError("ProASConfig: " + "; ".join(problems))


Edge = tuple[str, str]


class ReferenceGraph:
    """The agentic reference graph: edge validity from rules, walkthroughs and recent rollouts."""

    def __init__(self, cfg: ProASConfig, seed: int = 0) -> None:
        self.cfg = cfg
        self.seed = seed
        self.admissible: dict[str, frozenset[str]] = {}
        """φ(s) → commands the environment's rules accept there."""
        self.walkthrough: dict[str, set[str]] = {}
        """φ(s) → the walkthrough's next commands seen from there (the reference solution's edges)."""
        self._window: deque[Counter] = deque(maxlen=cfg.window)  # per iteration: edge → (n⁺, n⁻) as 2 counters
        self._window_neg: deque[Counter] = deque(maxlen=cfg.window)

    # building
    def observe_state(self, state: str, admissible: Sequence[str], walkthrough: Sequence[str] = ()) -> None:
        """Record the rules of a state and, if given, the walkthrough's next command from it."""
        self.admissible[state] = frozenset(admissible)
        if walkthrough:
            self.walkthrough.setdefault(state, set()).add(walkthrough[0])

    def add_iteration(self, episodes: Sequence[tuple[Sequence[Edge], bool]]) -> None:
        """Distil one iteration of rollouts: each episode's edges counted as successful or failed."""
        pos, neg = Counter(), Counter()
        for edges, success in episodes:
            (pos if success else neg).update(set(edges))
        self._window.append(pos)
        self._window_neg.append(neg)

    # reading
    def counts(self, edge: Edge) -> tuple[int, int]:
        return sum(c[edge] for c in self._window), sum(c[edge] for c in self._window_neg)

    def _raw_validity(self, edge: Edge, admissible: bool | None = None) -> float | None:
        state, action = edge
        src = self.cfg.graph_source
        if src in ("rules", "both"):
            if admissible is None:  # the rules as last recorded for the state
                admissible = state not in self.admissible or action in self.admissible[state]
            if not admissible:
                return 0.0
            if action in self.walkthrough.get(state, ()):
                return 1.0
        if src in ("distilled", "both"):
            n_pos, n_neg = self.counts(edge)
            if n_pos + n_neg >= self.cfg.n_min:
                return (n_pos + self.cfg.prior_a) / (n_pos + n_neg + self.cfg.prior_a + self.cfg.prior_b)
        if src in ("rules", "both") and state in self.walkthrough:  # admissible, off the reference solution
            return self.cfg.v_off
        return None

    def corrupted(self, edge: Edge) -> bool:
        """Whether this edge is in the corrupted share (a fixed hash of the edge, so it is stable)."""
        if self.cfg.corrupt <= 0:
            return False
        h = hashlib.sha256(repr((self.seed, edge)).encode()).digest()
        return int.from_bytes(h[:4], "little") / 2**32 < self.cfg.corrupt

    def validity(self, edge: Edge, admissible: bool | None = None) -> float:
        """v(e) ∈ [0, 1]; v_unk for an edge the graph knows nothing about. `admissible`: whether the
        environment accepted the command when the step took it, which the rules read instead of the
        admissible commands last recorded for the state (None: those); a state key that two states share
        cannot then make a step the environment accepted invalid."""
        v = self._raw_validity(edge, admissible)
        if v is None:
            return self.cfg.v_unk
        return 1.0 - v if self.corrupted(edge) else v

    def stats(self) -> dict[str, float]:
        """Graph size and how often its verdict on known edges agrees with the environment's rules."""
        # walkthrough edges are the graph's only where it reads the rules
        edges = ({(s, c) for s, cmds in self.walkthrough.items() for c in cmds}
                 if self.cfg.graph_source in ("rules", "both") else set())
        for c in (*self._window, *self._window_neg):
            edges.update(c)
        agree = judged = 0
        for e in edges:
            if e[0] in self.admissible:
                judged += 1
                agree += (self.validity(e) >= self.cfg.theta_v) == (e[1] in self.admissible[e[0]])
        return {"graph_edges": float(len(edges)), "graph_states": float(len(self.admissible)),
                "graph_rule_agreement": agree / judged if judged else float("nan")}


def step_advantages(adv: Sequence[float], validity: Sequence[Sequence[float]], cfg: ProASConfig) -> list[list[float]]:
    """Per-step advantages Â_{i,t} of ProAS from episode advantages A_i and step validities v_{i,t}.

    adv: (E,) group advantages; validity: E lists of T_i values. Returns E lists of T_i values.
    """
    if len(adv) != len(validity):
        raise ValueError(f"got {len(adv)} advantages for {len(validity)} episodes")
    out = []
    for a, vs in zip(adv, validity):
        T = len(vs)
        if a > 0:  # Masking Unreasonable Incentives
            g = [v if cfg.gate == "soft" else float(v >= cfg.theta_v) for v in vs]
            if cfg.rescale and sum(g) > 0:
                g = [x * T / sum(g) for x in g]
            out.append([a * x for x in g])
        elif a < 0:  # Asymmetric Penalty Redistribution
            devs = [t for t, v in enumerate(vs) if v < cfg.theta_v][: cfg.k_dev]
            if not devs:
                out.append([a] * T)
                continue
            w = [cfg.rho**k for k in range(len(devs))]
            z = sum(w)
            q = [0.0] * T
            for t, wk in zip(devs, w):
                q[t] = wk / z
            out.append([a * ((1 - cfg.lam) + cfg.lam * T * q[t]) for t in range(T)])
        else:
            out.append([0.0] * T)
    return out


def deviations(validity: Sequence[float], theta_v: float) -> int:
    return sum(v < theta_v for v in validity)
