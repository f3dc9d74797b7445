/**
 * The workbench server's REST API: one authenticated request helper and the record types
 * it returns, parsed defensively (numbers may be null, unknown states are kept as strings).
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/** Where the server extension mounts its JSON API, under the server's base URL. */
export const API_NAMESPACE = 'workbench/api';

/**
 * States a run record can be in; "stopping" is what a stop request answers with, "lost" a run
 * whose process has gone, "damaged" a run directory the server could not read (see `damage`).
 */
export type RunState =
  | 'running'
  | 'stopping'
  | 'finished'
  | 'stopped'
  | 'failed'
  | 'lost'
  | 'damaged';

/** The states in which a run still changes, so the sidebar keeps polling quickly. */
export const LIVE_STATES: ReadonlySet<string> = new Set([
  'running',
  'stopping'
]);

/** One run as `GET workbench/api/runs` lists it. */
export interface IRun {
  id: string;
  strategy: string;
  devices: number | null;
  steps: number | null;
  step: number | null;
  loss: number | null;
  samplesPerSecond: number | null;
  state: RunState | string;
  error: string | null;
  started: number | null;
  ended: number | null;
  dashboardLink: string | null;
  /** Restarts from a checkpoint so far (null: a run recorded before fault counts). */
  restarts: number | null;
  /** Devices noticed dead or stalled so far. */
  failures: number | null;
  /** Gradient pushes the parameter server discarded so far. */
  droppedUpdates: number | null;
  /** Seconds each restart took, failure noticed to first step after it ([] if none). */
  recoverySeconds: number[];
  /** Why the run's files could not be read (its state is then "damaged"), or null. */
  damage: string | null;
  /** The fields that held NaN or an infinity, which the server sends as null ([] if none). */
  nonFinite: string[];
  /** Why the run failed or restarted, one line each ([] if never, or not recorded). */
  failureReasons: string[];
}

/** One Dask cluster the workbench knows about. */
export interface ICluster {
  address: string;
  dashboardLink: string | null;
  runs: string[];
}

/** An HTTP error answered by the API, with the server's `message` when it gave one. */
export class APIError extends Error {
  constructor(
    readonly status: number,
    message: string
  ) {
    super(message);
    this.name = 'APIError';
  }
}

/**
 * Call the workbench API.
 *
 * @param endPoint - path below `workbench/api`, e.g. `runs` or `runs/<id>/stop`
 * @param init - the fetch options (method, body)
 * @param settings - the server connection (its `fetch` can be replaced in tests)
 * @returns the decoded JSON body
 * @throws {APIError} when the server answers an error status
 * @throws {ServerConnection.NetworkError} when the server cannot be reached
 */
export async function requestAPI<T>(
  endPoint = '',
  init: RequestInit = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<T> {
  const url = URLExt.join(settings.baseUrl, API_NAMESPACE, endPoint);
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new ServerConnection.NetworkError(error as TypeError);
  }
  const text = await response.text();
  let data: unknown = null;
  if (text.length > 0) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null; // an HTML error page: fall back to the status text below
    }
  }
  if (!response.ok) {
    const message =
      isObject(data) && typeof data.message === 'string'
        ? data.message
        : `${response.status} ${response.statusText}`.trim();
    throw new APIError(response.status, message);
  }
  return data as T;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function numberOrNull(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

/** A list of finite numbers; a lone number is a list of one, anything else none. */
function numberList(value: unknown): number[] {
  const items = Array.isArray(value) ? value : [value];
  return items.filter((item): item is number => numberOrNull(item) !== null);
}

/** The non-empty strings of a list (anything else: none). */
function stringList(value: unknown): string[] {
  return Array.isArray(value)
    ? value.filter(
        (item): item is string => typeof item === 'string' && item.length > 0
      )
    : [];
}

function stringOrNull(value: unknown): string | null {
  return typeof value === 'string' && value.length > 0 ? value : null;
}

/** A run record from the server's snake_case JSON, or null when it has no usable id. */
export function parseRun(raw: unknown): IRun | null {
  if (!isObject(raw) || typeof raw.id !== 'string' || raw.id.length === 0) {
    return null;
  }
  return {
    id: raw.id,
    strategy: typeof raw.strategy === 'string' ? raw.strategy : '?',
    devices: numberOrNull(raw.devices),
    steps: numberOrNull(raw.steps),
    step: numberOrNull(raw.step),
    loss: numberOrNull(raw.loss),
    samplesPerSecond: numberOrNull(raw.samples_per_second),
    state: typeof raw.state === 'string' ? raw.state : 'lost',
    error: stringOrNull(raw.error),
    started: numberOrNull(raw.started),
    ended: numberOrNull(raw.ended),
    dashboardLink: stringOrNull(raw.dashboard_link),
    restarts: numberOrNull(raw.restarts),
    failures: numberOrNull(raw.failures),
    droppedUpdates: numberOrNull(raw.dropped_updates),
    recoverySeconds: numberList(raw.recovery_seconds),
    damage: stringOrNull(raw.damage),
    nonFinite: stringList(raw.non_finite),
    failureReasons: stringList(raw.failure_reasons)
  };
}

/** A cluster record, or null when it has no address. */
export function parseCluster(raw: unknown): ICluster | null {
  if (
    !isObject(raw) ||
    typeof raw.address !== 'string' ||
    raw.address.length === 0
  ) {
    return null;
  }
  const runs = Array.isArray(raw.runs)
    ? raw.runs.filter((id): id is string => typeof id === 'string')
    : [];
  return {
    address: raw.address,
    dashboardLink: stringOrNull(raw.dashboard_link),
    runs
  };
}

/** Parse a list field (`runs`, `clusters`) of a response, dropping malformed entries. */
export function parseList<T>(
  body: unknown,
  field: string,
  parse: (raw: unknown) => T | null
): T[] {
  const list = isObject(body) ? body[field] : undefined;
  if (!Array.isArray(list)) {
    throw new Error(`The server's answer has no "${field}" list`);
  }
  return list.map(parse).filter((item): item is T => item !== null);
}

/**
 * Whether a run still changes: running, asked to stop but not yet stopped, or finished
 * training while its summary is still to come (no end time yet).
 */
export function isLive(run: IRun): boolean {
  return (
    LIVE_STATES.has(run.state) ||
    (run.state === 'finished' && run.ended === null)
  );
}

/** A short human message for any error thrown by {@link requestAPI}. */
export function describeError(error: unknown): string {
  if (error instanceof APIError) {
    return error.message;
  }
  if (error instanceof ServerConnection.NetworkError) {
    return 'The Jupyter server cannot be reached';
  }
  return error instanceof Error ? error.message : String(error);
}
