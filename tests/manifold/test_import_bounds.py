"""``manifold import`` checks a file from its header before reading any numbers: a sparse or complex
tensor, more numbers than a surfaces file holds (a 400M-element tensor: refused without reading it), a
malformed safetensors header and a deeply nested config are one line (before the model loads), never a
traceback."""

from __future__ import annotations

import json
import resource
import struct

import pytest
import torch

from geosteer.errors import GeosteerError
from geosteer.manifold.importer import read_released
from tests.cli_helpers import refused_before_load


def _safetensors(path, header: dict, data_bytes: int, *, sparse_file: bool = False) -> None:
    raw = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        if sparse_file:
            f.truncate(8 + len(raw) + data_bytes)  # a hole: the disk holds nothing, the header claims 1.6 GB
        else:
            f.write(b"\0" * data_bytes)


def _huge_safetensors(tmp_path):
    p = tmp_path / "huge.safetensors"
    n = 20_000 * 20_000  # 400M float32 numbers
    _safetensors(p, {"layers.0": {"dtype": "F32", "shape": [1, 20_000, 20_000], "data_offsets": [0, 4 * n]}},
                 4 * n, sparse_file=True)
    return p


def test_huge_tensors_are_refused_from_the_header(tmp_path):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(GeosteerError, match="400,000,000 numbers; a surfaces file has at most") as e:
        read_released(_huge_safetensors(tmp_path))
    assert "\n" not in str(e.value)
    p = tmp_path / "huge.pt"
    torch.save({"layers.0": torch.zeros(1).expand(400_000_000)}, p)  # 400M numbers, one stored
    with pytest.raises(GeosteerError, match="holds more than .* numbers"):
        read_released(p)
    grew_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grew_kb < 400_000  # far below the 1.6 GB the numbers would take


def test_wrong_shapes_are_refused_before_the_numbers_are_read(tmp_path, monkeypatch, capsys):
    """A stacked tensor of 100M numbers whose heads do not fit tiny-llama: refused from its shape."""
    p = tmp_path / "wide.safetensors"
    shape = [3, 4, 16, 1270, 121]  # not K x K control nets
    n = 3 * 4 * 16 * 1270 * 121
    _safetensors(p, {"surfaces": {"dtype": "F32", "shape": shape, "data_offsets": [0, 4 * n]}}, 4 * n,
                 sparse_file=True)
    line = refused_before_load(monkeypatch, capsys, "manifold", "import", str(p), "-m", "tiny-llama", "-o",
                               str(tmp_path / "out"))
    assert "shape" in line and not (tmp_path / "out").exists()


def test_huge_file_cli_is_one_line_before_the_model_loads(tmp_path, monkeypatch, capsys):
    line = refused_before_load(monkeypatch, capsys, "manifold", "import", str(_huge_safetensors(tmp_path)), "-m",
                               "tiny-llama", "-o", str(tmp_path / "out"))
    assert "numbers" in line


@pytest.mark.parametrize("header, needle", [
    ({"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 8]}}, "does not fit its 8 bytes"),
    ({"a": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]}}, "dtype 'Q4'"),
    ({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, "malformed shape"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 99]}}, "malformed shape or data offsets"),
    ({"a": [1, 2]}, "is not an object"),
])
def test_malformed_safetensors_headers_are_one_line(tmp_path, header, needle):
    p = tmp_path / "bad.safetensors"
    _safetensors(p, header, 8)
    with pytest.raises(GeosteerError, match=needle) as e:
        read_released(p)
    assert "\n" not in str(e.value)


def test_deep_safetensors_header_is_one_line(tmp_path):
    p = tmp_path / "deep.safetensors"
    raw = ("[" * 100_000 + "]" * 100_000).encode()
    p.write_bytes(struct.pack("<Q", len(raw)) + raw)
    with pytest.raises(GeosteerError, match="nested deeper"):
        read_released(p)


@pytest.mark.parametrize("make, needle", [
    (lambda: {"layers.0": torch.eye(3).to_sparse()}, "sparse_coo tensor"),
    (lambda: {"layers.0": torch.zeros(4, 16, 11, 11, dtype=torch.complex64)}, "complex64"),
    (lambda: [torch.eye(3).to_sparse()], "sparse_coo tensor"),
])
def test_sparse_and_complex_tensors_are_refused(tmp_path, make, needle):
    p = tmp_path / "x.pt"
    torch.save(make(), p)
    with pytest.raises(GeosteerError, match=needle):
        read_released(p)


def test_deeply_nested_config_is_read_without_recursion(tmp_path):
    doc: dict = {"grid_size": 8}
    for _ in range(400):
        doc = {"config": doc}
    doc["surfaces"] = {"layers.0": torch.zeros(4, 16, 11, 11)}
    p = tmp_path / "deep.pt"
    torch.save(doc, p)
    rel = read_released(p)
    assert list(rel.tensors) == [0] and rel.grid_size is None  # settings that deep are not settings


def test_safetensors_numbers_round_trip(tmp_path):
    """The lazily read safetensors tensors hold the file's numbers."""
    from safetensors.torch import save_file

    coef = torch.randn(3, 4, 16, 11, 11, generator=torch.Generator().manual_seed(0))
    save_file({"surfaces": coef}, str(tmp_path / "s.safetensors"))
    rel = read_released(tmp_path / "s.safetensors")
    assert rel.layout == "stacked" and all(torch.equal(rel.tensors[i], coef[i]) for i in range(3))
