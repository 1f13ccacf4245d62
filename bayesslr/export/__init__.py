"""Exports of the inference benchmark's targets to other tools (docs/targets.md).

* :mod:`bayesslr.export.slr_pymc`: the SLR posterior written in PyMC (standalone: it imports
  only NumPy, PyMC and PyTensor, so it ships as posteriordb model code); its log density is
  tested equal to :meth:`bayesslr.Target.log_density`;
* :mod:`bayesslr.export.posteriordb`: ``bayesslr export posteriordb OUT``.
"""
