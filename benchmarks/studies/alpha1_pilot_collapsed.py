"""Prototype, not in the package: collapsed Gibbs over the hidden locations of spiked SLR
(docs/sampling.md). Given the locations ``eps``, ``k`` and ``v`` are Gaussian (the spiked token
factor ``exp(sqrt(nu) chi - nu |k|^2 / (2D))`` is Gaussian in ``k``; ``y = z_eps + noise`` is
linear in ``v``), so both are integrated out and each ``eps_mu`` is drawn from its collapsed
conditional (the posterior predictive of ``y_mu`` at each location, rank-one updates of the
``v`` posterior covariance, recomputed once a sweep against drift); ``(k, v)`` are drawn given
the locations after each sweep. It measured that the slow mode at alpha = 1 is the posterior's,
not NUTS's geometry. Prints one JSON line (R-hat and ESS after a fifth discarded as burn-in).

    python benchmarks/studies/alpha1_pilot_collapsed.py NU SEED SWEEPS CHAINS INIT [D] [ALPHA]
    python benchmarks/studies/alpha1_pilot_collapsed.py 1.0 0 3000 4 teacher
"""

from __future__ import annotations

import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from bayesslr.bayes import arviz_adapter
from bayesslr.core.task import make_task, sample_task, seed_key

DELTA = 0.01


def sampler(X, y, mask, nu: float):
    """``run(key, eps0, sweeps) -> (k draws, v draws)`` for one chain, in float64."""
    N, _, D = X.shape
    P = 1.0 + N * nu / D  # posterior precision of k given the locations (isotropic)
    A_all = X / jnp.sqrt(D)

    def rebuild(eps):
        A = A_all[jnp.arange(N), eps]
        S = jnp.linalg.inv(jnp.eye(D) + A.T @ A / DELTA)
        return 0.5 * (S + S.T), A.T @ y / DELTA, X[jnp.arange(N), eps].sum(0)

    def update(c, mu):
        S, h, s, eps, key = c
        key, ku = jax.random.split(key)
        a, x = A_all[mu, eps[mu]], X[mu, eps[mu]]
        Sa = S @ a
        Sm = S + jnp.outer(Sa, Sa) / (DELTA - a @ Sa)  # sample mu removed
        hm, sm = h - a * y[mu] / DELTA, s - x
        Al = A_all[mu]
        mean = Al @ (Sm @ hm)
        var = DELTA + jnp.einsum("ld,de,le->l", Al, Sm, Al)
        lp = (-0.5 * jnp.log(var) - 0.5 * (y[mu] - mean) ** 2 / var
              + nu / (2 * D * P) * (2 * X[mu] @ sm + jnp.sum(X[mu] ** 2, -1)))
        lnew = jax.random.categorical(ku, jnp.where(mask[mu], lp, -jnp.inf))
        an = A_all[mu, lnew]
        San = Sm @ an
        S = Sm - jnp.outer(San, San) / (DELTA + an @ San)
        return (S, hm + an * y[mu] / DELTA, sm + X[mu, lnew], eps.at[mu].set(lnew), key), None

    def sweep(key, eps):
        key, kk, kv = jax.random.split(key, 3)
        (_, _, _, eps, _), _ = jax.lax.scan(update, (*rebuild(eps), eps, key), jnp.arange(N))
        S, h, s = rebuild(eps)
        k = jnp.sqrt(nu / D) * s / P + jax.random.normal(kk, (D,)) / jnp.sqrt(P)
        v = S @ h + jnp.linalg.cholesky(S) @ jax.random.normal(kv, (D,))
        return eps, k, v

    def run(key, eps0, n):
        def body(c, _):
            key, eps = c
            key, k1 = jax.random.split(key)
            eps, k, v = sweep(k1, eps)
            return (key, eps), (k, v)

        return jax.lax.scan(body, (key, eps0), None, length=n)[1]

    return jax.jit(jax.vmap(run, in_axes=(0, 0, None)), static_argnums=2)


def main(nu: float, seed: int, sweeps: int, chains: int, init: str, D: int = 200,
         alpha: float = 1.0) -> dict:
    task = make_task("spiked", L=3, nu=nu, delta=DELTA, D=D)
    N = int(round(alpha * D))
    teacher, train, _ = jax.jit(sample_task, static_argnums=(1, 2, 3))(
        seed_key(seed), task, N, 10_000)
    with jax.enable_x64(True):
        X, y = jnp.asarray(train.X, jnp.float64), jnp.asarray(train.y, jnp.float64)
        mask = jnp.asarray(train.mask)
        if init == "teacher":  # the locations drawn given (k*, v*): an exact posterior draw
            chi = X @ jnp.asarray(teacher.k, jnp.float64) / jnp.sqrt(D)
            z = X @ jnp.asarray(teacher.v, jnp.float64) / jnp.sqrt(D)
            lp = jnp.sqrt(nu) * chi - 0.5 * (y[:, None] - z) ** 2 / DELTA
            eps0 = jax.random.categorical(jax.random.key(5), lp[None].repeat(chains, 0), -1)
        else:
            eps0 = jax.random.randint(jax.random.key(5), (chains, N), 0, X.shape[1])
        t0, c0 = time.perf_counter(), time.process_time()
        K, V = sampler(X, y, mask, nu)(jax.random.split(jax.random.key(seed + 7), chains),
                                       eps0, sweeps)
        K, V = np.asarray(K), np.asarray(V)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    K, V = K[:, sweeps // 5:], V[:, sweeps // 5:]
    d = arviz_adapter.diagnostics({"k": K, "v": V})
    tk, tv = np.asarray(teacher.k), np.asarray(teacher.v)
    return {"nu": nu, "seed": seed, "D": D, "alpha": alpha, "init": init, "sweeps": sweeps,
            "wall_s": wall, "cpu_s": cpu, **{k: float(v) for k, v in d.items()},
            "m_k_chains": [float(K[c].mean(0) @ tk / D) for c in range(chains)],
            "m_v_chains": [float(V[c].mean(0) @ tv / D) for c in range(chains)]}


if __name__ == "__main__":
    a = sys.argv[1:]
    extra = [int(a[5])] if len(a) > 5 else []
    extra += [float(a[6])] if len(a) > 6 else []
    print(json.dumps(main(float(a[0]), int(a[1]), int(a[2]), int(a[3]), a[4], *extra)),
          flush=True)
