"""The Multi-Domain Recipe Optimizer: a GP encoding of recipe spaces, the BoTorch multi-objective
proposer (qLogNEHVI; Ament et al. 2023, arXiv 2310.20708; Daulton et al. 2021, arXiv 2105.08195) and
an Optuna sampler built on the same machinery.

Importing this package registers the proposer in `sro.proposers.PROPOSERS` as "botorch".
"""

from __future__ import annotations

from sro.optimizer.botorch_proposer import BoTorchProposer, objective_value, reference_point
from sro.optimizer.encoding import RecipeEncoder, sobol_pool
from sro.optimizer.optuna_sampler import SROSampler

__all__ = ["BoTorchProposer", "RecipeEncoder", "SROSampler", "objective_value", "reference_point", "sobol_pool"]
