/**
 * Make the runs the tests look at (see make_runs.py) and wait until both exist in the store.
 */
const { spawn } = require('child_process');
const fs = require('fs');
const path = require('path');

module.exports = async () => {
  const store = process.env.DTRAIN_RUN_STORE;
  const python = path.resolve(__dirname, '..', '..', '.venv', 'bin', 'python');
  const log = fs.openSync(path.join(store, 'make_runs.log'), 'a');
  const child = spawn(python, [path.join(__dirname, 'make_runs.py')], {
    env: { ...process.env, OMP_NUM_THREADS: '1', OPENBLAS_NUM_THREADS: '1' },
    stdio: ['ignore', log, log],
    detached: true
  });
  fs.writeFileSync(path.join(store, 'make_runs.pid'), String(child.pid));
  const manifest = path.join(store, 'runs.json');
  const deadline = Date.now() + 240000;
  while (!fs.existsSync(manifest)) {
    if (child.exitCode !== null || Date.now() > deadline) {
      const output = fs.readFileSync(path.join(store, 'make_runs.log'), 'utf-8');
      throw new Error(`make_runs.py did not make the runs:\n${output}`);
    }
    await new Promise(resolve => setTimeout(resolve, 250));
  }
  child.unref();
};
