"""``--strategy mesh --mesh dp=A,tp=B,pp=C``: a mesh that does not parse, does not match
``--devices``, asks more stages than the model has layers, or a tensor split that does not
divide a layer, is refused naming the flag before anything starts (exit 2 on the command
line)."""

import pytest

from workbench.cli.main import main
from workbench.config import ConfigError, RunConfig
from workbench.launch.runner import prepare_run


def refusal(**flags) -> ConfigError:
    with pytest.raises(ConfigError) as raised:
        prepare_run(RunConfig(strategy="mesh", **flags))
    return raised.value


@pytest.mark.parametrize(
    ("mesh", "expected"),
    [
        ("dp=2,tq=2", "AXIS=SIZE with AXIS one of dp, tp, pp"),
        ("dp=2,tp=0", "tp=0: each axis's size must be a whole number >= 1"),
        ("dp=2,dp=2", "dp is given twice"),
    ],
)
def test_a_malformed_mesh_names_the_flag_and_what_is_allowed(mesh, expected):
    error = refusal(devices=4, mesh=mesh)
    assert error.field == "--mesh"
    assert expected in str(error)


def test_the_command_line_refuses_a_malformed_mesh_with_exit_2(capsys):
    assert main(["run", "--strategy", "mesh", "--devices", "4", "--mesh", "dp=two"]) == 2
    err = capsys.readouterr().err
    assert "--mesh" in err and "dp=two" in err and "Traceback" not in err


def test_a_mesh_whose_product_is_not_the_device_count_names_both_flags():
    error = refusal(devices=4, mesh="dp=2,tp=2,pp=2")
    assert error.field == "--mesh"
    assert "2 x 2 x 2 = 8 devices" in str(error) and "--devices is 4" in str(error)


def test_more_stages_than_layers_names_the_mesh():
    error = refusal(devices=4, mesh="pp=4", hidden=(16,))  # Dense, Activation, Dense
    assert error.field == "--mesh"
    assert "pp=4 pipeline stages need at least 4 layers; the model has 3" in str(error)


def test_tp_not_dividing_a_split_layer_names_the_mesh():
    error = refusal(devices=4, mesh="dp=1,tp=4,pp=1", hidden=(18, 16))
    assert error.field == "--mesh"
    assert "do not divide dense_0's 18 units" in str(error)


def test_a_batch_the_replicas_and_micro_batches_do_not_divide_names_the_batch():
    error = refusal(devices=4, mesh="dp=4", batch_size=24, microbatches=4)
    assert error.field == "--batch-size"
    assert "4 replicas (--mesh dp) x 4 micro-batches" in str(error)


def test_a_mesh_whose_stages_hold_nothing_to_split_names_the_mesh():
    # Flatten + Dense in one stage, the last Dense in the other: no Dense pair in a stage.
    error = refusal(devices=4, mesh="tp=2,pp=2", hidden=(16,))
    assert error.field == "--mesh"
    assert "no stage of the model splits over 2 tensor-parallel ranks" in str(error)


def test_the_schedule_rules_name_their_flags():
    error = refusal(devices=4, mesh="dp=2,pp=2", virtual_stages=3)
    assert error.field == "--virtual-stages"
    assert "applies only with --schedule interleaved-1f1b" in str(error)
    error = refusal(
        devices=4,
        mesh="dp=1,tp=2,pp=2",
        schedule="interleaved-1f1b",
        microbatches=3,
        batch_size=30,
    )
    assert error.field == "--microbatches" and "multiple of pp=2" in str(error)
    error = refusal(devices=4, mesh="dp=2,pp=2", schedule="interleaved-1f1b", virtual_stages=3)
    assert error.field == "--mesh"
    assert "pp=2 pipeline stages x 3 virtual stages (--virtual-stages) need at least 6" in str(
        error
    )
