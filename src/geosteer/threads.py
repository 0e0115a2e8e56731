"""CPU threads on a machine that other work shares: a passive OpenMP wait and a thread count from the load.

torch's CPU kernels run in OpenMP parallel regions; between regions GNU OpenMP's worker threads spin for
a while before they sleep. On cores that other processes hold, that spinning takes time from the very
threads that would finish the region, so a busy machine runs a generation several times slower with
torch's default thread count than with one thread. The ``geosteer`` command therefore

- asks for a passive wait (``OMP_WAIT_POLICY=PASSIVE``: idle workers sleep at once) before torch is
  imported, unless the user set ``OMP_WAIT_POLICY``, ``GOMP_SPINCOUNT`` or ``KMP_BLOCKTIME`` themselves
  (:func:`prefer_passive_wait`; the OpenMP runtime reads it once, when torch loads it);
- without ``--threads``, uses the cores the 1-minute load average leaves free, at least one and at
  most torch's default (:func:`threads_for_load`), unless ``OMP_NUM_THREADS`` is set.

This module imports nothing heavy: it runs before torch is imported.
"""

from __future__ import annotations

import math
import os
import sys

#: Environment variables through which a user chose an OpenMP wait behaviour themselves.
WAIT_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")


def prefer_passive_wait(environ=None) -> bool:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` when torch is not imported yet and no wait setting is present.
    Returns whether it was set."""
    environ = os.environ if environ is None else environ
    if "torch" in sys.modules or any(environ.get(k) for k in WAIT_SETTINGS):
        return False
    environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return True


def is_geosteer_command(argv0: str | None = None, orig_argv: list[str] | None = None) -> bool:
    """Whether this process is the ``geosteer`` command: its console script, or ``python -m geosteer.cli``
    (while that module is located, ``sys.argv[0]`` is ``-m``; ``sys.orig_argv`` names the module)."""
    argv0 = sys.argv[0] if argv0 is None and sys.argv else (argv0 or "")
    if argv0 == "-m":
        orig = list(getattr(sys, "orig_argv", []) if orig_argv is None else orig_argv)
        after = orig[orig.index("-m") + 1:] if "-m" in orig else []
        return bool(after) and after[0] == "geosteer.cli"
    return os.path.basename(argv0).lower() in ("geosteer", "geosteer.exe", "geosteer-script.py")


def threads_for_load(default: int, cpus: int | None = None, load: float | None = None) -> int:
    """The thread count for a machine with ``cpus`` logical CPUs and a 1-minute load average ``load``
    (read from the machine when not given): the CPUs that load leaves free, rounded down, at least 1
    and at most ``default`` (torch's own choice)."""
    cpus = os.cpu_count() if cpus is None else cpus
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (OSError, AttributeError):  # no load average on this platform: torch's default
            return max(1, default)
    if not cpus or not math.isfinite(load):
        return max(1, default)
    return max(1, min(default, math.floor(cpus - load + 0.5)))
