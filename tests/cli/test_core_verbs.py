"""CLI: machine-readable output, and one-line errors with exit code 2 (no traceback) on bad input."""

import json

import pytest

from tests.cli_helpers import run_cli
from tests.hub_helpers import fake_hf_api


@pytest.fixture
def text_file(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text(" ".join(["A small cat sat on the warm mat near the door."] * 20))
    return f


def test_ppl_json(monkeypatch, capsys, text_file):
    code, out, err = run_cli(monkeypatch, capsys, "ppl", "--model", "tiny-llama", "--text-file", str(text_file),
                             "--context", "32", "--stride", "16", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert set(d) >= {"ppl", "nll", "tokens", "bits_per_byte"} and d["ppl"] > 1


@pytest.mark.parametrize("args,needle", [
    (["ppl", "--model", "nope-model", "--corpus", "heldout"], "unknown model"),
    (["ppl", "--model", "tiny-llama", "--text-file", "/no/such/file.txt"], "not found"),
    (["ppl", "--model", "tiny-llama", "--corpus", "heldout", "--context", "8", "--stride", "16"], "must be >="),
    (["ppl", "--model", "tiny-llama", "--corpus", "heldout", "--stride", "0"], "must be > 0"),
    (["ppl", "--model", "tiny-llama", "--corpus", "validation"], "valid"),
    (["generate", "--model", "tiny-llama", "--prompt", "hi", "--max-new-tokens", "0"], "max_new_tokens"),
    (["compare", "--model", "tiny-llama"], "no prompts"),
])
def test_bad_input_is_one_line_exit_2(monkeypatch, capsys, args, needle):
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert code == 2
    assert needle in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_empty_and_short_text_files(monkeypatch, capsys, tmp_path):
    empty = tmp_path / "e.txt"
    empty.write_text("  \n")
    code, _, err = run_cli(monkeypatch, capsys, "ppl", "--model", "tiny-llama", "--text-file", str(empty))
    assert code == 2 and "empty" in err
    short = tmp_path / "s.txt"
    short.write_text("Just a few words.")
    code, _, err = run_cli(monkeypatch, capsys, "ppl", "--model", "tiny-llama", "--text-file", str(short))
    assert code == 2 and "shorter than one window" in err
    binary = tmp_path / "b.txt"
    binary.write_bytes(b"\xff\xfe\x00\x81" * 10)
    code, _, err = run_cli(monkeypatch, capsys, "ppl", "--model", "tiny-llama", "--text-file", str(binary))
    assert code == 2 and "UTF-8" in err


def test_info_and_generate(monkeypatch, capsys):
    code, out, _ = run_cli(monkeypatch, capsys, "info", "--model", "tiny-gpt_neox", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["summary"]["residual"] == "parallel" and len(d["layers"]) == 3
    code, out, _ = run_cli(monkeypatch, capsys, "generate", "--model", "tiny-llama", "--prompt", "Hello",
                           "--max-new-tokens", "4", "--json")
    assert code == 0 and len(json.loads(out)["token_ids"]) == 4


def test_compare_writes_tidy_rows(monkeypatch, capsys, tmp_path):
    out_file = tmp_path / "cmp.json"
    code, out, err = run_cli(monkeypatch, capsys, "compare", "--model", "tiny-llama", "-p", "One", "-p", "Two",
                             "--max-new-tokens", "3", "--out", str(out_file), "--json")
    assert code == 0, err
    rows = json.loads(out_file.read_text())["rows"]
    assert [r["prompt"] for r in rows] == ["One", "Two"] and not any(r["greedy_changed"] for r in rows)


def test_compare_prints_the_texts_without_json(monkeypatch, capsys):
    """The table, then each prompt's two greedy continuations (the same texts --json gives), then the summary."""
    args = ("compare", "--model", "tiny-llama", "-p", "One", "-p", "Two", "--max-new-tokens", "4",
            "--set", "scale_site=attn_out", "--set", "scale_par=0.3")
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    code, js, err = run_cli(monkeypatch, capsys, *args, "--json")
    assert code == 0, err
    rows = json.loads(js)["rows"]
    for r in rows:
        block = f"prompt: {r['prompt']}\n  stock:      {r['text_a']!r}\n  intervened: {r['text_b']!r}"
        assert block in out
    assert out.index("stock vs intervened") < out.index("prompt: One") < out.index("greedy_change_rate")


def test_every_verb_has_help(monkeypatch, capsys):
    for verb in ["ppl", "generate", "compare", "info"]:
        code, out, _ = run_cli(monkeypatch, capsys, verb, "--help")
        assert code == 0 and "--model" in out


def test_version(monkeypatch, capsys):
    from geosteer import __version__

    code, out, err = run_cli(monkeypatch, capsys, "--version")
    assert code == 0 and out.strip() == f"geosteer {__version__}"


def test_push_uploads_the_folder(monkeypatch, capsys, tmp_path):
    """`geosteer push DIR org/name` hands the folder to the Hub API (replaced by a recorder here)."""
    from pathlib import Path

    import huggingface_hub

    calls = {}
    FakeApi = fake_hf_api(calls, tmp_path / "uploaded")

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # pushing is refused offline; the recorder is local
    shipped = Path(__file__).resolve().parents[2] / "artifacts" / "smollm2-surfaces"
    code, out, err = run_cli(monkeypatch, capsys, "push", str(shipped), "someorg/surf", "--public")
    assert code == 0, err
    assert calls["repo"] == ("someorg/surf", False) and "someorg/surf" in out
    assert sorted(p.name for p in (tmp_path / "uploaded").iterdir()) == sorted(p.name for p in shipped.iterdir())


@pytest.mark.parametrize("args,needle", [
    (["push", "/no/such/folder", "org/name"], "not a geosteer artifact"),
    (["push", "artifacts/smollm2-surfaces", "not-a-repo-id"], "not a Hub repo id"),
])
def test_push_bad_input(monkeypatch, capsys, args, needle):
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_missing_optional_package_names_its_extra(monkeypatch, capsys):
    """A verb importing an absent optional package prints which extra to install (one line, exit 2)."""
    import typer

    from geosteer.cli.common import run_app

    app = typer.Typer()

    @app.command()
    def needs_scipy() -> None:
        raise ModuleNotFoundError("No module named 'scipy'", name="scipy")

    @app.command()
    def other() -> None:
        pass

    with pytest.raises(SystemExit) as e:
        run_app(app, ["needs-scipy"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "geosteer[stats]" in err and len(err.strip().splitlines()) == 1
