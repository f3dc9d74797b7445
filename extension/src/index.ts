/**
 * The dtrain workbench in JupyterLab: the "Distributed training" sidebar, run chart panels,
 * Stop, and a launcher card for a notebook that starts a run. `activate` stays synchronous:
 * settings are applied when they arrive, and nothing here blocks JupyterLab's start.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  ICommandPalette,
  InputDialog,
  Notification
} from '@jupyterlab/apputils';
import { IDocumentManager } from '@jupyterlab/docmanager';
import { ILauncher } from '@jupyterlab/launcher';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import {
  ReadonlyJSONObject,
  ReadonlyPartialJSONObject
} from '@lumino/coreutils';

import { IRun } from './api';
import { isChartPage, RunChartPanels } from './chartPanels';
import { workbenchIcon, workbenchIconUrl } from './icons';
import { RunsModel } from './model';
import { RunsSidebar } from './sidebar';

const PLUGIN_ID = 'dtrain-workbench:plugin';

export namespace CommandIDs {
  export const openRun = 'workbench:open-run';
  export const stopRun = 'workbench:stop-run';
  export const newNotebook = 'workbench:new-notebook';
  export const refreshRuns = 'workbench:refresh-runs';
}

/** The cells of the notebook `workbench:new-notebook` creates. */
export const STARTER_CELLS = [
  '%load_ext workbench',
  '%dtrain --strategy mirrored --devices 2 --epochs 2'
];

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description:
    'Distributed training sidebar, run charts and Stop for the dtrain workbench.',
  autoStart: true,
  requires: [IDocumentManager],
  optional: [
    ICommandPalette,
    ILauncher,
    ISettingRegistry,
    INotebookTracker,
    ILayoutRestorer
  ],
  activate: (
    app: JupyterFrontEnd,
    docManager: IDocumentManager,
    palette: ICommandPalette | null,
    launcher: ILauncher | null,
    settingRegistry: ISettingRegistry | null,
    notebooks: INotebookTracker | null,
    restorer: ILayoutRestorer | null
  ): void => {
    const serverSettings = app.serviceManager.serverSettings;
    const model = new RunsModel({ serverSettings });
    const charts = new RunChartPanels(app, serverSettings.baseUrl);
    const { commands } = app;

    const sidebar = new RunsSidebar({
      model,
      openRun: runId => void commands.execute(CommandIDs.openRun, { runId }),
      stopRun: runId => void commands.execute(CommandIDs.stopRun, { runId }),
      newNotebook: () => void commands.execute(CommandIDs.newNotebook)
    });
    sidebar.disposed.connect(() => model.dispose());
    app.shell.add(sidebar, 'left', { rank: 900 });
    restorer?.add(sidebar, sidebar.id);

    commands.addCommand(CommandIDs.openRun, {
      label: args =>
        args.runId
          ? `Open Charts of Run ${String(args.runId)}`
          : 'Open Run Charts…',
      caption: 'Show the live charts of a training run in the main area',
      icon: workbenchIcon,
      describedBy: runIdSchema('The run to open; asks for one when left out'),
      execute: async args => {
        const runId =
          stringArg(args, 'runId') ??
          (await pickRun(model, 'Open the charts of run'));
        const page = stringArg(args, 'page'); // one page only: how the restorer reopens them
        if (runId) {
          charts.open(runId, isChartPage(page) ? [page] : undefined);
        }
      }
    });
    // After a reload the chart panels come back where they were.
    void restorer?.restore(charts.tracker, {
      command: CommandIDs.openRun,
      args: panel => ({
        runId: panel.node.dataset.runId ?? '',
        page: panel.node.dataset.chartPage ?? ''
      }),
      name: panel => panel.id
    });

    commands.addCommand(CommandIDs.stopRun, {
      label: args =>
        args.runId ? `Stop Run ${String(args.runId)}` : 'Stop a Training Run…',
      caption: 'Stop a live training run after the step in flight',
      describedBy: runIdSchema(
        'The run to stop; asks for one of the live runs when left out'
      ),
      isEnabled: args => {
        const runId = stringArg(args, 'runId');
        const run = runId ? model.run(runId) : undefined;
        return runId
          ? run === undefined || run.state === 'running'
          : model.hasLiveRuns;
      },
      execute: async args => {
        const runId =
          stringArg(args, 'runId') ??
          (await pickRun(model, 'Stop run', run => run.state === 'running'));
        if (!runId) {
          return;
        }
        const result = await model.stopRun(runId);
        sidebar.notify(result.message, !result.ok, runId);
        if (!result.ok) {
          Notification.error(result.message, { autoClose: 5000 });
        }
      }
    });

    commands.addCommand(CommandIDs.newNotebook, {
      label: args =>
        args.isLauncher
          ? 'Distributed Training'
          : 'New Distributed Training Notebook',
      caption:
        'A new notebook that loads the workbench and starts a mirrored run on two devices',
      icon: workbenchIcon,
      execute: async () => {
        const panel = await createStarterNotebook(app, docManager, notebooks);
        return panel;
      }
    });

    commands.addCommand(CommandIDs.refreshRuns, {
      label: 'Refresh Training Runs',
      caption: 'Ask the server for the runs and clusters now',
      execute: () => model.refresh()
    });

    if (palette) {
      const category = 'Distributed Training';
      for (const command of Object.values(CommandIDs)) {
        palette.addItem({ command, category });
      }
    }
    launcher?.add({
      command: CommandIDs.newNotebook,
      args: { isLauncher: true },
      // A "Notebook" card draws this image; without one it draws the label's first letter.
      kernelIconUrl: workbenchIconUrl,
      category: 'Notebook',
      rank: 10
    });

    if (settingRegistry) {
      settingRegistry
        .load(PLUGIN_ID)
        .then(settings => {
          const apply = (): void => {
            model.refreshInterval = settings.get('refreshInterval')
              .composite as number;
          };
          apply();
          settings.changed.connect(apply);
        })
        .catch(reason => {
          console.error(`${PLUGIN_ID}: could not load settings`, reason);
        });
    }
  }
};

function runIdSchema(description: string): { args: ReadonlyJSONObject } {
  return {
    args: {
      type: 'object',
      properties: { runId: { type: 'string', description } }
    }
  };
}

function stringArg(
  args: ReadonlyPartialJSONObject,
  name: string
): string | null {
  const value = args[name];
  return typeof value === 'string' && value.length > 0 ? value : null;
}

/** Ask the user for one of the model's runs (optionally only some); null when cancelled. */
async function pickRun(
  model: RunsModel,
  title: string,
  accept: (run: IRun) => boolean = () => true
): Promise<string | null> {
  await model.refresh();
  const runs = model.runs.filter(accept);
  if (runs.length === 0) {
    Notification.info('There is no run to choose from', { autoClose: 3000 });
    return null;
  }
  const labels = runs.map(run => `${run.id} — ${run.strategy}, ${run.state}`);
  const result = await InputDialog.getItem({ title, items: labels });
  if (!result.button.accept || result.value === null) {
    return null;
  }
  return runs[labels.indexOf(result.value)]?.id ?? null;
}

/** Create an untitled notebook holding the starter cells, opened with the default kernel. */
async function createStarterNotebook(
  app: JupyterFrontEnd,
  docManager: IDocumentManager,
  notebooks: INotebookTracker | null
): Promise<NotebookPanel | null> {
  const model = await docManager.newUntitled({ type: 'notebook', path: '' });
  const kernelName = app.serviceManager.kernelspecs.specs?.default;
  const opened = docManager.open(
    model.path,
    'Notebook',
    kernelName ? { name: kernelName } : {}
  );
  const panel =
    opened instanceof NotebookPanel
      ? opened
      : (notebooks?.find(widget => widget.context.path === model.path) ?? null);
  if (!panel) {
    return null;
  }
  await panel.context.ready;
  const shared = panel.content.model?.sharedModel;
  if (shared) {
    shared.transact(() => {
      shared.deleteCellRange(0, shared.cells.length);
      shared.insertCells(
        0,
        STARTER_CELLS.map(source => ({
          cell_type: 'code',
          source,
          metadata: {}
        }))
      );
    });
  }
  return panel;
}

export default plugin;
