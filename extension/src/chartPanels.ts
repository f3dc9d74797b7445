/**
 * A run's live charts as main-area panels: one `MainAreaWidget` per chart page, each an
 * `IFrame` on the page the server renders (`workbench/runs/<id>/charts/<page>`, which polls by
 * itself). A run's four panels dock as a 2x2 grid; a second run docks to the right of the first.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { IFrame, MainAreaWidget, WidgetTracker } from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';

import { workbenchIcon } from './icons';

/** The chart pages the server renders for a run, in the order they dock. */
export const CHART_PAGES = ['loss', 'utilization', 'timeline', 'communication'] as const;
export type ChartPage = (typeof CHART_PAGES)[number];

export function isChartPage(value: unknown): value is ChartPage {
  return (CHART_PAGES as ReadonlyArray<unknown>).includes(value);
}

const TITLES: Record<ChartPage, string> = {
  loss: 'Loss',
  utilization: 'Utilization',
  timeline: 'Timeline',
  communication: 'Communication'
};

/** Where each page docks: the first alone, the others relative to an earlier one. */
const PLACEMENT: Record<ChartPage, { mode: DockMode; relativeTo: ChartPage | null }> = {
  loss: { mode: 'split-right', relativeTo: null },
  utilization: { mode: 'split-right', relativeTo: 'loss' },
  timeline: { mode: 'split-bottom', relativeTo: 'loss' },
  communication: { mode: 'split-bottom', relativeTo: 'utilization' }
};

const WHOLE_MAIN_AREA = 'dtrain-workbench-whole-main-area';

type DockMode = 'split-right' | 'split-bottom' | 'tab-after';

/** The URL of a run's chart page. */
export function chartUrl(baseUrl: string, runId: string, page: ChartPage): string {
  return URLExt.join(baseUrl, 'workbench/runs', encodeURIComponent(runId), 'charts', page);
}

/** A run id without its date-time prefix (`20261123-012737-mirrored-fb4ea9` -> `mirrored-fb4ea9`). */
export function shortRunId(runId: string): string {
  return runId.replace(/^\d{8}-\d{6}-/, '');
}

/** The DOM id of a run's chart panel (ids must not contain spaces or slashes). */
export function chartPanelId(runId: string, page: ChartPage): string {
  return `dtrain-workbench-run-${runId.replace(/[^A-Za-z0-9_-]/g, '_')}-${page}`;
}

export class RunChartPanels {
  constructor(
    private readonly _app: JupyterFrontEnd,
    private readonly _baseUrl: string
  ) {}

  /** Every open chart panel; the layout restorer reopens them after a reload. */
  readonly tracker = new WidgetTracker<MainAreaWidget<IFrame>>({
    namespace: 'dtrain-workbench-charts'
  });

  /** The open panels of a run, in page order (closed ones left out). */
  panels(runId: string): MainAreaWidget<IFrame>[] {
    return CHART_PAGES.map(page => this._open.get(chartPanelId(runId, page))).filter(
      (panel): panel is MainAreaWidget<IFrame> => panel !== undefined && !panel.isDisposed
    );
  }

  /**
   * Show a run's charts (all pages, or `pages`): add the ones that are not open, activate the
   * ones that are.
   *
   * @returns the run's panels, in page order
   */
  open(runId: string, pages: ReadonlyArray<ChartPage> = CHART_PAGES): MainAreaWidget<IFrame>[] {
    const placed = new Map<ChartPage, MainAreaWidget<IFrame>>();
    for (const page of pages) {
      const id = chartPanelId(runId, page);
      const existing = this._open.get(id);
      if (existing && !existing.isDisposed) {
        placed.set(page, existing);
        continue;
      }
      const panel = this._createPanel(runId, page);
      const { mode, relativeTo } = PLACEMENT[page];
      const anchor = relativeTo ? placed.get(relativeTo) : undefined;
      // An anchor that was closed falls back to docking next to any panel of the run.
      const reference = anchor ?? (relativeTo ? placed.values().next().value : undefined);
      this._app.shell.add(panel, 'main', {
        ...(reference ? { mode, ref: reference.id } : this._firstPlacement()),
        activate: false
      });
      placed.set(page, panel);
    }
    for (const page of [...CHART_PAGES].reverse()) {
      const panel = placed.get(page);
      if (panel) {
        this._app.shell.activateById(panel.id); // the first page ends up focused
      }
    }
    return this.panels(runId);
  }

  /**
   * Where a run's first panel goes: to the right of what is open (a notebook stays in view,
   * a second run sits next to the first), or over the launcher when only launchers are open.
   */
  private _firstPlacement(): { mode: DockMode; ref?: string } {
    const open = Array.from(this._app.shell.widgets('main'));
    const launchers = open.filter(widget => widget.node.querySelector('.jp-Launcher-body'));
    if (open.length > 0 && launchers.length === open.length) {
      return { mode: 'tab-after', ref: launchers[launchers.length - 1].id };
    }
    // LabShell docks relative to the current widget when no ref is given; an id that matches
    // no widget makes the reference the whole main area, so a new run gets its own column.
    return { mode: 'split-right', ref: WHOLE_MAIN_AREA };
  }

  private _createPanel(runId: string, page: ChartPage): MainAreaWidget<IFrame> {
    const frame = new IFrame({
      sandbox: ['allow-scripts', 'allow-same-origin'],
      referrerPolicy: 'same-origin'
    });
    frame.url = chartUrl(this._baseUrl, runId, page);
    frame.addClass('jp-WorkbenchChartFrame');
    const panel = new MainAreaWidget({ content: frame });
    panel.id = chartPanelId(runId, page);
    panel.title.label = `${TITLES[page]} · ${shortRunId(runId)}`;
    panel.title.caption = `Run ${runId}: ${TITLES[page].toLowerCase()} charts`;
    panel.title.icon = workbenchIcon;
    panel.title.closable = true;
    panel.addClass('jp-WorkbenchChartPanel');
    panel.node.dataset.runId = runId;
    panel.node.dataset.chartPage = page;
    this._open.set(panel.id, panel);
    panel.disposed.connect(() => this._open.delete(panel.id));
    void this.tracker.add(panel);
    return panel;
  }

  private _open = new Map<string, MainAreaWidget<IFrame>>();
}
