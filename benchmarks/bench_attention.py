"""`make bench`: what attention costs on this machine, section by section, and what was measured.

Usage: python benchmarks/bench_attention.py [--out DIR] [--repeats N] [--sections a,b] [--record]

Sections (each a module bench_<name>.py; their docstrings say what they time):
  attention  the forward pass: NumPy reference, memory-efficient NumPy, PyTorch's fused kernel and its
             math path, B·H = 32, T in {256, 1024, 4096} (NumPy also at 8192)      chapters 2, 7
  causal     memory-efficient against the fused kernel at B·H = 8, T = 4096, causal and not   chapters 7, 9
  decoding   one generated token of a small decoder, with and without a KV cache              chapter 9
  backward   the NumPy backward passes against torch autograd's                               chapter 10
  minilm     all-MiniLM-L6-v2's NumPy forward against transformers' BertModel                 chapter 13
  llm        SmolLM2-135M's greedy decoding in NumPy against transformers' generate, 1 and 2 threads
             (medians of N rounds, not best of N); loading time and peak memory               chapter 14

Timings are compared only as ratios within one run: the implementations of a section are timed in
interleaved rounds, best of N. Each section's result carries, under "measured", the commit, the SHA-256
of every source file it timed (and of its own module), the CPU, the thread counts, the library versions
and the BLAS kernel. A run of some sections keeps the others from --base (default: the recorded run);
--record writes the result over the recorded run in the package (src/selfattention/data/bench-2core.json),
which chapters read through selfattention.recorded.recorded_run and the tests check against the sources.
Not part of make test: it takes several minutes and about 12 GB of memory.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import platform
import subprocess
import sys
from pathlib import Path

from bench_common import ROOT

from selfattention.machine import numerics
from selfattention.recorded import RECORD_FILE, package_sources, source_hashes

SECTIONS = {
    "attention": "bench_forward",
    "causal": "bench_causal",
    "decoding": "bench_decoding",
    "backward": "bench_backward",
    "minilm": "bench_minilm",
    "llm": "bench_llm",
}
RECORD = ROOT / "src" / "selfattention" / RECORD_FILE


def git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def measured(module) -> dict:
    """What a section measured: the sources it timed (hashed), the commit, the machine and its numerics."""
    package_files = package_sources(list(module.SOURCES))
    hashes = source_hashes(package_files, ROOT / "src")
    bench_files = [f"benchmarks/{module.__name__}.py", "benchmarks/bench_common.py"]
    hashes.update(source_hashes(bench_files, ROOT))
    changed = git("status", "--porcelain", "--", *(f"src/{name}" for name in package_files), *bench_files)
    return {
        "commit": git("rev-parse", "HEAD"),
        "sources_uncommitted": bool(changed and changed != "unknown"),
        "sources": hashes,
        "date": datetime.date.today().isoformat(),
        "python": platform.python_version(),
        **numerics(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "bench")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds (best of)")
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated, from {', '.join(SECTIONS)}")
    parser.add_argument("--base", type=Path, default=RECORD, help="the run whose other sections are kept")
    parser.add_argument("--record", action="store_true", help=f"also write the result over {RECORD.relative_to(ROOT)}")
    args = parser.parse_args()
    sections = [name.strip() for name in args.sections.split(",") if name.strip()]
    unknown = set(sections) - set(SECTIONS)
    if unknown or not sections:
        parser.error(f"unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1; got {args.repeats}")
    results = {"format": 2, "sections": {}}
    if set(sections) != set(SECTIONS) and args.base.exists():
        base = json.loads(args.base.read_text())
        results["sections"] = dict(base.get("sections", {})) if base.get("format") == 2 else {}
    for name in sections:
        module = importlib.import_module(SECTIONS[name])
        print(f"[{name}] {module.__doc__.splitlines()[0]}", flush=True)
        result = module.run(args.repeats)
        result["measured"] = measured(module)
        results["sections"][name] = result
        print("\n".join(module.report(result)) + "\n", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(results, indent=1) + "\n"
    (args.out / "bench.json").write_text(text)
    print(f"wrote {args.out / 'bench.json'}")
    if args.record:
        RECORD.write_text(text)
        print(f"recorded in {RECORD.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
