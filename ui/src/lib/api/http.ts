// The browser transport: `medusa serve`'s HTTP API, and one WebSocket for the page's
// generations and status updates (browsers allow few connections per server: a stream per
// generation would stall the rest of the page behind a handful of lanes).

import { EventSocket, eventsUrl } from './socket';
import { ApiError, type RunHandle, type TrainingWatch, type Transport } from './transport';
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
  PlannedHeads,
  SetTreeRequest,
  RunEvent,
  RunList,
  RunQuery,
  RemoteEngineInfo,
  ListedRun,
  RunWithSteps,
  TrainingJob,
  TrainingRequest,
  TuneReport,
  TuneRequest,
} from './types';

/**
 * What a page is told when the server does not answer at all (the browser says only "Failed to
 * fetch"): where it asked, and the likely reason. `base` is the transport's, '' for the page's
 * own origin.
 */
export function notAnsweringMessage(base: string, page: { origin: string }): string {
  const at = (base || page.origin).replace(/\/$/, '');
  return `the playground's server is not answering at ${at}; is \`medusa serve\` still running?`;
}

/** `?a=1&b=x` from the defined fields of `query`. */
export function queryString(query: object): string {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) {
    if (value !== undefined && value !== null && value !== '') params.set(key, String(value));
  }
  const text = params.toString();
  return text ? `?${text}` : '';
}

/** The error an HTTP answer carries (`{"error": {"code", "message"}}`), or a generic one. */
export async function errorFrom(response: Response): Promise<ApiError> {
  try {
    const body = await response.json();
    if (body?.error?.code) return new ApiError(body.error.code, body.error.message, response.status);
  } catch {
    // Not JSON: fall through.
  }
  return new ApiError(`http_${response.status}`, `${response.status} ${response.statusText}`, response.status);
}

/** The file name in a Content-Disposition header, if any. */
export function attachmentName(header: string | null): string | null {
  const match = header && /filename="?([^";]+)"?/.exec(header);
  return match ? match[1] : null;
}

/** Calls `onLine` with each non-empty line of a streamed body, as it arrives. */
export async function readLines(body: ReadableStream<Uint8Array>, onLine: (line: string) => void): Promise<void> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let pending = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    pending += decoder.decode(value, { stream: true });
    const lines = pending.split('\n');
    pending = lines.pop() ?? '';
    for (const line of lines) if (line.trim()) onLine(line);
  }
  if (pending.trim()) onLine(pending);
}

/**
 * The payload of a server-sent event's `data:` line; null for its other lines (comments such as
 * keep-alives, ids). The backend sends each event's JSON on one `data:` line.
 */
export function sseData(line: string): string | null {
  if (!line.startsWith('data:')) return null;
  const data = line.slice(5);
  return data.startsWith(' ') ? data.slice(1) : data;
}

export class HttpTransport implements Transport {
  readonly kind = 'http' as const;

  private readonly events: EventSocket;

  /** `base`: the server's address, '' for the page's own; `events` replaces its event socket. */
  constructor(
    private readonly base: string = '',
    events?: EventSocket,
  ) {
    this.events = events ?? new EventSocket(() => eventsUrl(base, location));
  }

  /** A fetch that got no answer: the server is down or gone (the browser's words go to the console). */
  private notAnswering(err: unknown): ApiError {
    console.warn('fetch failed:', err);
    return new ApiError('network', notAnsweringMessage(this.base, location));
  }

  private async request<T>(path: string, init?: RequestInit): Promise<T> {
    let response: Response;
    try {
      response = await fetch(this.base + path, init);
    } catch (err) {
      throw this.notAnswering(err);
    }
    if (!response.ok) throw await errorFrom(response);
    if (response.status === 204 || response.status === 202) {
      return (response.headers.get('content-type')?.includes('json') ? response.json() : undefined) as T;
    }
    return response.json() as Promise<T>;
  }

  private post<T>(path: string, body: unknown): Promise<T> {
    return this.send('POST', path, body);
  }

  private send<T>(method: 'POST' | 'PUT' | 'PATCH', path: string, body: unknown): Promise<T> {
    return this.request<T>(path, {
      method,
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(body),
    });
  }

  info(): Promise<Info> {
    return this.request('/api/info');
  }

  watchStatus(everyMs: number, onInfo: (info: Info) => void, onEnd?: (error: ApiError) => void): () => void {
    return this.events.watch(everyMs, onInfo, onEnd);
  }

  generate(request: PlaygroundRequest, onEvent: (event: RunEvent) => void): RunHandle {
    return this.events.generate(request, onEvent);
  }

  async listRuns(query: RunQuery = {}): Promise<ListedRun[]> {
    return (await this.request<RunList>(`/api/runs${queryString(query)}`)).runs;
  }

  getRun(id: number): Promise<RunWithSteps> {
    return this.request(`/api/runs/${id}`);
  }

  async listComparisons(limit?: number): Promise<Comparison[]> {
    const path = `/api/comparisons${queryString({ limit })}`;
    return (await this.request<ComparisonList>(path)).comparisons;
  }

  getComparison(id: number): Promise<Comparison> {
    return this.request(`/api/comparisons/${id}`);
  }

  createComparison(runIds: number[]): Promise<Comparison> {
    return this.post('/api/comparisons', { run_ids: runIds });
  }

  deleteRuns(runIds: number[]): Promise<DeleteReport> {
    return this.post('/api/runs/delete', { run_ids: runIds });
  }

  importRuns(document: unknown): Promise<ImportReport> {
    return this.post('/api/runs/import', document);
  }

  exportUrl(query: RunQuery, format: ExportFormat): string {
    return `${this.base}/api/runs/export${queryString({ ...query, format })}`;
  }

  exportRuns(query: RunQuery, format: ExportFormat): Promise<string | null> {
    return this.download(this.exportUrl(query, format), `medusa-runs.${format}`);
  }

  /** Fetches `url` and saves the answer as a download; resolves to the file's name. */
  private async download(url: string, fallbackName: string): Promise<string> {
    let response: Response;
    try {
      response = await fetch(url);
    } catch (err) {
      throw this.notAnswering(err);
    }
    if (!response.ok) throw await errorFrom(response);
    const name = attachmentName(response.headers.get('content-disposition')) ?? fallbackName;
    const objectUrl = URL.createObjectURL(await response.blob());
    const link = document.createElement('a');
    link.href = objectUrl;
    link.download = name;
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(objectUrl), 10_000);
    return name;
  }

  async listConversations(query: ConversationsQuery = {}): Promise<ConversationSummary[]> {
    const path = `/api/conversations${queryString(query)}`;
    return (await this.request<ConversationList>(path)).conversations;
  }

  getConversation(id: number): Promise<Conversation> {
    return this.request(`/api/conversations/${id}`);
  }

  createConversation(patch: ConversationPatch = {}): Promise<Conversation> {
    return this.post('/api/conversations', patch);
  }

  updateConversation(id: number, patch: ConversationPatch): Promise<Conversation> {
    return this.send('PATCH', `/api/conversations/${id}`, patch);
  }

  async deleteConversation(id: number): Promise<void> {
    await this.request(`/api/conversations/${id}`, { method: 'DELETE' });
  }

  exportConversation(id: number, format: ConversationExport): Promise<string | null> {
    const url = `${this.base}/api/conversations/${id}/export${queryString({ format })}`;
    return this.download(url, `conversation-${id}.${format === 'markdown' ? 'md' : 'json'}`);
  }

  async loadModel(request: LoadModelRequest): Promise<void> {
    await this.post('/api/model', request);
  }

  setTree(request: SetTreeRequest): Promise<Info> {
    return this.send('PUT', '/api/model/tree', request);
  }

  divergence(request: DivergenceRequest): Promise<Divergence | null> {
    return this.post('/api/divergence', request);
  }

  tune(options: TuneRequest = {}): Promise<TuneReport> {
    return this.post('/api/tune', options);
  }

  listRemotes(): Promise<RemoteEngineInfo[]> {
    // Asked for by the user: every engine now, not the server's recent answers.
    return this.request('/api/remotes?refresh=true');
  }

  addRemote(request: AddRemoteRequest): Promise<RemoteEngineInfo> {
    return this.post('/api/remotes', request);
  }

  async removeRemote(name: string): Promise<void> {
    await this.request(`/api/remotes/${encodeURIComponent(name)}`, { method: 'DELETE' });
  }

  localModels(): Promise<ModelsOnDisk> {
    return this.request('/api/models/local');
  }

  searchCatalog(query: string): Promise<CatalogSearch> {
    return this.request(`/api/catalog${queryString({ q: query.trim() })}`);
  }

  catalogFiles(repo: string): Promise<RepoFiles> {
    return this.request(`/api/catalog/${repo.split('/').map(encodeURIComponent).join('/')}`);
  }

  async downloadModel(request: DownloadRequest, onEvent: (event: DownloadEvent) => void): Promise<void> {
    let response: Response;
    try {
      response = await fetch(`${this.base}/api/catalog/download`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify(request),
      });
    } catch (err) {
      throw this.notAnswering(err);
    }
    if (!response.ok || !response.body) throw await errorFrom(response);
    await readLines(response.body, (line) => onEvent(JSON.parse(line) as DownloadEvent));
  }

  async cancelDownload(fileName: string): Promise<void> {
    await this.post('/api/catalog/cancel', { file_name: fileName });
  }

  async deleteModel(request: DeleteModelRequest): Promise<void> {
    const path = `/api/models/local/${encodeURIComponent(request.file_name)}${queryString({ partial: request.partial || undefined })}`;
    await this.request(path, { method: 'DELETE' });
  }

  startTraining(request: TrainingRequest): Promise<TrainingJob> {
    return this.post('/api/training', request);
  }

  plannedHeads(model: string): Promise<PlannedHeads> {
    return this.request(`/api/training/heads${queryString({ model })}`);
  }

  listTrainingJobs(): Promise<TrainingJob[]> {
    return this.request('/api/training');
  }

  getTrainingJob(id: number): Promise<TrainingJob> {
    return this.request(`/api/training/${id}`);
  }

  async cancelTraining(id: number): Promise<void> {
    await this.request(`/api/training/${id}/cancel`, { method: 'POST' });
  }

  resumeTraining(id: number): Promise<TrainingJob> {
    return this.request(`/api/training/${id}/resume`, { method: 'POST' });
  }

  deleteTrainingJob(id: number): Promise<DeletedTrainingJob> {
    return this.request(`/api/training/${id}`, { method: 'DELETE' });
  }

  // A stream of its own rather than the page's socket: a job is followed rarely and by one view.
  watchTraining(id: number, onJob: (job: TrainingJob) => void): TrainingWatch {
    const abort = new AbortController();
    const follow = async () => {
      let response: Response;
      try {
        response = await fetch(`${this.base}/api/training/${id}/events`, { signal: abort.signal });
      } catch (err) {
        if (abort.signal.aborted) return;
        throw this.notAnswering(err);
      }
      if (!response.ok || !response.body) throw await errorFrom(response);
      try {
        await readLines(response.body, (line) => {
          const data = sseData(line);
          if (data !== null && !abort.signal.aborted) onJob(JSON.parse(data) as TrainingJob);
        });
      } catch (err) {
        if (abort.signal.aborted) return;
        throw new ApiError('network', `the job's updates stopped: ${(err as Error).message}`);
      }
    };
    return { done: follow(), stop: () => abort.abort() };
  }

  onFileDrop(): () => void {
    return () => {};
  }

  async pickFile(): Promise<string | null> {
    return null;
  }
}
