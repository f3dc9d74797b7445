"""Calibration: measuring what a cluster's devices, links and collectives cost.

The measuring lives here. What was measured is plain data one layer down, where the cost
models and the planner read it without importing any of the measuring; deciding what the
what-if table needs measured lives one layer up, beside the strategies whose options decide it:

- :mod:`workbench.calibration.run_start`: what a run calibrates when it starts (the graphs its
  devices execute, the cache in the run store, ``--no-calibrate``); returns a
  :class:`~workbench.calibration.run_start.RunCalibration`;
- :mod:`workbench.calibration.probe`: each device's nodes, its links' one-way transfers, the
  add of a reduction and Dask's dispatch, timed on the workers;
- :mod:`workbench.calibration.collectives_probe`: the all-reduce, reduce and broadcast timed as
  a replica runs them;
- :mod:`workbench.calibration.exchange_probe`: a parameter-server worker's pulls and pushes
  timed as the workers run them;
- :mod:`workbench.calibration.mesh_groups_probe`: a mesh's data all-reduces (every group at
  once), its tensor all-reduces between computes and its hand-offs between busy stages, timed
  as its devices run them;
- :mod:`workbench.costs.calibration`: the record (:class:`~workbench.costs.Calibration`), its
  fits, merging and JSON, with no clocks and no I/O;
- :mod:`workbench.launch.calibrate`: ``dtrain calibrate`` and the what-if table's
  calibration (every batch size and collective the table's rows would time);
- the record's readers: :mod:`workbench.costs.cost_model` (the placer's costs),
  :mod:`workbench.planner.device_costs` and :mod:`workbench.planner.measured_collectives` (the
  planner's simulated step).

The package sits between the strategies, which call it before they plan, and the device-side
engine it times (docs/architecture/index.md, Layers).
"""
