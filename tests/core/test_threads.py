"""CPU threads on a busy machine (geosteer.threads): the passive OpenMP wait of the ``geosteer`` command and the
thread count chosen from the load when ``--threads`` is not given."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from geosteer import threads


@pytest.mark.parametrize("cpus,load,default,want", [
    (2, 0.0, 2, 2), (2, 0.4, 2, 2), (2, 0.6, 2, 1), (2, 2.0, 2, 1), (2, 7.5, 2, 1),
    (16, 3.2, 16, 13), (16, 3.2, 8, 8), (8, 0.0, 1, 1), (4, float("nan"), 4, 4), (0, 1.0, 3, 3),
])
def test_threads_for_load_uses_the_free_cores_at_least_one_at_most_the_default(cpus, load, default, want):
    assert threads.threads_for_load(default, cpus=cpus, load=load) == want


def test_no_load_average_keeps_the_default(monkeypatch):
    def no_load():
        raise OSError("no load average here")

    monkeypatch.setattr(os, "getloadavg", no_load)
    assert threads.threads_for_load(3, cpus=4) == 3


def test_passive_wait_only_before_torch_and_only_when_the_user_set_nothing(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch")
    env: dict = {}
    assert threads.prefer_passive_wait(env) and env == {"OMP_WAIT_POLICY": "PASSIVE"}
    for key, value in (("OMP_WAIT_POLICY", "ACTIVE"), ("GOMP_SPINCOUNT", "300000"), ("KMP_BLOCKTIME", "200")):
        env = {key: value}
        assert not threads.prefer_passive_wait(env) and env == {key: value}
    monkeypatch.setitem(sys.modules, "torch", torch)
    env = {}
    assert not threads.prefer_passive_wait(env) and env == {}  # too late: the OpenMP runtime is loaded


def test_the_geosteer_command_sets_the_wait_before_torch_loads():
    """Run as the console script (argv[0] ``geosteer``): the policy is in the environment when torch is first
    imported; as a library (any other argv[0]) nothing is set."""
    probe = ("import sys; sys.argv[0] = {argv0!r}; import builtins, os; real = builtins.__import__\n"
             "seen = []\n"
             "def spy(name, *a, **k):\n"
             "    if name == 'torch' and not seen: seen.append(os.environ.get('OMP_WAIT_POLICY'))\n"
             "    return real(name, *a, **k)\n"
             "builtins.__import__ = spy; import geosteer; builtins.__import__ = real\n"
             "print(seen[0], os.environ.get('OMP_WAIT_POLICY'))")
    env = {k: v for k, v in os.environ.items() if k not in threads.WAIT_SETTINGS}
    for argv0, want in (("/usr/bin/geosteer", "PASSIVE PASSIVE"), ("script.py", "None None")):
        out = subprocess.run([sys.executable, "-c", probe.format(argv0=argv0)], env=env, capture_output=True,
                             text=True, check=True).stdout.split()
        assert " ".join(out) == want
    out = subprocess.run([sys.executable, "-c", probe.format(argv0="geosteer")],
                         env={**env, "OMP_WAIT_POLICY": "ACTIVE"}, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["ACTIVE", "ACTIVE"]


@pytest.mark.parametrize("argv0,orig,want", [
    ("/venv/bin/geosteer", None, True), ("geosteer.exe", None, True), ("-m", ["python", "-m", "geosteer.cli"], True),
    ("-m", ["python", "-m", "pytest"], False), ("-m", ["python", "-m", "geosteer.cli.tasks"], False),
    ("script.py", None, False), ("/venv/bin/geosteer-serve", None, False), ("", None, False),
])
def test_which_processes_are_the_geosteer_command(argv0, orig, want):
    assert threads.is_geosteer_command(argv0, orig or []) is want


def test_set_threads_without_a_count_follows_the_load(monkeypatch):
    from geosteer.cli import common

    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(common, "_torch_default_threads", lambda: 4)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    try:
        monkeypatch.setattr(os, "getloadavg", lambda: (3.0, 0.0, 0.0))
        common.set_threads(0)
        assert torch.get_num_threads() == 1
        monkeypatch.setattr(os, "getloadavg", lambda: (1.0, 0.0, 0.0))
        common.set_threads(None)
        assert torch.get_num_threads() == 3
        common.set_threads(2)  # given: used as it is, whatever the load
        assert torch.get_num_threads() == 2
        monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the user's own setting wins: nothing changes
        common.set_threads(0)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
