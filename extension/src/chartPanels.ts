/**
 * A run's live charts as main-area tabs: one `MainAreaWidget` per chart page, each an `IFrame`
 * on the page the server renders (`workbench/runs/<id>/charts/<page>`, which polls by itself and
 * stacks the page's charts at the full width of the tab). A run's four tabs open next to the
 * last chart tab (or the notebook or launcher in view), so each chart gets the whole main area
 * instead of a quarter of it; a second run's tabs follow the first's.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { IFrame, MainAreaWidget, WidgetTracker } from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';

import { workbenchIcon } from './icons';

/** The chart pages the server renders for a run, in the order they dock. */
export const CHART_PAGES = [
  'loss',
  'utilization',
  'timeline',
  'communication'
] as const;
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

/** Where a tab goes: after the widget `ref` in its tab bar, or wherever the shell puts it. */
interface IPlacement {
  mode?: 'tab-after';
  ref?: string;
}

/** The URL of a run's chart page. */
export function chartUrl(
  baseUrl: string,
  runId: string,
  page: ChartPage
): string {
  return URLExt.join(
    baseUrl,
    'workbench/runs',
    encodeURIComponent(runId),
    'charts',
    page
  );
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
    return CHART_PAGES.map(page =>
      this._open.get(chartPanelId(runId, page))
    ).filter(
      (panel): panel is MainAreaWidget<IFrame> =>
        panel !== undefined && !panel.isDisposed
    );
  }

  /**
   * Show a run's charts (all pages, or `pages`): add the ones that are not open, activate the
   * ones that are.
   *
   * @returns the run's panels, in page order
   */
  open(
    runId: string,
    pages: ReadonlyArray<ChartPage> = CHART_PAGES
  ): MainAreaWidget<IFrame>[] {
    let first: MainAreaWidget<IFrame> | null = null;
    for (const page of pages) {
      const id = chartPanelId(runId, page);
      const existing = this._open.get(id);
      let panel: MainAreaWidget<IFrame>;
      if (existing && !existing.isDisposed) {
        panel = existing;
      } else {
        const placement = this._placement(); // read before the new panel counts as open
        panel = this._createPanel(runId, page);
        this._app.shell.add(panel, 'main', { ...placement, activate: false });
      }
      first = first ?? panel;
    }
    if (first) {
      this._app.shell.activateById(first.id); // the run's first page is the one in view
    }
    return this.panels(runId);
  }

  /**
   * Where the next tab goes: after the newest chart tab still open (a run's pages in order, a
   * second run after the first), else after the widget in view (the notebook that started the
   * run, or the launcher), in the same tab bar.
   */
  private _placement(): IPlacement {
    const charts = Array.from(this._open.values()).filter(
      panel => panel.isAttached
    );
    const last = charts[charts.length - 1];
    if (last) {
      return { mode: 'tab-after', ref: last.id };
    }
    const open = Array.from(this._app.shell.widgets('main'));
    const current = this._app.shell.currentWidget;
    const reference =
      current && open.includes(current) ? current : open[open.length - 1];
    return reference ? { mode: 'tab-after', ref: reference.id } : {};
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
