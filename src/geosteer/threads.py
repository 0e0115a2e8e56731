"""CPU threads on a shared machine: a passive OpenMP wait and a thread count from the load average.

:func:`prefer_passive_wait` sets ``OMP_WAIT_POLICY=PASSIVE`` before torch loads unless the user set a wait
policy; :func:`threads_for_load` uses the cores the 1-minute load leaves free unless ``OMP_NUM_THREADS`` is
set (docs/quickstart.md, "On a busy machine"). Imports nothing heavy.
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
