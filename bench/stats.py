"""Speed of LKT's vectorised resampling (local_knowledge_trainer.bootstrap, .hypothesis) against scipy and a naive Python loop.

Prints ONE JSON object. n = 1,000 observations, 10,000 resamples, seed 42. Each timing is the best of `REPEATS` runs after a
warm-up; ratios are reference time / LKT time measured in this same run (> 1 means LKT is faster). No asserts on time.
Correctness is reported alongside: with the same generator and batch, LKT's intervals equal scipy's bit for bit.
"""
import json, platform, time

import numpy as np
import scipy
from scipy import stats

from local_knowledge_trainer.bootstrap import bootstrap_ci
from local_knowledge_trainer.hypothesis import paired_bootstrap_test
from local_knowledge_trainer.stat_results import _batch_rows

N, B, SEED, REPEATS = 1_000, 10_000, 42, 5


def best_time(f, repeats=REPEATS):
    f()  # warm-up (imports, caches)
    ts = []
    for _ in range(repeats):
        t = time.perf_counter(); out = f(); ts.append(time.perf_counter() - t)
    return min(ts), out


def naive_paired_bootstrap(a, b, n_resamples=B, seed=SEED):
    "IndiaFinBench's algorithm written as a plain per-resample Python loop."
    rng = np.random.default_rng(seed)
    d = a - b; obs = d.mean(); centred = d - obs
    boot = np.empty(n_resamples)
    for i in range(n_resamples):
        boot[i] = rng.choice(centred, size=centred.size, replace=True).mean()
    return float((np.sum(np.abs(boot) >= abs(obs)) + 1) / (n_resamples + 1))   # never 0: (1 + k)/(B + 1)


def main():
    rng = np.random.default_rng(0)
    x = rng.lognormal(0, 0.7, N)  # skewed, like latencies or similarity gaps
    a = rng.beta(2, 2, N); b = np.clip(a - rng.normal(0.01, 0.1, N), 0, 1)
    out = {"bench": "stats", "n": N, "n_resamples": B, "seed": SEED, "repeats": REPEATS,
           "numpy": np.__version__, "scipy": scipy.__version__, "python": platform.python_version()}

    for method, smethod in (("percentile", "percentile"), ("bca", "BCa")):
        t_lkt, r = best_time(lambda: bootstrap_ci(x, np.mean, n_resamples=B, method=method, seed=SEED))
        t_sp, s = best_time(lambda: stats.bootstrap((x,), np.mean, n_resamples=B, method=smethod,
                                                    rng=np.random.default_rng(SEED)))
        # same resamples -> identical interval (scipy run with LKT's batch size)
        s_same = stats.bootstrap((x,), np.mean, n_resamples=B, method=smethod, rng=np.random.default_rng(SEED),
                                 batch=_batch_rows(N)).confidence_interval
        out[f"bootstrap_{method}"] = {
            "lkt_s": round(t_lkt, 5), "scipy_s": round(t_sp, 5), "speedup_vs_scipy": round(t_sp / t_lkt, 2),
            "ci_lkt": [r.low, r.high], "ci_scipy_default_batch": [float(s.confidence_interval.low), float(s.confidence_interval.high)],
            "max_abs_diff_same_batch": float(max(abs(r.low - s_same.low), abs(r.high - s_same.high)))}

    t_lkt, r = best_time(lambda: paired_bootstrap_test(a, b, n_resamples=B, seed=SEED))
    t_naive, p_naive = best_time(lambda: naive_paired_bootstrap(a, b), repeats=2)
    t_sp, s = best_time(lambda: stats.bootstrap((a - b,), np.mean, n_resamples=B, method="percentile",
                                                rng=np.random.default_rng(SEED), batch=_batch_rows(N)))
    obs = float((a - b).mean())
    out["paired_bootstrap"] = {
        "lkt_s": round(t_lkt, 5), "naive_loop_s": round(t_naive, 5), "speedup_vs_naive_loop": round(t_naive / t_lkt, 1),
        "scipy_bootstrap_ci_only_s": round(t_sp, 5), "speedup_vs_scipy_ci_only": round(t_sp / t_lkt, 2),
        "p_lkt": r.p_value, "p_naive_loop": p_naive,
        "p_from_scipy_distribution": float((np.sum(np.abs(s.bootstrap_distribution - obs) >= abs(obs)) + 1) / (B + 1)),
        "ci_lkt": list(r.ci), "ci_scipy": [float(s.confidence_interval.low), float(s.confidence_interval.high)],
        "note": "the naive loop draws its indices in 10,000 separate calls, so its random stream (and p) can differ slightly"}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
