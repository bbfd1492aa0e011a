"""`make bench` section "minilm" (chapter 13): all-MiniLM-L6-v2's NumPy forward against transformers' BertModel."""

from __future__ import annotations

import os
import time
from functools import partial

import numpy as np
import torch
from bench_common import ROOT  # noqa: F401  (puts src/ on the path)

from selfattention.measure import best_time

#: The package modules whose code this section times.
SOURCES = ("pretrained", "measure")

SENTENCES = (
    "The quick brown fox jumps over the lazy dog near the quiet river bank.",
    "Self-attention lets every token in a sentence look at every other token.",
    "The central bank raised interest rates for the third time this year.",
    "Heavy rain flooded the narrow streets of the old town overnight.",
    "She practises the violin for an hour every single evening after work.",
    "Researchers trained a small transformer on a laptop in a few minutes.",
    "The train to Edinburgh leaves from platform four at half past nine.",
    "Regular exercise and enough sleep lower the risk of heart disease.",
)


def run(repeats: int) -> dict:
    """Loading, and the forward of 8 sentences of about 16 tokens, NumPy against BertModel."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    import transformers
    from transformers import BertModel
    from transformers.utils import logging

    from selfattention import load_minilm

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    start = time.perf_counter()
    model = load_minilm()
    load_numpy = time.perf_counter() - start
    start = time.perf_counter()
    reference = BertModel.from_pretrained(str(model.path), local_files_only=True).eval()
    load_torch = time.perf_counter() - start
    ids, keep = model.token_ids(list(SENTENCES))
    t_ids, t_mask = torch.from_numpy(ids), torch.from_numpy(keep.astype(np.int64))

    def torch_forward() -> None:
        with torch.no_grad():
            reference(input_ids=t_ids, attention_mask=t_mask)

    for _ in range(3):  # warm-up: the first calls allocate and pick kernels
        model.forward(ids, keep)
        torch_forward()
    seconds = {
        "numpy": best_time(partial(model.forward, ids, keep), max(repeats, 20)),
        "torch": best_time(torch_forward, max(repeats, 20)),
    }
    return {
        "sentences": len(SENTENCES),
        "tokens": int(keep.sum()),
        "T": int(ids.shape[1]),
        "torch_attention": reference.config._attn_implementation,
        "transformers": transformers.__version__,  # the baseline's own library: it picks sdpa or eager
        "load_seconds": {"numpy": load_numpy, "torch": load_torch},
        "seconds": seconds,
        "ratios": {"numpy_over_torch_time": seconds["numpy"] / seconds["torch"]},
    }


def report(result: dict) -> list[str]:
    return [
        f"all-MiniLM-L6-v2, {result['sentences']} sentences padded to T = {result['T']} (target: numpy/torch <= 3):",
        f"  forward: numpy {result['seconds']['numpy'] * 1e3:.1f} ms, BertModel ({result['torch_attention']}) "
        f"{result['seconds']['torch'] * 1e3:.1f} ms, ratio {result['ratios']['numpy_over_torch_time']:.2f}; "
        f"loading: numpy {result['load_seconds']['numpy']:.2f} s, BertModel {result['load_seconds']['torch']:.2f} s",
    ]
