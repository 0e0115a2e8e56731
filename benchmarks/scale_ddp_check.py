"""Print how close the 2-process (gloo) training run is to the 1-process run (the figures behind
tests/integrations/test_distributed.py's assertions; the test itself asserts, this prints).

    PYTHONPATH=. .venv/bin/python benchmarks/scale_ddp_check.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch


def main() -> None:
    from accelerate import Accelerator

    from tests.integrations.test_distributed import BATCH, _launch, _train

    out = Path(tempfile.mkdtemp()) / "ddp.pt"
    _launch(2, out)
    ddp = torch.load(out)
    one, losses = _train(BATCH, None, Accelerator(cpu=True))
    half, _ = _train(BATCH // 2, None, Accelerator(cpu=True))
    print(f"parameters_moved_max_abs: {one.abs().max().item():.4g}")
    print(f"two_process_vs_one_max_abs: {(ddp['coef'] - one).abs().max().item():.3g}")
    print(f"half_global_batch_vs_one_max_abs: {(half - one).abs().max().item():.3g}")
    rel = max(abs(a - b) / abs(b) for a, b in zip(ddp["losses"], losses, strict=True))
    print(f"loss_max_rel_diff: {rel:.3g}")


if __name__ == "__main__":
    main()
