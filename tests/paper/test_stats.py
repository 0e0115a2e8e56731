"""mean_ci against scipy's own t interval."""

import math

import numpy as np
import torch
from scipy import stats

from geosteer_paper.stats import mean_ci


def test_mean_ci_matches_scipy_t_interval():
    x = np.random.default_rng(0).normal(1.5, 2.0, size=17)
    got = mean_ci(torch.tensor(x, dtype=torch.float32))
    lo, hi = stats.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=stats.sem(x))
    assert got["n"] == 17
    assert abs(got["mean"] - x.mean()) < 1e-6
    assert abs(got["ci95"][0] - lo) < 1e-5 and abs(got["ci95"][1] - hi) < 1e-5


def test_mean_ci_of_one_entry_has_no_interval():
    got = mean_ci(torch.tensor([3.0]))
    assert got["mean"] == 3.0 and got["n"] == 1 and all(math.isnan(v) for v in got["ci95"])
