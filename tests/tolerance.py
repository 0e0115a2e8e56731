"""Comparing numbers recomputed here with numbers committed from another machine.

A committed float was computed on some CPU with some BLAS and thread count; the same computation here may
differ in its last float32 bits (summation order, SIMD width). :func:`assert_records_close` compares nested
records (dicts, lists, strings, ints exactly; floats with a tolerance above float32 rounding of a sum of a
few thousand terms)."""

from __future__ import annotations

import math

# float32 has ~6e-8 relative rounding per operation; a reduction of n terms in another order can move the
# result by ~n·eps in the worst case, ~sqrt(n)·eps typically: 1e-5 relative covers sums of thousands of terms
REL = 1e-5
ABS = 1e-7


def assert_records_close(ours, committed, rel: float = REL, abs_: float = ABS, where: str = "") -> None:
    """``ours`` equals ``committed`` with floats compared to ``rel``/``abs_`` (everything else exactly)."""
    if isinstance(committed, float) or isinstance(ours, float):
        assert isinstance(ours, (int, float)) and isinstance(committed, (int, float)), where
        if math.isnan(committed):
            assert math.isnan(ours), where
            return
        assert math.isclose(ours, committed, rel_tol=rel, abs_tol=abs_), f"{where}: {ours!r} vs committed {committed!r}"
    elif isinstance(committed, dict):
        assert isinstance(ours, dict) and ours.keys() == committed.keys(), where
        for k in committed:
            assert_records_close(ours[k], committed[k], rel, abs_, f"{where}.{k}")
    elif isinstance(committed, list):
        assert isinstance(ours, list) and len(ours) == len(committed), where
        for i, (a, b) in enumerate(zip(ours, committed, strict=True)):
            assert_records_close(a, b, rel, abs_, f"{where}[{i}]")
    else:
        assert ours == committed, f"{where}: {ours!r} vs committed {committed!r}"
