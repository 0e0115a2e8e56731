"""One vocabulary: site names are the hook-point names, and an option name means one thing across verbs.

The command tree is walked (hidden commands and options excluded) and every site table is read; what does
not fit yet sits in an allow-list below, each entry with its reason.
"""

from __future__ import annotations

import warnings
from collections import defaultdict

import pytest
import torch

from geosteer.hooks import HOOK_POINTS, POINT_SYNONYMS, attach_hooks
from tests.cli_helpers import command_leaves

# Sites that are not residual-stream hook points, by what they are.
ATTENTION_INTERNAL = {"value_full", "value_exclude_self", "diag_removal"}  # edits inside attention
MLP_INTERNAL = {"carrier", "contrib"}  # the MLP's hidden activation (directional.mlp_internal)

# option -> reason: names that still carry two meanings (kinds), to be renamed with a warned alias.
OPTION_ALLOW = {
    "--texts": "bench judge reads the texts to score from a file; the paper's directional studies take a "
               "number of texts (study verbs, not tool verbs)",
}
# table -> reason: site tables whose names are not hook points yet.
SITE_TABLE_ALLOW = {
    "geosteer.directional.measure.RESIDUAL_SITES": "row labels (attn, mlp, block) of the measurement, shared with "
                                                   "the compression-error rows; the paper-figure study code, the "
                                                   "reproduction items and committed results files read them",
}


def _option_kind(param) -> str:
    """What an option's value is: a flag, or its element type (a repeatable option counts as its element)."""
    if param.is_flag:
        return "flag"
    kind = repr(param.bare_type())
    return kind[len("'list["):-2] if kind.startswith("'list[") else kind.strip("'")


def option_meanings() -> dict[str, dict[str, list[str]]]:
    """``--name`` -> {kind: [verbs]} over every visible leaf command."""
    seen: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path, cmd in command_leaves(hidden=False).items():
        for p in cmd.params:
            if getattr(p, "param_type_name", "") != "option" or getattr(p, "hidden", False):
                continue
            for name in p.opts:
                if name.startswith("--"):
                    seen[name][_option_kind(p)].append(path)
    return seen


def test_the_walk_sees_the_command_tree():
    paths = {path for path, _ in command_leaves(hidden=False).items()}
    assert {"ppl", "generate", "compare", "recipe show", "measure decompose"} <= paths
    kinds = option_meanings()
    assert kinds["--model"].keys() == {"str"} and len(kinds["--model"]["str"]) > 10
    assert "flag" in kinds["--json"]


def test_an_option_name_has_one_meaning_across_verbs():
    found = {name: dict(kinds) for name, kinds in option_meanings().items() if len(kinds) > 1}
    unexplained = {k: v for k, v in found.items() if k not in OPTION_ALLOW}
    assert not unexplained, f"options with two meanings (rename one, or allow-list it with a reason): {unexplained}"
    stale = set(OPTION_ALLOW) - set(found)
    assert not stale, f"allow-listed options that now have one meaning (drop them from OPTION_ALLOW): {stale}"


def _site_tables() -> dict[str, tuple[str, ...]]:
    from geosteer.directional import config, measure
    from geosteer.vectors import config as vectors_config
    from geosteer_paper.directional import gated, mlp_internal, sweep

    return {
        "geosteer.directional.config.SITES": config.SITES,
        "geosteer_paper.directional.sweep.SWEEP_SITES": sweep.SWEEP_SITES,
        "geosteer_paper.directional.gated.GATED_SITES": gated.GATED_SITES,
        "geosteer_paper.directional.mlp_internal.MLP_INTERNAL_SITES": mlp_internal.MLP_INTERNAL_SITES,
        "geosteer.directional.measure.RESIDUAL_SITES": measure.RESIDUAL_SITES,
        "geosteer.vectors.config.POINTS": vectors_config.POINTS,
    }


def test_site_tables_use_the_hook_point_names():
    vocabulary = set(HOOK_POINTS) | ATTENTION_INTERNAL | MLP_INTERNAL
    bad = {table: sorted(set(names) - vocabulary) for table, names in _site_tables().items()
           if set(names) - vocabulary and table not in SITE_TABLE_ALLOW}
    assert not bad, f"site names outside the hook-point vocabulary: {bad}"
    stale = {t for t in SITE_TABLE_ALLOW if set(_site_tables()[t]) <= vocabulary}
    assert not stale, f"allow-listed tables that now fit (drop them from SITE_TABLE_ALLOW): {stale}"
    from geosteer.directional.config import RESIDUAL_SITES

    assert set(RESIDUAL_SITES) <= set(HOOK_POINTS)  # a residual site is the hook point it edits


def test_every_synonym_maps_to_a_current_name():
    assert set(POINT_SYNONYMS.values()) <= set(HOOK_POINTS)
    assert not set(POINT_SYNONYMS) & set(HOOK_POINTS)


OLD_SITE_NAMES = ("resid_attn", "resid_mlp", "resid_block")  # removed; the hook-point names replaced them


@pytest.mark.parametrize("old", [*OLD_SITE_NAMES, "mlp_norm_in"])
def test_removed_point_names_are_unknown(old):
    from geosteer import load_model

    model, _ = load_model("tiny-llama")
    with pytest.raises(ValueError, match=f"unknown hook point '{old}'; valid: resid_pre, attn_out"):
        attach_hooks(model, old, [0], lambda t, ctx: None)


@pytest.mark.parametrize("old", OLD_SITE_NAMES)
def test_removed_site_names_are_refused_in_one_line(old, monkeypatch, capsys):
    from geosteer.directional import ComponentScale
    from geosteer.errors import GeosteerError
    from geosteer.recipe import InterventionSpec
    from tests.cli_helpers import one_line_exit_2, run_cli

    with pytest.raises(GeosteerError, match=f"unknown site '{old}'; valid: attn_out, mlp_out, resid_post"):
        ComponentScale(old, s_par=0.0)
    with pytest.raises(GeosteerError, match=f"unknown site '{old}'"):
        InterventionSpec.from_dict({"scale_site": old, "scale_par": 0.0})
    code, _, err = run_cli(monkeypatch, capsys, "recipe", "show", "--set", f"scale_site={old}")
    one_line_exit_2(code, err)
    assert f"unknown site '{old}'" in err and "attn_out" in err


def test_no_results_file_or_item_carries_a_removed_name():
    """The committed results files and reproduction items were migrated once (paper/studies/migrate_names.py)."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("migrate_names", root / "paper" / "studies" / "migrate_names.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.plan(root) == {}, "run python paper/studies/migrate_names.py"


def test_resid_mid_is_the_state_between_attention_and_mlp():
    """TransformerLens' ``resid_mid`` reaches the same tensor as ``mlp_in``: x + A, compared with x + A
    rebuilt from ``resid_pre`` and ``attn_out`` of the same forward."""
    from geosteer import load_model

    model, _ = load_model("tiny-llama")
    ids = torch.randint(0, 200, (1, 9), generator=torch.Generator().manual_seed(1))
    seen: dict[str, torch.Tensor] = {}

    def keep(name):
        def fn(t, ctx):
            seen[name] = t.detach().clone()
        return fn

    removers = [attach_hooks(model, p, [1], keep(p)) for p in ("resid_pre", "attn_out")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        removers.append(attach_hooks(model, "resid_mid", [1], keep("resid_mid")))
    try:
        with torch.no_grad():
            model(input_ids=ids)
    finally:
        for remove in removers:
            remove()
    torch.testing.assert_close(seen["resid_mid"], seen["resid_pre"] + seen["attn_out"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("argv", [
    ["measure", "explore", "-s", "S", "--prompts", "p.json"],
    ["manifold", "edit", "zero layer=0", "-s", "S", "-o", "O", "--dtype", "float16"],
    ["study", "directional", "pretrain", "--seeds", "0,1"],
    ["study", "directional", "pretrain", "--layers", "2"],
])
def test_removed_option_spellings_are_refused(argv, monkeypatch, capsys, tmp_path):
    from tests.cli_helpers import one_line_exit_2, run_cli

    argv = [str(tmp_path / a) if a in ("S", "O") else a for a in argv]
    code, _, err = run_cli(monkeypatch, capsys, *argv)
    one_line_exit_2(code, err)
    assert "No such option" in err


def test_recipe_keys_say_mlp_and_former_names_are_unknown(monkeypatch, capsys):
    from geosteer.errors import GeosteerError
    from geosteer.methods import recipe_keys
    from geosteer.recipe import InterventionSpec
    from tests.cli_helpers import one_line_exit_2, run_cli

    keys = recipe_keys()
    assert not [k for k in keys if "ffn" in k.lower()], "recipe keys say mlp (FFN in prose only)"
    for old in ("ffn_variant", "ffn_layers", "alpha_ffn"):
        with pytest.raises(GeosteerError, match=f"unknown recipe keys: {old}"):
            InterventionSpec(**{old: "1"})
    code, _, err = run_cli(monkeypatch, capsys, "recipe", "show", "--set", "alpha_ffn=0.5")
    one_line_exit_2(code, err)
    assert "unknown recipe key" in err and "alpha_mlp" in err  # the valid keys are listed


def test_help_texts_call_the_surfaces_object_surfaces():
    """One user-facing noun: 'surfaces' (``SurfaceBank`` is the class name only)."""
    import re

    said = []
    for path, cmd in command_leaves(hidden=False).items():
        texts = [cmd.help or "", *(getattr(p, "help", None) or "" for p in cmd.params if not getattr(p, "hidden", 0))]
        said += [(path, t) for t in texts if re.search(r"\bbanks?\b", t, re.IGNORECASE)]
    assert not said, f"help texts that say 'bank' (say 'surfaces'): {said}"


# The steering front door: every verb that runs a steered model takes --recipe DIR, --set key=value
# (repeatable) and --surfaces DIR (sugar for --set surfaces=DIR), the same options everywhere.
STEERING_VERBS = ("ppl", "generate", "compare", "demo", "studio")
# verb -> reason: steering verbs whose front door is spelt differently on purpose.
FRONT_DOOR_ALLOW = {
    "eval": "lm-eval's own command line: every argument goes to lm-eval, so --recipe/--set/--surfaces are read "
            "from its arguments (geosteer.cli.evaluate) into the geosteer model's --model_args, not click options",
    "serve": "serves several recipes at once: --recipe NAME=DIR (repeatable) names each one as a model id; a "
             "request's geosteer_recipe object takes the keys --set takes",
}
# verb -> reason: verbs with --surfaces that is not the front door (an input or a lever, not a steered run).
SURFACES_NOT_FRONT_DOOR = {
    "learn walls": "the surfaces a learner starts from (its input; the output is a new artifact)",
    "learn steering-surfaces": "the surfaces a learner starts from (its input; the output is a new artifact)",
    "measure explore": "the surfaces measured (sensitivity, coverage, walls): the object of the measurement",
    "manifold edit": "the artifact edited into a new folder; no model runs",
    "bench text": "surfaces artifacts compared as levers, several at once, each at several strengths",
}
FRONT_DOOR_HOMES = ("recipe show", "recipe save")  # read and write recipes; run no model


def _front_door_params(cmd) -> dict:
    return {p.opts[0]: p for p in cmd.params if getattr(p, "opts", None) and p.opts[0] in
            ("--recipe", "--set", "--surfaces")}


def test_every_steering_verb_takes_the_one_front_door():
    from geosteer.cli.recipe import RECIPE_HELP, SET_HELP, SURFACES_HELP

    leaves = command_leaves(hidden=False)
    for verb in STEERING_VERBS:
        params = _front_door_params(leaves[verb])
        assert set(params) == {"--recipe", "--set", "--surfaces"}, verb
        recipe, settings, surfaces = params["--recipe"], params["--set"], params["--surfaces"]
        assert (recipe.help, _option_kind(recipe), recipe.multiple) == (RECIPE_HELP, "str", False), verb
        assert (settings.help, _option_kind(settings), settings.multiple) == (SET_HELP, "str", True), verb
        assert surfaces.help.startswith(SURFACES_HELP) and not surfaces.multiple, verb  # (+ the verb's default)
        assert _option_kind(surfaces) == _option_kind(_front_door_params(leaves["ppl"])["--surfaces"]), verb


def test_every_verb_with_steering_options_is_classified():
    """A verb with --recipe, --set or --surfaces is a steering verb, an allowed difference or a non-front-door
    use of --surfaces; the paper's study verbs (`study ...`, an installed plugin) are experiments."""
    found = {path for path, cmd in command_leaves(hidden=False).items() if _front_door_params(cmd)
             and not path.startswith("study ")}
    known = {*STEERING_VERBS, *FRONT_DOOR_ALLOW, *SURFACES_NOT_FRONT_DOOR, *FRONT_DOOR_HOMES}
    assert found - {"eval"} <= known, f"unclassified (a steering verb takes RECIPE_OPT/SET_OPT): {found - known}"
    stale = known - found - {"eval"}
    assert not stale, f"classified verbs that no longer take these options: {stale}"


def test_eval_and_serve_spell_the_front_door_as_allowed():
    from geosteer.cli.evaluate import _FRONT_DOOR, _HELP

    assert set(_FRONT_DOOR) == {"--recipe", "--set", "--surfaces"}
    assert all(name in _HELP for name in _FRONT_DOOR)
    serve = _front_door_params(command_leaves(hidden=False)["serve"])["--recipe"]
    assert serve.multiple and "NAME=DIR" in serve.help
