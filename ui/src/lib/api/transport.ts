// One interface for talking to the backend. `http.ts` speaks to `medusa serve` (fetch, and one
// WebSocket for generations and status), `tauri.ts` to the desktop app (commands +
// `tauri::ipc::Channel`). Views only see `Transport`.

import type {
  CatalogSearch,
  DeleteModelRequest,
  DownloadEvent,
  DownloadRequest,
  ModelsOnDisk,
  RepoFiles,
  Comparison,
  Conversation,
  ConversationExport,
  ConversationPatch,
  ConversationSummary,
  ConversationsQuery,
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
  ListedRun,
  RunQuery,
  RunWithSteps,
  PlannedHeads,
  TrainingJob,
  TrainingRequest,
  TuneReport,
  TuneRequest,
  AddRemoteRequest,
  RemoteEngineInfo,
} from './types';

/** A generation in progress. */
export interface RunHandle {
  /** Resolves after the terminal event (`finished` or `failed`) was delivered, or on cancel. */
  done: Promise<void>;
  /** Stops the run; the backend records it as cancelled. */
  cancel(): void;
}

/**
 * The transports' handle: an instance, not a plain object, so that a view keeping it in `$state`
 * keeps the handle itself (Svelte would wrap a plain object in a proxy of another identity).
 */
export class Run implements RunHandle {
  constructor(
    readonly done: Promise<void>,
    readonly cancel: () => void,
  ) {}
}

/** A training job being followed. */
export interface TrainingWatch {
  /** Resolves after the last update (the job stopped running), or on `stop()`. */
  done: Promise<void>;
  /** Stops following; the job itself goes on. */
  stop(): void;
}

export interface Transport {
  readonly kind: 'http' | 'tauri';
  info(): Promise<Info>;
  /**
   * Calls `onInfo` with the backend's status now and then every `everyMs` or so (100 to 60000),
   * until the returned function is called. When the updates stop on their own (the connection
   * closed, the status could not be read) `onEnd` says why; watch again to hear more.
   */
  watchStatus(everyMs: number, onInfo: (info: Info) => void, onEnd?: (error: ApiError) => void): () => void;
  /**
   * Starts a generation; every event (started, text, step, finished, failed) goes to `onEvent`
   * in order. A request the backend refuses before starting (empty prompt, queue full, ...)
   * rejects `done` with an `ApiError`.
   */
  generate(request: PlaygroundRequest, onEvent: (event: RunEvent) => void): RunHandle;
  /** A page of runs, without their per-token arrays: `getRun` has a run's whole record. */
  listRuns(query?: RunQuery): Promise<ListedRun[]>;
  getRun(id: number): Promise<RunWithSteps>;
  listComparisons(limit?: number): Promise<Comparison[]>;
  getComparison(id: number): Promise<Comparison>;
  /** Links finished runs of one prompt (a `normal` one first as the baseline) as a comparison. */
  createComparison(runIds: number[]): Promise<Comparison>;
  /**
   * Deletes runs with their steps; comparisons that lose runs are measured again from the ones
   * left, or removed when none is left. Refused (`invalid_parameter`) for a running run or none.
   */
  deleteRuns(runIds: number[]): Promise<DeleteReport>;
  /**
   * Adds the runs of an export document (the JSON `exportRuns` writes), skipping those already
   * stored.
   */
  importRuns(document: unknown): Promise<ImportReport>;
  /**
   * Exports the runs matching `query`: a download in the browser, a save dialog in the desktop
   * app. Resolves to the file name or path written, or null when the user cancelled the dialog.
   */
  exportRuns(query: RunQuery, format: ExportFormat): Promise<string | null>;
  /** Starts loading another model (and heads) in the background; `info().loading` tracks it. */
  loadModel(request: LoadModelRequest): Promise<void>;
  /** Settings' tree for Medusa runs that draft `auto`, applied without reloading the model. */
  setTree(request: SetTreeRequest): Promise<Info>;
  /**
   * Where two greedy outputs of one prompt part, and how likely the loaded model finds each
   * token there; null when they do not part.
   */
  divergence(request: DivergenceRequest): Promise<Divergence | null>;
  /** Measures the loaded heads and this machine, predicting each tree size's speed (slow). */
  tune(options?: TuneRequest): Promise<TuneReport>;
  /** Conversations, the latest changed first; `search` matches words of titles and messages. */
  listConversations(query?: ConversationsQuery): Promise<ConversationSummary[]>;
  /** One conversation; an answer still being written shows its text so far (`answering`). */
  getConversation(id: number): Promise<Conversation>;
  /**
   * A new, empty conversation. Its messages are written by the generations that name it
   * (`conversation_id`): the stored messages become the request's, plus the answer.
   */
  createConversation(patch?: ConversationPatch): Promise<Conversation>;
  /** Renames it or changes its system prompt. */
  updateConversation(id: number, patch: ConversationPatch): Promise<Conversation>;
  /** Deletes it; its runs stay in the history. */
  deleteConversation(id: number): Promise<void>;
  /**
   * Exports one conversation: a download in the browser, a save dialog in the desktop app.
   * Resolves to the file name or path written, or null when the user cancelled the dialog.
   */
  exportConversation(id: number, format: ConversationExport): Promise<string | null>;
  /**
   * The remote engines runs may name (`engine`), each asked for its models now (not the server's
   * recent answers): slow for one that does not answer. `info().remotes` has them as last seen, without asking.
   */
  listRemotes(): Promise<RemoteEngineInfo[]>;
  /**
   * Adds a remote engine, saved with its key for later starts. One that does not answer is added
   * anyway, with `error` saying why.
   */
  addRemote(request: AddRemoteRequest): Promise<RemoteEngineInfo>;
  /** Removes a remote engine; runs it made keep its name in the history. */
  removeRemote(name: string): Promise<void>;
  /** The model files the backend may load, folder by folder (downloads go to the first). */
  localModels(): Promise<ModelsOnDisk>;
  /** The model hub's GGUF repositories matching `query`; the suggested ones when it is empty. */
  searchCatalog(query: string): Promise<CatalogSearch>;
  /** A repository's GGUF files with their sizes, formats and checksums. */
  catalogFiles(repo: string): Promise<RepoFiles>;
  /**
   * Downloads a hub file into the models folder, resuming an earlier attempt; its events
   * (progress, then `done` or `failed`) go to `onEvent`, and the promise resolves after the last.
   */
  downloadModel(request: DownloadRequest, onEvent: (event: DownloadEvent) => void): Promise<void>;
  /** Stops a download, keeping what arrived for the next attempt. */
  cancelDownload(fileName: string): Promise<void>;
  /** Deletes a model (or, with `partial`, an unfinished download) from the download folder. */
  deleteModel(request: DeleteModelRequest): Promise<void>;
  /**
   * Starts training Medusa heads for a model. The job's heads file is chosen as it starts
   * (`heads_path`, which also names the job): `<model stem>.medusa.gguf` beside the model, or
   * `<model stem>-2.medusa.gguf` and so on when a file or another job has that name.
   * Refused with `training_in_progress` while another job runs.
   */
  startTraining(request: TrainingRequest): Promise<TrainingJob>;
  /** Where a job started now for `model` would write its heads. */
  plannedHeads(model: string): Promise<PlannedHeads>;
  /** The training jobs, the latest first. */
  listTrainingJobs(): Promise<TrainingJob[]>;
  getTrainingJob(id: number): Promise<TrainingJob>;
  /** Stops a running job, keeping its collected answers; refused during its final tune. */
  cancelTraining(id: number): Promise<void>;
  /** Goes on with a cancelled, failed or interrupted job from the answers it collected. */
  resumeTraining(id: number): Promise<TrainingJob>;
  /**
   * Deletes a job that is not running and the answers it collected (the heads it wrote stay);
   * refused with `training_running` while it runs.
   */
  deleteTrainingJob(id: number): Promise<DeletedTrainingJob>;
  /**
   * Calls `onJob` with the job now, then after each change (a few times a second at most),
   * until it stops running.
   */
  watchTraining(id: number, onJob: (job: TrainingJob) => void): TrainingWatch;
  /**
   * Desktop only: calls `onDrop` with the paths of files dropped on the window; returns the
   * function that stops listening. The browser transport never calls it (a page sees no paths).
   */
  onFileDrop(onDrop: (paths: string[]) => void): () => void;
  /** Desktop only: a native file picker. The browser transport returns null (type a path). */
  pickFile(kind: 'model' | 'heads'): Promise<string | null>;
}

/** An error answered by the backend, or a transport failure (code `network`). */
export class ApiError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly status?: number,
  ) {
    super(inAppTerms(code, message));
    this.name = 'ApiError';
  }
}

/**
 * The backend's messages name command-line flags (it serves the command line too); in the app
 * they point to what a user of the app can do instead.
 */
export function inAppTerms(code: string, message: string): string {
  switch (code) {
    case 'no_medusa_heads':
      return 'Medusa mode needs heads for this model: open it with a heads file in Settings, or use normal, lookup or auto mode.';
    case 'prompt_too_long':
      return `${message.replace(/;\s*shorten it or raise --ctx-size\.?$/, '')}: start a new chat, shorten the message, or raise the context size in Settings.`;
    case 'context_failed':
      return message.replace(/;\s*try a smaller --ctx-size or --parallel\.?$/, '; try a smaller context size in Settings.');
    default:
      return message;
  }
}
