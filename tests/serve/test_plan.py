"""Recipes read into serving operations, and what is refused: runs without vLLM (the main suite too)."""

from __future__ import annotations

import pytest
import torch

from geosteer.errors import GeosteerError
from geosteer.methods import RecipeKey
from geosteer.recipe import InterventionSpec, save_recipe
from geosteer_vllm.plan import meta_model, parse_recipe_args, plan_recipe


def _recipe(tmp_path, name="r", base="tiny-llama", **keys):
    return save_recipe(tmp_path / name, InterventionSpec(**keys), base_model=base)


def test_directional_and_dynamics_ops_follow_geosteer_formulas(tmp_path, meta):
    model, m = meta
    folder = _recipe(tmp_path, scale_site="attn_out", scale_par=2.0, scale_perp=0.5, scale_layers="1",
                     alpha_mlp=3.0, gain_layers="0", parallel_layers="1")
    plan = plan_recipe("r", folder, m)
    assert sorted(plan.layers) == [0, 1]
    a, x = torch.randn(5, 8), torch.randn(5, 8)
    (fn,) = plan.layers[1].attn_out
    par = (a @ x.T).diagonal()[:, None] / (x * x).sum(-1, keepdim=True) * x  # a∥ by hand
    torch.testing.assert_close(fn(a, {"resid_pre": x}, None), 2.0 * par + 0.5 * (a - par))
    (gain,) = plan.layers[0].mlp_out
    torch.testing.assert_close(gain(a, {}, None), 3.0 * a)
    (par_in,) = plan.layers[1].mlp_in
    assert par_in(a, {"resid_pre": x}, None) is x


def test_neutral_recipe_has_no_ops(tmp_path, meta):
    assert plan_recipe("n", _recipe(tmp_path), meta[1]).layers == {}


@pytest.mark.parametrize("site", ["value_exclude_self", "diag_removal"])
def test_settings_that_need_the_self_weight_are_refused(tmp_path, meta, site):
    folder = _recipe(tmp_path, scale_site=site, scale_par=0.5)
    with pytest.raises(GeosteerError, match=f"scale_site={site} cannot be served exactly"):
        plan_recipe("r", folder, meta[1])


def test_recipe_for_another_base_model_is_refused(tmp_path, meta):
    folder = _recipe(tmp_path, base="smollm2", alpha_mlp=2.0)
    with pytest.raises(GeosteerError, match="made for base model 'smollm2'"):
        plan_recipe("r", folder, meta[1])


def test_not_a_recipe_folder_is_one_line(tmp_path, meta):
    with pytest.raises(GeosteerError, match="not a geosteer recipe or artifact folder"):
        plan_recipe("r", tmp_path, meta[1])


def test_unsupported_family_is_refused():
    from geosteer.models.loading import load_model

    model, _ = load_model("tiny-gpt2")
    with pytest.raises(GeosteerError, match="supports the llama, qwen2, qwen3, mistral, gemma3_text families; "
                                            "this model is 'gpt2'"):
        meta_model(model.config)


def test_recipe_arguments(tmp_path):
    assert parse_recipe_args([f"a={tmp_path}"]) == {"a": str(tmp_path.resolve())}
    for bad, msg in ((["a"], "NAME=DIR"), ([f"a={tmp_path}", f"a={tmp_path}"], "repeated"),
                     ([f"x/y={tmp_path}"], "not a plain name"), (["a=/nonexistent-dir"], "folder not found"),
                     ([f"a b={tmp_path}"], "letters, digits"), ([f"a\nb={tmp_path}"], "letters, digits"),
                     ([f"{'a' * 129}={tmp_path}"], "letters, digits")):
        with pytest.raises(GeosteerError, match=msg):
            parse_recipe_args(bad)
    with pytest.raises(GeosteerError, match="recipe name 'smollm2' is the base model's id"):
        parse_recipe_args([f"smollm2={tmp_path}"], "smollm2")


def test_an_intervention_without_served_ops_is_refused_in_one_line(meta):
    from geosteer.methods import Method, register_method, unregister_method
    from geosteer.recipe import InterventionSpec
    from geosteer_vllm.plan import plan_spec

    class Toy:
        def attach(self, model):
            return lambda: None

    class ToyServed(Toy):
        def served_ops(self, ops):
            ops.edit(2, "mlp_out", lambda t, st, tok: 2 * t)

    register_method(Method("toy_served", keys=(RecipeKey("toy_mode", None, kind="text"),),
                           build=lambda model, v, force=False: [] if v["toy_mode"] is None else
                           [ToyServed() if v["toy_mode"] == "served" else Toy()]))
    try:
        with pytest.raises(GeosteerError, match="^Toy cannot be served \\(it declares no served_ops\\)"):
            plan_spec("t", InterventionSpec(toy_mode="plain"), meta[1], "t", key="t")
        plan = plan_spec("t", InterventionSpec(toy_mode="served"), meta[1], "t", key="t")
        (fn,) = plan.layers[2].mlp_out
        assert list(plan.layers) == [2] and torch.equal(fn(torch.ones(2, 3), {}, None), 2 * torch.ones(2, 3))
    finally:
        unregister_method("toy_served")


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory, meta):
    """tiny-llama as a model folder (what the engine loads), declaring tiny-llama as its base."""
    model, _ = meta
    folder = tmp_path_factory.mktemp("tiny-llama")
    model.config.geosteer_base_model = "tiny-llama"
    try:
        model.save_pretrained(folder)
    finally:
        del model.config.geosteer_base_model
    return str(folder)


def _surfaces(model, folder, walls=()):
    from geosteer.manifold import ManifoldConfig, SurfaceBank

    bank = SurfaceBank(ManifoldConfig.for_model(model, grid_size=4, layers=[1]))
    with torch.no_grad():
        bank.coefficients.fill_(0.1)
    bank.set_walls(list(walls))
    return str(bank.save(folder))


def test_every_recipe_splits_over_tensor_parallel_ranks_that_take_whole_heads(tmp_path, meta, tiny_folder):
    from geosteer.manifold.walls import Wall
    from geosteer_vllm.engine import engine_args

    model, _ = meta
    split = {"s": _surfaces(model, tmp_path / "s"),
             "w": _surfaces(model, tmp_path / "w", walls=[Wall(layer=1, heads=(0,))]),
             "v": str(_recipe(tmp_path, "v", scale_site="value_full", scale_par=0.5)),
             "c": str(_recipe(tmp_path, "c", scale_site="value_full", scale_par=0.5, scale_value_space="concat")),
             "a": str(_recipe(tmp_path, "a", scale_site="attn_out", scale_par=0.5, alpha_mlp=1.2))}
    for tp in (2, 4):
        assert engine_args(tiny_folder, split, tensor_parallel_size=tp)["hf_overrides"]["geosteer_recipes"] == split
    with pytest.raises(GeosteerError, match="^4 attention heads do not split over tensor_parallel_size=3$"):
        engine_args(tiny_folder, {"s": split["s"]}, tensor_parallel_size=3)


def test_the_engine_arguments_say_where_the_steering_runs_and_why_eager(tmp_path, meta, tiny_folder):
    """Residual recipes run in the compiled graph; exact walls, attention operations where the graph cannot
    hold them, and captures make the engine eager, and ``geosteer_eager`` names the cause."""
    from geosteer.manifold.walls import Wall
    from geosteer_vllm import graph
    from geosteer_vllm.engine import CAPTURE_EAGER, engine_args

    model, _ = meta
    vec = {"a": str(_recipe(tmp_path, "a", scale_site="attn_out", scale_par=0.5, alpha_mlp=1.2))}
    kw = engine_args(tiny_folder, vec)
    assert kw["hf_overrides"]["geosteer_graph"] and kw["hf_overrides"]["geosteer_eager"] is None
    assert "enforce_eager" not in kw and kw["additional_config"]["geosteer_graph"]
    walls = {"w": _surfaces(model, tmp_path / "w", walls=[Wall(layer=1, heads=(0,))])}
    kw = engine_args(tiny_folder, {**vec, **walls})
    assert kw["enforce_eager"] and not kw["hf_overrides"]["geosteer_graph"]
    assert kw["hf_overrides"]["geosteer_eager"] == "recipe 'w': layer 1 has exact walls" or (
        not graph.attention_in_graph() and kw["hf_overrides"]["geosteer_eager"].startswith(
            "recipe 'w': layer 1 has operations inside attention"))
    kw = engine_args(tiny_folder, {"v": str(_recipe(tmp_path, "v", scale_site="value_full", scale_par=0.5))})
    assert kw["hf_overrides"]["geosteer_graph"] == graph.attention_in_graph()
    if not graph.attention_in_graph():  # without vLLM's CPU build and geosteer's kernels: eager, and where not
        assert "only on vLLM's CPU build" in kw["hf_overrides"]["geosteer_eager"]
    kw = engine_args(tiny_folder, vec, max_capture=1000)
    assert kw["enforce_eager"] and kw["hf_overrides"]["geosteer_eager"] == CAPTURE_EAGER


def test_surfaces_and_value_scales_split_by_heads_as_attention_does(tmp_path, meta):
    """Each rank's part, computed on its heads alone (and the KV heads they read, replicated when there are
    fewer KV heads than ranks, as vLLM does), is that rank's slice of the whole layer's result."""
    from geosteer.served import LayerOps, ValueScale
    from geosteer_vllm import surface_ops
    from geosteer_vllm.tensor_parallel import ConcatOverRanks, shard_layer, shard_plan

    model, m = meta
    surf = plan_recipe("s", _surfaces(model, tmp_path / "s"), m)
    (op,) = surf.layers[1].attention
    H, hkv = model.config.num_attention_heads, model.config.num_key_value_heads
    n, d, rep, grid = 5, model.config.hidden_size // H, H // hkv, (op.grid_size, op.lo, op.hi)
    gen = torch.Generator().manual_seed(0)
    f, q = torch.randn(n, hkv, op.K, rep, d, generator=gen), torch.randn(n, H, d, generator=gen)
    whole = surface_ops.surface_delta(f, q, op.coeff, grid)
    for tp in (2, 4):
        per, parts = H // tp, []
        for rank in range(tp):
            (mine,) = shard_plan(surf, rank, tp, H).layers[1].attention
            heads = torch.arange(rank * per, (rank + 1) * per)
            kv = heads[::rep] // rep if per >= rep else heads[:1] // rep  # the rank's KV heads
            fr = f[:, kv] if per >= rep else f[:, kv][:, :, :, heads % rep]
            parts.append(surface_ops.surface_delta(fr, q[:, heads], mine.coeff, grid))
        torch.testing.assert_close(torch.cat(parts, dim=1), whole)
    concat = LayerOps(attention=[ValueScale(0.5, 1.2, None, True)])
    for rank in range(2):  # every rank scales its heads; the dot products are summed over the ranks
        assert shard_layer(concat, rank, 2, H).attention == [ConcatOverRanks(0.5, 1.2, None, True)]
    value = LayerOps(attention=[ValueScale(0.5, 1.0, [1, 3], False), ValueScale(0.7, 1.2, None, False)])
    assert [o.heads for o in shard_layer(value, 0, 2, H).attention] == [[1], None]
    assert [o.heads for o in shard_layer(value, 1, 2, H).attention] == [[1], None]  # head 3 is its second
    assert [o.heads for o in shard_layer(value, 0, 4, H).attention] == [None]  # head 0 is not selected


def test_tensor_parallel_size_among_the_vllm_arguments():
    from geosteer_vllm.engine import tensor_parallel_size

    assert tensor_parallel_size(["--max-model-len", "256"]) == 1
    assert tensor_parallel_size(["-tp", "2"]) == 2
    assert tensor_parallel_size(["--tensor-parallel-size=4", "--enforce-eager"]) == 4
    for bad in (["-tp"], ["--tensor-parallel-size", "x"], ["-tp", "0"]):
        with pytest.raises(GeosteerError, match="positive integer"):
            tensor_parallel_size(bad)


def test_walls_are_read_after_the_surfaces_and_also_on_layers_without_them(tmp_path, meta):
    from geosteer.manifold.walls import Wall
    from geosteer.served import Surface
    from geosteer_vllm.walls import WallOp

    model, m = meta
    folder = _surfaces(model, tmp_path / "w", walls=[Wall(layer=1, heads=(0,), q=(0.0, 1.0), k=(0.0, 1.0)),
                                                     Wall(layer=2, heads=(3,), dims=(5,))])
    plan = plan_recipe("w", folder, m)
    assert [type(op) for op in plan.layers[1].attention] == [WallOp, Surface]  # walls outermost
    (op,) = plan.layers[2].attention
    assert isinstance(op, WallOp) and op.coeff is None and op.heads.tolist() == [3] and op.dims.tolist() == [5]


@pytest.mark.parametrize("mode,phase,start", [("add", "all", 0), ("ablate_add", "prompt", 2),
                                              ("norm_match", "generation", 0), ("ablate", "all", 3)])
def test_steering_vectors_are_served_per_token_by_position_and_phase(tmp_path, meta, mode, phase, start):
    from geosteer.served import Tokens
    from geosteer.vectors.apply import SteeringVectors

    model, m = meta
    d = model.config.hidden_size
    v = torch.randn(d, generator=torch.Generator().manual_seed(0))
    folder = SteeringVectors({1: v}, point="mlp_out", base_model="tiny-llama", d_model=d,
                             n_layers=model.config.num_hidden_layers).save(tmp_path / "v")
    plan = plan_recipe("v", _recipe(tmp_path, "r", vectors=str(folder), vector_scale=2.5, vector_mode=mode,
                                    vector_phase=phase, vector_from=start), m)
    (fn,) = plan.layers[1].mlp_out
    assert list(plan.layers) == [1] and plan.prompt_dependent == (phase != "all")
    x = torch.randn(6, d)
    tokens = Tokens(torch.tensor([0, 1, 2, 3, 4, 5]), torch.tensor([4, 4, 4, 4, 4, 4]))  # prompt: 0-3
    u = v / v.norm()  # by hand, per mode
    steered = {"add": x + 2.5 * v, "ablate": x - (x @ u)[:, None] * u, "ablate_add": x - (x @ u)[:, None] * u + 2.5 * v,
               "norm_match": (x + 2.5 * v) * (x.norm(dim=-1) / (x + 2.5 * v).norm(dim=-1))[:, None]}[mode]
    on = (tokens.positions >= start) & {"all": torch.ones(6, dtype=torch.bool), "prompt": tokens.positions < 4,
                                        "generation": tokens.positions >= 4}[phase]
    torch.testing.assert_close(fn(x, {}, tokens), torch.where(on[:, None], steered, x))


@pytest.mark.parametrize("name", ["manifold", "directional", "dynamics", "vectors", "toy"])
def test_every_method_is_served_or_refused_in_one_line(tmp_path, meta, name, request):
    """Each registered method's active example (``Method.examples``, as the contract suite uses) becomes
    per-layer operations, or one line; the toy plugin (no ``served_ops``) is refused by name."""
    import importlib

    from geosteer.methods import methods
    from geosteer.recipe import InterventionSpec
    from geosteer_vllm.plan import plan_spec

    model, m = meta
    if name == "toy":
        request.getfixturevalue("toy_method")
    method = methods()[name]
    examples = method.examples
    if isinstance(examples, str):
        module, _, fn = examples.partition(":")
        examples = getattr(importlib.import_module(module), fn)
    active = examples(model, tmp_path)["active"]
    if name == "toy":
        with pytest.raises(GeosteerError, match="^ToyScale cannot be served \\(it declares no served_ops\\)"):
            plan_spec(name, InterventionSpec(**active), m, name, key=name)
    else:
        assert plan_spec(name, InterventionSpec(**active), m, name, key=name).layers
