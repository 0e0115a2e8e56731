"""``--chat`` on every learner and the studio: the prompts a learner reads are the tokenizer's chat template
of the user's prompts, the same as formatting them by hand with ``apply_chat_template``; a model without a
chat template is refused in one line, ``--system`` without ``--chat`` before any model loads."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from geosteer.eval.chat import format_prompt, format_targets
from geosteer.train.prompts import encode_controls, encode_targets
from tests.cli_helpers import one_line_exit_2, refused_before_load, run_cli

PROMPTS = ["The cat sat on the", "Paris is the capital of", "One, two, three,"]
TARGETS = [{"prompt": p, "target": "yes"} for p in PROMPTS]
NEGATIVES = [{"prompt": p, "target": "no"} for p in PROMPTS]
CONTROLS = ["Berlin is a city in", "Red, green and", "She opened the door and"]
SYSTEM = "Answer in one word."


def by_hand(tok, prompt: str, system: str | None = SYSTEM) -> str:
    msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    return tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)


def template_ids(tok, prompt: str, system: str | None = SYSTEM) -> list[int]:
    msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    out = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


@pytest.mark.parametrize("add_bos", [None, True, False])
def test_formatted_prompts_encode_to_the_chat_templates_own_ids(tiny_model, add_bos):
    _, tok = tiny_model("llama")
    for system in (SYSTEM, None):
        items = format_targets(tok, TARGETS, True, system, add_bos)
        got = encode_targets(tok, items, add_bos)
        ctl = encode_controls(tok, [format_prompt(tok, p, True, system, add_bos) for p in PROMPTS], add_bos)
        for i, p in enumerate(PROMPTS):
            want = template_ids(tok, p, system)
            n = len(want)
            assert got.ids[i, :n].tolist() == want  # exactly one BOS, whatever the encoding
            assert got.ids[i, n:n + 1].tolist() == tok("yes", add_special_tokens=False).input_ids[:1]
            assert ctl.ids[i, : int(ctl.lengths[i])].tolist() == want
    assert format_prompt(tok, "x", False, None, add_bos) == "x"  # without --chat: unchanged


def _files(tmp_path, tok, chat_by_hand: bool, strip_bos: bool = False):
    """Target, negative and control files: the plain prompts, or formatted by hand."""
    def fmt(p):
        text = by_hand(tok, p) if chat_by_hand else p
        return text[len(tok.bos_token):] if strip_bos and text.startswith(tok.bos_token) else text
    tag = "hand" if chat_by_hand else "plain"
    paths = [tmp_path / f"{tag}-{k}.json" for k in ("t", "n", "c")]
    paths[0].write_text(json.dumps([{**t, "prompt": fmt(t["prompt"])} for t in TARGETS]))
    paths[1].write_text(json.dumps([{**t, "prompt": fmt(t["prompt"])} for t in NEGATIVES]))
    paths[2].write_text(json.dumps([fmt(c) for c in CONTROLS]))
    return [str(p) for p in paths]


def _tensors(folder) -> dict:
    return {f.name: load_file(f) for f in sorted(folder.glob("*.safetensors"))}


def _same(a: dict, b: dict) -> None:
    assert a and a.keys() == b.keys()
    for name in a:
        assert a[name].keys() == b[name].keys()
        for k in a[name]:
            assert torch.equal(a[name][k], b[name][k]), (name, k)


def _zero_surfaces(model, path) -> str:
    from geosteer import manifold

    bank = manifold.install(model, grid_size=4, layers=[1, 2])
    manifold.uninstall(model)
    manifold.save(bank, path)
    return str(path)


@pytest.mark.parametrize("verb", ["steering-surfaces", "walls"])
def test_manifold_learners_with_chat_learn_what_hand_formatted_prompts_teach(tiny_model, tmp_path, monkeypatch,
                                                                            capsys, verb):
    model, tok = tiny_model("llama")
    src = _zero_surfaces(model, tmp_path / "src")
    outs = {}
    for tag, hand in (("chat", False), ("hand", True)):
        t, n, c = _files(tmp_path, tok, hand)
        args = ["learn", verb, "--surfaces", src, "--target-file", t, "--control-file", c, "--model",
                "tiny-llama", "--threads", "1", "--steps", "2", "--out", str(tmp_path / tag), "--json"]
        args += ["--negative-file", n] if verb == "steering-surfaces" else ["--mode", "dense", "--candidates", "8"]
        args += ["--chat", "--system", SYSTEM] if tag == "chat" else []
        code, _, err = run_cli(monkeypatch, capsys, *args)
        assert code == 0, err
        outs[tag] = _tensors(tmp_path / tag)
    _same(outs["chat"], outs["hand"])


def test_directional_steer_learn_with_chat_learns_what_hand_formatted_prompts_teach(tiny_model, tmp_path,
                                                                                   monkeypatch, capsys):
    _, tok = tiny_model("llama")
    outs = {}
    for tag, hand in (("chat", False), ("hand", True)):
        t, n, c = _files(tmp_path, tok, hand, strip_bos=True)  # this learner puts the BOS first itself
        args = ["learn", "scales", "--target-file", t, "--negative-file", n, "--control-file",
                c, "--model", "tiny-llama", "--threads", "1", "--steps", "2", "--layers", "1-2", "--out",
                str(tmp_path / tag), "--json"]
        code, _, err = run_cli(monkeypatch, capsys, *args, *(["--chat", "--system", SYSTEM] if tag == "chat" else []))
        assert code == 0, err
        outs[tag] = {p.relative_to(tmp_path / tag): load_file(p) for p in (tmp_path / tag).rglob("*.safetensors")}
    assert outs["chat"]
    _same({str(k): v for k, v in outs["chat"].items()}, {str(k): v for k, v in outs["hand"].items()})


def test_vectors_train_with_chat_extracts_from_hand_formatted_prompts(tiny_model, tmp_path, monkeypatch, capsys):
    _, tok = tiny_model("llama")
    pairs = [["I love this film", "I hate this film"], ["What a great day", "What an awful day"]]
    plain, hand = tmp_path / "p.json", tmp_path / "h.json"
    plain.write_text(json.dumps(pairs))
    hand.write_text(json.dumps([[by_hand(tok, a), by_hand(tok, b)] for a, b in pairs]))
    outs = {}
    for tag, f, extra in (("chat", plain, ["--chat", "--system", SYSTEM]), ("hand", hand, [])):
        code, _, err = run_cli(monkeypatch, capsys, "learn", "vectors", "-m", "tiny-llama", "--pairs", str(f),
                               "--layers", "0-1", "--out", str(tmp_path / tag), "--threads", "1", "--json", *extra)
        assert code == 0, err
        outs[tag] = _tensors(tmp_path / tag)
    _same(outs["chat"], outs["hand"])
    code, _, err = run_cli(monkeypatch, capsys, "learn", "vectors", "-m", "tiny-llama", "--pairs", str(plain),
                           "--layers", "0", "--out", str(tmp_path / "plain"), "--threads", "1", "--json")
    assert code == 0, err
    plain_v, hand_v = _tensors(tmp_path / "plain")["vectors.safetensors"], outs["hand"]["vectors.safetensors"]
    key = sorted(plain_v)[0]
    assert not torch.equal(plain_v[key], hand_v[key])  # the template changes what is extracted


def test_chat_is_refused_on_a_model_without_a_chat_template(tmp_path, monkeypatch, capsys):
    t, n, c = _files(tmp_path, None, False)
    pairs = tmp_path / "pairs.json"
    pairs.write_text(json.dumps([["good", "bad"]]))
    runs = [["learn", "scales", "--target-file", t, "--control-file", c, "--model", "tiny-gpt2",
             "--out", str(tmp_path / "o1"), "--chat"],
            ["learn", "vectors", "-m", "tiny-gpt2", "--pairs", str(pairs), "--out", str(tmp_path / "o2"), "--chat"]]
    for args in runs:
        code, _, err = run_cli(monkeypatch, capsys, *args, "--threads", "1")
        one_line_exit_2(code, err)
        assert "chat template" in err
    assert not (tmp_path / "o2").exists()


def test_system_without_chat_is_refused_before_loading(tmp_path, monkeypatch, capsys):
    t, n, c = _files(tmp_path, None, False)
    for args in (["learn", "steering-surfaces", "--surfaces", str(tmp_path), "--target-file", t, "--control-file", c],
                 ["learn", "walls", "--surfaces", str(tmp_path), "--target-file", t, "--control-file", c],
                 ["learn", "scales", "--target-file", t, "--control-file", c],
                 ["learn", "vectors", "--pairs", t],
                 ["studio", "--port", "1"]):
        line = refused_before_load(monkeypatch, capsys, *args, "--out" if args[0] != "studio" else "--host",
                                   str(tmp_path / "o") if args[0] != "studio" else "127.0.0.1", "--system", "x")
        assert "--chat" in line, args


def test_studio_chat_session_generates_from_the_templated_prompt(tiny_model, tmp_path):
    from geosteer import manifold
    from geosteer.eval.generation import generate
    from geosteer.interventions import steer
    from geosteer.studio.session import Session

    model, tok = tiny_model("llama")
    bank = manifold.install(model, grid_size=4, layers=[1])
    try:
        session = Session(model, tok, bank, tmp_path / "ws", model_name="tiny-llama", max_new_tokens_cap=6,
                          chat=True, system=SYSTEM)
        assert session.model_text("Hello") == by_hand(tok, "Hello")
        got = session.effect("Hello", max_new_tokens=5, reference="none")
        with steer(model):
            want = generate(model, tok, by_hand(tok, "Hello"), 5)
        assert got["before"]["token_ids"] == want.token_ids
    finally:
        manifold.uninstall(model)
