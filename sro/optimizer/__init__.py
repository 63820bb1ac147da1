"""The Multi-Domain Recipe Optimizer: a GP encoding of recipe spaces, the BoTorch multi-objective
proposer (qLogNEHVI; Ament et al. 2023, arXiv 2310.20708; Daulton et al. 2021, arXiv 2105.08195) and
an Optuna sampler built on the same machinery.

Importing this package registers the proposers in `sro.proposers.PROPOSERS`: "botorch" (the default of
`sro search`), and Optuna's "tpe" and "nsga2" for comparison ("random" lives in `sro.proposers`).
"""

from __future__ import annotations

from sro.optimizer.botorch_proposer import BoTorchProposer, objective_value
from sro.optimizer.encoding import RecipeEncoder, sobol_pool
from sro.optimizer.hypervolume import hypervolume, hypervolume_history, reference_point
from sro.optimizer.optuna_proposers import NSGA2Proposer, TPEProposer
from sro.optimizer.optuna_sampler import SROSampler

__all__ = ["BoTorchProposer", "NSGA2Proposer", "RecipeEncoder", "SROSampler", "TPEProposer", "hypervolume",
           "hypervolume_history", "objective_value", "reference_point", "sobol_pool"]
