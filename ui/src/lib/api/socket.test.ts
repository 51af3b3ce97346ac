import { afterEach, describe, expect, it, vi } from 'vitest';
import { EventSocket, eventsUrl, MAX_SOCKET_RUNS, socketNotAnswering } from './socket';
import { ApiError, Run } from './transport';
import type { Info, RunEvent, StreamMessage } from './types';

/** A WebSocket the test opens, feeds and closes by hand. */
class FakeSocket {
  static made: FakeSocket[] = [];
  sent: unknown[] = [];
  onopen: (() => void) | null = null;
  onmessage: ((event: { data: string }) => void) | null = null;
  onclose: ((event?: { code: number }) => void) | null = null;
  onerror: (() => void) | null = null;

  constructor(readonly url: string) {
    FakeSocket.made.push(this);
  }

  send(text: string) {
    this.sent.push(JSON.parse(text));
  }

  close() {}

  open() {
    this.onopen?.();
  }

  receive(message: StreamMessage) {
    this.onmessage?.({ data: JSON.stringify(message) });
  }

  /** Closed by the server with `code`. */
  closeWith(code: number) {
    this.onclose?.({ code });
  }

  /** As browsers do: an error, then the close. */
  drop() {
    this.onerror?.();
    this.onclose?.();
  }
}

function events() {
  FakeSocket.made = [];
  const connect = vi.fn((url: string) => new FakeSocket(url) as unknown as WebSocket);
  return { socket: new EventSocket(() => 'ws://h/api/events', connect), connect };
}

const last = () => FakeSocket.made[FakeSocket.made.length - 1];
const started = (run_id: number): RunEvent => ({ type: 'started', run_id, prompt_tokens: 2 });
const text = (t: string): RunEvent => ({ type: 'text', text: t, token_ids: [1], sources: ['model'] });
const finished = (run_id: number, stop_reason = 'max_tokens') =>
  ({ type: 'finished', run_id, stop_reason }) as unknown as RunEvent;
const info = (active: number) => ({ metrics: { active } }) as unknown as Info;

/** Lets the promise callbacks due so far run. */
const settle = () => new Promise((r) => setTimeout(r, 0));

afterEach(() => vi.restoreAllMocks());

describe('eventsUrl', () => {
  it('points at the page own host, or at the given server', () => {
    expect(eventsUrl('', { protocol: 'http:', host: '127.0.0.1:8080' })).toBe('ws://127.0.0.1:8080/api/events');
    expect(eventsUrl('', { protocol: 'https:', host: 'lab.example' })).toBe('wss://lab.example/api/events');
    expect(eventsUrl('http://h:1/', { protocol: 'https:', host: 'x' })).toBe('ws://h:1/api/events');
    expect(eventsUrl('https://h', { protocol: 'http:', host: 'x' })).toBe('wss://h/api/events');
  });
});

describe('EventSocket', () => {
  it('opens on first use, sends what waited once open, and dispatches events by id', async () => {
    const { socket, connect } = events();
    expect(connect).not.toHaveBeenCalled();
    const a: string[] = [];
    const b: string[] = [];
    const runA = socket.generate({ prompt: 'a' }, (e) => a.push(e.type === 'text' ? e.text : e.type));
    const runB = socket.generate({ prompt: 'b' }, (e) => b.push(e.type === 'text' ? e.text : e.type));
    expect(connect).toHaveBeenCalledTimes(1);
    expect(connect).toHaveBeenCalledWith('ws://h/api/events');
    const ws = last();
    expect(ws.sent).toEqual([]);
    ws.open();
    expect(ws.sent).toEqual([
      { type: 'generate', id: 1, request: { prompt: 'a' } },
      { type: 'generate', id: 2, request: { prompt: 'b' } },
    ]);
    ws.receive({ type: 'run', id: 2, event: started(8) });
    ws.receive({ type: 'run', id: 1, event: started(7) });
    ws.receive({ type: 'run', id: 1, event: text('x') });
    ws.receive({ type: 'run', id: 2, event: text('y') });
    ws.receive({ type: 'run', id: 2, event: finished(8) });
    ws.receive({ type: 'run', id: 9, event: text('nobody') });
    await runB.done;
    expect(b).toEqual(['started', 'y', 'finished']);
    let aDone = false;
    void runA.done.then(() => (aDone = true));
    await settle();
    expect(aDone).toBe(false);
    ws.receive({ type: 'run', id: 1, event: { type: 'failed', run_id: 7, code: 'decode_failed', message: 'boom' } });
    await runA.done;
    expect(a).toEqual(['started', 'x', 'failed']);
    // Later generations take fresh ids on the same socket.
    socket.generate({ prompt: 'c' }, () => {});
    expect(ws.sent[2]).toEqual({ type: 'generate', id: 3, request: { prompt: 'c' } });
    expect(connect).toHaveBeenCalledTimes(1);
  });

  it('hands out handles a Svelte state keeps as they are', () => {
    const { socket } = events();
    const run = socket.generate({ prompt: 'a' }, () => {});
    expect(run).toBeInstanceOf(Run);
    expect(Object.getPrototypeOf(run)).not.toBe(Object.prototype);
  });

  it('rejects a refused generation with the backend error', async () => {
    const { socket } = events();
    const run = socket.generate({ prompt: '' }, () => {});
    last().open();
    last().receive({ type: 'refused', id: 1, error: { code: 'empty_prompt', message: 'the prompt is empty' } });
    await expect(run.done).rejects.toEqual(new ApiError('empty_prompt', 'the prompt is empty'));
  });

  it('cancels a started run by id and resolves after its last event', async () => {
    const { socket } = events();
    const seen: string[] = [];
    const run = socket.generate({ prompt: 'x' }, (e) => seen.push(e.type));
    const ws = last();
    ws.open();
    ws.receive({ type: 'run', id: 1, event: started(4) });
    run.cancel();
    run.cancel();
    expect(ws.sent).toEqual([
      { type: 'generate', id: 1, request: { prompt: 'x' } },
      { type: 'cancel', id: 1 },
    ]);
    ws.receive({ type: 'run', id: 1, event: finished(4, 'cancelled') });
    await run.done;
    expect(seen).toEqual(['started', 'finished']);
  });

  it('resolves a run cancelled before it started', async () => {
    const { socket } = events();
    const run = socket.generate({ prompt: 'x' }, () => {});
    const ws = last();
    ws.open();
    run.cancel();
    expect(ws.sent[1]).toEqual({ type: 'cancel', id: 1 });
    ws.receive({ type: 'refused', id: 1, error: { code: 'cancelled', message: 'cancelled before it started' } });
    await expect(run.done).resolves.toBeUndefined();
  });

  it('drops a run cancelled before the socket opened without telling the backend', async () => {
    const { socket } = events();
    const run = socket.generate({ prompt: 'x' }, () => {});
    run.cancel();
    await expect(run.done).resolves.toBeUndefined();
    last().open();
    expect(last().sent).toEqual([]);
  });

  it('rejects every run in flight when the socket closes, and opens a new one on next use', async () => {
    const { socket, connect } = events();
    const a = socket.generate({ prompt: 'a' }, () => {});
    const b = socket.generate({ prompt: 'b' }, () => {});
    const stopped = socket.generate({ prompt: 'c' }, () => {});
    const ws = last();
    ws.open();
    ws.receive({ type: 'run', id: 1, event: started(1) });
    stopped.cancel();
    ws.drop();
    const lost = new ApiError('network', 'the connection to the server closed before the run ended');
    await expect(a.done).rejects.toEqual(lost);
    await expect(b.done).rejects.toEqual(lost);
    // The page asked it to stop, and closing stopped it.
    await expect(stopped.done).resolves.toBeUndefined();
    // Events of the old socket go nowhere.
    ws.receive({ type: 'run', id: 1, event: text('late') });

    const seen: string[] = [];
    const again = socket.generate({ prompt: 'd' }, (e) => seen.push(e.type));
    expect(connect).toHaveBeenCalledTimes(2);
    const fresh = last();
    expect(fresh).not.toBe(ws);
    fresh.open();
    expect(fresh.sent).toEqual([{ type: 'generate', id: 4, request: { prompt: 'd' } }]);
    fresh.receive({ type: 'run', id: 4, event: finished(5) });
    await again.done;
    expect(seen).toEqual(['finished']);
  });

  it('says the server is unreachable when the socket never opened', async () => {
    const { socket } = events();
    const run = socket.generate({ prompt: 'a' }, () => {});
    last().drop();
    await expect(run.done).rejects.toEqual(
      new ApiError('network', "the playground's server is not answering at http://h; is `medusa serve` still running?"),
    );
  });

  it('names the server that does not answer by its http address', () => {
    const expected = (at: string) => `the playground's server is not answering at ${at}; is \`medusa serve\` still running?`;
    expect(socketNotAnswering('ws://127.0.0.1:8080/api/events')).toBe(expected('http://127.0.0.1:8080'));
    expect(socketNotAnswering('wss://lab.example/medusa/api/events')).toBe(expected('https://lab.example/medusa'));
  });

  it('rejects when the socket cannot even be made', async () => {
    const socket = new EventSocket(
      () => 'nope',
      () => {
        throw new SyntaxError('bad address');
      },
    );
    const run = socket.generate({ prompt: 'a' }, () => {});
    await expect(run.done).rejects.toEqual(new ApiError('network', 'cannot reach the server: bad address'));
  });

  it(`keeps at most ${MAX_SOCKET_RUNS} generations at the backend and sends the rest as places free`, async () => {
    const { socket } = events();
    const runs = Array.from({ length: MAX_SOCKET_RUNS + 2 }, (_, i) => socket.generate({ prompt: `p${i}` }, () => {}));
    const ws = last();
    ws.open();
    expect(ws.sent.length).toBe(MAX_SOCKET_RUNS);
    // One still waiting here is cancelled without a word to the backend.
    runs[MAX_SOCKET_RUNS].cancel();
    await expect(runs[MAX_SOCKET_RUNS].done).resolves.toBeUndefined();
    ws.receive({ type: 'run', id: 3, event: finished(3) });
    expect(ws.sent.length).toBe(MAX_SOCKET_RUNS + 1);
    expect(ws.sent.at(-1)).toEqual({ type: 'generate', id: MAX_SOCKET_RUNS + 2, request: { prompt: `p${MAX_SOCKET_RUNS + 1}` } });
  });

  it('subscribes to status at the fastest interval asked and stops when the last watcher leaves', () => {
    const { socket } = events();
    const slow: number[] = [];
    const fast: number[] = [];
    const stopSlow = socket.watch(1500, (i) => slow.push(i.metrics!.active));
    const ws = last();
    ws.open();
    const stopFast = socket.watch(500, (i) => fast.push(i.metrics!.active));
    ws.receive({ type: 'status', info: info(2) });
    expect(slow).toEqual([2]);
    expect(fast).toEqual([2]);
    stopFast();
    stopFast();
    ws.receive({ type: 'status', info: info(1) });
    expect(fast).toEqual([2]);
    expect(slow).toEqual([2, 1]);
    stopSlow();
    expect(ws.sent).toEqual([
      { type: 'status', every_ms: 1500 },
      { type: 'status', every_ms: 500 },
      { type: 'status', every_ms: 1500 },
      { type: 'status', every_ms: 0 },
    ]);
  });

  it('keeps intervals within what the backend takes', () => {
    const { socket } = events();
    socket.watch(10, () => {});
    socket.watch(1e9, () => {});
    last().open();
    expect(last().sent).toEqual([
      { type: 'status', every_ms: 100 },
      { type: 'status', every_ms: 100 },
    ]);
  });

  it('tells watchers when the socket closes, and a new watch opens a new socket', () => {
    const { socket, connect } = events();
    const ended: ApiError[] = [];
    const seen: number[] = [];
    const stop = socket.watch(1000, (i) => seen.push(i.metrics!.active), (e) => ended.push(e));
    last().open();
    last().drop();
    expect(ended).toEqual([new ApiError('network', 'the connection to the server closed')]);
    // Leaving after the end sends nothing and opens nothing.
    stop();
    expect(connect).toHaveBeenCalledTimes(1);
    socket.watch(1000, (i) => seen.push(i.metrics!.active));
    expect(connect).toHaveBeenCalledTimes(2);
    last().open();
    expect(last().sent).toEqual([{ type: 'status', every_ms: 1000 }]);
    last().receive({ type: 'status', info: info(3) });
    expect(seen).toEqual([3]);
  });

  it('carries its watchers on a new socket when the server gives an idle one away', async () => {
    const { socket, connect } = events();
    const ended: ApiError[] = [];
    const seen: number[] = [];
    socket.watch(1000, (i) => seen.push(i.metrics!.active), (e) => ended.push(e));
    last().open();
    last().closeWith(1013);
    // Nothing ended: a new socket asks for the status again.
    expect(ended).toEqual([]);
    expect(connect).toHaveBeenCalledTimes(2);
    last().open();
    expect(last().sent).toEqual([{ type: 'status', every_ms: 1000 }]);
    last().receive({ type: 'status', info: info(4) });
    expect(seen).toEqual([4]);
    // A socket with a run going is never given away; closed with any other code, it ends.
    const run = socket.generate({ prompt: 'hi' } as never, () => {});
    last().closeWith(1008);
    await expect(run.done).rejects.toThrow('closed');
    expect(ended).toHaveLength(1);
  });

  it('ends a run whose view failed on one of its events', async () => {
    const error = vi.spyOn(console, 'error').mockImplementation(() => {});
    const { socket } = events();
    const run = socket.generate({ prompt: 'a' }, (e) => {
      if (e.type === 'text') throw new TypeError('view bug');
    });
    const ws = last();
    ws.open();
    ws.receive({ type: 'run', id: 1, event: text('x') });
    ws.receive({ type: 'run', id: 1, event: finished(1) });
    await expect(run.done).resolves.toBeUndefined();
    expect(error).toHaveBeenCalledWith(new TypeError('view bug'));
  });

  it('ignores messages it cannot read and reports errors without an id', () => {
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
    const { socket } = events();
    const run = socket.generate({ prompt: 'a' }, () => {});
    const ws = last();
    ws.open();
    ws.onmessage?.({ data: 'not json' });
    ws.receive({ type: 'error', error: { code: 'invalid_parameter', message: 'not a stream request' } });
    expect(warn).toHaveBeenCalledWith('event stream: invalid_parameter: not a stream request');
    run.cancel();
    expect(ws.sent.at(-1)).toEqual({ type: 'cancel', id: 1 });
  });
});
