"""The PyTorch RPC parameter-server peer trains with a server and its trainers."""

from __future__ import annotations

import pytest

from benchmarks.ps_reference import ParameterServerSettings, run_torch_parameter_server
from benchmarks.torch_reference import import_torch

pytestmark = pytest.mark.skipif(import_torch() is None, reason="PyTorch is not installed")


@pytest.mark.integration
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_peer_trains_through_its_server_and_reports_its_step(mode):
    settings = ParameterServerSettings(
        mode=mode, global_batch=8, hidden=(4,), inputs=6, steps=3, warmup=1
    )
    figures = run_torch_parameter_server(settings)
    assert figures["ms_per_step"] > 0 and figures["final_loss"] > 0
    assert figures["samples_per_second"] == pytest.approx(8e3 / figures["ms_per_step"])


def test_a_mode_the_peer_lacks_is_refused_before_any_process_starts():
    with pytest.raises(ValueError, match="mode must be one of sync, async"):
        run_torch_parameter_server(ParameterServerSettings(mode="stale"))
