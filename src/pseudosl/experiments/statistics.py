"""The statistics of the paired comparisons: Student-t intervals, paired t-tests, Holm's adjustment, power.

All two-sided at level :data:`ALPHA` (the tables' 95 % intervals), on the per-seed differences of two rows:

* :func:`student_t_quantile`, :func:`t_interval`: the interval ``mean ± t_{0.975, n-1} · std / sqrt(n)``;
* :func:`paired_p_value`: the paired t-test's p-value; :func:`holm`: Holm's step-down adjustment of a family of
  them (a family-wise error rate of at most alpha);
* :func:`t_test_power`, :func:`detectable_difference`, :func:`seeds_for_power`: the power of the paired t-test
  (noncentral t) at a given spread, the smallest difference it detects with :data:`POWER`, and the seeds a
  difference needs.

scipy provides the distributions; nothing here knows about experiments (:mod:`.summary` uses it).
"""

from __future__ import annotations

import math

import numpy as np

from ..logic.checks import check_int

__all__ = ["student_t_quantile", "t_interval", "paired_p_value", "holm", "t_test_power", "detectable_difference",
           "seeds_for_power", "ALPHA", "POWER"]

ALPHA = 0.05  # the tests' level: 95 % intervals, two-sided p-values against it
POWER = 0.8   # the power asked of a design: the detectable difference and the seeds needed are at this power


def student_t_quantile(p: float, df: int) -> float:
    """The ``p``-quantile of Student's t with ``df`` degrees of freedom (``scipy.stats.t.ppf``; ``p`` in (0, 1))."""
    from scipy.stats import t
    if not 0 < p < 1:
        raise ValueError(f"p = {p!r}: expected a probability strictly between 0 and 1")
    df = check_int("df", df, 1, " (degrees of freedom)")
    return float(t.ppf(p, df))


def t_interval(values: list[float]) -> tuple[float, float, float, float]:
    """Mean, sample std (ddof = 1) and the 95 % Student-t interval ``mean ± t_{0.975, n-1} · std / sqrt(n)`` of
    ``n >= 1`` values (std and interval NaN for one value).

    Example:
        >>> [round(x, 3) for x in t_interval([3.0, 5.0])]
        [4.0, 1.414, -8.706, 16.706]
    """
    d = np.asarray(values, dtype=float)
    n = check_int("len(values)", len(d), 1, " (values to average)")
    mean = float(d.mean())
    std = float(d.std(ddof=1)) if n > 1 else float("nan")
    half = student_t_quantile(0.975, n - 1) * std / math.sqrt(n) if n > 1 else float("nan")
    return mean, std, mean - half, mean + half


def paired_p_value(values: list[float]) -> float:
    """The two-sided p-value of the paired t-test of ``values`` (per-seed differences) against 0: ``2 P(T_{n-1} >
    |mean| / (std / sqrt(n)))``; NaN for one value; for values all equal, 1 when they are 0 and 0 otherwise (no
    spread).

    Example:
        >>> round(paired_p_value([3.0, 5.0, 4.0, 6.0, 2.0]), 5)
        0.00481
    """
    from scipy.stats import t
    mean, std, _, _ = t_interval(values)
    n = len(values)
    if n < 2:
        return float("nan")
    if std == 0:
        return 1.0 if mean == 0 else 0.0
    return float(2 * t.sf(abs(mean) / (std / math.sqrt(n)), n - 1))


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjustment of ``m`` p-values (NaN ones left NaN and not counted in ``m``): the ``j``-th
    smallest becomes ``max_{i <= j} min(1, (m - i + 1) p_(i))``, so "adjusted p < alpha" rejects with a
    family-wise error rate of at most alpha.

    Example:
        >>> holm([0.01, 0.04, 0.03, float("nan")])
        [0.03, 0.06, 0.06, nan]
    """
    order = sorted((p, i) for i, p in enumerate(p_values) if p == p)
    out = [float("nan")] * len(p_values)
    running = 0.0
    for j, (p, i) in enumerate(order):
        running = max(running, min(1.0, (len(order) - j) * p))
        out[i] = round(running, 12)
    return out


def t_test_power(effect: float, std: float, n: int, alpha: float = ALPHA) -> float:
    """The power of the two-sided paired t-test at level ``alpha`` with ``n`` seeds to detect a mean difference
    ``effect`` when the per-seed differences have standard deviation ``std``: ``P(|T| > t_{1 - alpha/2, n-1})``
    for ``T`` noncentral t with ``n - 1`` degrees of freedom and noncentrality ``effect / (std / sqrt(n))``
    (NaN for ``n < 2`` or no spread)."""
    from scipy.stats import nct
    if n < 2 or not std > 0 or effect != effect:
        return float("nan")
    q = student_t_quantile(1 - alpha / 2, n - 1)
    nc = abs(effect) / (std / math.sqrt(n))
    wrong_side = nct.cdf(-q, n - 1, nc)  # rejecting on the other side: tiny for nc >= 0 (scipy's NaN there is 0)
    return float(nct.sf(q, n - 1, nc) + (0.0 if wrong_side != wrong_side else wrong_side))


def detectable_difference(std: float, n: int, power: float = POWER, alpha: float = ALPHA) -> float:
    """The smallest mean difference that ``n`` seeds detect with ``power`` (two-sided paired t-test at ``alpha``)
    when the per-seed differences have standard deviation ``std`` (NaN for ``n < 2`` or no spread)."""
    from scipy.optimize import brentq
    if n < 2 or not std > 0:
        return float("nan")
    se = std / math.sqrt(n)  # the power is ~1 at a noncentrality 10 beyond the critical value (and NaN far past it)
    return float(brentq(lambda d: t_test_power(d, std, n, alpha) - power, 1e-12 * se,
                        (student_t_quantile(1 - alpha / 2, n - 1) + 10) * se))


def seeds_for_power(effect: float, std: float, power: float = POWER, alpha: float = ALPHA,
                    most: int = 100_000) -> int | None:
    """The fewest paired seeds with which the t-test detects ``effect`` with ``power`` at the spread ``std``
    (``None`` past ``most`` or without an effect)."""
    if not std > 0 or effect != effect or effect == 0:
        return None
    n = 2
    while t_test_power(effect, std, n, alpha) < power:
        n = n + 1 if n < 100 else int(n * 1.1)
        if n > most:
            return None
    return n
