"""lm-eval results files as tidy rows: the sample counts are read only where they have lm-eval's shape."""

from __future__ import annotations

import pytest

from geosteer.viz.lm_eval_results import lm_eval_rows


def _doc(samples):
    return {"results": {"arc": {"acc,none": 0.5, "acc_stderr,none": 0.1, "alias": "arc"}}, "config": {},
            "n-samples": samples}


@pytest.mark.parametrize("samples", ["lots", 5, [1], None, True, {"arc": None}, {"arc": "x"}, {"arc": [3]},
                                     {"arc": {"effective": "3"}}, {"arc": {"effective": True}}, {"other": 3}])
def test_samples_of_another_shape_give_rows_without_a_count(samples):
    _, rows = lm_eval_rows(_doc(samples))
    assert rows == [{"task": "arc", "filter": "none", "acc": 0.5, "acc_stderr": 0.1}]


def test_the_effective_count_is_kept():
    _, rows = lm_eval_rows(_doc({"arc": {"original": 10, "effective": 7}}))
    assert rows[0]["n"] == 7
