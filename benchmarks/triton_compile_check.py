"""Compile every variant of the fused Triton surface kernels for a GPU target, without a GPU.

Triton's interpreter (the CPU tests) does not enforce what the compiler does (tile shapes of products,
types across branches, register allocation): this runs the real compiler down to a cubin for the given
architecture (default sm_90, H100/H200) with the bundled ptxas, for the forward (each mask kind, with and
without surfaces), the split-K decode part and its merge, the training step's backward (dq/dC and
dk/dv, at the tile sizes the wrapper uses on CUDA) and the rank-r forward and decode. About a minute of CPU per kernel.

    .venv/bin/python benchmarks/triton_compile_check.py            # sm_90, head_dim 64
    .venv/bin/python benchmarks/triton_compile_check.py --arch 80 --head-dim 128
    .venv/bin/python benchmarks/triton_compile_check.py --only backward   # the training step's kernels
    .venv/bin/python benchmarks/triton_compile_check.py --only rank       # the rank-r forward
"""

from __future__ import annotations

import argparse
import inspect

FLOATS = {"scale", "softcap", "sc", "off"}


def _signature(fn, ptrs: dict, consts: dict) -> dict:
    sig = {}
    for p in inspect.signature(fn.fn).parameters:
        sig[p] = "constexpr" if p in consts else ptrs.get(p, "fp32" if p in FLOATS else "i32")
    return sig


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", type=int, default=90)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp32"))
    ap.add_argument("--only", default="", help="compile only the variants whose name contains this text")
    a = ap.parse_args(argv)
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from geosteer.kernels import triton_backward as tb
    from geosteer.kernels import triton_kernels as tk
    from geosteer.kernels import triton_low_rank_kernels as tlk

    target = GPUTarget("cuda", a.arch, 32)
    bd = max(16, 1 << (a.head_dim - 1).bit_length())
    base = dict(G=8, K=11, KB=16, HAS_SURF=True, CAUSAL=True, MASK_KIND=0, SOFTCAP=False, WINDOW=False,
                BLOCK_M=32, BLOCK_N=32, BLOCK_D=bd, DV=min(bd, 32), D=a.head_dim)
    x = "*" + a.dtype
    f32 = "*fp32"
    io = dict(Q=x, Kp=x, V=x, Cf=f32, Out=f32, Lse=f32)
    fwd = dict(WITH_VALUE=True, STORE_LSE=True)
    cases = [
        ("forward causal + window", tk._fwd, dict(io, Mk="*u8"), dict(base, WINDOW=True, **fwd)),
        ("forward boolean mask", tk._fwd, dict(io, Mk="*u8"), dict(base, CAUSAL=False, MASK_KIND=1, **fwd)),
        ("forward additive mask, softcap, delta only", tk._fwd, dict(io, Mk=f32),
         dict(base, CAUSAL=False, MASK_KIND=2, SOFTCAP=True, WITH_VALUE=False, STORE_LSE=True)),
        ("forward stock (lse)", tk._fwd, dict(io, Mk="*u8"), dict(base, HAS_SURF=False, G=1, K=1, KB=1, **fwd)),
        ("decode partial", tk._partial, dict(Q=x, Kp=x, V=x, Mk="*u8", Pm=f32, Pl=f32, Pv=f32, Pf=f32),
         dict(base, CAUSAL=False, MASK_KIND=1, BLOCK_M=16)),
        ("decode combine", tk._combine, dict(Q=x, Cf=f32, Pm=f32, Pl=f32, Pv=f32, Pf=f32, Out=f32, Lse=f32),
         dict(G=8, K=11, KB=16, HAS_SURF=True, WITH_VALUE=True, STORE_LSE=True, BLOCK_M=16, BLOCK_D=bd,
              DV=min(bd, 32), D=a.head_dim)),
    ]
    bwd_io = dict(Q=x, Kp=x, V=x, Cf=f32, Mk="*u8", Gr=f32, O=f32, Lse=f32)
    bwd = dict(base, BLOCK_M=16, BLOCK_N=16, WITH_VALUE=True)
    del bwd["DV"]
    cases += [
        ("backward dq + dC, causal + window", tb._bwd_dq, dict(bwd_io, OutQ=f32, OutC=f32), dict(bwd, WINDOW=True)),
        ("backward dk + dv, causal + window", tb._bwd_dkdv, dict(bwd_io, OutK=f32, OutV=f32), dict(bwd, WINDOW=True)),
        ("backward dq + dC, boolean mask, softcap", tb._bwd_dq, dict(bwd_io, OutQ=f32, OutC=f32),
         dict(bwd, CAUSAL=False, MASK_KIND=1, SOFTCAP=True)),
    ]
    narrow_io = dict(Q=x, Kp=x, V=x, Uf=f32, Wf=f32, Out=f32)
    narrow = dict(G=8, K=11, R=2, RB=2, CAUSAL=True, MASK_KIND=0, SOFTCAP=False, WINDOW=False, WITH_VALUE=True,
                  BLOCK_M=32, BLOCK_N=32, BLOCK_D=bd, DV=min(bd, 64), D=a.head_dim)
    cases += [
        ("rank-2 forward causal + window", tlk._fwd_narrow, dict(narrow_io, Mk="*u8"), dict(narrow, WINDOW=True)),
        ("rank-3 forward, decode tile, boolean mask, softcap, delta only", tlk._fwd_narrow,
         dict(narrow_io, Mk="*u8"), dict(narrow, R=3, RB=4, DV=min(bd, 32), BLOCK_M=16, CAUSAL=False, MASK_KIND=1,
                                         SOFTCAP=True, WITH_VALUE=False)),
        ("rank-2 decode partial", tlk._partial_narrow,
         dict(Q=x, Kp=x, V=x, Wf=f32, Mk="*u8", Pm=f32, Pl=f32, Pv=f32, Ps=f32),
         {n: v for n, v in dict(narrow, CAUSAL=False, MASK_KIND=1, BLOCK_M=16).items() if n != "WITH_VALUE"}),
        ("rank-2 decode combine", tlk._combine_narrow,
         dict(Q=x, Uf=f32, Pm=f32, Pl=f32, Pv=f32, Ps=f32, Out=f32),
         dict(G=8, K=11, R=2, RB=2, WITH_VALUE=True, BLOCK_M=16, BLOCK_D=bd, DV=min(bd, 64), D=a.head_dim)),
    ]
    if a.only:
        cases = [c for c in cases if a.only in c[0]]
    for name, fn, ptrs, consts in cases:
        k = triton.compile(ASTSource(fn=fn, signature=_signature(fn, ptrs, consts), constexprs=consts), target=target)
        print(f"{name}: compiled for sm_{a.arch} (cubin {len(k.asm['cubin'])} bytes)", flush=True)


if __name__ == "__main__":
    main()
