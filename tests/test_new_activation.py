"""A new activation is one edit: one entry added to ``ACTIVATIONS`` (done here before the
families are imported, as an edit of core/activations.py would) reaches the population family,
ERM and the replica theory, with no other change; an activation that declares the replica
theory out of its reach is refused there by name."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SCRIPT = r"""
import json, math
import jax.numpy as jnp
from bayesslr.core import activations as A

def tanh_act(chi, mask=None, theta=None):
    return jnp.where(A._full_mask(chi, mask), 1.0 + jnp.tanh(chi), 0.0)

A.ACTIVATIONS["tanh"] = A.Activation("tanh", tanh_act, (), (), False, False, "1 + tanh(chi_l)")
A.ACTIVATIONS["nope"] = A.Activation("nope", tanh_act, (), (), False, False, "test",
                                     replica=False)

import bayesslr as bs
from bayesslr.core.task import ConfigError
from bayesslr.registry import ACTIVATION_COLORS, validate_cell

bs.configure_jax()
fams = bs.families()
out = {"acts": {f: list(fams[f].activations) for f in ("population", "erm", "gd", "theory_erm")},
       "color": ACTIVATION_COLORS.get("tanh")}
task = dict(variant="spiked", L="3", nu=2.0, delta=0.0)
out["pop"] = bs.run_cell(bs.Cell("population:tanh", **task, options={"samples": 4000}))
out["bayes"] = bs.run_cell(bs.Cell("population:bayes", **task, options={"samples": 4000}))
out["erm"] = bs.run_cell(bs.Cell("erm:tanh", **task, alpha=3.0, lam=0.1, D=40,
                                 options={"n_test": 2000}))
out["theory"] = bs.run_cell(bs.Cell("theory_erm:tanh", **task, alpha=3.0, lam=0.1,
                                    options={"samples": 1000, "test_samples": 2000}))
validate_cell(bs.Cell("erm:tanh", **task, alpha=3.0, lam="replica", D=40))
try:
    validate_cell(bs.Cell("theory_erm:nope", **task, alpha=3.0, lam=0.1))
    out["refused"] = ""
except ConfigError as exc:
    out["refused"] = str(exc)
print(json.dumps({k: v for k, v in out.items()}, default=str))
"""


@pytest.mark.slow
def test_one_entry_in_activations_runs_through_population_erm_and_theory():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    for family in ("population", "erm", "gd"):
        assert "tanh" in got["acts"][family] and "nope" in got["acts"][family]
    assert "tanh" in got["acts"]["theory_erm"] and "nope" not in got["acts"]["theory_erm"]
    assert got["color"] == "C4"
    pop, bayes = got["pop"], got["bayes"]
    # no activation beats the Bayes predictor (same common random numbers: 4 standard errors)
    assert pop["test_error"] >= bayes["test_error"] - 4 * (pop["stderr"] + bayes["stderr"])
    assert 0.0 < pop["test_error"] < 1.0
    erm, theory = got["erm"], got["theory"]
    assert math_ok(erm["test_error"]) and math_ok(theory["test_error"])
    assert "theory_erm:nope" in got["refused"] and "theory_erm:tanh" in got["refused"]


def math_ok(x) -> bool:
    return isinstance(x, float) and 0.0 <= x < 10.0
