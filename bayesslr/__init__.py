"""bayesslr: reference benchmark suite for single-location regression (SLR).

Duranthon, Marion, Boyer, Loureiro, Zdeborova, "Statistical Advantage of Softmax Attention:
Insights from Single-Location Regression", arXiv 2509.21936. The mathematics implemented here is
written down in ``shared/spec/slr.md``; module docstrings cite its sections.

Importing the package configures JAX once (see :mod:`bayesslr.jaxconfig`): host devices for
parallel chains (only if JAX has not been imported yet) and the persistent compilation cache.
"""

from bayesslr.jaxconfig import configure as _configure

_configure()

__version__ = "0.1.0"

__all__ = ["__version__"]
