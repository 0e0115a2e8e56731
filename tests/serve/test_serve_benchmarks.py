"""benchmarks/serve_throughput.py --surfaces-only and benchmarks/serve_ladder.py: the served FLOP floor against a
token-by-token count, the random surfaces, bad input, the ladder's record, and one ladder run on a tiny Llama
(both engines started, two rounds). Behaviour only: no timing is asserted."""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("vllm")

from tests.serve.helpers import tiny_folder  # noqa: E402

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _module(name: str):
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def st():
    return _module("serve_throughput")


@pytest.fixture(scope="module")
def ladder():
    return _module("serve_ladder")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tiny_folder("llama", tmp_path_factory.mktemp("tiny") / "llama")


def _count(model, prompt: int, new: int, K: int, layers: int) -> float:
    """Multiply-adds token by token: every token through each nn.Linear of the decoder layers and attention to
    itself and the tokens before it; the last ``new`` tokens through the LM head."""
    blocks = model.model.layers
    linear = sum(m.in_features * m.out_features for m in blocks.modules() if isinstance(m, torch.nn.Linear))
    cfg = model.config
    hd = cfg.head_dim
    stock = extra = 0
    tokens = prompt + new - 1
    for t in range(tokens):
        stock += linear + len(blocks) * cfg.num_attention_heads * (t + 1) * 2 * hd
        extra += layers * cfg.num_attention_heads * (t + 1) * K * hd
        if t >= prompt - 1:
            stock += model.lm_head.in_features * model.lm_head.out_features
    return (stock + extra) / stock


@pytest.mark.parametrize("prompt,new,K,layers", [(8, 4, 11, 3), (32, 64, 11, 2), (5, 1, 7, 1)])
def test_served_flop_floor_matches_a_token_by_token_count(st, prompt, new, K, layers):
    from geosteer.models.loading import load_model

    model, _ = load_model("tiny-llama")
    got = st.served_flop_floor(model, prompt, new, K, layers)
    assert got == pytest.approx(_count(model, prompt, new, K, layers), rel=1e-12)
    assert got > 1


def test_random_surfaces_are_every_layer_grid_8_and_seeded(st, folder, tmp_path):
    import geosteer

    meta, tok = st.weightless(folder)
    assert all(p.device.type == "meta" for p in meta.parameters())
    assert tok("The river").input_ids
    a = geosteer.load(st.random_surfaces(meta, tmp_path / "a"), model=meta)
    b = geosteer.load(st.random_surfaces(meta, tmp_path / "b"), model=meta)
    assert a.K == 11 and list(a.config.resolved_layers()) == list(range(meta.config.num_hidden_layers))
    assert torch.equal(a.coefficients, b.coefficients) and a.coefficients.abs().sum() > 0
    c = geosteer.load(st.random_surfaces(meta, tmp_path / "c", seed=1), model=meta)
    assert not torch.equal(a.coefficients, c.coefficients)


@pytest.mark.parametrize("args,message", [
    (["--surfaces-only", "--recipe", "x=/tmp"], "--surfaces-only times the surfaces alone: drop --recipe"),
    (["--surfaces", "/no/such/folder"], "--surfaces: no such folder: /no/such/folder"),
    (["--surfaces-only", "--no-stock-engine"], "--no-stock-engine needs --steered-stock"),
    (["--steered-stock"], "--steered-stock and --no-stock-engine go with --surfaces-only"),
])
def test_throughput_refuses_bad_input_before_any_engine(st, capsys, args, message):
    with pytest.raises(SystemExit) as e:
        st.main(args)
    assert e.value.code == 2
    assert message in capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize("args,message", [(["--repeats", "0"], "--repeats 0: give an integer from 1 to 1000"),
                                          (["--surfaces-of", "smollm2"], "--surfaces-of needs NAME=DIR")])
def test_ladder_refuses_bad_input(ladder, capsys, args, message):
    with pytest.raises(SystemExit) as e:
        ladder.main(args)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def _rows(settings: dict[str, tuple[list[float], list[float]]]) -> list[dict]:
    """Rows as serve_throughput writes them: per round, each setting in turn ({setting: (tokens/s, CPU s)})."""
    rounds = len(next(iter(settings.values()))[0])
    return [{"engine": "vllm", "setting": name, "batch": 4, "new": 8, "tokens_per_s": tps[i], "cpu_s": cpu[i],
             "kv_bytes_per_token": 10.0, "compiled": True, "load_1min": 1.0}
            for i in range(rounds) for name, (tps, cpu) in settings.items()]


def test_record_pairs_rounds_in_order(ladder):
    stock, surf = [100.0, 80.0, 90.0], [50.0, 60.0, 45.0]
    on_steered = [95.0, 85.0, 80.0]
    rows = _rows({"stock": (stock, [1.0, 1.1, 1.2]), "stock_on_steered": (on_steered, [1.0, 1.2, 1.3]),
                  "surfaces": (surf, [1.5, 1.4, 1.8])})
    rec = ladder.record_of({"rows": rows, "flop_floor": {"surfaces@4": 1.05}}, 4)
    assert rec["baseline"] == "stock"
    assert rec["time"]["ratio"] == round(statistics.median(stock) / statistics.median(surf), 4)
    assert (rec["time"]["ratio_min"], rec["time"]["ratio_max"]) == (round(80 / 60, 4), 2.0)
    assert rec["cpu_time"]["ratio"] == round(1.5 / 1.1, 4)
    assert rec["steered_stock"]["time"]["ratio"] == round(90 / 85, 4)
    assert rec["steered_stock"]["cpu_time"]["ratio"] == round(1.2 / 1.1, 4)
    assert rec["repeats"] == 3 and rec["flop_floor"] == 1.05 and rec["new"] == 8
    alone = ladder.record_of({"rows": [r for r in rows if r["setting"] != "stock"],
                              "flop_floor": {"surfaces@4": 1.05}}, 4)
    assert alone["baseline"] == "stock_on_steered" and "steered_stock" not in alone
    assert alone["time"]["ratio"] == round(85 / 50, 4)


def test_ladder_runs_stock_against_random_surfaces_on_a_tiny_llama(ladder, folder, tmp_path):
    out = tmp_path / "ladder.json"
    ladder.main(["--models", folder, "--batch", "2", "--new", "3", "--prompt-tokens", "8", "--repeats", "2",
                 "--steered-stock", "--before-rounds", f"touch {tmp_path / 'before'}",
                 "--after-rounds", f"touch {tmp_path / 'after'}", "--out", str(out)])
    assert (tmp_path / "before").is_file() and (tmp_path / "after").is_file()
    rec = json.loads(out.read_text())["models"][folder]
    assert rec["surfaces"] == "random" and rec["repeats"] == 2 and rec["shape"]["layers"] == 3
    assert rec["baseline"] == "stock" and rec["steered_stock"]["time"]["ratio"] > 0
    assert all(len(rec["tokens_per_s"][s]) == 2 and min(rec["tokens_per_s"][s]) > 0
               for s in ("stock", "stock_on_steered", "surfaces"))
    assert rec["time"]["ratio_min"] <= rec["time"]["ratio_max"] and rec["cpu_time"]["ratio"] > 0
    assert rec["flop_floor"] > 1
    assert rec["kv_bytes_per_token"]["stock"] == pytest.approx(rec["kv_bytes_per_token"]["surfaces"], rel=0.5)
    again = out.read_text()
    ladder.main(["--models", folder, "--out", str(out)])  # measured already: skipped
    assert out.read_text() == again


def test_ladder_records_hook_commands_as_cmd(ladder):
    assert ladder._public(["--models", "a", "--before-rounds", "/x/hold.sh", "--after-rounds=/x/go.sh", "--new", "3"]) \
        == ["--models", "a", "--before-rounds", "CMD", "--after-rounds=CMD", "--new", "3"]
