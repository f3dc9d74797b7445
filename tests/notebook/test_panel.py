"""The live panel and the form, on real runs: chart sources hold the streamed points, the
panel says finished as soon as a cluster run's devices are done, its Stop button ends a run,
chart refreshes stay at or under 10 a second, and the form rejects what the magic rejects with
the same message."""

from __future__ import annotations

import html
import time

import pytest
from IPython.core.error import UsageError

from workbench.charts.live_charts import MAX_REFRESH_HZ
from workbench.notebook.panel import TrainingForm, form_start
from workbench.store import RunStore


@pytest.mark.integration
def test_after_a_run_the_chart_sources_hold_every_streamed_point(shell):
    run = shell.run_line_magic("dtrain", "--steps 8 --hidden 16")
    panel = run.panel()
    started = time.monotonic()
    run.wait(120)
    panel.updater.join(30)
    panel.ticker.join(30)  # its last tick (after the run ended) is on its own thread
    elapsed = time.monotonic() - started
    sources = panel.charts.sources
    assert list(sources["loss"].data["step"]) == list(range(8))
    assert list(sources["loss"].data["loss"]) == [e.value for e in run.log.scalars("loss")]
    assert len(sources["test_loss"].data["value"]) == 1
    assert set(sources["timeline"].data["phase"]) >= {"compute"}
    assert len(sources["timeline"].data["start"]) == len(run.log.phases())
    assert sources["utilization"].data["device"] == ["/job:worker/task:0/device:CPU:0"]
    assert panel.progress.value == 8 and "finished" in panel.status.value
    assert panel.updater.refreshes <= elapsed * MAX_REFRESH_HZ + 2


@pytest.mark.integration
def test_a_mirrored_run_shows_both_devices_and_their_traffic(shell):
    run = shell.run_line_magic("dtrain", "--strategy mirrored --devices 2 --steps 6 --hidden 16")
    panel = run.panel()
    last_step = said_finished = None  # when the panel showed each
    deadline = time.monotonic() + 180
    while not run.done and time.monotonic() < deadline:
        now = time.monotonic()
        if last_step is None and panel.progress.value == 6:
            last_step = now
        if said_finished is None and panel.status.value.startswith("<b>finished</b>"):
            said_finished = now
        time.sleep(0.02)
    run.wait(1)
    panel.updater.join(30)
    # Finished as soon as the devices are done, not once the cluster has closed.
    assert said_finished is not None and said_finished - last_step < 1.0
    assert not panel.dashboard.value  # the cluster is gone: no link to its dashboard
    traffic = panel.charts.sources["traffic"].data
    assert len(traffic["device"]) == 2 and all(sent > 0 for sent in traffic["sent"])
    phases = set(panel.charts.sources["timeline"].data["phase"])
    assert {"compute", "allreduce"} <= phases
    assert panel.charts.figures["timeline"].y_range.factors == list(reversed(traffic["device"]))
    # The store says which cluster it ran on (the JupyterLab sidebar lists it).
    status = RunStore().open(run.run_id).status()
    assert status["dashboard_link"] == run.dashboard_link is not None
    # (over TLS: the clusters the workbench starts speak it)
    assert status["scheduler_address"].startswith("tls://127.0.0.1:")


@pytest.mark.integration
def test_the_panels_stop_button_ends_a_live_run(shell):
    run = shell.run_line_magic("dtrain", "--steps 100000 --hidden 16")
    panel = run.panel()
    while run.step < 3:
        time.sleep(0.05)
    panel.stop_button.click()
    run.wait(120)
    panel.updater.join(30)
    assert run.state == "stopped" and panel.stop_button.disabled
    assert panel.progress.value == run.step - run.first_step < 100000


FORM_INPUTS = [
    ({"--devices": "0"}),
    ({"--devices": "two"}),
    ({"--batch-size": "0"}),
    ({"--epochs": "x"}),
    ({"--lr": "-1"}),
    ({"--dataset": "imagenet"}),
    ({"--strategy": "mirrored", "--devices": "2", "--batch-size": "7"}),
    ({"--strategy": "parameter-server", "--devices": "2", "--ps": "0"}),
    ({"--strategy": "parameter-server", "--devices": "2", "--staleness": "2"}),
    ({"--strategy": "pipeline", "--devices": "2", "--stages": "0"}),
    ({"--strategy": "pipeline", "--devices": "2", "--microbatches": "0"}),
    ({"--strategy": "mirrored", "--devices": "2", "--bucket-mb": "0"}),
]


@pytest.mark.parametrize("values", FORM_INPUTS)
def test_the_form_rejects_what_the_magic_rejects_with_the_same_message(shell, values):
    magics = shell.magics_manager.registry["WorkbenchMagics"]
    form = TrainingForm(form_start(magics))
    for flag, value in values.items():
        form.fields[flag].value = value
    assert form.start() is None
    with pytest.raises(UsageError) as raised:
        shell.run_line_magic("dtrain", " ".join(form.flags()))
    assert form.error.value.endswith(f">{html.escape(str(raised.value))}</span>")
    assert not magics.runs.all()


@pytest.mark.integration
def test_the_form_starts_a_run_and_shows_its_panel(shell):
    magics = shell.magics_manager.registry["WorkbenchMagics"]
    form = TrainingForm(form_start(magics))
    form.fields["--epochs"].value = "1"
    form.fields["--strategy"].value = "pipeline"
    assert [w.description for w in form.options.children] == [
        "stages",
        "micro-batches",
        "schedule",
        "virtual stages",
    ]
    form.fields["--strategy"].value = "one-device"
    run = form.start()
    assert run is not None and form.output.children == (run.panel().widget,)
    run.wait(120)
    assert run.state == "finished" and run.config.epochs == 1


def test_a_switch_option_is_a_checkbox_whose_flag_is_given_only_when_ticked():
    form = TrainingForm(lambda flags: None)
    form.fields["--strategy"].value = "mirrored"
    assert "--elastic" not in form.flags()
    form.fields["--elastic"].value = True
    words = form.flags()
    assert "--elastic" in words and words[words.index("--elastic") + 1 :][:1] != ["True"]
