/**
 * What the sidebar shows stays readable and current: runs refresh twice a second while live
 * (the settings' default too), a run's failure reasons show on its problem line, a truncated
 * run id has its tooltip, and "Asked run … to stop" goes once the run has stopped or after a
 * few seconds.
 */
import { ServerConnection } from '@jupyterlab/services';

import { parseRun } from '../api';
import { RunsModel } from '../model';
import { NOTICE_MS, problemSummary, RunsSidebar } from '../sidebar';
import * as schema from '../../schema/plugin.json';

jest.mock('../icons', () => ({ workbenchIcon: undefined }));

const RUN = {
  id: '20261126-012550-mirrored-669cbc',
  strategy: 'mirrored',
  devices: 2,
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
const REASONS = [
  'worker task1 died: killed by signal 9',
  'stalled 30 s in the all-reduce'
];

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

describe('refresh interval', () => {
  it('is at most half a second while a run is live, by default and in the settings', () => {
    const model = new RunsModel({
      serverSettings: serve({ runs: [] }),
      autoStart: false
    });
    expect(model.refreshInterval).toBeLessThanOrEqual(500);
    model.dispose();
    expect(schema.properties.refreshInterval.default).toBeLessThanOrEqual(500);
  });
});

describe('failure reasons', () => {
  it('are parsed and shown on the problem line', () => {
    const run = parseRun({
      ...RUN,
      state: 'failed',
      failure_reasons: [...REASONS, 3]
    });
    expect(run?.failureReasons).toEqual(REASONS);
    expect(problemSummary(run!)).toBe(REASONS.join(' · '));
    expect(parseRun(RUN)?.failureReasons).toEqual([]);
  });
});

describe('RunsSidebar', () => {
  let model: RunsModel;
  let sidebar: RunsSidebar;
  const listing: { runs: unknown[] } = { runs: [] };

  beforeEach(async () => {
    listing.runs = [RUN];
    model = new RunsModel({ serverSettings: serve(listing), autoStart: false });
    sidebar = new RunsSidebar({
      model,
      openRun: jest.fn(),
      stopRun: jest.fn()
    });
    await model.refresh();
  });

  afterEach(() => {
    jest.useRealTimers();
    sidebar.dispose();
    model.dispose();
  });

  function row(): HTMLElement {
    return sidebar.node.querySelector<HTMLElement>('.jp-WorkbenchRun')!;
  }

  it('gives the run id its full text as tooltip', () => {
    const id = row().querySelector<HTMLElement>('.jp-WorkbenchRun-id')!;
    expect(id.title).toBe(RUN.id);
  });

  it('shows the failure reasons of a failed run', async () => {
    listing.runs = [{ ...RUN, state: 'failed', failure_reasons: REASONS }];
    await model.refresh();
    const problem = row().querySelector<HTMLElement>(
      '.jp-WorkbenchRun-problem'
    )!;
    expect(problem.hidden).toBe(false);
    expect(problem.textContent).toContain('killed by signal 9');
    expect(problem.title).toContain('stalled 30 s in the all-reduce');
  });

  it('drops the stop notice once the run has stopped', async () => {
    sidebar.notify(`Asked run ${RUN.id} to stop`, false, RUN.id);
    expect(sidebar.notice).toBe(`Asked run ${RUN.id} to stop`);
    listing.runs = [{ ...RUN, state: 'stopping' }];
    await model.refresh();
    expect(sidebar.notice).not.toBeNull(); // still stopping: still true
    listing.runs = [{ ...RUN, state: 'stopped' }];
    await model.refresh();
    expect(sidebar.notice).toBeNull();
    const status = sidebar.node.querySelector<HTMLElement>(
      '.jp-WorkbenchSidebar-status'
    )!;
    expect(status.hidden).toBe(true);
  });

  it('drops any notice after a few seconds', () => {
    jest.useFakeTimers();
    sidebar.notify(`Asked run ${RUN.id} to stop`, false, RUN.id);
    jest.advanceTimersByTime(NOTICE_MS + 1);
    expect(sidebar.notice).toBeNull();
  });
});
