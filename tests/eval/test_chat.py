"""``--chat`` on generate and compare: the prompt goes through the tokenizer's chat template."""

from __future__ import annotations

import json

from geosteer.eval.chat import chat_prompt
from tests.cli_helpers import refused_before_load, run_cli


def test_generate_chat_is_generate_of_the_templated_prompt(monkeypatch, capsys, tiny_model):
    _, tok = tiny_model("llama")
    templated = chat_prompt(tok, "Hi there", system="Be brief.")
    assert "Hi there" in templated and "Be brief." in templated
    args = ["generate", "-m", "tiny-llama", "--max-new-tokens", "5", "--json"]
    code, chat_out, err = run_cli(monkeypatch, capsys, *args, "-p", "Hi there", "--chat", "--system", "Be brief.")
    assert code == 0, err
    code, plain_out, err = run_cli(monkeypatch, capsys, *args, "-p", templated)
    assert code == 0, err
    assert json.loads(chat_out)["token_ids"] == json.loads(plain_out)["token_ids"]


def test_compare_chat_reports_the_prompts_as_given(monkeypatch, capsys):
    code, out, err = run_cli(monkeypatch, capsys, "compare", "-m", "tiny-llama", "-p", "Hello", "--chat",
                             "--max-new-tokens", "3", "--json")
    assert code == 0, err
    assert [r["prompt"] for r in json.loads(out)["rows"]] == ["Hello"]


def test_system_without_chat_is_refused_before_loading(monkeypatch, capsys):
    line = refused_before_load(monkeypatch, capsys, "generate", "-m", "tiny-llama", "-p", "Hi", "--system", "x")
    assert "--chat" in line
