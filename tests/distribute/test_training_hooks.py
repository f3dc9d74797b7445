"""``Sequential.compile``/``fit`` reach the strategies through hooks the package registers
lazily; importing the package again (a reload, a second import after ``sys.modules`` was
cleaned) must not leave them calling themselves."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

SCRIPT = """
import importlib
import workbench
import workbench.distribute
importlib.reload(workbench)
model = workbench.Sequential([workbench.Flatten(), workbench.Dense(10)], input_shape=(1, 8, 8))
model.compile(steps=3, batch_size=32, dtype="float64", optimizer="sgd", lr=0.5)
print(type(model.strategy).__name__)
"""


def test_a_model_compiles_after_the_package_is_imported_again():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "OneDeviceStrategy"
