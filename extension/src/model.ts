/**
 * The sidebar's state: the runs and clusters the server knows, refreshed by a poll.
 *
 * Flow: a `Poll` calls `refresh()`; `refresh()` shares one request with every caller while it
 * is in flight (so requests never overlap), replaces the state and emits `changed`. The poll
 * runs at `refreshInterval` while a run is live and `idleFactor` times slower otherwise
 * (`idleFactor: Infinity` stops it until `refresh()` is called). Failures never reach the
 * caller: they become `status === 'error'` with a message, and the poll backs off.
 */
import { ServerConnection } from '@jupyterlab/services';
import { IDisposable } from '@lumino/disposable';
import { IPoll, Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import {
  describeError,
  ICluster,
  IRun,
  isLive,
  parseCluster,
  parseList,
  parseRun,
  requestAPI
} from './api';

/** Where the model is: waiting for its first answer, up to date, or failing. */
export type ModelStatus = 'loading' | 'ready' | 'error';

/** What a stop request came to. */
export interface IStopResult {
  ok: boolean;
  message: string;
}

export namespace RunsModel {
  export interface IOptions {
    /** The server connection; defaults to `ServerConnection.makeSettings()`. */
    serverSettings?: ServerConnection.ISettings;
    /** Milliseconds between refreshes while a run is live (default 250). */
    refreshInterval?: number;
    /** How many times slower to poll with no live run (default 4; Infinity: not at all). */
    idleFactor?: number;
    /** Whether to start polling at once (default true). */
    autoStart?: boolean;
  }
}

/** The smallest refresh interval the settings schema allows. */
export const MINIMUM_REFRESH_INTERVAL = 250;
/** Live runs refresh four times a second: the sidebar stays within a second of the devices. */
export const DEFAULT_REFRESH_INTERVAL = 250;
/** With no live run, every second: a run started in a notebook shows up soon. */
const DEFAULT_IDLE_FACTOR = 4;
const MAXIMUM_BACKOFF = 60 * 1000;
/** The least pause between a live run's requests, as a share of the refresh interval. */
const MINIMUM_GAP = 0.25;

export class RunsModel implements IDisposable {
  constructor(options: RunsModel.IOptions = {}) {
    this.serverSettings =
      options.serverSettings ?? ServerConnection.makeSettings();
    this._refreshInterval = clampInterval(
      options.refreshInterval ?? DEFAULT_REFRESH_INTERVAL
    );
    this._idleFactor = Math.max(1, options.idleFactor ?? DEFAULT_IDLE_FACTOR);
    this._poll = new Poll({
      auto: false,
      factory: () => this._pollOnce(),
      frequency: this._frequency(),
      name: 'dtrain-workbench:runs',
      standby: () => (this._paused ? true : 'when-hidden')
    });
    if (options.autoStart ?? true) {
      void this._poll.start();
    }
  }

  readonly serverSettings: ServerConnection.ISettings;

  /** Emitted whenever runs, clusters, status or error change. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get runs(): ReadonlyArray<IRun> {
    return this._runs;
  }

  get clusters(): ReadonlyArray<ICluster> {
    return this._clusters;
  }

  get status(): ModelStatus {
    return this._status;
  }

  /** Why the last refresh failed, or null once one succeeds. */
  get error(): string | null {
    return this._error;
  }

  get hasLiveRuns(): boolean {
    return this._runs.some(isLive);
  }

  /** Milliseconds between refreshes while a run is live (applied from the next tick on). */
  get refreshInterval(): number {
    return this._refreshInterval;
  }

  set refreshInterval(value: number) {
    const interval = clampInterval(value);
    if (interval === this._refreshInterval) {
      return;
    }
    this._refreshInterval = interval;
    this._poll.frequency = this._frequency();
    if (!this._poll.isDisposed && this._status !== 'loading') {
      void this._poll.refresh(); // so a shorter interval takes effect now, not after the old one
    }
  }

  /** A paused model does not poll (e.g. while its sidebar is hidden); `refresh()` still works. */
  get paused(): boolean {
    return this._paused;
  }

  set paused(value: boolean) {
    if (value === this._paused) {
      return;
    }
    this._paused = value;
    if (!value && !this._poll.isDisposed) {
      void this._poll.refresh(); // catch up at once when shown again
    }
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  /** A run by id, as of the last refresh. */
  run(runId: string): IRun | undefined {
    return this._runs.find(run => run.id === runId);
  }

  /**
   * Fetch runs and clusters now. Shares the request in flight if there is one; never rejects.
   */
  refresh(): Promise<void> {
    if (this._isDisposed) {
      return Promise.resolve();
    }
    if (!this._inFlight) {
      this._inFlight = this._fetch().finally(() => {
        this._inFlight = null;
      });
    }
    return this._inFlight.then(
      () => undefined,
      () => undefined
    );
  }

  /** Ask the server to stop a live run; never rejects. */
  async stopRun(runId: string): Promise<IStopResult> {
    try {
      const body = await requestAPI<unknown>(
        `runs/${encodeURIComponent(runId)}/stop`,
        { method: 'POST' },
        this.serverSettings
      );
      const updated = parseRun(body);
      if (updated && !this._isDisposed) {
        this._runs = this._runs.map(run =>
          run.id === updated.id ? updated : run
        );
        this._poll.frequency = this._frequency();
        this._changed.emit();
      }
      void this.refresh();
      return { ok: true, message: `Asked run ${runId} to stop` };
    } catch (error) {
      return {
        ok: false,
        message: `Could not stop run ${runId}: ${describeError(error)}`
      };
    }
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this._poll.dispose();
    Signal.clearData(this);
  }

  /** The poll's factory: like `refresh()`, but rejects on failure so the poll backs off. */
  private async _pollOnce(): Promise<void> {
    if (!this._inFlight) {
      this._inFlight = this._fetch().finally(() => {
        this._inFlight = null;
      });
    }
    await this._inFlight;
  }

  private async _fetch(): Promise<void> {
    const started = Date.now();
    try {
      const [runsBody, clustersBody] = await Promise.all([
        requestAPI<unknown>('runs', {}, this.serverSettings),
        requestAPI<unknown>('clusters', {}, this.serverSettings)
      ]);
      const runs = parseList(runsBody, 'runs', parseRun);
      const clusters = parseList(clustersBody, 'clusters', parseCluster);
      if (this._isDisposed) {
        return;
      }
      this._runs = runs;
      this._clusters = clusters;
      this._status = 'ready';
      this._error = null;
      this._poll.frequency = this._frequency(Date.now() - started);
      this._changed.emit();
    } catch (error) {
      if (this._isDisposed) {
        return;
      }
      this._status = 'error';
      this._error = describeError(error);
      this._poll.frequency = this._frequency(); // the poll backs off from here
      this._changed.emit();
      throw error;
    }
  }

  /**
   * The poll frequency for the current state: fast while live, slower (or never) when idle.
   * While live the interval runs from the start of the request that took `elapsed` ms (the
   * poll waits from its end), so a slow server does not slow the sidebar down by as much.
   */
  private _frequency(elapsed = 0): IPoll.Frequency {
    const idle = this._refreshInterval * this._idleFactor;
    const live = Math.max(
      this._refreshInterval - elapsed,
      this._refreshInterval * MINIMUM_GAP
    );
    const interval =
      this.hasLiveRuns || this._status === 'loading'
        ? Math.round(live)
        : Number.isFinite(idle)
          ? Math.min(idle, Poll.MAX_INTERVAL)
          : Poll.NEVER;
    const max =
      interval === Poll.NEVER
        ? Poll.NEVER
        : Math.max(interval, MAXIMUM_BACKOFF);
    return { interval, backoff: true, max };
  }

  private _changed = new Signal<this, void>(this);
  private _runs: IRun[] = [];
  private _clusters: ICluster[] = [];
  private _status: ModelStatus = 'loading';
  private _error: string | null = null;
  private _refreshInterval: number;
  private _idleFactor: number;
  private _paused = false;
  private _isDisposed = false;
  private _inFlight: Promise<void> | null = null;
  private _poll: Poll;
}

function clampInterval(value: number): number {
  return Number.isFinite(value)
    ? Math.max(MINIMUM_REFRESH_INTERVAL, Math.round(value))
    : DEFAULT_REFRESH_INTERVAL;
}
