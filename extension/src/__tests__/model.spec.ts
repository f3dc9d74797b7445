/**
 * RunsModel against a scripted server: the fetch of `ServerConnection.makeSettings` is replaced,
 * so these tests cover the real request helper, parsing, polling and error handling.
 */
import { ServerConnection } from '@jupyterlab/services';

import { parseCluster, parseRun } from '../api';
import { RunsModel } from '../model';

type Handler = (request: Request) => Promise<Response> | Response;

interface IFakeServer {
  settings: ServerConnection.ISettings;
  requests: string[];
  setHandler(handler: Handler): void;
}

const RUNNING = {
  id: 'run-1',
  strategy: 'mirrored',
  devices: 2,
  steps: 100,
  step: 10,
  loss: 1.25,
  samples_per_second: 812.5,
  state: 'running',
  error: null,
  started: 1700000000,
  ended: null,
  dashboard_link: 'http://127.0.0.1:8787/status'
};
const FINISHED = {
  ...RUNNING,
  id: 'run-0',
  state: 'finished',
  step: 100,
  ended: 1700000100
};
const CLUSTER = {
  address: 'tcp://127.0.0.1:8786',
  dashboard_link: 'http://127.0.0.1:8787/status',
  runs: ['run-1']
};

function json(body: unknown, status = 200): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { 'Content-Type': 'application/json' }
  });
}

/** A server answering `runs` and `clusters` from the given lists. */
function listing(runs: unknown[], clusters: unknown[] = [CLUSTER]): Handler {
  return request => {
    const path = new URL(request.url).pathname;
    if (path.endsWith('/workbench/api/runs')) {
      return json({ runs });
    }
    if (path.endsWith('/workbench/api/clusters')) {
      return json({ clusters });
    }
    return json({ message: `no route ${path}` }, 404);
  };
}

function fakeServer(handler: Handler): IFakeServer {
  let current = handler;
  const requests: string[] = [];
  const fetch = (input: RequestInfo | URL): Promise<Response> => {
    const request = input as Request;
    requests.push(`${request.method} ${new URL(request.url).pathname}`);
    return Promise.resolve(current(request));
  };
  const settings = ServerConnection.makeSettings({
    baseUrl: 'http://localhost:8888/lab-base/',
    wsUrl: 'ws://localhost:8888/lab-base/',
    fetch: fetch as typeof window.fetch
  });
  return { settings, requests, setHandler: next => (current = next) };
}

function deferred<T>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>(done => (resolve = done));
  return { promise, resolve };
}

describe('parsing', () => {
  it('maps snake_case records and keeps nulls', () => {
    expect(parseRun({ ...RUNNING, loss: null, devices: 'two' })).toEqual({
      id: 'run-1',
      strategy: 'mirrored',
      devices: null,
      steps: 100,
      step: 10,
      loss: null,
      samplesPerSecond: 812.5,
      state: 'running',
      error: null,
      started: 1700000000,
      ended: null,
      dashboardLink: 'http://127.0.0.1:8787/status',
      // A record without fault counts (a run recorded before them) reads as none known.
      restarts: null,
      failures: null,
      droppedUpdates: null,
      recoverySeconds: [],
      damage: null,
      nonFinite: [],
      failureReasons: []
    });
  });

  it('parses fault counts, null-safe', () => {
    const faulty = parseRun({
      ...RUNNING,
      restarts: 2,
      failures: 2,
      dropped_updates: 14,
      recovery_seconds: [1.5, 'x', null, 2.25]
    });
    expect(faulty?.restarts).toBe(2);
    expect(faulty?.failures).toBe(2);
    expect(faulty?.droppedUpdates).toBe(14);
    expect(faulty?.recoverySeconds).toEqual([1.5, 2.25]);
    const odd = parseRun({
      ...RUNNING,
      restarts: '2',
      dropped_updates: null,
      recovery_seconds: 3
    });
    expect(odd?.restarts).toBeNull();
    expect(odd?.droppedUpdates).toBeNull();
    expect(odd?.recoverySeconds).toEqual([3]);
    expect(
      parseRun({ ...RUNNING, recovery_seconds: { last: 3 } })?.recoverySeconds
    ).toEqual([]);
  });

  it('drops records without an id and keeps unknown states', () => {
    expect(parseRun({ strategy: 'mirrored' })).toBeNull();
    expect(parseRun('run-1')).toBeNull();
    expect(parseRun({ id: 'x', state: 'paused' })?.state).toBe('paused');
    expect(parseRun({ id: 'x' })?.state).toBe('lost');
  });

  it('parses clusters', () => {
    expect(parseCluster(CLUSTER)).toEqual({
      address: 'tcp://127.0.0.1:8786',
      dashboardLink: 'http://127.0.0.1:8787/status',
      runs: ['run-1']
    });
    expect(parseCluster({ dashboard_link: 'x' })).toBeNull();
    expect(parseCluster({ address: 'a', runs: [1, 'r'] })?.runs).toEqual(['r']);
  });
});

describe('RunsModel', () => {
  let model: RunsModel | null = null;

  beforeEach(() => {
    jest.useFakeTimers();
  });

  afterEach(() => {
    model?.dispose();
    model = null;
    jest.useRealTimers();
  });

  it('keeps a run live while it has finished training but not yet ended', async () => {
    // Its last step is in (finished), its test figures and end time are still to come.
    const closing = { ...FINISHED, id: 'run-2', ended: null };
    const server = fakeServer(listing([closing, FINISHED]));
    model = new RunsModel({
      serverSettings: server.settings,
      autoStart: false
    });
    await model.refresh();
    expect(model.hasLiveRuns).toBe(true);
    server.setHandler(listing([{ ...closing, ended: 1700000200 }, FINISHED]));
    await model.refresh();
    expect(model.hasLiveRuns).toBe(false);
  });

  it('loads runs and clusters and emits changed', async () => {
    const server = fakeServer(listing([RUNNING, FINISHED, { bad: true }]));
    model = new RunsModel({
      serverSettings: server.settings,
      autoStart: false
    });
    let changes = 0;
    model.changed.connect(() => changes++);
    expect(model.status).toBe('loading');
    await model.refresh();
    expect(model.status).toBe('ready');
    expect(model.runs.map(run => run.id)).toEqual(['run-1', 'run-0']);
    expect(model.clusters[0].address).toBe('tcp://127.0.0.1:8786');
    expect(model.hasLiveRuns).toBe(true);
    expect(changes).toBe(1);
    expect(server.requests).toEqual([
      'GET /lab-base/workbench/api/runs',
      'GET /lab-base/workbench/api/clusters'
    ]);
  });

  it('never overlaps requests', async () => {
    const gate = deferred<void>();
    let inFlight = 0;
    let most = 0;
    const server = fakeServer(async request => {
      inFlight++;
      most = Math.max(most, inFlight);
      await gate.promise;
      inFlight--;
      return listing([RUNNING])(request);
    });
    model = new RunsModel({
      serverSettings: server.settings,
      refreshInterval: 250
    });
    await jest.advanceTimersByTimeAsync(0); // the poll's first tick starts a request
    const refreshes = [model.refresh(), model.refresh()];
    await jest.advanceTimersByTimeAsync(5000); // ticks due while the request hangs
    expect(server.requests).toHaveLength(2); // one runs + one clusters request
    gate.resolve();
    await Promise.all(refreshes);
    expect(most).toBe(2);
    expect(model.status).toBe('ready');
  });

  it('polls at the refresh interval while a run is live', async () => {
    const server = fakeServer(listing([RUNNING]));
    model = new RunsModel({
      serverSettings: server.settings,
      refreshInterval: 1000
    });
    await jest.advanceTimersByTimeAsync(0);
    expect(server.requests).toHaveLength(2);
    await jest.advanceTimersByTimeAsync(1000);
    expect(server.requests).toHaveLength(4);
    await jest.advanceTimersByTimeAsync(3000);
    expect(server.requests).toHaveLength(10);
  });

  it('counts the live interval from the start of a slow request', async () => {
    // A server that takes 600 ms: the next request goes 1000 ms after the last one started.
    const server = fakeServer(async request => {
      await new Promise(done => setTimeout(done, 600));
      return listing([RUNNING])(request);
    });
    model = new RunsModel({
      serverSettings: server.settings,
      refreshInterval: 1000
    });
    await jest.advanceTimersByTimeAsync(0);
    expect(server.requests).toHaveLength(2);
    await jest.advanceTimersByTimeAsync(999);
    expect(server.requests).toHaveLength(2);
    await jest.advanceTimersByTimeAsync(1);
    expect(server.requests).toHaveLength(4);
    await jest.advanceTimersByTimeAsync(2000);
    expect(server.requests).toHaveLength(8);
  });

  it('polls ten times slower when nothing is live, and not at all with idleFactor Infinity', async () => {
    const server = fakeServer(listing([FINISHED]));
    model = new RunsModel({
      serverSettings: server.settings,
      refreshInterval: 1000,
      idleFactor: 10
    });
    await jest.advanceTimersByTimeAsync(0);
    await jest.advanceTimersByTimeAsync(9000);
    expect(server.requests).toHaveLength(2);
    await jest.advanceTimersByTimeAsync(1000);
    expect(server.requests).toHaveLength(4);

    const quiet = fakeServer(listing([FINISHED]));
    const stopped = new RunsModel({
      serverSettings: quiet.settings,
      refreshInterval: 1000,
      idleFactor: Infinity
    });
    await jest.advanceTimersByTimeAsync(0);
    await jest.advanceTimersByTimeAsync(120000);
    expect(quiet.requests).toHaveLength(2);
    await stopped.refresh(); // an explicit refresh still works
    expect(quiet.requests).toHaveLength(4);
    stopped.dispose();
  });

  it('speeds up again when a run starts', async () => {
    const server = fakeServer(listing([FINISHED]));
    model = new RunsModel({
      serverSettings: server.settings,
      refreshInterval: 1000
    });
    await jest.advanceTimersByTimeAsync(0);
    server.setHandler(listing([RUNNING, FINISHED]));
    await jest.advanceTimersByTimeAsync(10000); // the idle tick sees the new live run
    expect(model.hasLiveRuns).toBe(true);
    const before = server.requests.length;
    await jest.advanceTimersByTimeAsync(1000);
    expect(server.requests.length).toBe(before + 2);
  });

  it('does not poll while paused', async () => {
    const server = fakeServer(listing([RUNNING]));
    model = new RunsModel({
      serverSettings: server.settings,
      refreshInterval: 1000
    });
    await jest.advanceTimersByTimeAsync(0);
    model.paused = true;
    await jest.advanceTimersByTimeAsync(10000);
    expect(server.requests).toHaveLength(2);
    model.paused = false; // refreshes at once when shown again
    await jest.advanceTimersByTimeAsync(0);
    expect(server.requests).toHaveLength(4);
  });

  it('applies a new refresh interval, at least 250 ms', async () => {
    const server = fakeServer(listing([RUNNING]));
    model = new RunsModel({
      serverSettings: server.settings,
      refreshInterval: 5000
    });
    await jest.advanceTimersByTimeAsync(0);
    model.refreshInterval = 10;
    expect(model.refreshInterval).toBe(250);
    await jest.advanceTimersByTimeAsync(0);
    const before = server.requests.length;
    await jest.advanceTimersByTimeAsync(1000);
    expect(server.requests.length).toBe(before + 8);
  });

  it('turns failures into an error state, then recovers', async () => {
    const server = fakeServer(() =>
      json({ message: 'run store unreadable' }, 500)
    );
    model = new RunsModel({
      serverSettings: server.settings,
      autoStart: false
    });
    await expect(model.refresh()).resolves.toBeUndefined();
    expect(model.status).toBe('error');
    expect(model.error).toBe('run store unreadable');

    server.setHandler(() => Promise.reject(new TypeError('Failed to fetch')));
    await model.refresh();
    expect(model.error).toBe('The Jupyter server cannot be reached');

    server.setHandler(() => new Response('<html>oops</html>', { status: 502 }));
    await model.refresh();
    expect(model.error).toMatch(/^502/);

    server.setHandler(() => json({ something: 'else' }));
    await model.refresh();
    expect(model.error).toMatch(/no "runs" list/);

    server.setHandler(listing([RUNNING]));
    await model.refresh();
    expect(model.status).toBe('ready');
    expect(model.error).toBeNull();
  });

  it('backs off while the server fails', async () => {
    const server = fakeServer(() => json({ message: 'down' }, 503));
    model = new RunsModel({
      serverSettings: server.settings,
      refreshInterval: 1000,
      idleFactor: 10
    });
    await jest.advanceTimersByTimeAsync(0);
    await jest.advanceTimersByTimeAsync(30000);
    // Polling every 1 s would be 30 more calls; backing off from the idle 10 s makes few.
    // Lumino's back-off is jittered: a sleep is drawn between the interval and 3 x the last
    // one, so the first, after the 1 s loading interval, may be as short as 3 s: polls at 0,
    // >= 3, >= 12 and >= 22 s at most, besides the first refresh.
    expect(server.requests.length / 2).toBeLessThanOrEqual(5);
    expect(model.status).toBe('error');
  });

  it('stops a run and shows it stopping', async () => {
    const server = fakeServer(request => {
      if (request.method === 'POST') {
        return json({ ...RUNNING, state: 'stopping' }, 202);
      }
      return listing([RUNNING])(request);
    });
    model = new RunsModel({
      serverSettings: server.settings,
      autoStart: false
    });
    await model.refresh();
    const result = await model.stopRun('run-1');
    expect(result.ok).toBe(true);
    expect(server.requests).toContain(
      'POST /lab-base/workbench/api/runs/run-1/stop'
    );
    expect(model.run('run-1')?.state).toBe('stopping');
    expect(model.hasLiveRuns).toBe(true);
  });

  it('reports the server message when a stop is refused', async () => {
    const server = fakeServer(request => {
      if (request.method === 'POST') {
        return json({ message: 'run run-0 is not running' }, 409);
      }
      return listing([FINISHED])(request);
    });
    model = new RunsModel({
      serverSettings: server.settings,
      autoStart: false
    });
    await model.refresh();
    const result = await model.stopRun('run-0');
    expect(result).toEqual({
      ok: false,
      message: 'Could not stop run run-0: run run-0 is not running'
    });
    expect(model.run('run-0')?.state).toBe('finished');
  });

  it('stops polling and ignores late answers once disposed', async () => {
    const gate = deferred<void>();
    const server = fakeServer(async request => {
      await gate.promise;
      return listing([RUNNING])(request);
    });
    model = new RunsModel({
      serverSettings: server.settings,
      refreshInterval: 250
    });
    let changes = 0;
    model.changed.connect(() => changes++);
    await jest.advanceTimersByTimeAsync(0);
    const pending = model.refresh();
    model.dispose();
    expect(model.isDisposed).toBe(true);
    gate.resolve();
    await pending;
    await jest.advanceTimersByTimeAsync(10000);
    expect(changes).toBe(0);
    expect(model.runs).toHaveLength(0);
    expect(server.requests).toHaveLength(2);
    await model.refresh(); // a no-op after disposal
    expect(server.requests).toHaveLength(2);
  });
});
