"""A run's data flows one way (docs/architecture/run-lifecycle.md, "The life of a `dtrain run`"):
the job is the run's inputs, which nothing that trains it writes into; what a run finds out is
returned. Checked twice: the job refuses a write at run time (a frozen dataclass), and no module of
``workbench`` writes an attribute of a job it was handed, or mutates one in place."""

from __future__ import annotations

import ast
import dataclasses

import pytest

from tests.test_architecture import PACKAGE

JOB_NAMES = {"job"}  # the name every function that is handed a TrainingJob gives it
MUTATORS = {"append", "extend", "update", "add", "insert", "pop", "clear", "remove"}


def _job_attribute(node: ast.AST) -> bool:
    """``job.x`` or ``job.x.y`` (or ``self.job.x``): an attribute reached from a job."""
    while isinstance(node, ast.Attribute):
        value = node.value
        if isinstance(value, ast.Name) and value.id in JOB_NAMES:
            return True
        if isinstance(value, ast.Attribute) and value.attr in JOB_NAMES:
            return True
        node = value
    return False


def writes_into_a_job(source: str, filename: str = "<source>") -> list[str]:
    """Each place ``source`` writes into a job: an assignment to one of its attributes (or
    theirs), an augmented assignment, a delete, or an in-place mutator called on one."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in MUTATORS
            and isinstance(node.func.value, ast.Attribute)
            and _job_attribute(node.func.value)
        ):
            found.append(f"{filename}:{node.lineno}: {ast.unparse(node.func)}(...)")
        for target in targets:
            for part in ast.walk(target):
                if isinstance(part, ast.Attribute) and _job_attribute(part):
                    found.append(f"{filename}:{node.lineno}: {ast.unparse(target)} = ...")
                    break
    return found


def test_the_scan_finds_the_writes_a_job_used_to_take():
    # What the device side, the store link and the strategies did before the job was frozen.
    source = """
def run(job, session, self):
    job.device_type = session.device_type
    job.faults.restarts += 1
    self.job.faults.recovery_seconds.append(2.0)
    job.observers.append(object())
    first, job.initial_parameters = 3, {}
    job.config.options["x"] = 1
"""
    assert len(writes_into_a_job(source)) == 6


def test_no_module_of_the_workbench_writes_into_a_job():
    found = [
        write
        for path in sorted(PACKAGE.rglob("*.py"))
        for write in writes_into_a_job(path.read_text(), str(path.relative_to(PACKAGE.parent)))
    ]
    assert not found, "\n".join(found)


def test_a_job_refuses_a_write_at_run_time():
    from workbench.config import RunConfig
    from workbench.launch.runner import prepare_run

    job = prepare_run(RunConfig(steps=2, hidden=(8,))).job
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.device_type = "gpu"  # type: ignore[misc]
    variant = dataclasses.replace(job, run_id="r1")  # a variant is a copy
    assert variant.run_id == "r1" and job.run_id is None and variant.stop is job.stop
