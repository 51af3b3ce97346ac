// The page's one WebSocket to `medusa serve` (`/api/events`): every generation streams over it,
// told apart by an id the page picks, and status updates come over it instead of polling.

import { ApiError, Run, type RunHandle } from './transport';
import type { PlaygroundRequest, Info, RunEvent, StreamMessage, StreamRequest } from './types';

/** Generations the backend takes at once on one socket; more wait here until one ends. */
export const MAX_SOCKET_RUNS = 64;
/** Status intervals the backend accepts, in ms. */
export const STATUS_EVERY_MS = { min: 100, max: 60_000 } as const;

/** `ws(s)://…/api/events` for an HTTP base address, or for the page's own origin when it is ''. */
export function eventsUrl(base: string, page: { protocol: string; host: string }): string {
  if (base === '') return `${page.protocol === 'https:' ? 'wss:' : 'ws:'}//${page.host}/api/events`;
  return `${base.replace(/^http/, 'ws').replace(/\/$/, '')}/api/events`;
}

const CLOSED = 'the connection to the server closed';
/**
 * The close code (1013, try again later) of a socket whose place the server gave to a newcomer
 * because it carried no generation while every place was taken.
 */
const REPLACED = 1013;
/**
 * A socket that never opened: the backend is down or gone (the browser says nothing more), told
 * with the server's address as the page's requests are.
 */
export function socketNotAnswering(url: string): string {
  const server = url.replace(/^ws/, 'http').replace(/\/api\/events$/, '');
  return `the playground's server is not answering at ${server}; is \`medusa serve\` still running?`;
}

/** A generation the page started and whose last message has not come yet. */
interface Generation {
  request: PlaygroundRequest;
  onEvent: (event: RunEvent) => void;
  resolve: () => void;
  reject: (error: ApiError) => void;
  /** Sent to the backend (not still waiting for a free place here). */
  sent: boolean;
  cancelled: boolean;
}

interface Watcher {
  everyMs: number;
  onInfo: (info: Info) => void;
  onEnd?: (error: ApiError) => void;
}

/**
 * Opens the socket on first use and again on the first use after it closed. Messages wait until
 * it is open. When it closes, every generation not yet ended rejects with a `network` ApiError
 * (those the page cancelled resolve: they ended as asked) and status watchers are told that
 * nothing more comes.
 */
export class EventSocket {
  private socket: WebSocket | null = null;
  private opened = false;
  /** Messages waiting for the socket to open, with the generation each starts, if any. */
  private outbox: { text: string; starts?: number }[] = [];
  private generations = new Map<number, Generation>();
  /** Ids waiting for a free place, oldest first. */
  private waiting: number[] = [];
  private inFlight = 0;
  private nextId = 1;
  private watchers = new Set<Watcher>();
  /** The status interval last asked of the backend; 0 for none. */
  private statusEvery = 0;

  constructor(
    private readonly url: () => string,
    private readonly connect: (url: string) => WebSocket = (url) => new WebSocket(url),
  ) {}

  /** Starts a generation; `done` follows the `RunHandle` contract of `Transport.generate`. */
  generate(request: PlaygroundRequest, onEvent: (event: RunEvent) => void): RunHandle {
    // Ids are never reused: the backend may still hold an ended one for a moment.
    const id = this.nextId;
    this.nextId = this.nextId >= 0xffff_ffff ? 1 : this.nextId + 1;
    let generation!: Generation;
    const done = new Promise<void>((resolve, reject) => {
      generation = { request, onEvent, resolve, reject, sent: false, cancelled: false };
    });
    this.generations.set(id, generation);
    this.waiting.push(id);
    this.pump();
    return new Run(done, () => this.cancel(id));
  }

  /**
   * Calls `onInfo` with the backend's status now and every `everyMs` (more often while another
   * watcher asks for more) until the returned function is called, or until the socket closes:
   * `onEnd` then says why, and the watcher must watch again to hear more.
   */
  watch(everyMs: number, onInfo: (info: Info) => void, onEnd?: (error: ApiError) => void): () => void {
    const watcher: Watcher = {
      everyMs: Math.min(STATUS_EVERY_MS.max, Math.max(STATUS_EVERY_MS.min, Math.round(everyMs))),
      onInfo,
      onEnd,
    };
    this.watchers.add(watcher);
    // Asked again even at the same interval: the backend answers at once, so this watcher need
    // not wait for the next tick.
    this.statusEvery = this.fastestWatch();
    this.send({ type: 'status', every_ms: this.statusEvery });
    return () => {
      if (!this.watchers.delete(watcher)) return;
      const every = this.fastestWatch();
      if (every !== this.statusEvery && this.socket) {
        this.statusEvery = every;
        this.send({ type: 'status', every_ms: every });
      }
    };
  }

  private fastestWatch(): number {
    let every = 0;
    for (const w of this.watchers) if (every === 0 || w.everyMs < every) every = w.everyMs;
    return every;
  }

  private cancel(id: number): void {
    const generation = this.generations.get(id);
    if (!generation || generation.cancelled) return;
    generation.cancelled = true;
    const unsent = this.outbox.findIndex((m) => m.starts === id);
    if (!generation.sent || unsent >= 0) {
      // The backend never heard of it: nothing to tell it.
      this.waiting = this.waiting.filter((w) => w !== id);
      if (unsent >= 0) this.outbox.splice(unsent, 1);
      this.end(id);
      generation.resolve();
      return;
    }
    // A started run ends with a `finished` event (stop reason `cancelled`), one still waiting
    // with `refused` (`cancelled`): either resolves `done`.
    this.send({ type: 'cancel', id });
  }

  /** Sends the waiting generations the backend has room for. */
  private pump(): void {
    while (this.waiting.length > 0 && this.inFlight < MAX_SOCKET_RUNS) {
      const id = this.waiting.shift()!;
      const generation = this.generations.get(id);
      if (!generation) continue;
      generation.sent = true;
      this.inFlight += 1;
      this.send({ type: 'generate', id, request: generation.request });
    }
  }

  private end(id: number): void {
    const generation = this.generations.get(id);
    if (!generation) return;
    this.generations.delete(id);
    if (generation.sent) {
      this.inFlight -= 1;
      this.pump();
    }
  }

  private send(message: StreamRequest): void {
    const text = JSON.stringify(message);
    const socket = this.socket ?? this.open();
    if (this.opened) socket.send(text);
    else this.outbox.push({ text, starts: message.type === 'generate' ? message.id : undefined });
  }

  private open(): WebSocket {
    let socket: WebSocket;
    const url = this.url();
    try {
      socket = this.connect(url);
    } catch (err) {
      // An address the browser refuses: the same as a socket that closes at once.
      socket = closedSocket();
      const detail = `cannot reach the server: ${(err as Error).message}`;
      queueMicrotask(() => this.closed(socket, detail));
    }
    this.socket = socket;
    this.opened = false;
    socket.onopen = () => {
      if (this.socket !== socket) return;
      this.opened = true;
      for (const { text } of this.outbox) socket.send(text);
      this.outbox = [];
    };
    socket.onmessage = (event) => {
      if (this.socket !== socket) return;
      this.receive(event.data);
    };
    socket.onclose = (event?: CloseEvent) => {
      if (this.opened && event?.code === REPLACED && this.generations.size === 0) {
        this.reopen(socket);
        return;
      }
      this.closed(socket, this.opened ? CLOSED : socketNotAnswering(url));
    };
    return socket;
  }

  private receive(data: unknown): void {
    let message: StreamMessage;
    try {
      message = JSON.parse(String(data));
    } catch {
      return;
    }
    switch (message.type) {
      case 'run': {
        const generation = this.generations.get(message.id);
        if (!generation) return;
        try {
          generation.onEvent(message.event);
        } catch (err) {
          // A view that fails on one event must not keep its generation from ending.
          console.error(err);
        }
        if (message.event.type === 'finished' || message.event.type === 'failed') {
          this.end(message.id);
          generation.resolve();
        }
        return;
      }
      case 'refused': {
        const generation = this.generations.get(message.id);
        if (!generation) return;
        this.end(message.id);
        if (message.error.code === 'cancelled') generation.resolve();
        else generation.reject(new ApiError(message.error.code, message.error.message));
        return;
      }
      case 'status':
        for (const watcher of [...this.watchers]) watcher.onInfo(message.info);
        return;
      case 'error':
        // Not tied to a generation: this page sends only well-formed messages with fresh ids and
        // at most MAX_SOCKET_RUNS at once, so this is a backend this page does not match.
        console.warn(`event stream: ${message.error.code}: ${message.error.message}`);
        return;
    }
  }

  /**
   * The server gave this idle socket's place to a newcomer (every place was taken): a new
   * socket carries the status watchers on, as the page still needs one, and nothing ends.
   */
  private reopen(socket: WebSocket): void {
    if (this.socket !== socket) return;
    this.socket = null;
    this.opened = false;
    this.statusEvery = 0;
    if (this.watchers.size === 0) return;
    this.statusEvery = this.fastestWatch();
    this.send({ type: 'status', every_ms: this.statusEvery });
  }

  /** Ends everything the socket carried; `reason` says what happened to it. */
  private closed(socket: WebSocket, reason: string): void {
    if (this.socket !== socket) return;
    this.socket = null;
    this.opened = false;
    this.outbox = [];
    this.statusEvery = 0;
    this.waiting = [];
    this.inFlight = 0;
    const generations = [...this.generations.values()];
    this.generations.clear();
    for (const g of generations) {
      if (g.cancelled) g.resolve();
      else g.reject(new ApiError('network', reason === CLOSED ? `${CLOSED} before the run ended` : reason));
    }
    const watchers = [...this.watchers];
    this.watchers.clear();
    const error = new ApiError('network', reason);
    for (const w of watchers) w.onEnd?.(error);
  }
}

/** Stands in for a socket that could not be created: it sends nothing and never opens. */
function closedSocket(): WebSocket {
  return { send() {}, close() {} } as unknown as WebSocket;
}
