/**
 * The dtrain workbench in a real JupyterLab and chromium: the sidebar lists the runs that
 * global-setup trained, in rows that keep each run's fields on one line, a run opens as four chart
 * tabs with Bokeh plots, Stop ends a live run and its notice goes once it has stopped.
 */
import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import { Locator } from '@playwright/test';
import * as fs from 'fs';
import * as path from 'path';

const SIDEBAR = 'dtrain-workbench-sidebar';
const PAGES = ['loss', 'utilization', 'timeline', 'communication'];
const SHOTS = path.join(__dirname, '..', 'test-results', 'screenshots');

interface IRuns {
  finished: string;
  live: string;
  diverged: string;
  damaged: string;
}

function runs(): IRuns {
  const file = path.join(process.env.DTRAIN_RUN_STORE ?? '', 'runs.json');
  return JSON.parse(fs.readFileSync(file, 'utf-8')) as IRuns;
}

async function shot(page: IJupyterLabPageFixture, name: string): Promise<void> {
  fs.mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: path.join(SHOTS, `${name}.png`) });
}

async function openSidebar(page: IJupyterLabPageFixture): Promise<Locator> {
  await page.sidebar.openTab(SIDEBAR);
  const sidebar = page.locator(`#${SIDEBAR}`);
  await expect(sidebar).toBeVisible();
  return sidebar;
}

function launcherCard(page: IJupyterLabPageFixture): Locator {
  return page
    .locator('.jp-LauncherCard:visible', { hasText: 'Distributed Training' })
    .first();
}

function panelId(runId: string, chart: string): string {
  return `dtrain-workbench-run-${runId.replace(/[^A-Za-z0-9_-]/g, '_')}-${chart}`;
}

/** The tab of a run's chart page (its tooltip is the panel's caption). */
function chartTab(
  page: IJupyterLabPageFixture,
  runId: string,
  chart: string
): Locator {
  return page.locator(`.lm-TabBar-tab[title="Run ${runId}: ${chart} charts"]`);
}

test.describe('dtrain workbench', () => {
  test('JupyterLab starts with the extension', async ({ page }) => {
    const errors: string[] = [];
    page.on('console', message => {
      if (
        message.type() === 'error' &&
        message.text().includes('dtrain-workbench')
      ) {
        errors.push(message.text());
      }
    });
    await expect(
      page.locator(`.jp-SideBar [data-id="${SIDEBAR}"]`)
    ).toBeVisible();
    const commands = await page.evaluate(() =>
      window.jupyterapp.commands
        .listCommands()
        .filter(id => id.startsWith('workbench:'))
    );
    expect(commands.sort()).toEqual([
      'workbench:new-notebook',
      'workbench:open-run',
      'workbench:refresh-runs',
      'workbench:stop-run'
    ]);
    await page.evaluate(() =>
      window.jupyterapp.commands.execute('launcher:create')
    );
    await expect(launcherCard(page)).toBeVisible();
    // The card draws the workbench's picture, not the first letter of its label.
    await expect(
      launcherCard(page).locator('img.jp-Launcher-kernelIcon')
    ).toBeVisible();
    await expect(
      launcherCard(page).locator('.jp-LauncherCard-noKernelIcon')
    ).toHaveCount(0);
    await shot(page, '01-launcher');
    expect(errors).toEqual([]);
  });

  test('the sidebar lists the runs of the store', async ({ page }) => {
    const { finished, live } = runs();
    const sidebar = await openSidebar(page);
    const row = sidebar.locator(`.jp-WorkbenchRun[data-run-id="${finished}"]`);
    await expect(row.locator('.jp-WorkbenchRun-state')).toHaveText('finished');
    await expect(row.locator('.jp-WorkbenchRun-strategy')).toHaveText(
      'mirrored'
    );
    await expect(row.locator('.jp-WorkbenchRun-devices')).toHaveText('2');
    await expect(row.locator('.jp-WorkbenchRun-step')).toHaveText(/^\d+\/60$/);
    await expect(row.locator('.jp-WorkbenchRun-loss')).toHaveText(/^\d/);
    await expect(row.locator('.jp-WorkbenchRun-stop')).toBeHidden();
    // The three fields sit on one line, and the shortened run id has the whole one as tooltip.
    const tops = await row
      .locator('.jp-WorkbenchRun-field')
      .evaluateAll(fields =>
        fields.map(field => Math.round(field.getBoundingClientRect().top))
      );
    expect(tops).toHaveLength(3);
    expect(new Set(tops).size).toBe(1);
    await expect(row.locator('.jp-WorkbenchRun-id')).toHaveAttribute(
      'title',
      finished
    );
    // Its exports download with the browser's login: the Chrome trace and the scalars.
    const trace = await page.request.get(
      (await row
        .locator('.jp-WorkbenchRun-export', { hasText: 'Chrome trace' })
        .getAttribute('href')) ?? ''
    );
    expect(trace.status()).toBe(200);
    const phases = ((await trace.json()) as { traceEvents: { ph: string }[] })
      .traceEvents;
    expect(phases.filter(event => event.ph === 'X').length).toBeGreaterThan(0);
    const csv = await page.request.get(
      (await row
        .locator('.jp-WorkbenchRun-export', { hasText: 'CSV' })
        .getAttribute('href')) ?? ''
    );
    const table = await csv.text();
    expect(table.split('\n')[0]).toBe('step,name,value,time,device');
    expect(table).toContain(',loss,');
    const liveRow = sidebar.locator(`.jp-WorkbenchRun[data-run-id="${live}"]`);
    await expect(liveRow.locator('.jp-WorkbenchRun-state')).toHaveText(
      'running'
    );
    await expect(liveRow.locator('.jp-WorkbenchRun-stop')).toBeVisible();
    // The live run's step moves while the sidebar polls.
    const first = await liveRow.locator('.jp-WorkbenchRun-step').textContent();
    await expect(liveRow.locator('.jp-WorkbenchRun-step')).not.toHaveText(
      first ?? '',
      {
        timeout: 20000
      }
    );
    await shot(page, '02-sidebar');
  });

  test('a diverged run and a damaged run are listed flagged, the others intact', async ({
    page
  }) => {
    const { finished, live, diverged, damaged } = runs();
    const response = await page.request.get('/workbench/api/runs');
    expect(response.status()).toBe(200);
    // JSON.parse is strict: a NaN anywhere in the answer would throw here.
    const records = (
      JSON.parse(await response.text()) as { runs: Record<string, unknown>[] }
    ).runs;
    const byId = new Map(records.map(record => [record.id, record]));
    expect([...byId.keys()]).toEqual(
      expect.arrayContaining([finished, live, diverged, damaged])
    );
    expect(byId.get(damaged)?.state).toBe('damaged');
    expect(byId.get(damaged)?.damage).toContain('status.json');
    expect(byId.get(diverged)?.non_finite).toEqual(['loss']);
    expect(byId.get(diverged)?.loss).toBeNull();
    expect(byId.get(finished)?.state).toBe('finished');
    const clusters = await page.request.get('/workbench/api/clusters');
    expect(clusters.status()).toBe(200);

    const sidebar = await openSidebar(page);
    const damagedRow = sidebar.locator(
      `.jp-WorkbenchRun[data-run-id="${damaged}"]`
    );
    await expect(damagedRow.locator('.jp-WorkbenchRun-state')).toHaveText(
      'damaged'
    );
    await expect(damagedRow.locator('.jp-WorkbenchRun-problem')).toHaveText(
      /^Damaged: status\.json is not valid JSON/
    );
    const divergedRow = sidebar.locator(
      `.jp-WorkbenchRun[data-run-id="${diverged}"]`
    );
    await expect(divergedRow.locator('.jp-WorkbenchRun-problem')).toHaveText(
      'NaN/∞: loss'
    );
    await expect(divergedRow.locator('.jp-WorkbenchRun-loss')).toHaveText('–');
    const finishedRow = sidebar.locator(
      `.jp-WorkbenchRun[data-run-id="${finished}"]`
    );
    await expect(finishedRow.locator('.jp-WorkbenchRun-state')).toHaveText(
      'finished'
    );
    await expect(finishedRow.locator('.jp-WorkbenchRun-problem')).toBeHidden();
    await expect(sidebar.locator('.jp-WorkbenchSidebar-status')).toBeHidden();
    await shot(page, '02b-flagged-runs');
  });

  test('opening runs shows their chart tabs with Bokeh plots', async ({
    page
  }) => {
    const { finished, live } = runs();
    const sidebar = await openSidebar(page);
    await sidebar
      .locator(`.jp-WorkbenchRun[data-run-id="${finished}"]`)
      .click();
    // One tab per page, in one tab bar: each chart page gets the whole main area.
    await expect(
      page.locator(`.lm-TabBar-tab[title*="${finished}"]`)
    ).toHaveCount(4);
    await expect(page.locator(`#${panelId(finished, 'loss')}`)).toBeVisible();
    const bars = await page
      .locator('.jp-WorkbenchChartPanel')
      .evaluateAll(
        panels => new Set(panels.map(panel => panel.parentElement)).size
      );
    expect(bars).toBe(1);
    const main = await page.locator('#jp-main-dock-panel').boundingBox();
    for (const chart of PAGES) {
      await chartTab(page, finished, chart).click();
      const panel = page.locator(`#${panelId(finished, chart)}`);
      await expect(panel).toBeVisible();
      const box = await panel.boundingBox();
      expect(box && main && box.width > 0.9 * main.width).toBe(true);
      const frame = page.frameLocator(`#${panelId(finished, chart)} iframe`);
      await expect(
        frame.locator('.bk-Canvas canvas, canvas').first()
      ).toBeVisible({
        timeout: 60000
      });
      // Give the charts a moment to draw their data before the picture.
      await page.waitForTimeout(1500);
      await shot(page, `03-finished-run-${chart}`);
    }

    // Opening it again activates the panels instead of adding more.
    await page.evaluate(
      runId =>
        window.jupyterapp.commands.execute('workbench:open-run', { runId }),
      finished
    );
    await expect(page.locator('.jp-WorkbenchChartPanel')).toHaveCount(4);

    // A second run's tabs follow the first's, its loss tab in view. (The server reads a long
    // run's events the first time: wait for its answer before the picture.)
    const liveData = page.waitForResponse(
      response =>
        response.url().includes(`/api/runs/${live}/charts/loss`) &&
        response.ok(),
      { timeout: 60000 }
    );
    await sidebar.locator(`.jp-WorkbenchRun[data-run-id="${live}"]`).click();
    await expect(page.locator('.jp-WorkbenchChartPanel')).toHaveCount(8);
    await expect(page.locator(`#${panelId(live, 'loss')}`)).toBeVisible();
    await expect(page.locator(`#${panelId(finished, 'loss')}`)).toBeHidden();
    const frame = page.frameLocator(`#${panelId(live, 'loss')} iframe`);
    await expect(
      frame.locator('.bk-Canvas canvas, canvas').first()
    ).toBeVisible({
      timeout: 60000
    });
    await liveData;
    await page.waitForTimeout(1500);
    await shot(page, '04-two-runs');
    // The live run's timeline: thousands of steps as phase shares, its last steps in detail.
    await chartTab(page, live, 'timeline').click();
    const liveTimeline = page.frameLocator(
      `#${panelId(live, 'timeline')} iframe`
    );
    await expect(
      liveTimeline.locator('.bk-Canvas canvas, canvas').first()
    ).toBeVisible({
      timeout: 60000
    });
    await page.waitForTimeout(2000);
    await shot(page, '04a-live-run-timeline');

    // A reload brings every panel back, with its charts.
    // (Galata's ready check waits for the launcher, which the restored panels now cover.)
    await page.reload({ waitForIsReady: false });
    await page.waitForSelector('#jupyterlab-splash', { state: 'detached' });
    await expect(page.locator('.jp-WorkbenchChartPanel')).toHaveCount(8, {
      timeout: 60000
    });
    await chartTab(page, finished, 'timeline').click(); // a tab draws once it is in view
    const restored = page.frameLocator(
      `#${panelId(finished, 'timeline')} iframe`
    );
    await expect(
      restored.locator('.bk-Canvas canvas, canvas').first()
    ).toBeVisible({
      timeout: 60000
    });
    await page.waitForTimeout(2000);
    await shot(page, '04b-after-reload');
  });

  test('Stop ends a live run', async ({ page }) => {
    const { live } = runs();
    const sidebar = await openSidebar(page);
    const row = sidebar.locator(`.jp-WorkbenchRun[data-run-id="${live}"]`);
    await expect(row.locator('.jp-WorkbenchRun-state')).toHaveText('running');
    await row.locator('.jp-WorkbenchRun-stop').click();
    await expect(row.locator('.jp-WorkbenchRun-state')).toHaveText(
      /stopping|stopped/
    );
    await expect(row.locator('.jp-WorkbenchRun-state')).toHaveText('stopped', {
      timeout: 60000
    });
    await expect(row.locator('.jp-WorkbenchRun-stop')).toBeHidden();
    // "Asked run … to stop" is no longer true: it goes.
    await expect(sidebar.locator('.jp-WorkbenchSidebar-status')).toBeHidden();
    await shot(page, '05-stopped');
  });

  test('the launcher card makes a notebook whose run the sidebar lists', async ({
    page
  }) => {
    await page.evaluate(() =>
      window.jupyterapp.commands.execute('launcher:create')
    );
    await launcherCard(page).click();
    await page.waitForSelector('.jp-NotebookPanel');
    await expect(page.locator('.jp-NotebookPanel .jp-Cell')).toHaveCount(2);
    const sources = await page.evaluate(() => {
      const widget = window.jupyterapp.shell.currentWidget as unknown as {
        content: {
          model: { sharedModel: { cells: { getSource(): string }[] } };
        };
      };
      return widget.content.model.sharedModel.cells.map(cell =>
        cell.getSource()
      );
    });
    expect(sources).toEqual([
      '%load_ext workbench',
      '%dtrain --strategy mirrored --devices 2 --epochs 2'
    ]);
    await shot(page, '06-new-notebook');

    // Running it trains in the notebook's kernel, and the sidebar lists that run (the store
    // is the one link between the two) until it finishes.
    // (Other spec files may have added runs to the store: count from what is there now.)
    const listed = async () =>
      (
        (await (await page.request.get('/workbench/api/runs')).json()) as {
          runs: unknown[];
        }
      ).runs.length;
    const before = await listed();
    await page.notebook.run();
    const sidebar = await openSidebar(page);
    const { finished, live, diverged, damaged } = runs();
    const known = [finished, live, diverged, damaged];
    const rows = sidebar.locator('.jp-WorkbenchRun');
    await expect(rows).toHaveCount(before + 1, { timeout: 120000 });
    const fresh = rows.first(); // newest first
    expect(known).not.toContain(await fresh.getAttribute('data-run-id'));
    await expect(fresh.locator('.jp-WorkbenchRun-strategy')).toHaveText(
      'mirrored'
    );
    await expect(fresh.locator('.jp-WorkbenchRun-state')).toHaveText(
      'finished',
      {
        timeout: 180000
      }
    );
    await shot(page, '07-notebook-run-listed');
  });
});
