"""``--model geosteer`` model_args: an unknown key (a misspelt recipe key), an empty ``pretrained`` or an
unknown ``dtype`` are one line naming what is valid, before lm-eval starts or any model loads; known keys
(geosteer's, the recipe's, lm-eval's ``hf`` ones) pass."""

from __future__ import annotations

import pytest

pytest.importorskip("lm_eval")

from geosteer.errors import GeosteerError  # noqa: E402
from tests.cli_helpers import forbid_model_builds, refused_before_load  # noqa: E402


@pytest.fixture
def no_lm_eval_run(monkeypatch):
    import geosteer.integrations.lm_eval as glm

    def ran(*a, **k):
        raise AssertionError("lm-eval ran")

    monkeypatch.setattr(glm, "main", ran)


@pytest.mark.parametrize("model_args, needle", [
    ("pretrained=tiny-llama,surfacez=/tmp", "unknown --model_args key surfacez for --model geosteer (did you mean "
                                            "surfaces?); valid: pretrained, recipe, dtype, surfaces"),
    ("pretrained=tiny-llama,dtype=int3", "--model_args dtype=int3: unknown dtype 'int3'; valid: auto, float32"),
    ("pretrained=", "pretrained=''"),
    ("pretrained=tiny-llama,scale_site=attn_out,scale_par=true", "scale_par must be a number, not a boolean"),
    ("pretrained=tiny-llama,scale_par=nan,scale_site=attn_out", "scale_par must be a finite number"),
    ("pretrained=tiny-llama,wibble=1,wobble=2", "unknown --model_args keys wibble, wobble"),
])
@pytest.mark.parametrize("form", ["one", "equals", "split"])
def test_bad_model_args_are_one_line_before_lm_eval_runs(no_lm_eval_run, monkeypatch, capsys, model_args, needle,
                                                         form):
    if form == "one":
        args = ["--model_args", model_args]
    elif form == "equals":
        args = [f"--model_args={model_args}"]
    else:
        args = ["--model_args", *model_args.split(",")]
    line = refused_before_load(monkeypatch, capsys, "eval", "--model", "geosteer", *args, "--tasks", "x")
    assert needle in line


def test_the_model_class_checks_too(monkeypatch):
    from geosteer.integrations.lm_eval import GeosteerLM

    forbid_model_builds(monkeypatch)
    for arg_string in ("pretrained=tiny-llama,surfacez=x", "pretrained=tiny-llama,dtype=int3"):
        with pytest.raises(GeosteerError, match="--model_args") as e:
            GeosteerLM.create_from_arg_string(arg_string, {"batch_size": 1, "device": "cpu"})
        assert "\n" not in str(e.value)


def test_known_model_args_pass():
    from geosteer.integrations.lm_eval import check_model_args

    check_model_args({"pretrained": "tiny-llama", "surfaces": "x", "scale_par": 0.5, "dtype": "bf16",
                      "batch_size": 2, "max_batch_size": 8, "device": "cpu", "max_length": 64})
    check_model_args({})  # pretrained defaults to smollm2


def test_other_models_are_not_checked(monkeypatch):
    from geosteer.cli.evaluate import _check_geosteer_model_args

    _check_geosteer_model_args(["--model", "hf", "--model_args", "pretrained=gpt2,anything=1"])
    with pytest.raises(GeosteerError):
        _check_geosteer_model_args(["--model", "geosteer", "-a", "anything=1"])


@pytest.mark.parametrize("argv, expected", [
    (["--tasks", "x", "--recipe", "R", "--set", "scale_par=0", "--surfaces=S"],
     ["--tasks", "x", "--model", "geosteer", "--model_args", "recipe=R", "scale_par=0", "surfaces=S"]),
    (["--model", "geosteer", "--set", "scale_layers=0;2", "--tasks", "x"],
     ["--model", "geosteer", "--tasks", "x", "--model_args", "scale_layers=0;2"]),
    (["--model", "hf", "--tasks", "x"], ["--model", "hf", "--tasks", "x"]),
])
def test_eval_takes_the_steering_front_door(argv, expected):
    """``--recipe``, ``--set`` and ``--surfaces`` of ``geosteer eval`` become the geosteer model's model_args."""
    from geosteer.cli.evaluate import _front_door

    assert _front_door(argv) == expected


@pytest.mark.parametrize("argv, needle", [
    (["--model", "hf", "--set", "scale_par=0"], "steer --model geosteer, not --model hf"),
    (["--set", "scale_layers=0,2"], "no ',' in a value here"),
    (["--set", "scale_par"], "expected key=value"),
    (["--set", "bogus=1"], "unknown --model_args key bogus"),
])
def test_eval_front_door_errors_are_one_line(no_lm_eval_run, monkeypatch, capsys, argv, needle):
    line = refused_before_load(monkeypatch, capsys, "eval", *argv, "--tasks", "x")
    assert needle in line
