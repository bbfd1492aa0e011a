"""Chapter 14's reference numbers from transformers, recorded so that the chapter need not load transformers.

Usage: python scripts/record_smollm2_reference.py [--out src/selfattention/data/smollm2_reference.json]

Loading torch and transformers and building LlamaForCausalLM takes about 7 s, a third of the chapter's
20-second budget, so the chapter compares its NumPy model with numbers recorded here, and
tests/test_llm.py runs `build()` again and checks that it still gives them (to float32 rounding).

For the chapter's prompt (a chat question) the record holds, from transformers' LlamaForCausalLM built
from the same dequantized weights (selfattention.interop.llama.transformers_llama, float32, fused
attention):

- "ids": the prompt's token ids, fed to both models (the comparison never depends on a tokenizer);
- "columns" and "logits": at every position, the logits of the 5 tokens transformers ranks highest
  and of 27 fixed vocabulary entries (seeded), as float32 values written out in full;
- "greedy": the 32 tokens transformers' generate(do_sample=False) picks, with its cache and without.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "selfattention" / "data" / "smollm2_reference.json"
QUESTION = "Why do leaves change colour in autumn?"
NEW_TOKENS = 32
TOP, FIXED = 5, 27


def build(model: Any = None) -> dict[str, Any]:
    """The record, computed now (``model``: a loaded SmolLM2, or None to load it)."""
    import torch
    import transformers

    from selfattention.interop.llama import transformers_llama
    from selfattention.llm import load_smollm2

    torch.manual_seed(0)
    model = load_smollm2() if model is None else model
    reference = transformers_llama(model.weights)
    ids = model.encode(model.chat_prompt(QUESTION))
    with torch.no_grad():
        logits = reference(torch.tensor([ids])).logits[0].numpy()  # (T, V) float32
        greedy = {
            name: reference.generate(
                torch.tensor([ids]),
                max_new_tokens=NEW_TOKENS,
                do_sample=False,
                use_cache=use_cache,
                eos_token_id=model.eos_id,
                pad_token_id=model.eos_id,
            )[0, len(ids) :].tolist()
            for name, use_cache in (("cached", True), ("uncached", False))
        }
    fixed = np.random.default_rng(0).choice(model.config.vocab_size, size=FIXED, replace=False)
    top = np.argsort(-logits, axis=-1, kind="stable")[:, :TOP]  # (T, 5)
    columns = np.concatenate([top, np.broadcast_to(fixed, (len(ids), FIXED))], axis=1)  # (T, 32)
    values = np.take_along_axis(logits, columns, axis=1)
    return {
        "question": QUESTION,
        "ids": ids,
        "columns": columns.tolist(),
        "logits": [[float(v) for v in row] for row in values],
        "greedy": greedy,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    record = build()
    args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out} ({len(record['ids'])} prompt tokens)", file=sys.stderr)


if __name__ == "__main__":
    main()
