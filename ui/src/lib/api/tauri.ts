// The desktop transport: the app's Tauri commands, with a Channel per generation.

import { Channel, invoke } from '@tauri-apps/api/core';
import { getCurrentWebview } from '@tauri-apps/api/webview';
import { ApiError, Run, type RunHandle, type TrainingWatch, type Transport } from './transport';
import type {
  AddRemoteRequest,
  CatalogSearch,
  DeleteModelRequest,
  DownloadEvent,
  DownloadRequest,
  ModelsOnDisk,
  RepoFiles,
  Comparison,
  Conversation,
  ConversationExport,
  ConversationList,
  ConversationPatch,
  ConversationSummary,
  ConversationsQuery,
  ComparisonList,
  DeleteReport,
  DeletedTrainingJob,
  Divergence,
  DivergenceRequest,
  ExportFormat,
  ImportReport,
  PlaygroundRequest,
  Info,
  LoadModelRequest,
  SetTreeRequest,
  RunEvent,
  RunList,
  RunQuery,
  RemoteEngineInfo,
  ListedRun,
  RunWithSteps,
  PlannedHeads,
  TrainingJob,
  TrainingRequest,
  TuneReport,
  TuneRequest,
} from './types';

/** A command's rejection (`{code, message}`, or a bare string from Tauri itself) as an ApiError. */
export function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  if (err && typeof err === 'object' && 'code' in err && 'message' in err) {
    return new ApiError(String(err.code), String(err.message));
  }
  return new ApiError('desktop', String(err));
}

async function call<T>(command: string, args?: Record<string, unknown>): Promise<T> {
  try {
    return await invoke<T>(command, args);
  } catch (err) {
    throw toApiError(err);
  }
}

export class TauriTransport implements Transport {
  readonly kind = 'tauri' as const;
  /** Settles when the generation asked for last has started or given up. */
  private lastStart: Promise<unknown> = Promise.resolve();

  info(): Promise<Info> {
    return call('info');
  }

  // The app has no connection to spare: asking for the status on a timer costs a command each.
  watchStatus(everyMs: number, onInfo: (info: Info) => void, onEnd?: (error: ApiError) => void): () => void {
    let stopped = false;
    let asking = false;
    const ask = async () => {
      if (asking || stopped) return;
      asking = true;
      try {
        const info = await this.info();
        if (!stopped) onInfo(info);
      } catch (err) {
        if (!stopped) {
          stop();
          onEnd?.(toApiError(err));
        }
      } finally {
        asking = false;
      }
    };
    const timer = setInterval(ask, Math.min(60_000, Math.max(100, everyMs)));
    const stop = () => {
      stopped = true;
      clearInterval(timer);
    };
    void ask();
    return stop;
  }

  generate(request: PlaygroundRequest, onEvent: (event: RunEvent) => void): RunHandle {
    let runId: number | null = null;
    let cancelled = false;
    let finish: () => void = () => {};
    const ended = new Promise<void>((resolve) => (finish = resolve));
    const channel = new Channel<RunEvent>();
    channel.onmessage = (event) => {
      if (event.type === 'started') runId = event.run_id;
      onEvent(event);
      if (event.type === 'finished' || event.type === 'failed') finish();
    };
    // Sent once the generation asked for before it has started (or given up), so that runs
    // queue in the order they were asked for, as the server's event socket starts them. One
    // cancelled before its turn is never sent.
    const sent = this.lastStart.then(() =>
      cancelled ? null : call<number>('generate', { request, onEvent: channel }),
    );
    this.lastStart = sent.catch(() => undefined);
    const started = sent.then((id) => {
      if (id === null) return finish();
      runId = id;
      if (cancelled) void call('cancel_run', { runId: id }).catch(() => {});
    });
    return new Run(
      started.then(() => ended),
      () => {
        cancelled = true;
        // The run ends with a `finished` event (stop reason `cancelled`), which resolves `done`.
        if (runId !== null) void call('cancel_run', { runId }).catch(() => finish());
      },
    );
  }

  async listRuns(query: RunQuery = {}): Promise<ListedRun[]> {
    return (await call<RunList>('list_runs', { query })).runs;
  }

  getRun(id: number): Promise<RunWithSteps> {
    return call('get_run', { id });
  }

  async listComparisons(limit?: number): Promise<Comparison[]> {
    return (await call<ComparisonList>('list_comparisons', { limit: limit ?? null })).comparisons;
  }

  getComparison(id: number): Promise<Comparison> {
    return call('get_comparison', { id });
  }

  createComparison(runIds: number[]): Promise<Comparison> {
    return call('create_comparison', { runIds });
  }

  deleteRuns(runIds: number[]): Promise<DeleteReport> {
    return call('delete_runs', { runIds });
  }

  importRuns(document: unknown): Promise<ImportReport> {
    return call('import_runs', { document });
  }

  exportRuns(query: RunQuery, format: ExportFormat): Promise<string | null> {
    return call('export_runs', { query, format });
  }

  loadModel(request: LoadModelRequest): Promise<void> {
    return call('load_model', { request });
  }

  setTree(request: SetTreeRequest): Promise<Info> {
    return call('set_tree', { request });
  }

  divergence(request: DivergenceRequest): Promise<Divergence | null> {
    return call('divergence', { request });
  }

  tune(options: TuneRequest = {}): Promise<TuneReport> {
    return call('tune', { request: options });
  }

  async listConversations(query: ConversationsQuery = {}): Promise<ConversationSummary[]> {
    return (await call<ConversationList>('list_conversations', { query })).conversations;
  }

  getConversation(id: number): Promise<Conversation> {
    return call('get_conversation', { id });
  }

  createConversation(patch: ConversationPatch = {}): Promise<Conversation> {
    return call('create_conversation', { patch });
  }

  updateConversation(id: number, patch: ConversationPatch): Promise<Conversation> {
    return call('update_conversation', { id, patch });
  }

  deleteConversation(id: number): Promise<void> {
    return call('delete_conversation', { id });
  }

  exportConversation(id: number, format: ConversationExport): Promise<string | null> {
    return call('export_conversation', { id, format });
  }

  listRemotes(): Promise<RemoteEngineInfo[]> {
    return call('list_remotes');
  }

  addRemote(request: AddRemoteRequest): Promise<RemoteEngineInfo> {
    return call('add_remote', { request });
  }

  async removeRemote(name: string): Promise<void> {
    await call('remove_remote', { name });
  }

  localModels(): Promise<ModelsOnDisk> {
    return call('list_local_models');
  }

  searchCatalog(query: string): Promise<CatalogSearch> {
    return call('search_catalog', { query });
  }

  catalogFiles(repo: string): Promise<RepoFiles> {
    return call('catalog_files', { repo });
  }

  async downloadModel(request: DownloadRequest, onEvent: (event: DownloadEvent) => void): Promise<void> {
    let ended: () => void = () => {};
    const last = new Promise<void>((resolve) => (ended = resolve));
    const channel = new Channel<DownloadEvent>();
    channel.onmessage = (event) => {
      onEvent(event);
      if (event.type !== 'progress') ended();
    };
    // The command resolves once the download ended; its last event may still be on its way.
    await call('download_model', { request, onEvent: channel });
    await last;
  }

  async cancelDownload(fileName: string): Promise<void> {
    await call('cancel_download', { fileName });
  }

  async deleteModel(request: DeleteModelRequest): Promise<void> {
    await call('delete_model', { request });
  }

  startTraining(request: TrainingRequest): Promise<TrainingJob> {
    return call('start_training', { request });
  }

  plannedHeads(model: string): Promise<PlannedHeads> {
    return call('planned_heads', { model });
  }

  listTrainingJobs(): Promise<TrainingJob[]> {
    return call('list_training_jobs');
  }

  getTrainingJob(id: number): Promise<TrainingJob> {
    return call('get_training_job', { id });
  }

  async cancelTraining(id: number): Promise<void> {
    await call('cancel_training', { id });
  }

  resumeTraining(id: number): Promise<TrainingJob> {
    return call('resume_training', { id });
  }

  deleteTrainingJob(id: number): Promise<DeletedTrainingJob> {
    return call('delete_training_job', { id });
  }

  // The command goes on until the job stops; stopping only stops listening to its channel.
  watchTraining(id: number, onJob: (job: TrainingJob) => void): TrainingWatch {
    let stopped = false;
    let ended: () => void = () => {};
    const last = new Promise<void>((resolve) => (ended = resolve));
    let stopNow: () => void = () => {};
    const stopping = new Promise<void>((resolve) => (stopNow = resolve));
    const channel = new Channel<TrainingJob>();
    channel.onmessage = (job) => {
      if (stopped) return;
      onJob(job);
      if (job.status !== 'running') ended();
    };
    // The command resolves after its last update was sent; that update may still be on its way.
    const followed = call('watch_training', { id, onEvent: channel }).then(() => last);
    return {
      done: Promise.race([followed, stopping]),
      stop: () => {
        stopped = true;
        stopNow();
      },
    };
  }

  onFileDrop(onDrop: (paths: string[]) => void): () => void {
    let stopped = false;
    let unlisten: (() => void) | null = null;
    void getCurrentWebview()
      .onDragDropEvent((event) => {
        if (event.payload.type === 'drop' && event.payload.paths.length > 0) onDrop(event.payload.paths);
      })
      .then((stop) => {
        if (stopped) stop();
        else unlisten = stop;
      })
      .catch(() => {});
    return () => {
      stopped = true;
      unlisten?.();
    };
  }

  pickFile(kind: 'model' | 'heads'): Promise<string | null> {
    return call('pick_file', { kind });
  }
}
