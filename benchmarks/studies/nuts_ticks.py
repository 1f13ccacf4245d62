"""Study (issue 35): NUTS draws one leapfrog step at a time, vectorised chains that do not
wait for each other; measured, and not adopted.

Run: ``.venv/bin/python benchmarks/studies/nuts_ticks.py`` (a few CPU-minutes): checks that
the draws have the law of NumPyro's NUTS on a Gaussian (moments, ESS and the distribution of
tree sizes, 4 x 20 000 draws each), then times both on the paper's NUTS posterior.

**What it found (2026-12-03, two cores at load 8-12, so CPU-seconds are inflated and vary by
about 20 % between runs).** On the paper's NUTS cells the lockstep costs little: with the
warm-up's adapted step size the trees of the 4 chains had nearly one size (15 leapfrog steps
every draw at ``alpha = 2``, ``nu = 2``; 31-63 at ``alpha = 1``, ``nu = 1``, ``D = 200``), so few
gradients are spent waiting. This version's bookkeeping (one select per state field per step)
made it slower where no chain waits (``alpha = 2``, 1 000 draws: 81.0 against 66.6 CPU-us per
chain-gradient; 16 chains: 66.4 against 61.6) and about as fast where trees vary (``alpha = 1``:
45.8 against 48.2). On the Gaussian below, whose trees vary, the two agree in law (steps a draw
11.120 and 11.133; ESS within 3 %). A per-chain loop condition under ``vmap`` selects the whole
loop state, draws included, at every step (8.6x the gradient at 1 000 draws): the loop's
condition here is the batch's. Not adopted: the ``bayes_sampling`` NUTS keeps NumPyro's
transition; this is the version to take where trees vary between chains (transients from
random starts, modes of different widths).

Under ``vmap`` (the ``vectorized`` chain method), NumPyro's NUTS transition
(:func:`bayesslr.bayes.warmup.nuts_transition`, ``numpyro.infer.hmc_util.build_tree``) runs its
tree-doubling loops until the *longest* tree of the batch is built: every chain pays a gradient
at every leapfrog step of the slowest chain, at every iteration. The question (issue 35, item
1; ``benchmarks/bench_nuts_step.py``) was whether that lockstep is what makes a NUTS step cost
more than its gradient; the answer above is: not on the paper's posteriors.

This module runs the same algorithm, multinomial NUTS with the iterative U-turn checks of
NumPyro's ``_iterative_build_subtree`` (Phan et al. 2019; Betancourt 2017, appendix A), written
as a state machine whose one transition is *one leapfrog step* of one chain
(:func:`_tick`). A chain finishes its subtree, merges it into its tree, ends its iteration and
starts the next one on its own tick; vectorised chains share only the leapfrog step, so
no gradient is spent waiting (the program-counter autobatching of Radul et al. 2020,
"Automatically batching control-intensive programs for modern accelerators", by hand, for
this one loop). Each chain's draws have the law of NumPyro's NUTS at the same step size and
diagonal mass matrix; only the random numbers are used in another order.

What it does not do: adaptation. The warm-up (:func:`bayesslr.bayes.warmup.run_warmup`) pools
its step size and mass matrix over the chains at every iteration, so it keeps the per-iteration
lockstep; these draws start where it ends, with its adapted (frozen) step size and mass.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from bayesslr.bayes.warmup import MAX_DELTA_ENERGY
from bayesslr.core.jaxconfig import Array, PRNGKey


class Draws(NamedTuple):
    """The draws of one chain (leading axis: draw).

    Attributes
    ----------
    z : Array, shape (n, P)
        Positions.
    log_density : Array, shape (n,)
        Log density (minus the potential) at each draw.
    diverging : Array, shape (n,)
        Whether the iteration's trajectory diverged.
    steps : Array, shape (n,)
        Leapfrog steps (gradient evaluations) of each iteration.
    ticks : Array
        Leapfrog steps this chain took in all (``steps.sum()``).
    """

    z: Array
    log_density: Array
    diverging: Array
    steps: Array
    ticks: Array


class _Chain(NamedTuple):
    # what a chain's loop reads and never changes
    step_size: Array
    inv_mass: Array
    momenta: Array
    key: PRNGKey


class _State(NamedTuple):
    # the iteration: its start energy; the tree (edges, proposal, weight, momentum sum, ...)
    energy0: Array
    zl: Array
    rl: Array
    gl: Array
    zr: Array
    rr: Array
    gr: Array
    zp: Array
    pep: Array
    gp: Array
    w: Array
    rsum: Array
    depth: Array
    n_prop: Array
    # the subtree being built: direction, edge (where the next leaf starts), proposal, ...
    right: Array
    ez: Array
    er: Array
    eg: Array
    szp: Array
    spep: Array
    sgp: Array
    sw: Array
    srsum: Array
    sn: Array
    sturn: Array
    # checkpoints of the iterative U-turn check
    rck: Array
    rsck: Array
    # the output
    tick: Array
    ticks: Array
    count: Array
    buf_z: Array
    buf_logp: Array
    buf_div: Array
    buf_steps: Array


_TREE = 14  # fields of _State that are the iteration's tree


def _is_turning(inv_mass: Array, r_left: Array, r_right: Array, r_sum: Array) -> Array:
    """NumPyro's ``_is_turning`` (the generalised no-U-turn criterion, Betancourt 2017 A.4.2),
    over the leading axes of its arguments."""
    rs = r_sum - (r_left + r_right) / 2
    return (jnp.sum(inv_mass * r_left * rs, -1) <= 0) | (jnp.sum(inv_mass * r_right * rs, -1) <= 0)


def nuts_draws(potential: Callable[[Array], Array], z0: Array, step_size: Array,
               inv_mass: Array, keys: PRNGKey, num_draws: int,
               max_tree_depth: int = 10) -> Draws:
    """``num_draws`` NUTS draws of each of ``C`` chains, one leapfrog step of every chain per
    loop turn.

    The loop runs while any chain has fewer than ``num_draws`` draws; a chain that has all of
    its draws keeps stepping (its steps are not counted and nothing more is written) until the
    last one is done. The loop's condition is the batch's, not a chain's: a per-chain
    condition under ``vmap`` would select the whole loop state, draws included, at every step.

    Parameters
    ----------
    potential : callable
        ``z (P,) -> U(z)``, minus the log density of one chain.
    z0 : Array, shape (C, P)
        Starts (the last warm-up draws).
    step_size : Array, shape (C,)
        Leapfrog step sizes (frozen).
    inv_mass : Array, shape (C, P)
        Diagonal inverse mass matrices (frozen).
    keys : PRNGKey, shape (C,)
    num_draws : int
        Draws per chain (static, >= 1).
    max_tree_depth : int
        Largest tree depth (a tree has at most ``2**max_tree_depth - 1`` leapfrog steps).

    Returns
    -------
    Draws
        Each field with a leading chain axis.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> d = nuts_draws(lambda z: 0.5 * jnp.sum(z ** 2), jnp.zeros((2, 3)), jnp.full(2, 0.8),
    ...                jnp.ones((2, 3)), jax.random.split(jax.random.key(0), 2), 200)
    >>> d.z.shape, bool((d.ticks == d.steps.sum(1)).all())
    ((2, 200, 3), True)
    """
    if num_draws < 1:
        raise ValueError(f"num_draws must be >= 1, got {num_draws}")
    if not 1 <= max_tree_depth <= 15:
        raise ValueError(f"max_tree_depth must be in [1, 15], got {max_tree_depth}")
    dtype = z0.dtype
    kw = {"num_draws": num_draws, "max_tree_depth": max_tree_depth}
    init = jax.vmap(functools.partial(_init, potential, **kw))
    step = jax.vmap(functools.partial(_tick, potential, **kw))
    chain, s0 = init(z0, jnp.asarray(step_size, dtype), jnp.asarray(inv_mass, dtype), keys)
    s = lax.while_loop(lambda s: jnp.any(s.count < num_draws), lambda s: step(chain, s), s0)
    return Draws(s.buf_z, s.buf_logp, s.buf_div, s.buf_steps, s.ticks)


def _kinetic(inv_mass: Array, r: Array) -> Array:
    return 0.5 * jnp.sum(inv_mass * r * r)


def _new_iteration(inv_mass, z, pe, g, r):
    """The tree of one point: the first :data:`_TREE` fields of :class:`_State`."""
    f0 = jnp.zeros((), z.dtype)
    i0 = jnp.zeros((), jnp.int32)
    return (pe + _kinetic(inv_mass, r), z, r, g, z, r, g, z, pe, g, f0, r, i0, i0)


def _new_subtree(tree, right):
    """An empty subtree at the tree's edge on the side ``right`` (the fields of
    :class:`_State` after the tree's)."""
    _, zl, rl, gl, zr, rr, gr = tree[:7]
    ez, er, eg = (jnp.where(right, a, b) for a, b in ((zr, zl), (rr, rl), (gr, gl)))
    f0 = jnp.zeros((), ez.dtype)
    return (right, ez, er, eg, ez, f0, eg, f0, jnp.zeros_like(er), jnp.zeros((), jnp.int32),
            jnp.zeros((), bool))


def _init(potential, z0, step_size, inv_mass, key, *, num_draws, max_tree_depth):
    """One chain's constants and first state (a new iteration at ``z0``, its first subtree)."""
    P = z0.shape[0]
    dtype = z0.dtype
    k_mom, k_ticks, k_dir = jax.random.split(key, 3)
    # every iteration's momentum, drawn up front: one is needed at one tick in ~2^depth, and
    # under vmap a draw inside the loop would be paid at every tick
    momenta = jax.random.normal(k_mom, (num_draws, P), dtype) / jnp.sqrt(inv_mass)
    pe0, g0 = jax.value_and_grad(potential)(z0)
    tree = _new_iteration(inv_mass, z0, pe0, g0, momenta[0])
    right = jax.random.uniform(k_dir, (), dtype) < 0.5
    i0 = jnp.zeros((), jnp.int32)
    state = _State(*tree, *_new_subtree(tree, right),
                   jnp.zeros((max_tree_depth, P), dtype), jnp.zeros((max_tree_depth, P), dtype),
                   i0, i0, i0, jnp.zeros((num_draws, P), dtype), jnp.zeros((num_draws,), dtype),
                   jnp.zeros((num_draws,), bool), jnp.zeros((num_draws,), jnp.int32))
    return _Chain(step_size, inv_mass, momenta, k_ticks), state


def _tick(potential, c: _Chain, s: _State, *, num_draws, max_tree_depth) -> _State:
    """One leapfrog step of one chain and the bookkeeping it triggers (NumPyro's
    ``_build_basetree``, ``_iterative_build_subtree``, ``_combine_tree`` and ``build_tree``'s
    doubling loop, one leaf at a time)."""
    inv_mass = c.inv_mass
    u = jax.random.uniform(jax.random.fold_in(c.key, s.tick), (3,), s.ez.dtype)
    live = s.count < num_draws  # a chain with all its draws steps on, unrecorded
    # one leapfrog step from the subtree's edge
    eps = jnp.where(s.right, c.step_size, -c.step_size)
    r_half = s.er - 0.5 * eps * s.eg
    z1 = s.ez + eps * inv_mass * r_half
    pe1, g1 = jax.value_and_grad(potential)(z1)
    r1 = r_half - 0.5 * eps * g1
    delta = pe1 + _kinetic(inv_mass, r1) - s.energy0
    delta = jnp.where(jnp.isnan(delta), jnp.inf, delta)
    lw = -delta
    div1 = delta > MAX_DELTA_ENERGY
    # the leaf joins the subtree: uniform progressive sampling inside a subtree
    first = s.sn == 0
    sw = jnp.where(first, lw, jnp.logaddexp(s.sw, lw))
    move = first | (u[0] < jnp.exp(lw - sw))
    szp = jnp.where(move, z1, s.szp)
    spep = jnp.where(move, pe1, s.spep)
    sgp = jnp.where(move, g1, s.sgp)
    srsum = jnp.where(first, r1, s.srsum + r1)
    leaf = s.sn
    sn = s.sn + 1
    # iterative U-turn checks against the checkpoints (NumPyro's _leaf_idx_to_ckpt_idxs):
    # an even leaf writes checkpoint idx_max, an odd one checks idx_min..idx_max
    idx_max = lax.population_count(leaf >> 1)
    idx_min = idx_max - (lax.population_count(leaf ^ (leaf + 1)) - 1) + 1
    even = leaf % 2 == 0
    rck = s.rck.at[idx_max].set(jnp.where(even, r1, s.rck[idx_max]))
    rsck = s.rsck.at[idx_max].set(jnp.where(even, srsum, s.rsck[idx_max]))
    slots = jnp.arange(max_tree_depth)
    sub = _is_turning(inv_mass, rck, r1[None], srsum[None] - rsck + rck)
    sturn = jnp.any((slots >= idx_min) & (slots <= idx_max) & sub)
    sdone = (sn == (1 << s.depth)) | sturn | div1
    # the subtree joins the tree (biased progressive sampling), when it is done
    zl = jnp.where(s.right, s.zl, z1)
    rl = jnp.where(s.right, s.rl, r1)
    gl = jnp.where(s.right, s.gl, g1)
    zr = jnp.where(s.right, z1, s.zr)
    rr = jnp.where(s.right, r1, s.rr)
    gr = jnp.where(s.right, g1, s.gr)
    rsum = s.rsum + srsum
    take = ~(sturn | div1) & (u[1] < jnp.exp(jnp.minimum(sw - s.w, 0.0)))
    zp = jnp.where(take, szp, s.zp)
    pep = jnp.where(take, spep, s.pep)
    gp = jnp.where(take, sgp, s.gp)
    depth = s.depth + 1
    n_prop = s.n_prop + sn
    turn = sturn | _is_turning(inv_mass, rl, rr, rsum)
    idone = sdone & ((depth >= max_tree_depth) | turn | div1)
    # the iteration's draw
    record = idone & live
    i = jnp.minimum(s.count, num_draws - 1)
    buf_z = s.buf_z.at[i].set(jnp.where(record, zp, s.buf_z[i]))
    buf_logp = s.buf_logp.at[i].set(jnp.where(record, -pep, s.buf_logp[i]))
    buf_div = s.buf_div.at[i].set(jnp.where(record, div1, s.buf_div[i]))
    buf_steps = s.buf_steps.at[i].set(jnp.where(record, n_prop, s.buf_steps[i]))
    count = s.count + record.astype(jnp.int32)
    # the tree after this tick: the next iteration's point, the merged tree, or unchanged
    fresh = _new_iteration(inv_mass, zp, pep, gp, c.momenta[jnp.minimum(count, num_draws - 1)])
    merged = (s.energy0, zl, rl, gl, zr, rr, gr, zp, pep, gp, jnp.logaddexp(s.w, sw), rsum,
              depth, n_prop)
    tree = tuple(jnp.where(idone, a, jnp.where(sdone, b, k))
                 for a, b, k in zip(fresh, merged, s[:_TREE], strict=True))
    # the subtree after this tick: a new one from the tree's edge, or this one grown
    started = _new_subtree(tree, u[2] < 0.5)
    grown = (s.right, z1, r1, g1, szp, spep, sgp, sw, srsum, sn, sturn)
    subtree = tuple(jnp.where(sdone, a, b) for a, b in zip(started, grown, strict=True))
    return _State(*tree, *subtree, rck, rsck, s.tick + 1, s.ticks + live.astype(jnp.int32),
                  count, buf_z, buf_logp, buf_div, buf_steps)


def _check_law(n: int = 20000, chains: int = 4) -> None:
    import arviz as az
    import numpy as np

    from bayesslr.bayes.warmup import nuts_transition

    scales = jnp.array([0.5, 1.0, 2.0, 3.0, 0.1])
    P = scales.shape[0]

    def pot(z):
        return 0.5 * jnp.sum((z / scales) ** 2)

    inv = scales ** 2 * jnp.array([1.0, 0.5, 2.0, 1.0, 1.0])  # an imperfect mass matrix
    eps = 0.35
    ours = jax.jit(lambda ks: nuts_draws(pot, jnp.zeros((chains, P)), jnp.full(chains, eps),
                                         jnp.tile(inv[None], (chains, 1)), ks, n, 10))
    d = ours(jax.random.split(jax.random.key(0), chains))

    def chain(k):
        def body(c, k):
            t = nuts_transition(pot, c[0], c[1], c[2], jnp.asarray(eps), inv, k, 10)
            return (t.z, t.pe, t.grad), (t.z, t.steps)
        z0 = jnp.zeros(P)
        pe, g = jax.value_and_grad(pot)(z0)
        return lax.scan(body, (z0, pe, g), jax.random.split(k, n))[1]

    zs, st = jax.jit(jax.vmap(chain))(jax.random.split(jax.random.key(1), chains))
    for name, z, steps in (("ticks", d.z, d.steps), ("numpyro", zs, st)):
        z = np.asarray(z)
        ess = az.ess(az.convert_to_dataset({"z": z}))["z"].values
        print(f"{name:8s} mean {z.mean((0, 1)).round(3)} sd/scale "
              f"{(z.std((0, 1)) / np.asarray(scales)).round(3)} ESS {ess.round(0)} "
              f"steps/draw {float(np.mean(steps)):.3f}")


def _time_paper(alpha: float = 2.0, nu: float = 2.0, n: int = 1000, chains: int = 4) -> None:
    import time

    from bayesslr.bayes.model import model_spec
    from bayesslr.bayes.nuts import model_args, potential_fn_gen
    from bayesslr.bayes.warmup import nuts_transition, run_warmup
    from bayesslr.core.task import make_task, sample_task, seed_key

    D = 200
    task = make_task("spiked", L=3, nu=nu, delta=0.01, D=D)
    teacher, train, _ = sample_task(seed_key(0), task, int(alpha * D), 10)
    spec = model_spec(task)
    pt = potential_fn_gen("marginal", spec.variant)(*model_args(spec, train))

    def pot(z):
        return pt({"k": z[:D], "v": z[D:]})

    z0 = jnp.concatenate([teacher.k, teacher.v])
    warm = jax.jit(jax.vmap(lambda k: run_warmup(pot, z0, k, 200, 1, target_accept=0.8,
                                                 max_tree_depth=10, axis_name="c"),
                            axis_name="c"))
    r = warm(jax.random.split(jax.random.key(0), chains))
    zs, eps, inv = r.z[:, -1], r.step_size, r.inv_mass

    def lock_chain(z, e, i, k):
        pe, g = jax.value_and_grad(pot)(z)

        def body(c, k):
            t = nuts_transition(pot, c[0], c[1], c[2], e, i, k, 10)
            return (t.z, t.pe, t.grad), t.steps
        return lax.scan(body, (z, pe, g), jax.random.split(k, n))[1]

    runs = {"ticks": jax.jit(lambda z, e, i, k: nuts_draws(pot, z, e, i, k, n, 10).steps),
            "lockstep": jax.jit(jax.vmap(lock_chain))}
    keys = jax.random.split(jax.random.key(1), chains)
    for name, fn in runs.items():
        jax.block_until_ready(fn(zs, eps, inv, keys))
        c0 = time.process_time()
        steps = jax.block_until_ready(fn(zs, eps, inv, keys))
        cpu = time.process_time() - c0
        print(f"alpha={alpha} nu={nu} {name:8s} {1e6 * cpu / float(steps.sum()):.1f} CPU-us per "
              f"chain-gradient, steps/draw min {int(steps.min())} max {int(steps.max())}")


if __name__ == "__main__":
    import bayesslr

    bayesslr.configure_jax()
    _check_law()
    _time_paper(2.0, 2.0)
    _time_paper(1.0, 1.0)
