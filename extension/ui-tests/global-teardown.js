/** End the process that trains the live run, if a test left it running, and its children. */
const fs = require('fs');
const path = require('path');

module.exports = async () => {
  const pidFile = path.join(process.env.DTRAIN_RUN_STORE, 'make_runs.pid');
  if (!fs.existsSync(pidFile)) {
    return;
  }
  const pid = Number(fs.readFileSync(pidFile, 'utf-8'));
  try {
    process.kill(-pid, 'SIGTERM'); // its process group: the run and its Dask workers
  } catch {
    // already gone
  }
};
