"""What ``pip install`` resolves to: GPU extras for the CUDA major of the machine's driver, and
dependency ranges that admit what CuPy 14 and numba admit (their own caps were read off the
wheels' metadata: cupy-cuda12x/13x 14.2.0 and numba 0.68.1 both require numpy < 2.6)."""

from __future__ import annotations

from pathlib import Path

import tomllib
from packaging.requirements import Requirement

PROJECT = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
EXTRAS = PROJECT["optional-dependencies"]


def requirements(extra: str) -> dict[str, Requirement]:
    return {Requirement(text).name: Requirement(text) for text in EXTRAS[extra]}


def test_each_cuda_major_has_its_own_gpu_extra_with_matching_builds():
    for major in ("12", "13"):
        wanted = requirements(f"gpu-cu{major}")
        assert set(wanted) == {f"cupy-cuda{major}x", "dask-cuda"}
        assert wanted["dask-cuda"].extras == {f"cu{major}"}
        assert wanted[f"cupy-cuda{major}x"].specifier.contains("14.2.0")
        assert wanted[f"cupy-cuda{major}x"].specifier.contains("13.6.0")  # CuPy 13 works too


def test_ucx_extras_bring_what_distributed_needs_to_move_device_arrays():
    for major in ("12", "13"):
        wanted = requirements(f"ucx-cu{major}")
        # The UCX comms, RMM to receive CUDA frames, numba for distributed's CuPy serializers.
        assert {f"distributed-ucxx-cu{major}", f"rmm-cu{major}", "numba"} <= set(wanted)


def test_numpy_may_be_what_cupy_14_and_numba_allow():
    numpy = next(Requirement(t) for t in PROJECT["dependencies"] if t.startswith("numpy"))
    assert numpy.specifier.contains("2.5.5") and numpy.specifier.contains("2.0.0")
    assert not numpy.specifier.contains("2.6.0")  # above what cupy 14.2 and numba 0.68 accept
