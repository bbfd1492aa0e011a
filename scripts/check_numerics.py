"""Check that a `make test-stable` configuration really changes the numerics it claims to change.

Usage: python scripts/check_numerics.py one-thread | other-simd

Run with the same environment as the nbval pass it guards (the Makefile does).
An environment variable that is misspelt, renamed by a new NumPy or PyTorch, or
ignored on this CPU would let the pass re-run the default numerics and prove
nothing; this script fails instead, naming what did not take effect.

- one-thread: PyTorch and NumPy's BLAS each run one thread (OMP_NUM_THREADS=1).
- other-simd: NumPy's ufuncs run their baseline kernels, not AVX2 or AVX-512
  (NPY_DISABLE_CPU_FEATURES), PyTorch its DEFAULT kernels (ATEN_CPU_CAPABILITY),
  and MKL its compatible code path (MKL_CBWR); on x86-64 only, where those
  exist. Whether MKL_CBWR changed this CPU's float32 matrix product is printed:
  MKL picks the compatible path by itself on some CPUs.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys

MATMUL = (
    "import hashlib, torch; g = torch.Generator().manual_seed(0); "
    "a, b = torch.randn(300, 257, generator=g), torch.randn(257, 301, generator=g); "
    "print(hashlib.sha256((a @ b).numpy().tobytes()).hexdigest())"
)


def _matmul_digest(environment: dict[str, str]) -> str:
    run = subprocess.run([sys.executable, "-c", MATMUL], env=environment, capture_output=True, text=True, check=True)
    return run.stdout.strip()


def check(mode: str) -> list[str]:
    """The settings of ``mode`` that did not take effect (empty if all did)."""
    from selfattention.machine import numerics

    n = numerics()
    print(
        f"{mode}: NumPy SIMD {n['numpy_simd']}, BLAS {n['blas']} on {n['blas_threads']} threads, "
        f"torch {n['torch_capability']} on {n['torch_threads']} threads; environment {n['environment']}"
    )
    problems = []
    if mode == "one-thread":
        if n["torch_threads"] != 1:
            problems.append(f"torch runs {n['torch_threads']} threads, not 1 (is OMP_NUM_THREADS=1 set?)")
        if n["blas_threads"] not in (1, None):
            problems.append(f"NumPy's BLAS runs {n['blas_threads']} threads, not 1 (is OMP_NUM_THREADS=1 set?)")
    elif mode == "other-simd":
        if platform.machine().lower() not in ("x86_64", "amd64"):
            print(f"other-simd: {platform.machine()} has none of these x86-64 paths; this pass re-runs the default")
            return []
        if not n["numpy_simd"].startswith("baseline"):
            problems.append(f"NumPy still dispatches to {n['numpy_simd']} (NPY_DISABLE_CPU_FEATURES not in effect)")
        if n["torch_capability"] != "DEFAULT":
            problems.append(f"torch still runs {n['torch_capability']} kernels (ATEN_CPU_CAPABILITY not in effect)")
        if os.environ.get("MKL_CBWR") != "COMPATIBLE":
            problems.append("MKL_CBWR is not COMPATIBLE")
        else:
            default = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"}
            changed = _matmul_digest(default) != _matmul_digest(dict(os.environ))
            print(
                f"other-simd: MKL_CBWR=COMPATIBLE {'changes' if changed else 'does not change'} torch's float32 "
                "matrix product on this CPU"
            )
    else:
        problems.append(f"unknown mode {mode!r}; expected one-thread or other-simd")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__)
        return 2
    problems = check(argv[0])
    for problem in problems:
        print(f"check_numerics: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
