"""Vectorised resampling and exact paired tests over questions.

The nonparametric bootstrap of a mean over questions depends only on how often each question is
drawn. Questions with the same correctness pattern (their successes in every condition) are
interchangeable, so a resample is a multinomial draw of counts over the distinct patterns; with a
single run per question a 2x2 has at most 16 patterns, and 10,000 resamples cost a few
milliseconds. This is the ordinary bootstrap, not an approximation of it.

Two tests, both exact, both conditional on the questions' absolute contrasts:
- `mcnemar_pvalue`: the exact McNemar test of a plain pair (binomial on the discordant questions);
- `sign_flip_pvalue`: the sign-flip randomization test of a per-question contrast (main effects,
  interactions, differences of repeat means). Under the null that a question's conditions are
  exchangeable, each contrast's sign is a fair coin. For a plain pair it is McNemar's test.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

__all__ = [
    "mcnemar_pvalue",
    "percentile_ci",
    "question_counts",
    "resample_cell_means",
    "sign_flip_pvalue",
]

# Rows of counts generated at once: bounds memory at ~_CELLS int64 counts per batch.
_CELLS = 2_000_000
# Null distributions longer than this (product of lengths) are convolved by FFT, not directly.
_DIRECT_MAX = 4_000_000


def question_counts(
    inverse: np.ndarray, n_patterns: int, n_boot: int, rng: np.random.Generator
) -> Iterator[np.ndarray]:
    """Bootstrap counts per pattern, in batches of shape (b, n_patterns) that sum to n_boot rows.

    `inverse[i]` is question i's pattern. Each row is one resample of the n questions with
    replacement, reduced to how many drawn questions fall in each pattern.
    """
    n = int(inverse.size)
    mult = np.bincount(inverse, minlength=n_patterns)
    # Few patterns: one multinomial draw per resample (n_patterns binomials). Many patterns (repeat
    # means): draw the question indices themselves, which is cheaper than n_patterns binomials.
    few = n_patterns * 8 <= n
    batch = max(1, _CELLS // max(n if not few else n_patterns, 1))
    done = 0
    while done < n_boot:
        b = min(batch, n_boot - done)
        if few:
            yield rng.multinomial(n, mult / n, size=b)
        else:
            pid = inverse[rng.integers(0, n, size=(b, n))]
            pid += (np.arange(b) * n_patterns)[:, None]
            yield np.bincount(pid.ravel(), minlength=b * n_patterns).reshape(b, n_patterns)
        done += b


def resample_cell_means(
    successes: np.ndarray, repeats: int, *, n_boot: int, seed: int, two_level: bool = False
) -> np.ndarray:
    """Bootstrap distribution of each condition's accuracy: shape (n_boot, conditions), fractions.

    `successes[i, j]` = correct answers of condition j on question i over `repeats` runs. Questions
    are resampled jointly for all conditions (which keeps the pairing). With `two_level`, each drawn
    question's runs are then resampled within it, independently per condition (a run of one
    condition has no partner run in another): a question drawn c times with s successes
    contributes Binomial(c * repeats, s / repeats). Binomials with the same s add up, so one draw
    per (resample, condition, s) gives the same distribution as one per drawn question.
    """
    s = np.asarray(successes, dtype=np.int64)
    n, m = s.shape
    if n == 0:
        raise ValueError("no questions to resample")
    patterns, inverse = np.unique(s, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    rng = np.random.default_rng(seed)
    # Runs only vary inside questions that were sometimes right and sometimes wrong (0 < s < K).
    levels = np.arange(1, repeats) if two_level else np.arange(0)
    unstable = (patterns[:, :, None] == levels[None, None, :]).astype(float)  # (P, m, K-1)
    fixed = np.where(unstable.any(axis=2), 0, patterns).astype(float)
    out = np.empty((n_boot, m))
    row = 0
    for counts in question_counts(inverse, len(patterns), n_boot, rng):
        total = counts @ fixed
        for j in range(m if levels.size else 0):
            drawn = (counts @ unstable[:, j, :]).astype(np.int64)  # (b, K-1) questions drawn per level s
            total[:, j] += rng.binomial(drawn * repeats, levels / repeats).sum(axis=1)
        out[row:row + len(counts)] = total / (n * repeats)
        row += len(counts)
    return out


def percentile_ci(draws: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval of bootstrap draws along axis 0 (nan where a column is all nan)."""
    lo, hi = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2], axis=0)
    return lo, hi


def mcnemar_pvalue(b_only: int | np.ndarray, a_only: int | np.ndarray) -> np.ndarray | float:
    """Two-sided exact McNemar p (vectorised): 2 * P(X <= min) for X ~ Binomial(discordant, 1/2).

    Equal to `scipy.stats.binomtest(b_only, b_only + a_only).pvalue`; 1 without discordance.
    """
    from scipy import special  # here, not at the top: a report whose tables test nothing never loads SciPy

    b = np.asarray(b_only, dtype=np.int64)
    a = np.asarray(a_only, dtype=np.int64)
    d = a + b
    # bdtr is the binomial CDF as a plain ufunc: the same numbers as scipy.stats.binom.cdf, without
    # its per-call overhead (the simulation tests call this thousands of times).
    p = np.minimum(1.0, 2.0 * special.bdtr(np.minimum(a, b), np.maximum(d, 1), 0.5))
    p = np.where(d == 0, 1.0, p)
    return float(p) if p.ndim == 0 else p


def _fair_binomial_pmf(m: int) -> np.ndarray:
    """P(X = k), k = 0..m, for X ~ Binomial(m, 1/2), in log space (exact to ~1e-13 relative)."""
    from scipy import special

    k = np.arange(m + 1)
    log_pmf: np.ndarray = special.gammaln(m + 1) - special.gammaln(k + 1) - special.gammaln(m - k + 1) - m * np.log(2.0)
    pmf: np.ndarray = np.exp(log_pmf)
    return pmf


def sign_flip_pvalue(d: np.ndarray, scale: int) -> float:
    """Exact two-sided sign-flip p of sum(d) against 0, for per-question contrasts `d`.

    `scale` makes every d integer (a pair of single runs: 1; a main effect averaged over two cells:
    2; repeat means over K runs: K or 2K). The null distribution of the sum of |d_i| * (+-1) is
    built exactly by convolving one binomial per distinct |d|; p = P(|T| >= |t_obs|).
    """
    a = np.abs(np.asarray(d, dtype=float)) * scale
    ai = np.rint(a).astype(np.int64)
    if a.size and np.max(np.abs(a - ai)) > 1e-6:
        raise ValueError(f"contrasts are not multiples of 1/{scale}; pass the right scale")
    pos = np.asarray(d) > 0
    nz = ai > 0
    if not nz.any():
        return 1.0
    ai, pos = ai[nz], pos[nz]
    mags, counts = np.unique(ai, return_counts=True)
    if len(mags) == 1:  # one magnitude: a binomial, i.e. exact McNemar
        return float(mcnemar_pvalue(int(pos.sum()), int((~pos).sum())))
    pmf = np.ones(1)
    for v, m in zip(mags.tolist(), counts.tolist(), strict=True):
        part = np.zeros(v * m + 1)
        part[::v] = _fair_binomial_pmf(m)
        if len(pmf) * len(part) > _DIRECT_MAX:
            from scipy import signal

            pmf = signal.fftconvolve(pmf, part)
        else:
            pmf = np.convolve(pmf, part)
    pmf = np.clip(pmf, 0.0, None)  # FFT round-off can dip a hair below 0
    total = int(ai.sum())
    s_obs = int(ai[pos].sum())
    t = np.abs(2 * np.arange(len(pmf)) - total)
    return float(min(1.0, pmf[t >= abs(2 * s_obs - total)].sum()))
