"""trtllm-bench's tuned settings (NVIDIA/TensorRT-LLM tensorrt_llm/bench/build/tuning.py,
``finetune_setting``, and tensorrt_llm/bench/benchmark/utils/general.py, ``get_settings``), against
values worked by hand from those functions' rules."""
from __future__ import annotations

import pytest

from fastsim.errors import FastsimInputError
from fastsim.validate.trtllm_bench import bench_settings


@pytest.mark.parametrize("kv, isl, osl, pp, expected", [
    # R = 1e6 / 2048 = 488.3 -> raw_bs 488.3 -> 128 x ceil(3.81) = 512; raw_token = 488.3 x 2 = 976.6 -> 2048
    (1e6, 1024, 1024, 1, (512, 2048)),
    # R = 2e5 / 9216 = 21.7 -> bs max(64, 32) = 64; raw_token = 21.7 x 9 = 195.3 -> 2048
    (2e5, 8192, 1024, 1, (64, 2048)),
    # R = 4e6 / 9216 = 434.0 -> bs 512; raw_token = 3906.2 -> 256 x ceil(15.26) = 4096
    (4e6, 8192, 1024, 1, (512, 4096)),
    # R = 2e7 / 2176 = 9191 -> capped 4096 -> bs 4096; raw_token = 4096 x 1.0625 = 4352 -> 512 x 9 = 4608
    (2e7, 128, 2048, 1, (4096, 4608)),
    # the same with PP 2: raw_bs 2048 -> 2048; raw_token 2176 -> 256 x 9 = 2304
    (2e7, 128, 2048, 2, (2048, 2304)),
    # R = 1e7 / 2176 = 4595.6 -> 4096; 128/2048 reversed: raw_token = 4096 x 17 -> capped 32768
    (1e7, 2048, 128, 1, (4096, 32768)),
])
def test_tuned_settings(kv, isl, osl, pp, expected):
    assert bench_settings(kv, isl, osl, pp, chunked_prefill=True) == expected


@pytest.mark.parametrize("kv, isl, osl, expected", [
    # tuned (512, 2048) already covers ISL 1024 + 512
    (1e6, 1024, 1024, (512, 2048)),
    # tuned (64, 2048): raised to 8192 + 64 so an 8192-token prompt fits one step
    (2e5, 8192, 1024, (64, 8256)),
    # tuned (512, 4096): raised to 8192 + 512
    (4e6, 8192, 1024, (512, 8704)),
    # R = 812461 / 5500 = 147.7 -> bs 160; raw_token 1625 -> 2048; raised to 5000 + 160
    (812461.0, 5000, 500, (160, 5160)),
    # tuned (4096, 32768) is above 2048 + 4096: unchanged
    (1e7, 2048, 128, (4096, 32768)),
])
def test_without_chunked_prefill_max_num_tokens_covers_the_longest_prompt(kv, isl, osl, expected):
    assert bench_settings(kv, isl, osl) == expected


def test_too_little_kv_is_refused_as_trtllm_bench_does():
    with pytest.raises(FastsimInputError, match="at least one request"):
        bench_settings(1000.0, 1024, 1024)
