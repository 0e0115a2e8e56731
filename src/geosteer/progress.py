"""One progress bar for every long loop (tqdm on a terminal's stderr; silent when piped, under ``--json``
(:func:`quiet`) or with ``GEOSTEER_PROGRESS=0``; ``GEOSTEER_PROGRESS=1`` forces it).

    with progress(len(settings), "sweep", unit="setting") as step:
        for cfg in settings:
            step()               # step(postfix="ppl 12.9") adds a note
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_quiet = False


def quiet(on: bool = True) -> None:
    """Silence (or allow again) every bar of this process: the CLI's ``--json`` calls it."""
    global _quiet
    _quiet = bool(on)


def enabled() -> bool:
    """Whether bars are shown now (see the module docstring)."""
    flag = os.environ.get("GEOSTEER_PROGRESS", "").strip().lower()
    if _quiet or flag in ("0", "false", "no", "off"):
        return False
    if flag in ("1", "true", "yes", "on"):
        return True
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())


@contextmanager
def progress(total: int | None, desc: str, *, unit: str = "it", initial: int = 0,
             show: bool = True) -> Iterator[Callable[..., None]]:
    """A bar of ``total`` steps named ``desc``; yields ``step(n=1, postfix=None)``. ``show=False`` (or
    :func:`enabled` false) gives the same function as a no-op, so callers never branch."""
    if not (show and enabled()):
        yield lambda n=1, postfix=None: None
        return
    from tqdm.auto import tqdm

    bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, dynamic_ncols=True, file=sys.stderr,
               leave=False)

    def step(n: int = 1, postfix: str | None = None) -> None:
        if postfix is not None:
            bar.set_postfix_str(postfix, refresh=False)
        bar.update(n)

    try:
        yield step
    finally:
        bar.close()


def counter(done: int, total: int, elapsed: float, start: int = 0) -> str:
    """``"3/10, about 12 s left"``: the count and ETA that per-step log lines carry, on a terminal or not.
    ``elapsed``: seconds since step ``start`` (where a resumed run began); the ETA is the mean time per
    step since then times the steps left."""
    if done - start <= 0 or total <= done:
        return f"{done}/{total}"
    left = elapsed / (done - start) * (total - done)
    when = f"{left:.0f} s" if left < 120 else f"{left / 60:.1f} min"
    return f"{done}/{total}, about {when} left"
