"""The model runners the plugin follows (``geosteer_vllm.runners``): a steering engine never runs on one whose
steps it does not hook, V1 is chosen where the user chose nothing, and V2's hooks fill the same recipe rows
and prompt lengths as V1's, checked on V2's own request-state and input-batch structures (V2 itself needs
Triton, which vLLM's CPU build does not have: its three Triton kernels are stubbed here, nothing else)."""

from __future__ import annotations

import json
import os
import types

import pytest

pytest.importorskip("vllm")

from geosteer.errors import GeosteerError  # noqa: E402
from geosteer_vllm import batch, runners  # noqa: E402

ENV = "VLLM_USE_V2_MODEL_RUNNER"


def test_an_unset_runner_choice_becomes_v1_and_the_note_says_so():
    env = {}
    note = runners.pin(env)
    assert env[ENV] == "0" and note == f"{ENV} was unset: geosteer set it to 0"
    assert runners.describe("V1", note) == f"vLLM's V1 model runner ({ENV} was unset: geosteer set it to 0)"


def test_a_users_choice_is_kept_and_a_malformed_one_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(runners, "_has_triton", lambda: True)
    for value in ("0", " 0 ", "1"):
        env = {ENV: value}
        assert runners.pin(env) is None and env == {ENV: value}
    monkeypatch.setattr(runners, "_has_triton", lambda: False)  # vLLM's CPU build
    assert runners.pin({ENV: "0"}) is None
    with pytest.raises(GeosteerError) as e:
        runners.pin({ENV: "1"})
    assert "\n" not in str(e.value) and "needs Triton" in str(e.value)
    for value in ("yes", "", "true"):
        with pytest.raises(GeosteerError) as e:
            runners.pin({ENV: value})
        assert "\n" not in str(e.value) and f"{ENV} must be 0" in str(e.value)


def test_engine_args_pin_the_runner_before_vllm_chooses(monkeypatch):
    from geosteer_vllm.engine import engine_args

    monkeypatch.delenv(ENV, raising=False)
    assert "hf_overrides" not in engine_args("smollm2")  # the stock model: the runner is vLLM's choice
    assert ENV not in os.environ
    kw = engine_args("smollm2", inline=_policy())
    assert os.environ[ENV] == "0"
    assert kw["hf_overrides"]["geosteer_runner_note"] == f"{ENV} was unset: geosteer set it to 0"
    assert "geosteer_runner_note" not in engine_args("smollm2", inline=_policy())["hf_overrides"]  # the user's now
    monkeypatch.setenv(ENV, "on")
    with pytest.raises(GeosteerError, match=f"{ENV} must be 0"):
        engine_args("smollm2", inline=_policy())


def test_serve_refuses_a_malformed_runner_choice_in_one_line_before_vllm_starts(monkeypatch, capsys):
    from geosteer_vllm import cli
    from tests.cli_helpers import one_line_exit_2, run_cli

    monkeypatch.setattr(cli, "_run_vllm", lambda argv: pytest.fail("vLLM was started"))
    monkeypatch.setenv("GEOSTEER_SERVE_ROUTES", "{}")  # serve sets it for its router
    refused = {"yes": f"{ENV} must be 0", **({} if runners._has_triton() else {"1": "needs Triton"})}
    for value, words in refused.items():
        monkeypatch.setenv(ENV, value)
        code, _, err = run_cli(monkeypatch, capsys, "serve", "-m", "smollm2")
        one_line_exit_2(code, err)
        assert words in err
    started = []
    monkeypatch.setattr(cli, "_run_vllm", started.append)
    monkeypatch.delenv(ENV)
    code, _, err = run_cli(monkeypatch, capsys, "serve", "-m", "smollm2")
    assert code == 0 and started and os.environ[ENV] == "0"
    overrides = json.loads(started[0][started[0].index("--hf-overrides") + 1])
    assert overrides["geosteer_runner_note"] == f"{ENV} was unset: geosteer set it to 0"


def _policy():
    from geosteer_vllm.inline import Policy

    return Policy({}, ())


def test_every_runner_of_vllm_032_is_hooked_and_an_override_is_not():
    from vllm.v1.worker.cpu.model_runner import CPUModelRunner as CPUv2
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner as CPUv1
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner as GPUv2
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner as GPUv1

    runners.track()
    runners.track()  # idempotent
    assert all(runners.hooked(c) for c in (GPUv1, CPUv1, GPUv2, CPUv2))

    class Own(GPUv2):
        def prepare_inputs(self, *a, **k):
            return None

    assert not runners.hooked(Own) and not runners.hooked(object)


def test_a_steered_model_is_refused_on_a_runner_the_plugin_does_not_follow():
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner as GPUv2

    runners.track()

    def builder(base):
        class Runner(base):
            def __init__(self):  # no vLLM state: only the stack the model is built on
                pass

            def load_model(self):
                return runners.check(types.SimpleNamespace(use_v2_model_runner=False))

        return Runner

    from vllm.v1.worker.cpu_model_runner import CPUModelRunner as CPUv1

    assert builder(GPUv2)().load_model() == "V2" and builder(CPUv1)().load_model() == "V1"  # followed

    class Unknown:
        def execute_model(self):
            pass

    for base in (Unknown, type("Own", (GPUv2,), {"prepare_inputs": lambda self, *a: None})):
        with pytest.raises(GeosteerError) as e:
            builder(base)().load_model()
        assert "\n" not in str(e.value) and f"{ENV}=0" in str(e.value) and "stock model" in str(e.value)
    assert runners.check(types.SimpleNamespace(use_v2_model_runner=True)) == "V2"  # no runner on the stack


@pytest.fixture
def v2_runner(monkeypatch):
    """vLLM's V2 runner with its real request states and input buffers on the CPU and the rest inert."""
    import torch
    from vllm.v1.worker.gpu import buffer_utils
    from vllm.v1.worker.gpu import model_runner as mr
    from vllm.v1.worker.gpu.input_batch import InputBuffers
    from vllm.v1.worker.gpu.states import RequestState

    runners.track()
    monkeypatch.setattr(buffer_utils, "is_uva_available", lambda: False)  # no pinned memory on this machine
    for kernel in ("prepare_prefill_inputs", "prepare_pos_seq_lens", "combine_sampled_and_draft_tokens"):
        monkeypatch.setattr(mr, kernel, lambda *a, **k: None)  # Triton kernels: input ids and positions only
    r = mr.GPUModelRunner.__new__(mr.GPUModelRunner)
    cpu = torch.device("cpu")
    r.req_states = RequestState(8, 64, 64, 0, 100, cpu, use_dense_all_token_ids=True)
    r.req_states.apply_staged_writes = lambda: None  # a Triton kernel; prompt_len is read from its numpy mirror
    r.input_buffers = InputBuffers(8, 64, cpu)

    class Inert:
        num_new_sampled_tokens_per_step = 1

        def __getattr__(self, name):
            return lambda *a, **k: None

    r.model_state = r.block_tables = r.lora_state = Inert()
    for name in ("adaptive_verification", "pooling_runner", "encoder_cache", "pp_handler", "prompt_logprobs_worker",
                 "sampler", "fast_prefill", "pcp_manager", "model"):
        setattr(r, name, None)
    r.is_last_pp_rank = r.use_pp = False
    r.device, r.max_num_reqs, r.decode_query_len = cpu, 8, 1
    r.model_config = types.SimpleNamespace(rswa_window=None)
    yield r
    batch.set_rows([])
    batch.set_recipes([])


def _new(req_id: str, n: int, extra: dict | None):
    from vllm import SamplingParams
    from vllm.v1.core.sched.output import NewRequestData

    ids = list(range(n))
    return NewRequestData(req_id=req_id, prompt_token_ids=ids, mm_features=[], pooling_params=None,
                          sampling_params=SamplingParams(extra_args=extra), block_ids=([0],),
                          num_computed_tokens=0, lora_request=None, prefill_token_ids=ids)


def _step(runner, new: list, tokens: dict, finished=()):
    """One step of the V2 runner as ``execute_model`` runs it: requests finished and added, the batch gathered
    in V2's own order, its inputs prepared (the plugin's rows written there)."""
    from vllm.v1.core.sched.output import CachedRequestData, SchedulerOutput

    out = SchedulerOutput(scheduled_new_reqs=new, scheduled_cached_reqs=CachedRequestData.make_empty(),
                          num_scheduled_tokens=tokens, total_num_scheduled_tokens=sum(tokens.values()),
                          scheduled_spec_decode_tokens={}, scheduled_encoder_inputs={},
                          num_common_prefix_blocks=[], finished_req_ids=set(finished), free_encoder_mm_hashes=[])
    runner.finish_requests(out)
    runner.add_requests(out)
    state, _ = runner.gather_batch_req_state(out, False)
    desc = types.SimpleNamespace(num_tokens=out.total_num_scheduled_tokens, num_reqs=None)
    return runner.prepare_inputs(out, state, desc, 0)


def _plan(name: str):
    return types.SimpleNamespace(name=name, neutral=False, layers={})


def test_v2_hooks_fill_each_steps_rows_and_prompt_lengths_in_v2s_batch_order(v2_runner):
    calm, loud = _plan("calm"), _plan("loud")
    batch.set_recipes([calm, loud])
    ib = _step(v2_runner, [_new("a", 5, None), _new("b", 3, {"geosteer_recipe": "calm"}),
                           _new("c", 2, {"geosteer_recipe": "loud"})], {"a": 5, "b": 3, "c": 2})
    order = list(ib.req_ids)  # V2 sorts its batch (sort_batch_req_ids); the rows follow its order
    sizes, recipes = {"a": 5, "b": 3, "c": 2}, {"a": None, "b": calm, "c": loud}
    assert batch._PROMPT_LEN.tolist() == [sizes[r] for r in order for _ in range(sizes[r])]
    groups = batch.groups(10)
    seen = {batch.plan(g).name: rows.tolist() for g, rows in groups.items()}
    start, expect = 0, {}
    for r in order:
        if recipes[r] is not None:
            expect[recipes[r].name] = list(range(start, start + sizes[r]))
        start += sizes[r]
    assert seen == expect

    # the next step: b decodes one token, a finished, d is new; a's recipe is forgotten with it
    ib = _step(v2_runner, [_new("d", 4, {"geosteer_recipe": "calm"})], {"b": 1, "d": 4}, finished={"a"})
    assert "a" not in v2_runner._geosteer_extra and set(v2_runner._geosteer_extra) == {"b", "c", "d"}
    rows = {r: n for r, n in zip(ib.req_ids, ib.num_scheduled_tokens.tolist(), strict=True)}
    assert rows == {"b": 1, "d": 4}
    assert batch._PROMPT_LEN.tolist() == [{"b": 3, "d": 4}[r] for r in ib.req_ids for _ in range(rows[r])]
    (g,) = batch.groups(5)
    assert batch.plan(g) is calm and batch.groups(5)[g] is None  # every row of this step is calm's


def test_v2_rows_follow_a_streamed_request_re_added_with_new_settings(v2_runner):
    batch.set_recipes([_plan("calm")])
    _step(v2_runner, [_new("s", 3, {"geosteer_recipe": "calm"})], {"s": 3})
    assert list(batch.groups(3)) == [0]
    _step(v2_runner, [_new("s", 5, None)], {"s": 2})  # the same id again: V2 removes it, then adds it
    assert v2_runner._geosteer_extra == {"s": None} and batch.groups(2) == {}
    assert batch._PROMPT_LEN.tolist() == [5, 5]


@pytest.mark.parametrize("option, words", [({"enable_dbo": True}, "--enable-dbo"),
                                           ({"ubatch_size": 2}, "--ubatch-size"),
                                           ({"prefill_context_parallel_size": 2}, "--prefill-context-parallel"),
                                           ({"enable_adaptive_verification": True}, "adaptive verification")])
def test_a_step_run_in_parts_is_refused_where_the_model_is_built(option, words):
    """The rows describe whole steps: microbatches, a partitioned prefill or drafts moved between requests on
    the device would give tokens other rows."""
    par = {"enable_dbo": False, "ubatch_size": 0, "prefill_context_parallel_size": 1}

    def config(**kw):
        spec = types.SimpleNamespace(enable_adaptive_verification=kw.pop("enable_adaptive_verification", False))
        return types.SimpleNamespace(parallel_config=types.SimpleNamespace(**{**par, **kw}), speculative_config=spec)

    assert runners.check(config()) == "V1"
    with pytest.raises(GeosteerError) as e:
        runners.check(config(**option))
    assert "\n" not in str(e.value) and words in str(e.value)


def test_a_v2_step_whose_tokens_do_not_add_up_is_logged_and_steers_no_token(v2_runner, caplog):
    batch.set_recipes([_plan("calm")])
    ib = _step(v2_runner, [_new("a", 3, {"geosteer_recipe": "calm"})], {"a": 3})
    assert list(batch.groups(3)) == [0]
    ib.num_tokens = 2  # what adaptive verification leaves after moving drafts on the device
    runners.fill_v2(v2_runner, ib)
    assert batch.groups(3) == {} and "the token rows of a step failed" in caplog.text
