"""Rank-normalised split R-hat and bulk / tail ESS as array operations over every parameter at
once (issue 35: ArviZ loops over each scalar parameter in Python, 30 % of a short NUTS run).

The formulas are ArviZ 0.23's (``arviz/stats/diagnostics.py``: ``_rhat_rank``, ``_ess_bulk``,
``_ess_tail``, ``_ess``, ``_split_chains``, ``_z_scale``; ``stats_utils.autocov``,
``stats_utils.quantile``), step by step, for draws ``(chains, draws, params)``:

* split chains: the first ``draws // 2`` and the last ``draws // 2`` draws of every chain, the
  halves stacked as ``2 chains`` chains (the middle draw of an odd count is dropped);
* rank normalisation: average ranks (ties share their mean rank) over all split draws, the
  fractional offset ``3/8`` (Blom), ``z = Phi^-1((r - 3/8) / (N - 3/4 + 1))``;
* R-hat: ``sqrt((B / W + n - 1) / n)`` on the z-scores (bulk) and on the z-scores of the split
  draws folded about their median (tail); the larger of the two, with Python's ``max``
  (``max(bulk, tail)``: a NaN bulk stays NaN, a NaN tail gives the bulk);
* ESS: the FFT autocovariance of every split chain (``scipy.fftpack.next_fast_len(2 n)``
  padding), ``rho_t = 1 - (W - mean_c acov_t) / var_plus``, Geyer's initial positive sequence
  (pairs summed until a pair sum is not positive or the lag ``n - 3`` is reached, the last even
  lag kept when positive), then his initial monotone sequence, ``tau = -1 + 2 sum + last``
  floored at ``1 / log10(N)``, ``ESS = N / tau``; ``N`` (the number of split draws) when the
  series is constant (``max - min < finfo(float).resolution``);
* bulk ESS on the z-scores; tail ESS the smaller (Python's ``min``) of the ESS of the
  indicators ``x <= q_5%`` and ``x <= q_95%``, the quantiles R's type 7 over all draws of the
  parameter (``scipy.stats.mstats.mquantiles(alphap=1, betap=1)``, its arithmetic reproduced);
* NaN: a parameter with a NaN draw, fewer than 4 draws per chain, or (R-hat) fewer than 2
  chains.

What differs from ArviZ is only the order of floating-point operations (sums of pairs in the
monotone sequence, ``np.var`` where ArviZ with Numba uses the one-pass variance, the ranks as
integers indexing a table of normal quantiles computed once); ``tests/test_fast_diagnostics.py``
checks agreement with ArviZ to 1e-10 relative. ArviZ is the reference of that test, not a
dependency of this module.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats
from scipy.fftpack import next_fast_len

#: parameters per block: bounds the working memory (a block of 8 parameters of 4 chains x
#: 20 000 draws holds ~ 10 MB of FFT, under glibc's mmap threshold, so blocks reuse the heap;
#: 8 was ~20 % faster than 16 or 32 on (4, 20000, 64))
BLOCK = 8
_C = 3 / 8  # Blom's fractional offset, ArviZ's _backtransform_ranks default


def _z_table(size: int) -> np.ndarray:
    """``Phi^-1`` of ArviZ's back-transformed average rank ``r = (j + 2) / 2`` for index ``j``
    (``j = first + last`` sorted positions of a tie group, 0-based: ``0 .. 2 size - 2``)."""
    r = (np.arange(2 * size - 1) + 2) / 2.0
    return stats.norm.ppf((r - _C) / (size - 2 * _C + 1))


def _tie_index(s: np.ndarray) -> np.ndarray:
    """For rows ``s`` sorted along axis 1: ``first + last`` sorted positions of each element's
    tie group (twice its average rank minus 2; ``scipy.stats.rankdata(method="average")``)."""
    n = s.shape[1]
    pos = np.arange(n)
    new = np.empty(s.shape, bool)
    new[:, 0] = True
    np.not_equal(s[:, 1:], s[:, :-1], out=new[:, 1:])
    if new.all():  # no ties anywhere: first = last = position
        return np.broadcast_to(2 * pos, s.shape)
    first = np.maximum.accumulate(np.where(new, pos, 0), axis=1)
    end = np.empty_like(new)
    end[:, -1] = True
    end[:, :-1] = new[:, 1:]
    last = np.minimum.accumulate(np.where(end, pos, n - 1)[:, ::-1], axis=1)[:, ::-1]
    return first + last


def _z_from_sorted(order: np.ndarray, s: np.ndarray, table: np.ndarray) -> np.ndarray:
    """z-scores in the original positions, rows sorted as ``s = rows[order]``."""
    z = np.empty(s.shape, np.float64)
    np.put_along_axis(z, order, table[_tie_index(s)], axis=1)
    return z


def _rhat(z: np.ndarray) -> np.ndarray:
    """ArviZ's ``_rhat`` for ``z`` ``(params, chains, n)``."""
    n = z.shape[2]
    chain_mean = z.mean(axis=2)
    within = z.var(axis=2, ddof=1).mean(axis=1)
    between = n * chain_mean.var(axis=1, ddof=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sqrt((between / within + n - 1) / n)


def _autocov(y: np.ndarray) -> np.ndarray:
    """ArviZ's ``stats_utils.autocov`` along the last axis."""
    n = y.shape[-1]
    m = next_fast_len(2 * n)
    y = y - y.mean(axis=-1, keepdims=True)
    f = np.fft.rfft(y, n=m, axis=-1)
    f *= np.conjugate(f)
    cov = np.fft.irfft(f, n=m, axis=-1)[..., :n]
    cov /= n
    return cov


def _ess(y: np.ndarray) -> np.ndarray:
    """ArviZ's ``_ess`` (``relative=False``) for ``y`` ``(params, chains, n)``, no NaN in
    ``y`` assumed (the callers mask those parameters)."""
    y = np.asarray(y, np.float64)
    p, n_chain, n = y.shape
    total = n_chain * n
    const = (y.max(axis=(1, 2)) - y.min(axis=(1, 2))) < np.finfo(float).resolution
    with np.errstate(invalid="ignore", divide="ignore"):
        acov = _autocov(y).mean(axis=1)  # (params, n): mean over chains per lag
        chain_mean = y.mean(axis=2)
        mean_var = acov[:, 0] * n / (n - 1.0)
        var_plus = mean_var * (n - 1.0) / n
        if n_chain > 1:
            var_plus = var_plus + chain_mean.var(axis=1, ddof=1)
        rho = 1.0 - (mean_var[:, None] - acov) / var_plus[:, None]
        rho[:, 0] = 1.0
        # Geyer's initial positive sequence: the pair k is (rho[2k], rho[2k+1]), k = 1 .. k_lim
        # while the previous pair sum is positive (ArviZ's `while t < n - 3`, t = 2k - 1)
        k_lim = max(0, (n - 3) // 2)
        pairs = rho[:, 0:2 * k_lim + 1:2] + rho[:, 1:2 * k_lim + 2:2]  # (params, k_lim + 1)
        stop = ~(pairs > 0.0)
        stop[:, k_lim] = True
        big_k = np.argmax(stop, axis=1)  # the number of pairs beyond the first ArviZ computes
        rows = np.arange(p)
        last_even = rho[rows, 2 * big_k]
        last_pair = pairs[rows, big_k]
        last = np.where((last_pair >= 0) | (last_even > 0), last_even, 0.0)
        # Geyer's initial monotone sequence: each pair sum the running minimum of the earlier
        monotone = np.minimum.accumulate(pairs, axis=1)
        kept = np.arange(k_lim + 1)[None, :] < big_k[:, None]
        tau = -1.0 + 2.0 * np.where(kept, monotone, 0.0).sum(axis=1) + last
        floor = 1 / np.log10(total)
        tau = np.where(floor > tau, floor, tau)  # Python's max(tau, floor): NaN stays NaN
        ess = total / tau
    ess = np.where(np.isnan(rho[:, 1]), np.nan, ess)
    return np.where(const, float(total), ess)


def _mquantile_pair(flat: np.ndarray, probs: tuple[float, float]) -> list[np.ndarray]:
    """R's type-7 quantiles of every row of ``flat`` with ``mquantiles``' own arithmetic."""
    n = flat.shape[1]
    ks, gammas = [], []
    for prob in probs:
        p = np.float64(prob)
        aleph = n * p + (1 + p * (1.0 - 1 - 1))
        k = int(np.floor(np.clip(aleph, 1, n - 1)))
        ks.append(k)
        gammas.append(np.clip(aleph - k, 0, 1))
    kth = sorted({i for k in ks for i in (k - 1, k) if 0 <= i < n})
    part = np.partition(flat, kth, axis=1) if n > 1 else flat
    out = []
    for k, g in zip(ks, gammas, strict=True):
        lo = part[:, k - 1].astype(np.float64)
        hi = part[:, min(k, n - 1)].astype(np.float64)
        out.append((1.0 - g) * lo + g * hi)
    return out


def _block(x: np.ndarray, table: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """R-hat, bulk ESS, tail ESS of ``x`` ``(params, chains, draws)`` (draws >= 4)."""
    p, c, n = x.shape
    half = n // 2
    split = np.concatenate([x[:, :, :half], x[:, :, n - half:]], axis=1)  # ArviZ's _stack
    flat = split.reshape(p, -1)
    order = np.argsort(flat, axis=1)
    s = np.take_along_axis(flat, order, axis=1)
    z = _z_from_sorted(order, s, table)
    # the folded draws |x - median|: the sorted draws folded are two sorted runs (below the
    # median reversed, above it), which a stable sort (timsort) merges in linear time
    med = np.median(flat, axis=1)
    fs = np.abs(s - med[:, None].astype(s.dtype))
    order_f = np.argsort(fs, axis=1, kind="stable")
    zf = _z_from_sorted(np.take_along_axis(order, order_f, axis=1),
                        np.take_along_axis(fs, order_f, axis=1), table)
    bad_fold = np.isnan(fs).any(axis=1)  # inf draws: ArviZ's folded ranks are NaN there
    zf[bad_fold] = np.nan
    shape = (p, 2 * c, half)
    z, zf = z.reshape(shape), zf.reshape(shape)
    if c >= 2:
        bulk, tail = _rhat(z), _rhat(zf)
        r_hat = np.where(tail > bulk, tail, bulk)  # Python's max(bulk, tail)
    else:
        r_hat = np.full(p, np.nan)
    ess_bulk = _ess(z)
    full = x.reshape(p, -1)
    q_lo, q_hi = _mquantile_pair(full, (0.05, 0.95))
    ess = []
    for q in (q_lo, q_hi):
        ind = x <= q[:, None, None]
        ess.append(_ess(np.concatenate([ind[:, :, :half], ind[:, :, n - half:]], axis=1)))
    ess_tail = np.where(ess[1] < ess[0], ess[1], ess[0])  # Python's min(low, high)
    return r_hat, ess_bulk, ess_tail


def rank_diagnostics(x: np.ndarray) -> dict[str, np.ndarray]:
    """Per-parameter rank-normalised split R-hat, bulk ESS and tail ESS of draws ``x``
    ``(chains, draws, params...)``: ArviZ's ``rhat(method="rank")``, ``ess(method="bulk")``,
    ``ess(method="tail")`` as arrays ``(params...)``, to rounding.

    NaN, as ArviZ: every value of a parameter with a NaN draw or fewer than 4 draws per chain;
    R-hat with fewer than 2 chains. A constant parameter: R-hat NaN, both ESS the number of
    split draws.
    """
    x = np.asarray(x)
    if x.ndim < 2:
        raise ValueError(f"draws must be (chains, draws, ...), got shape {x.shape}")
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    c, n = x.shape[:2]
    tail_shape = x.shape[2:]
    flat = x.reshape(c, n, -1)
    p = flat.shape[2]
    out = {name: np.full(p, np.nan) for name in ("r_hat", "ess_bulk", "ess_tail")}
    if n >= 4 and c >= 1 and p:
        table = _z_table(2 * c * (n // 2))
        for p0 in range(0, p, BLOCK):
            xb = np.ascontiguousarray(np.moveaxis(flat[:, :, p0:p0 + BLOCK], 2, 0))
            nan = np.isnan(xb).any(axis=(1, 2))
            if nan.any():  # the NaN parameters are NaN; the others computed on their own
                xb = xb.copy()
                xb[nan] = 0.0
            vals = _block(xb, table)
            for name, val in zip(out, vals, strict=True):
                out[name][p0:p0 + BLOCK] = np.where(nan, np.nan, val)
    return {name: val.reshape(tail_shape) for name, val in out.items()}


def _reduce(vals: list[np.ndarray], fn) -> float:
    v = np.concatenate([np.ravel(a) for a in vals]) if vals else np.zeros(0)
    v = v[np.isfinite(v)]
    return float(fn(v)) if v.size else math.nan


def diagnostics(draws: dict[str, np.ndarray]) -> dict[str, float]:
    """``r_hat_max``, ``ess_bulk_min``, ``ess_tail_min`` over every coordinate of every
    variable ``name -> (chains, draws, ...)``, the non-finite values left out (NaN when none
    is finite): what ArviZ's ``rhat`` / ``ess`` give, reduced the same way."""
    per = [rank_diagnostics(np.asarray(a)) for a in draws.values()]
    return {"r_hat_max": _reduce([d["r_hat"] for d in per], np.max),
            "ess_bulk_min": _reduce([d["ess_bulk"] for d in per], np.min),
            "ess_tail_min": _reduce([d["ess_tail"] for d in per], np.min)}
