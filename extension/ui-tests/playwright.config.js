/**
 * Galata configuration: Debian's chromium (no browser download), a JupyterLab started by the
 * `webServer` on its own port with an isolated run store, and runs made by `global-setup.js`;
 * the live test runs last.
 */
const fs = require('fs');
const os = require('os');
const path = require('path');
const baseConfig = require('@jupyterlab/galata/lib/playwright-config');

// Set once in the main process; the test workers inherit the environment.
if (!process.env.DTRAIN_RUN_STORE) {
  process.env.DTRAIN_RUN_STORE = fs.mkdtempSync(path.join(os.tmpdir(), 'dtrain-ui-tests-'));
}
const port = process.env.DTRAIN_UI_TEST_PORT || '8891';
process.env.DTRAIN_UI_TEST_PORT = port;
const venv = path.resolve(__dirname, '..', '..', '.venv', 'bin');

module.exports = {
  ...baseConfig,
  reporter: [['list'], ['html', { open: 'never', outputFolder: 'playwright-report' }]],
  outputDir: 'test-results/artifacts',
  workers: 1,
  timeout: 180000,
  expect: { timeout: 30000 },
  // The live test measures how far the views trail one run: after the other tests, whose
  // long live run (global-setup.js) would otherwise train beside it on the same cores until
  // their Stop test ends it.
  projects: [
    { name: 'workbench', testMatch: /workbench\.spec\.ts/ },
    { name: 'live', testMatch: /live\.spec\.ts/, dependencies: ['workbench'] }
  ],
  globalSetup: require.resolve('./global-setup'),
  globalTeardown: require.resolve('./global-teardown'),
  use: {
    ...baseConfig.use,
    baseURL: `http://localhost:${port}`,
    viewport: { width: 1400, height: 900 },
    launchOptions: {
      executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium',
      args: ['--no-sandbox']
    },
    trace: 'retain-on-failure',
    video: 'off'
  },
  webServer: {
    command: `${path.join(venv, 'jupyter')} lab --config jupyter_server_test_config.py`,
    url: `http://localhost:${port}/lab`,
    timeout: 120000,
    reuseExistingServer: false,
    env: { ...process.env, PATH: `${venv}:${process.env.PATH}` }
  }
};
