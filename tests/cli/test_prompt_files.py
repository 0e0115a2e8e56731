"""Prompt and pair files of every verb that reads one: a lone surrogate (``"caf\\ud800"``, in a value or a
key), a list nested 100,000 deep, a FIFO or ``/dev/zero`` in place of the file are one line, exit 2, before the
model loads; ``tasks build`` refuses example counts it could not finish."""

from __future__ import annotations

import json
import os

import pytest

from tests.cli_helpers import refused_before_load

PAIR = ["I love it", "I hate it"]
TARGET = {"prompt": "The cat sat on the", "target": " mat"}


def _bad(tmp_path, how: str, good) -> str:
    p = tmp_path / f"{how}.json"
    if how == "surrogate":
        p.write_text(json.dumps(good).replace("I love it", "caf\\ud800").replace("The cat", "caf\\ud800")
                     .replace("A dog", "caf\\udfff"))
    elif how == "surrogate-key":
        p.write_text('[{"prompt\\ud800": "x", "target": "y"}]')
    elif how == "deep":
        p.write_text("[" * 100_000 + "]" * 100_000)
    elif how == "fifo":
        os.mkfifo(p)
    elif how == "zero":
        p.symlink_to("/dev/zero")
    return str(p)


@pytest.fixture
def files(tmp_path, tiny_model):
    import geosteer.manifold as M

    model, _ = tiny_model("llama")
    bank = M.install(model, grid_size=4, grid_range=(-4.0, 4.0))
    M.uninstall(model)
    src = M.save(bank, tmp_path / "src")
    good = {"pairs": [PAIR, PAIR], "targets": [TARGET], "controls": ["A dog ran in the park"],
            "prompts": ["A dog ran in the park"]}
    paths = {}
    for name, doc in good.items():
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(doc))
    return src, paths, good


VERBS = {
    "learn vectors --pairs": lambda s, f, bad: ["learn", "vectors", "-m", "tiny-llama", "--pairs", bad("pairs"),
                                                "--out", "vec-out"],
    "learn vectors --positive": lambda s, f, bad: ["learn", "vectors", "-m", "tiny-llama", "--method", "mean_diff",
                                                   "--positive", bad("prompts"), "--negative", str(f["prompts"]),
                                                   "--out", "vec-out"],
    "wall-learn --target-file": lambda s, f, bad: ["learn", "walls", "-m", "tiny-llama", "-s", str(s),
                                                   "--target-file", bad("targets"), "--control-file",
                                                   str(f["controls"]), "--out", "wl-out"],
    "wall-learn --control-file": lambda s, f, bad: ["learn", "walls", "-m", "tiny-llama", "-s", str(s),
                                                    "--target-file", str(f["targets"]), "--control-file",
                                                    bad("controls"), "--out", "wl-out"],
    "steer-learn --target-file": lambda s, f, bad: ["learn", "steering-surfaces", "-m", "tiny-llama", "-s", str(s),
                                                    "--target-file", bad("targets"), "--control-file",
                                                    str(f["controls"]), "--out", "sl-out"],
    "steer-learn --negative-file": lambda s, f, bad: ["learn", "steering-surfaces", "-m", "tiny-llama", "-s", str(s),
                                                      "--target-file", str(f["targets"]), "--control-file",
                                                      str(f["controls"]), "--negative-file", bad("targets"),
                                                      "--out", "sl-out"],
    "compare --prompts-file": lambda s, f, bad: ["compare", "-m", "tiny-llama", "--prompts-file", bad("prompts")],
}


@pytest.mark.parametrize("how", ["surrogate", "surrogate-key", "deep", "fifo", "zero"])
@pytest.mark.parametrize("verb", list(VERBS))
def test_hostile_prompt_files_are_refused_before_the_model_loads(files, tmp_path, monkeypatch, capsys, verb, how):
    src, paths, good = files
    if how == "surrogate-key" and not verb.startswith(("wall", "steer")):
        pytest.skip("object keys: the target files")
    monkeypatch.chdir(tmp_path)
    line = refused_before_load(monkeypatch, capsys, *VERBS[verb](src, paths, lambda k: _bad(tmp_path, how,
                                                                                          good[k])))
    needle = {"surrogate": "surrogate", "surrogate-key": "surrogate", "deep": "nested deeper", "fifo": "FIFO",
              "zero": "device"}[how]
    assert needle in line or (how in ("fifo", "zero") and "not a file" in line), line
    assert not any(p.name.endswith("-out") for p in tmp_path.iterdir())


@pytest.mark.parametrize("args, needle", [(["--ruler-n", "1000000000"], "at most 10000"),
                                          (["--proxy-n", "0"], "must be >= 1"),
                                          (["--lengths", ",".join(str(256 + i) for i in range(17))], "at most 16"),
                                          (["--lengths", "384,384"], "twice")])
def test_tasks_build_counts_are_capped_before_the_tokenizer_loads(tmp_path, monkeypatch, capsys, args, needle):
    import geosteer.tasks.build as B

    def no_tokenizer(*a, **k):
        raise AssertionError("the tokenizer was loaded")

    monkeypatch.setattr(B, "tokenizer_and_limit", no_tokenizer)
    line = refused_before_load(monkeypatch, capsys, "tasks", "build", "-m", "tiny-llama", "--out",
                               str(tmp_path / "t"), *args)
    assert needle in line and not (tmp_path / "t").exists()


def test_tasks_build_python_api_has_the_same_cap(tmp_path):
    from geosteer.errors import GeosteerError
    from geosteer.tasks.build import build

    with pytest.raises(GeosteerError, match="at most 10000"):
        build(tmp_path / "t", model="tiny-llama", lengths=[384], ruler_n=10**9)
