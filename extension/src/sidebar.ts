/**
 * The "Distributed training" sidebar: the clusters (with links to their Dask dashboards) and
 * the runs of the run store, redrawn from the model's `changed` signal. Rows are keyed by run
 * id and updated in place, so a refresh never steals a click or the keyboard focus.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { ICluster, IRun, isLive } from './api';
import { workbenchIcon } from './icons';
import { RunsModel } from './model';

export namespace RunsSidebar {
  export interface IOptions {
    model: RunsModel;
    /** Called to open a run's charts (click, Enter). */
    openRun: (runId: string) => void;
    /** Called to stop a live run (its Stop button). */
    stopRun: (runId: string) => void;
    /** Called by the "New notebook" button, if given. */
    newNotebook?: () => void;
  }
}

export class RunsSidebar extends Widget {
  constructor(options: RunsSidebar.IOptions) {
    super();
    this._options = options;
    this.id = 'dtrain-workbench-sidebar';
    this.addClass('jp-WorkbenchSidebar');
    this.title.icon = workbenchIcon;
    this.title.caption = 'Distributed training';

    const header = element('header', 'jp-WorkbenchSidebar-header');
    header.append(
      element('h2', 'jp-WorkbenchSidebar-title', 'Distributed training')
    );
    const actions = element('div', 'jp-WorkbenchSidebar-actions');
    if (options.newNotebook) {
      actions.append(
        button('New notebook', 'jp-WorkbenchSidebar-new', options.newNotebook)
      );
    }
    actions.append(
      button(
        'Refresh',
        'jp-WorkbenchSidebar-refresh',
        () => void options.model.refresh()
      )
    );
    header.append(actions);

    this._status = element('div', 'jp-WorkbenchSidebar-status');
    this._status.setAttribute('role', 'status');
    this._clusterList = element('ul', 'jp-WorkbenchSidebar-clusters');
    this._runList = element('ul', 'jp-WorkbenchSidebar-runs');
    this._runList.addEventListener('click', this._onRunClick);
    this._runList.addEventListener('keydown', this._onRunKey);
    this.node.append(
      header,
      this._status,
      element('h3', 'jp-WorkbenchSidebar-section', 'Clusters'),
      this._clusterList,
      element('h3', 'jp-WorkbenchSidebar-section', 'Runs'),
      this._runList
    );
    options.model.changed.connect(this._render, this);
    this._render();
  }

  /**
   * Show a message below the header (e.g. the answer to a stop request) for `NOTICE_MS`
   * (errors `ERROR_NOTICE_MS`); a notice about run `runId` goes as soon as that run is no
   * longer live (it has stopped: its row says so).
   */
  notify(message: string, isError = false, runId: string | null = null): void {
    window.clearTimeout(this._noticeTimer);
    this._notice = { message, isError, runId };
    this._noticeTimer = window.setTimeout(
      () => {
        this._notice = null;
        this._renderStatus(this._options.model);
      },
      isError ? ERROR_NOTICE_MS : NOTICE_MS
    );
    this._render();
  }

  /** The notice shown now, or null. */
  get notice(): string | null {
    return this._notice?.message ?? null;
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._options.model.paused = false;
  }

  protected onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this._options.model.paused = true;
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._options.model.changed.disconnect(this._render, this);
    window.clearTimeout(this._noticeTimer);
    super.dispose();
  }

  private _render(): void {
    const { model } = this._options;
    this._renderStatus(model);
    this._renderClusters(model.clusters);
    this._renderRuns(model.runs, model.status === 'loading');
  }

  private _renderStatus(model: RunsModel): void {
    const parts: string[] = [];
    let isError = false;
    if (model.status === 'error') {
      parts.push(`Cannot load runs: ${model.error ?? 'unknown error'}`);
      isError = true;
    }
    const about = this._notice?.runId
      ? model.run(this._notice.runId)
      : undefined;
    if (about && !isLive(about)) {
      this._notice = null; // the run has stopped: its row says so now
    }
    if (this._notice) {
      parts.push(this._notice.message);
      isError = isError || this._notice.isError;
    }
    this._status.textContent = parts.join(' — ');
    this._status.classList.toggle('jp-mod-error', isError);
    this._status.hidden = parts.length === 0;
  }

  private _renderClusters(clusters: ReadonlyArray<ICluster>): void {
    const items = clusters.map(cluster => {
      const item = element('li', 'jp-WorkbenchSidebar-cluster');
      item.append(
        element('span', 'jp-WorkbenchSidebar-address', cluster.address)
      );
      if (cluster.dashboardLink) {
        const link = element(
          'a',
          'jp-WorkbenchSidebar-dashboard',
          'Dask dashboard'
        );
        link.href = cluster.dashboardLink;
        link.target = '_blank';
        link.rel = 'noopener noreferrer';
        item.append(link);
      }
      const count = cluster.runs.length;
      item.append(
        element(
          'span',
          'jp-WorkbenchSidebar-muted',
          `${count} run${count === 1 ? '' : 's'}`
        )
      );
      return item;
    });
    if (items.length === 0) {
      items.push(
        element('li', 'jp-WorkbenchSidebar-empty', 'No cluster running')
      );
    }
    this._clusterList.replaceChildren(...items);
  }

  private _renderRuns(runs: ReadonlyArray<IRun>, loading: boolean): void {
    if (runs.length === 0) {
      const text = loading
        ? 'Loading…'
        : 'No runs yet: start one with %dtrain in a notebook';
      this._rows.clear();
      this._runList.replaceChildren(
        element('li', 'jp-WorkbenchSidebar-empty', text)
      );
      return;
    }
    const rows = runs.map(run => {
      const row =
        this._rows.get(run.id) ??
        createRunRow(run.id, this._options.model.serverSettings.baseUrl);
      updateRunRow(row, run);
      return row;
    });
    this._rows = new Map(rows.map(row => [row.dataset.runId ?? '', row]));
    // Only touch the DOM order when it changed, so a focused row keeps its focus.
    const current = Array.from(this._runList.children);
    if (
      current.length !== rows.length ||
      rows.some((row, index) => current[index] !== row)
    ) {
      this._runList.replaceChildren(...rows);
    }
  }

  private _onRunClick = (event: MouseEvent): void => {
    const target = event.target as HTMLElement;
    const row = target.closest<HTMLElement>('.jp-WorkbenchRun');
    const runId = row?.dataset.runId;
    if (!runId) {
      return;
    }
    if (target.closest('.jp-WorkbenchRun-stop')) {
      event.stopPropagation();
      this._options.stopRun(runId);
    } else if (!target.closest('a')) {
      this._options.openRun(runId);
    }
  };

  private _onRunKey = (event: KeyboardEvent): void => {
    const target = event.target as HTMLElement;
    if (event.key === 'Enter' && target.classList.contains('jp-WorkbenchRun')) {
      const runId = target.dataset.runId;
      if (runId) {
        event.preventDefault();
        this._options.openRun(runId);
      }
    }
  };

  private _options: RunsSidebar.IOptions;
  private _status: HTMLElement;
  private _clusterList: HTMLElement;
  private _runList: HTMLElement;
  private _rows = new Map<string, HTMLElement>();
  private _notice: {
    message: string;
    isError: boolean;
    runId: string | null;
  } | null = null;
  private _noticeTimer = 0;
}

/** How long a notice stays at most (ms): an error a little longer, to be read. */
export const NOTICE_MS = 5000;
export const ERROR_NOTICE_MS = 10000;

/** The fields a run row shows, in order: [class suffix, label]. */
// The devices go in the head ("mirrored ×2"): four columns did not fit a sidebar.
const FIELDS: ReadonlyArray<[string, string]> = [
  ['step', 'Step'],
  ['loss', 'Loss'],
  ['speed', 'Samples/s']
];
// Each label's tooltip (the labels stay short so the four fit on one line).
const FIELD_TITLES: Record<string, string> = {
  step: 'Steps done / steps in the run',
  loss: 'Training loss of the latest step',
  speed: 'Samples per second, over the last steps'
};

/** The exports of a run the server offers: [endpoint, link text, file name suffix, tooltip]. */
const EXPORTS: ReadonlyArray<[string, string, string, string]> = [
  [
    'trace',
    'Chrome trace',
    'trace.json',
    'The timeline for chrome://tracing or Perfetto'
  ],
  ['scalars.csv', 'CSV', 'scalars.csv', 'Loss and the other per-step scalars']
];

function createRunRow(runId: string, baseUrl: string): HTMLElement {
  const row = element('li', 'jp-WorkbenchRun');
  row.dataset.runId = runId;
  row.tabIndex = 0;
  row.title = `Open the charts of run ${runId}`;
  const head = element('div', 'jp-WorkbenchRun-head');
  const devices = element('span', 'jp-WorkbenchRun-deviceCount');
  devices.append(element('span', 'jp-WorkbenchRun-devices'));
  head.append(
    element('span', 'jp-WorkbenchRun-strategy'),
    devices,
    element('span', 'jp-WorkbenchRun-state'),
    button('Stop', 'jp-WorkbenchRun-stop')
  );
  const fields = element('div', 'jp-WorkbenchRun-fields');
  for (const [name, label] of FIELDS) {
    const field = element('div', 'jp-WorkbenchRun-field');
    field.title = FIELD_TITLES[name] ?? label;
    field.append(
      element('span', 'jp-WorkbenchRun-label', label),
      element('span', `jp-WorkbenchRun-value jp-WorkbenchRun-${name}`)
    );
    fields.append(field);
  }
  const exports = element('div', 'jp-WorkbenchRun-exports');
  for (const [endpoint, text, suffix, tooltip] of EXPORTS) {
    const link = element('a', 'jp-WorkbenchRun-export', text);
    // Same origin: the browser's Jupyter login cookie authenticates the download.
    link.href = URLExt.join(
      baseUrl,
      'workbench/api/runs',
      encodeURIComponent(runId),
      endpoint
    );
    link.download = `${runId}-${suffix}`;
    link.title = tooltip;
    exports.append(link);
  }
  // Shortened with an ellipsis in a narrow sidebar: the tooltip has it whole.
  const idLine = element('div', 'jp-WorkbenchRun-id', runId);
  idLine.title = runId;
  const faults = element('div', 'jp-WorkbenchRun-faults');
  faults.hidden = true;
  const problem = element('div', 'jp-WorkbenchRun-problem');
  problem.hidden = true;
  row.append(head, fields, faults, problem, idLine, exports);
  return row;
}

function updateRunRow(row: HTMLElement, run: IRun): void {
  setText(row, '.jp-WorkbenchRun-strategy', run.strategy);
  setTitle(row, '.jp-WorkbenchRun-strategy', `${run.strategy} · run ${run.id}`);
  const state = row.querySelector<HTMLElement>('.jp-WorkbenchRun-state');
  if (state) {
    state.textContent = run.state;
    state.dataset.state = run.state;
    state.title = run.error ?? run.damage ?? run.state;
  }
  row.dataset.state = run.state;
  const stop = row.querySelector<HTMLButtonElement>('.jp-WorkbenchRun-stop');
  if (stop) {
    stop.hidden = run.state !== 'running';
    stop.title = `Stop run ${run.id} after the step in flight`;
  }
  setText(row, '.jp-WorkbenchRun-devices', formatCount(run.devices));
  setTitle(
    row,
    '.jp-WorkbenchRun-deviceCount',
    run.devices === null
      ? 'devices unknown'
      : `${run.devices} device${run.devices === 1 ? '' : 's'}`
  );
  const step =
    run.steps !== null
      ? `${formatCount(run.step)}/${formatCount(run.steps)}`
      : formatCount(run.step);
  setText(row, '.jp-WorkbenchRun-step', step);
  setTitle(row, '.jp-WorkbenchRun-step', `step ${step}`);
  setText(row, '.jp-WorkbenchRun-loss', formatLoss(run.loss));
  setTitle(
    row,
    '.jp-WorkbenchRun-loss',
    run.loss === null ? 'no loss yet' : `loss ${run.loss}`
  );
  setText(row, '.jp-WorkbenchRun-speed', formatSpeed(run.samplesPerSecond));
  updateFaults(row, run);
  updateProblem(row, run);
  row.classList.toggle('jp-mod-live', isLive(run));
}

/**
 * What the server could not show of a run, e.g. "Damaged: status.json is not valid JSON" or
 * "NaN/∞: loss, samples_per_second" (those fields read "–"); "" for a sound run.
 */
export function problemSummary(run: IRun): string {
  const parts: string[] = [];
  if (run.damage !== null) {
    parts.push(`Damaged: ${run.damage}`);
  }
  if (run.nonFinite.length > 0) {
    parts.push(`NaN/∞: ${run.nonFinite.join(', ')}`);
  }
  parts.push(...run.failureReasons);
  return parts.join(' · ');
}

function updateProblem(row: HTMLElement, run: IRun): void {
  const node = row.querySelector<HTMLElement>('.jp-WorkbenchRun-problem');
  if (!node) {
    return;
  }
  const summary = problemSummary(run);
  setText(row, '.jp-WorkbenchRun-problem', summary);
  node.hidden = summary.length === 0;
  const notes: string[] = [];
  if (run.damage !== null) {
    notes.push(
      'The run store could not read this run; its other fields may be missing'
    );
  }
  if (run.nonFinite.length > 0) {
    notes.push(
      'These values were NaN or infinite (a diverged run) and show as –'
    );
  }
  if (run.failureReasons.length > 0) {
    notes.push(
      `Why the run failed or restarted:\n${run.failureReasons.join('\n')}`
    );
  }
  node.title = notes.join('\n');
  row.classList.toggle('jp-mod-damaged', run.damage !== null);
  row.classList.toggle('jp-mod-nonfinite', run.nonFinite.length > 0);
}

/**
 * What went wrong in a run and what it cost, e.g. "Restarts 2 · Dropped 14"; "" for a run
 * without faults or recorded before fault counts. Failures show only where they differ from
 * the restarts: a failure still being recovered from, or one the run did not survive.
 */
export function faultSummary(run: IRun): string {
  const restarts = run.restarts ?? 0;
  const failures = run.failures ?? 0;
  const parts: string[] = [];
  if (restarts > 0) {
    parts.push(`Restarts ${restarts}`);
  }
  if (failures > 0 && failures !== restarts) {
    parts.push(`Failures ${failures}`);
  }
  if ((run.droppedUpdates ?? 0) > 0) {
    parts.push(`Dropped ${run.droppedUpdates}`);
  }
  return parts.join(' · ');
}

/** The tooltip of the fault line: how long each recovery took. */
export function recoveryTooltip(run: IRun): string {
  if (run.recoverySeconds.length === 0) {
    return 'Failures, restarts from a checkpoint and dropped gradient pushes';
  }
  const times = run.recoverySeconds
    .map(seconds => `${seconds.toFixed(1)} s`)
    .join(', ');
  return `Recovery took ${times}`;
}

function updateFaults(row: HTMLElement, run: IRun): void {
  const node = row.querySelector<HTMLElement>('.jp-WorkbenchRun-faults');
  if (!node) {
    return;
  }
  const summary = faultSummary(run);
  setText(row, '.jp-WorkbenchRun-faults', summary);
  node.hidden = summary.length === 0;
  node.title = recoveryTooltip(run);
}

function formatCount(value: number | null): string {
  return value === null ? '–' : String(value);
}

function formatLoss(value: number | null): string {
  if (value === null) {
    return '–';
  }
  return value !== 0 && Math.abs(value) < 0.001
    ? value.toExponential(2)
    : value.toPrecision(4);
}

function formatSpeed(value: number | null): string {
  if (value === null) {
    return '–';
  }
  return value >= 1000 ? `${(value / 1000).toFixed(1)}k` : value.toFixed(0);
}

function setTitle(root: HTMLElement, selector: string, title: string): void {
  const node = root.querySelector<HTMLElement>(selector);
  if (node && node.title !== title) {
    node.title = title;
  }
}

function setText(root: HTMLElement, selector: string, text: string): void {
  const node = root.querySelector<HTMLElement>(selector);
  if (node && node.textContent !== text) {
    node.textContent = text;
  }
}

function element<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className: string,
  text?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  node.className = className;
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

function button(
  label: string,
  className: string,
  onClick?: () => void
): HTMLButtonElement {
  const node = element(
    'button',
    `jp-Button jp-mod-styled jp-mod-small ${className}`,
    label
  );
  node.type = 'button';
  if (onClick) {
    node.addEventListener('click', onClick);
  }
  return node;
}
