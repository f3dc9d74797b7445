"""``dtrain bench nccl`` on the CuPy double's GPUs (its NCCL really sums across the worker
processes), and what it says where there are no GPUs."""

import pytest

from benchmarks.nccl_suite import NcclSettings, render, run_nccl_suite

pytestmark = pytest.mark.gpu_path


@pytest.mark.integration
def test_nccl_suite_measures_an_all_reduce_that_sums_on_every_rank(cpu_double_gpus):
    result = run_nccl_suite(NcclSettings(megabytes=1, workers=2, repeats=2, warmup=1), print)
    assert result["available"], result.get("reason")
    assert result["bytes"] == 2**20
    # busbw is 2(N-1)/N of algbw: with 2 workers, equal
    assert result["bus_gb_per_s"] == pytest.approx(result["algorithm_gb_per_s"])
    assert result["allreduce_ms"]["median"] > 0 and result["memory_gb_per_s"] > 0
    assert "busbw GB/s" in render(result)


def test_without_gpus_the_suite_says_why_it_did_not_run(monkeypatch):
    monkeypatch.delenv("DTRAIN_GPU_RUNTIME", raising=False)
    result = run_nccl_suite(NcclSettings(megabytes=1, workers=2, repeats=1), print)
    if result["available"]:
        pytest.skip("this machine has GPUs")
    assert "--device-type: gpu was requested" in result["reason"]
    assert render(result).endswith(result["reason"])
