"""Multi-head single-location regression: several hidden directions, several heads
(docs/multihead.md).

Not yet registered as a method family, nor exposed at the top level of :mod:`bayesslr`: import
from :mod:`bayesslr.multihead.task` (or from here).
"""

from bayesslr.multihead.task import (
    SIGMAS,
    BayesRiskMC,
    MultiheadData,
    MultiheadTask,
    MultiheadTeacher,
    PopulationRiskMC,
    attention_predict,
    attention_weights,
    bayes_predict,
    bayes_risk_mc,
    posterior,
    sample_multihead,
    teacher_heads_risk_mc,
)

__all__ = [
    "SIGMAS",
    "BayesRiskMC",
    "MultiheadData",
    "MultiheadTask",
    "MultiheadTeacher",
    "PopulationRiskMC",
    "attention_predict",
    "attention_weights",
    "bayes_predict",
    "bayes_risk_mc",
    "posterior",
    "sample_multihead",
    "teacher_heads_risk_mc",
]
