/**
 * One run, three live views in a real JupyterLab and chromium: a notebook trains a 2000-step
 * mirrored run with its panel while the sidebar and the run's Dask dashboard page follow it.
 * Each view must show each step within a second of the first view that showed it, the panel and
 * the sidebar must say "finished" within a second of the last step, and after a reload every
 * chart of the panel must have its data again, each step once.
 */
import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import { Page } from '@playwright/test';
import * as fs from 'fs';
import * as path from 'path';

const SIDEBAR = 'dtrain-workbench-sidebar';
const STEPS = 2000;
// About 10-20 s of training on two cores.
const FLAGS = `--strategy mirrored --devices 2 --steps ${STEPS} --hidden 512,512 --batch-size 128`;
const SAMPLE_MS = 50; // each view is read 20 times a second
// Every view within a second of the first, at 95% of the steps; a machine that the run, the
// browser and the server share sometimes stalls for a second or two (a sidebar once showed a
// run's step 21 2.2 s late on two slow cores), so the worst step may be later, but not by more
// than WORST_LAG_MS (the panel once trailed by a thousand steps: many seconds).
const LAG_BOUND_MS = 1000;
const WORST_LAG_MS = 3000;
const SHOTS = path.join(__dirname, '..', 'test-results', 'screenshots');

/** [time in ms (Date.now), step] each time a view's step changed. */
type Samples = [number, number][];

async function shot(page: Page, name: string): Promise<void> {
  fs.mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: path.join(SHOTS, `${name}.png`) });
}

/**
 * Read ``selectors`` (view name -> CSS selector, looked up through shadow roots: Bokeh draws in
 * them) every SAMPLE_MS in ``page``, keeping each change of the step ("step 120/2000",
 * "120/2000"), and when each of ``states`` (view name -> CSS selector) first said finished.
 */
async function startSampling(
  page: Page,
  selectors: Record<string, string>,
  states: Record<string, string> = {}
): Promise<void> {
  await page.evaluate(
    ({ selectors, states, every }) => {
      const find = (
        root: Document | ShadowRoot,
        selector: string
      ): Element | null => {
        const found = root.querySelector(selector);
        if (found) {
          return found;
        }
        for (const element of Array.from(root.querySelectorAll('*'))) {
          const inner = element.shadowRoot
            ? find(element.shadowRoot, selector)
            : null;
          if (inner) {
            return inner;
          }
        }
        return null;
      };
      const state = window as unknown as {
        dtrainSamples: Record<string, [number, number][]>;
        dtrainFinishedAt: Record<string, number>;
        dtrainSampler: number;
      };
      const elements: Record<string, Element | null> = {};
      state.dtrainSamples = {};
      state.dtrainFinishedAt = {};
      for (const name of Object.keys(selectors)) {
        state.dtrainSamples[name] = [];
      }
      state.dtrainSampler = window.setInterval(() => {
        const now = Date.now();
        for (const [name, selector] of Object.entries(selectors)) {
          let element = elements[name];
          if (!element || !element.isConnected) {
            element = elements[name] = find(document, selector);
          }
          // A shadow root's text without its style sheets (their CSS has numbers too).
          const parts = element?.shadowRoot
            ? Array.from(element.shadowRoot.childNodes).filter(
                node => !['STYLE', 'LINK'].includes(node.nodeName)
              )
            : [element];
          const text = parts.map(node => node?.textContent ?? '').join(' ');
          const match = text.match(/(\d+)\/\d+/);
          const seen = state.dtrainSamples[name];
          if (
            match &&
            (seen.length === 0 || seen[seen.length - 1][1] !== Number(match[1]))
          ) {
            seen.push([now, Number(match[1])]);
          }
        }
        for (const [name, selector] of Object.entries(states)) {
          const said =
            document.querySelector(selector)?.textContent?.trim() ?? '';
          if (
            state.dtrainFinishedAt[name] === undefined &&
            said.startsWith('finished')
          ) {
            state.dtrainFinishedAt[name] = now;
          }
        }
      }, every);
    },
    { selectors, states, every: SAMPLE_MS }
  );
}

async function stopSampling(page: Page): Promise<{
  samples: Record<string, Samples>;
  finishedAt: Record<string, number>;
}> {
  return page.evaluate(() => {
    const state = window as unknown as {
      dtrainSamples: Record<string, [number, number][]>;
      dtrainFinishedAt: Record<string, number>;
      dtrainSampler: number;
    };
    window.clearInterval(state.dtrainSampler);
    return { samples: state.dtrainSamples, finishedAt: state.dtrainFinishedAt };
  });
}

/** When ``samples`` first showed ``step`` or a later one (null: never). */
function reached(samples: Samples, step: number): number | null {
  const hit = samples.find(([, shown]) => shown >= step);
  return hit ? hit[0] : null;
}

/**
 * Each view's lags (ms) behind the first view to show a step, over every step shown after all
 * the views were being read (a view opened later has its first step late): the worst, at which
 * step, and the 95th percentile.
 */
function lags(views: Record<string, Samples>): Record<string, ILag> {
  const watched = Math.max(
    ...Object.values(views).map(s => (s.length ? s[0][1] : Infinity))
  );
  const steps = new Set<number>();
  for (const samples of Object.values(views)) {
    samples.forEach(([, step]) => step > watched && steps.add(step));
  }
  const all: Record<string, number[]> = {};
  const worst: Record<string, [number, number]> = {}; // [lag, at which step]
  for (const name of Object.keys(views)) {
    all[name] = [];
    worst[name] = [0, 0];
  }
  for (const step of steps) {
    const times = Object.entries(views).map(([name, samples]) => [
      name,
      reached(samples, step)
    ]);
    if (times.some(([, time]) => time === null)) {
      continue; // a step some view never reached is checked by the final-step assertion
    }
    const first = Math.min(...times.map(([, time]) => time as number));
    for (const [name, time] of times) {
      const lag = (time as number) - first;
      all[name as string].push(lag);
      if (lag > worst[name as string][0]) {
        worst[name as string] = [lag, step];
      }
    }
  }
  const result: Record<string, ILag> = {};
  for (const [name, values] of Object.entries(all)) {
    const sorted = [...values].sort((a, b) => a - b);
    const p95 = sorted.length
      ? sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * 0.95))]
      : 0;
    result[name] = { worst: worst[name][0], atStep: worst[name][1], p95 };
  }
  return result;
}

interface ILag {
  worst: number;
  atStep: number;
  p95: number;
}

/** Each Bokeh figure in the page's documents, with the rows its renderers' sources hold. */
async function figureRows(
  page: IJupyterLabPageFixture
): Promise<Record<string, number>> {
  return page.evaluate(() => {
    type Model = { constructor: { __name__: string }; [key: string]: unknown };
    const bokeh = (window as unknown as { Bokeh?: { documents: unknown[] } })
      .Bokeh;
    const rows: Record<string, number> = {};
    for (const [index, document] of (bokeh?.documents ?? []).entries()) {
      const models = (document as { all_models: Set<Model> }).all_models;
      for (const model of Array.from(models ?? [])) {
        if (!['Figure', 'Plot'].includes(model.constructor.__name__)) {
          continue;
        }
        const title = `${(model.title as { text?: string } | null)?.text ?? '?'} #${index}`;
        const renderers = model.renderers as {
          data_source?: { get_length(): number | null };
        }[];
        const lengths = renderers.map(r => r.data_source?.get_length() ?? 0);
        rows[title] = Math.max(rows[title] ?? 0, ...lengths, 0);
      }
    }
    return rows;
  });
}

const SOURCES = ['loss', 'throughput'];

/** The ``step`` column of each loss and throughput source of the page's drawn documents. */
async function stepColumns(
  page: IJupyterLabPageFixture
): Promise<Record<string, number[]>> {
  return page.evaluate(names => {
    type Source = {
      name: string | null;
      get_column(name: string): ArrayLike<number> | null;
    };
    type Doc = { roots(): unknown[]; all_models: Set<Source> };
    const bokeh = (window as unknown as { Bokeh?: { documents: Doc[] } }).Bokeh;
    const columns: Record<string, number[]> = {};
    for (const [index, document] of (bokeh?.documents ?? []).entries()) {
      if (document.roots().length === 0) {
        continue; // a view's earlier document, cleared when it drew again
      }
      for (const model of Array.from(document.all_models)) {
        if (model.name !== null && names.includes(model.name)) {
          columns[`${model.name} #${index}`] = Array.from(
            model.get_column('step') ?? []
          );
        }
      }
    }
    return columns;
  }, SOURCES);
}

/**
 * What is wrong with each column: a step repeated or out of order, a loss step missing (the
 * loss has every step, from 0), or the loss's last step not ``last``.
 */
function faults(
  columns: Record<string, number[]>,
  last: number | null
): string[] {
  const found: string[] = [];
  for (const [name, steps] of Object.entries(columns)) {
    const loss = name.startsWith('loss');
    const at = steps.findIndex((step, i) =>
      loss
        ? step !== (i > 0 ? steps[i - 1] + 1 : 0)
        : i > 0 && step <= steps[i - 1]
    );
    if (at >= 0) {
      const around = steps.slice(Math.max(0, at - 2), at + 2).join(', ');
      found.push(
        `${name}: ${steps.length} rows, step ${steps[at]} at row ${at} (…${around}…)`
      );
    }
    if (last !== null && loss && steps[steps.length - 1] !== last) {
      found.push(
        `${name}: ends at step ${steps[steps.length - 1]}, not ${last}`
      );
    }
  }
  return found;
}

test.describe('one run, three live views', () => {
  test('panel, sidebar and dashboard page keep up; the panel survives a reload', async ({
    page
  }) => {
    test.setTimeout(360000);
    await page.notebook.createNew('live.ipynb');
    await page.notebook.setCell(0, 'code', '%load_ext workbench');
    await page.notebook.addCell('code', `%dtrain ${FLAGS}`);
    await page.notebook.run(); // %dtrain returns at once, with the panel
    const panelStep = page.locator('.dtrain-panel-step');
    await expect(panelStep).toBeVisible({ timeout: 60000 });
    const runId =
      (await page.locator('.dtrain-panel-run').textContent())?.trim() ?? '';
    expect(runId).toContain('mirrored');

    await page.sidebar.openTab(SIDEBAR);
    const row = page.locator(
      `#${SIDEBAR} .jp-WorkbenchRun[data-run-id="${runId}"]`
    );
    await expect(row).toBeVisible({ timeout: 30000 });
    const sidebarRow = `.jp-WorkbenchRun[data-run-id="${runId}"]`;
    await startSampling(
      page,
      {
        panel: '.dtrain-panel-step',
        sidebar: `${sidebarRow} .jp-WorkbenchRun-step`
      },
      {
        panel: '.dtrain-panel-status',
        sidebar: `${sidebarRow} .jp-WorkbenchRun-state`
      }
    );

    // The run's own dashboard page, named by the id the panel and the sidebar show.
    const link = page.locator('.jp-OutputArea a', {
      hasText: 'Dask dashboard'
    });
    await expect(link).toBeVisible({ timeout: 60000 });
    const board = new URL((await link.getAttribute('href')) ?? '');
    board.pathname = '/individual-workbench-loss';
    board.searchParams.set('run', runId);
    const boardPage = await page.context().newPage();
    await boardPage.goto(board.toString());
    await startSampling(boardPage, { board: '.dtrain-board-step' });
    await page.bringToFront();

    await expect(page.locator('.dtrain-panel-status')).toContainText(
      'finished',
      {
        timeout: 240000
      }
    );
    await page.waitForTimeout(2000); // the slower views catch up with the last step
    await shot(page, 'live-01-finished');
    const { samples, finishedAt } = await stopSampling(page);
    const boardSamples = (await stopSampling(boardPage)).samples;
    await boardPage.close();
    const views = { ...samples, ...boardSamples };

    const worst = lags(views);
    const lastStepAt = Math.min(
      ...Object.values(views).map(
        s => reached(s, STEPS) ?? Number.POSITIVE_INFINITY
      )
    );
    const finishedLags = Object.fromEntries(
      ['panel', 'sidebar'].map(name => [
        name,
        (finishedAt[name] ?? Number.POSITIVE_INFINITY) - lastStepAt
      ])
    );
    console.log(
      `steps seen: ${Object.entries(views)
        .map(
          ([name, s]) =>
            `${name} ${s.length} (${s[0]?.[1]}..${s[s.length - 1]?.[1]})`
        )
        .join(
          ', '
        )}; lag behind the first view [ms]: ${JSON.stringify(worst)}; ` +
        `said finished [ms after the first view showed step ${STEPS}]: ` +
        JSON.stringify(finishedLags)
    );
    // Soft: a view that lags is reported with the others, and the reload is still checked.
    for (const [name, shown] of Object.entries(views)) {
      expect
        .soft(reached(shown, STEPS), `${name} never showed step ${STEPS}`)
        .not.toBeNull();
      expect
        .soft(shown.length, `${name} changed too rarely to follow`)
        .toBeGreaterThan(5);
    }
    for (const [name, { worst: lag, atStep, p95 }] of Object.entries(worst)) {
      expect
        .soft(p95, `${name}: 95% of the steps within ${p95} ms`)
        .toBeLessThan(LAG_BOUND_MS);
      const why = `${name} showed step ${atStep} ${lag} ms after the first view`;
      expect.soft(lag, why).toBeLessThan(WORST_LAG_MS);
    }
    for (const [name, lag] of Object.entries(finishedLags)) {
      expect
        .soft(lag, `the ${name} said finished late`)
        .toBeLessThan(LAG_BOUND_MS);
    }

    // A reload builds the panel's views again from the kernel: the charts come back whole.
    // (Once the run has ended: its summary replaces "closing the cluster".)
    await expect(page.locator('.dtrain-panel-status')).toContainText(
      'samples/s',
      {
        timeout: 60000
      }
    );
    await page.notebook.save(); // the output that names the panel's widget, as a user's would be
    // (Galata's ready check waits for the launcher, which the notebook now covers.)
    // ipywidgets restores a page's widgets from the kernel; on a loaded machine its first
    // request sometimes loses the race with the output's rendering ("model not found"), which
    // a second reload does not.
    const consoleLines: string[] = [];
    page.on('console', message => {
      if (['error', 'warning'].includes(message.type())) {
        consoleLines.push(`${message.type()}: ${message.text().slice(0, 300)}`);
      }
    });
    for (let attempt = 1; ; attempt++) {
      consoleLines.length = 0;
      await page.reload({ waitForIsReady: false });
      await page.waitForSelector('#jupyterlab-splash', { state: 'detached' });
      const restored = page.locator('.dtrain-panel-step');
      const lost = page.locator('.jp-OutputArea', {
        hasText: 'model not found'
      });
      await expect(restored.or(lost).first()).toBeVisible({ timeout: 60000 });
      if ((await restored.count()) === 0) {
        // What ipywidgets said while it restored, for whoever reads the log.
        console.log(
          `reload ${attempt} lost the panel; browser console:\n${consoleLines.join('\n')}`
        );
      }
      if ((await restored.count()) > 0 || attempt === 2) {
        console.log(`panel restored by reload ${attempt}`);
        break;
      }
    }
    await expect(page.locator('.dtrain-panel-step')).toBeVisible({
      timeout: 60000
    });
    await expect
      .poll(async () => Object.keys(await figureRows(page)).length, {
        timeout: 60000
      })
      .toBeGreaterThan(4);
    const rows = await figureRows(page);
    console.log(`after the reload, rows per chart: ${JSON.stringify(rows)}`);
    for (const [title, count] of Object.entries(rows)) {
      expect(
        count,
        `chart "${title}" is empty after the reload`
      ).toBeGreaterThan(0);
    }
    // Each step once, in order: the loss of every step from 0 to the last, no row twice
    // (the browser's echo of a patch once made the kernel hold every streamed row twice).
    const columns = await stepColumns(page);
    expect(Object.keys(columns).length).toBeGreaterThan(0);
    expect(faults(columns, STEPS - 1)).toEqual([]);
    await shot(page, 'live-02-reloaded');
  });
});
