/**
 * The sidebar's run rows against a scripted server: a run with faults shows its restarts,
 * failures and dropped pushes (with the recovery times as tooltip); a run without, or one
 * recorded before fault counts existed, shows no fault line.
 */
import { ServerConnection } from '@jupyterlab/services';

import { IRun, parseRun } from '../api';
import { RunsModel } from '../model';
import { faultSummary, recoveryTooltip, RunsSidebar } from '../sidebar';

// The real icon pulls in @jupyterlab/ui-components, whose web components Jest cannot load;
// the sidebar only hands it to its title.
jest.mock('../icons', () => ({ workbenchIcon: undefined }));

const RUN = {
  id: 'run-1',
  strategy: 'parameter-server',
  devices: 3,
  steps: 100,
  step: 40,
  loss: 0.5,
  samples_per_second: 900,
  state: 'running',
  error: null,
  started: 1700000000,
  ended: null,
  dashboard_link: null
};
const FAULTY = {
  ...RUN,
  restarts: 2,
  failures: 2,
  dropped_updates: 14,
  recovery_seconds: [2.04, 1.5]
};
const CLEAN = {
  ...RUN,
  id: 'run-0',
  restarts: 0,
  failures: 0,
  dropped_updates: 0,
  recovery_seconds: []
};
const OLD = { ...RUN, id: 'run-old', state: 'finished' }; // no fault keys at all

/** A server listing `listing.runs` as it is at each request. */
function serve(listing: { runs: unknown[] }): ServerConnection.ISettings {
  const fetch = (input: RequestInfo | URL): Promise<Response> => {
    const path = new URL((input as Request).url).pathname;
    const body = path.endsWith('/runs')
      ? { runs: listing.runs }
      : { clusters: [] };
    return Promise.resolve(new Response(JSON.stringify(body), { status: 200 }));
  };
  return ServerConnection.makeSettings({
    baseUrl: 'http://localhost:8888/',
    wsUrl: 'ws://localhost:8888/',
    fetch: fetch as typeof window.fetch
  });
}

function run(raw: unknown): IRun {
  const parsed = parseRun(raw);
  if (parsed === null) {
    throw new Error('unparsable run');
  }
  return parsed;
}

describe('faultSummary', () => {
  it('names what is nonzero', () => {
    expect(faultSummary(run(FAULTY))).toBe('Restarts 2 · Dropped 14');
    expect(faultSummary(run({ ...RUN, dropped_updates: 3 }))).toBe('Dropped 3');
  });

  it('shows failures only where they differ from the restarts', () => {
    // Noticed, not recovered from yet.
    expect(faultSummary(run({ ...RUN, failures: 1, restarts: 0 }))).toBe(
      'Failures 1'
    );
    // One failure more than the run could restart from.
    expect(faultSummary(run({ ...RUN, failures: 4, restarts: 3 }))).toBe(
      'Restarts 3 · Failures 4'
    );
  });

  it('is empty for clean runs and runs recorded before fault counts', () => {
    expect(faultSummary(run(CLEAN))).toBe('');
    expect(faultSummary(run(OLD))).toBe('');
  });

  it('gives the recovery times as tooltip', () => {
    expect(recoveryTooltip(run(FAULTY))).toBe('Recovery took 2.0 s, 1.5 s');
    expect(recoveryTooltip(run(OLD))).toMatch(/^Failures, restarts/);
  });
});

describe('RunsSidebar fault line', () => {
  let model: RunsModel;
  let sidebar: RunsSidebar;

  afterEach(() => {
    sidebar.dispose();
    model.dispose();
  });

  async function render(listing: { runs: unknown[] }): Promise<HTMLElement> {
    model = new RunsModel({ serverSettings: serve(listing), autoStart: false });
    sidebar = new RunsSidebar({
      model,
      openRun: jest.fn(),
      stopRun: jest.fn()
    });
    await model.refresh();
    return sidebar.node;
  }

  function faultLine(node: HTMLElement, runId: string): HTMLElement {
    const line = node.querySelector<HTMLElement>(
      `.jp-WorkbenchRun[data-run-id="${runId}"] .jp-WorkbenchRun-faults`
    );
    if (line === null) {
      throw new Error(`no fault line in the row of ${runId}`);
    }
    return line;
  }

  it('shows restarts and dropped pushes on a faulty run only', async () => {
    const node = await render({ runs: [FAULTY, CLEAN, OLD] });
    const faulty = faultLine(node, 'run-1');
    expect(faulty.hidden).toBe(false);
    expect(faulty.textContent).toBe('Restarts 2 · Dropped 14');
    expect(faulty.title).toBe('Recovery took 2.0 s, 1.5 s');
    expect(faultLine(node, 'run-0').hidden).toBe(true);
    expect(faultLine(node, 'run-old').hidden).toBe(true);
    expect(faultLine(node, 'run-old').textContent).toBe('');
  });

  it('updates the line in place as the counts grow', async () => {
    const listing = {
      runs: [{ ...RUN, failures: 1, restarts: 0 }] as unknown[]
    };
    const node = await render(listing);
    const line = faultLine(node, 'run-1');
    expect(line.textContent).toBe('Failures 1');
    listing.runs = [FAULTY];
    await model.refresh();
    expect(faultLine(node, 'run-1')).toBe(line); // the same row, rewritten
    expect(line.textContent).toBe('Restarts 2 · Dropped 14');
    expect(line.hidden).toBe(false);
  });
});

describe('RunsSidebar damaged and non-finite runs', () => {
  const DAMAGED = {
    id: 'run-damaged',
    strategy: null,
    devices: null,
    state: 'damaged',
    damage: 'status.json is not valid JSON (truncated or corrupted)',
    non_finite: []
  };
  const DIVERGED = {
    ...RUN,
    id: 'run-nan',
    state: 'finished',
    loss: null,
    non_finite: ['loss']
  };

  it('lists them with their reason and mark, the other runs as they are', async () => {
    const listing = { runs: [DIVERGED, DAMAGED, CLEAN] };
    const model = new RunsModel({
      serverSettings: serve(listing),
      autoStart: false
    });
    const sidebar = new RunsSidebar({
      model,
      openRun: jest.fn(),
      stopRun: jest.fn()
    });
    await model.refresh();
    const node = sidebar.node;
    const row = (id: string) =>
      node.querySelector<HTMLElement>(`.jp-WorkbenchRun[data-run-id="${id}"]`);
    const problem = (id: string) =>
      row(id)?.querySelector<HTMLElement>('.jp-WorkbenchRun-problem');
    expect(model.status).toBe('ready');
    expect(
      row('run-damaged')?.querySelector('.jp-WorkbenchRun-state')?.textContent
    ).toBe('damaged');
    expect(problem('run-damaged')?.textContent).toBe(
      'Damaged: status.json is not valid JSON (truncated or corrupted)'
    );
    expect(problem('run-damaged')?.hidden).toBe(false);
    expect(
      row('run-damaged')?.querySelector<HTMLElement>('.jp-WorkbenchRun-stop')
        ?.hidden
    ).toBe(true);
    expect(problem('run-nan')?.textContent).toBe('NaN/∞: loss');
    expect(
      row('run-nan')?.querySelector('.jp-WorkbenchRun-loss')?.textContent
    ).toBe('–');
    expect(problem('run-0')?.hidden).toBe(true);
    expect(
      row('run-0')?.querySelector('.jp-WorkbenchRun-loss')?.textContent
    ).toBe('0.5000');
    sidebar.dispose();
    model.dispose();
  });
});
