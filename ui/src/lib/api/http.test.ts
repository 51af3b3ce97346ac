import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  attachmentName,
  errorFrom,
  HttpTransport,
  notAnsweringMessage,
  queryString,
  readLines,
  sseData,
} from './http';
import { ApiError } from './transport';
import type { RunEvent } from './types';

/** Stands in for the browser's WebSocket: records what the page sends, and answers by hand. */
class FakeWebSocket {
  static made: FakeWebSocket[] = [];
  sent: unknown[] = [];
  onopen: (() => void) | null = null;
  onmessage: ((event: { data: string }) => void) | null = null;
  onclose: (() => void) | null = null;

  constructor(readonly url: string) {
    FakeWebSocket.made.push(this);
  }

  send(text: string) {
    this.sent.push(JSON.parse(text));
  }

  close() {}

  receive(message: unknown) {
    this.onmessage?.({ data: JSON.stringify(message) });
  }
}

function pageAt(host: string) {
  FakeWebSocket.made = [];
  vi.stubGlobal('WebSocket', FakeWebSocket);
  vi.stubGlobal('location', { protocol: 'http:', host });
}

function json(status: number, body: unknown): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { 'Content-Type': 'application/json' },
  });
}

afterEach(() => vi.unstubAllGlobals());

describe('HttpTransport', () => {
  it('streams generations over one socket to the page own server', async () => {
    pageAt('127.0.0.1:8080');
    const t = new HttpTransport();
    const events: RunEvent[] = [];
    const first = t.generate({ prompt: 'x', mode: 'lookup' }, (e) => events.push(e));
    const second = t.generate({ prompt: 'y' }, () => {});
    expect(FakeWebSocket.made.map((s) => s.url)).toEqual(['ws://127.0.0.1:8080/api/events']);
    const ws = FakeWebSocket.made[0];
    ws.onopen?.();
    expect(ws.sent).toEqual([
      { type: 'generate', id: 1, request: { prompt: 'x', mode: 'lookup' } },
      { type: 'generate', id: 2, request: { prompt: 'y' } },
    ]);
    ws.receive({ type: 'run', id: 1, event: { type: 'started', run_id: 4, prompt_tokens: 3 } });
    ws.receive({ type: 'run', id: 1, event: { type: 'text', text: 'Hi', token_ids: [1], sources: ['model'] } });
    ws.receive({ type: 'run', id: 1, event: { type: 'finished', run_id: 4 } });
    await first.done;
    expect(events.map((e) => e.type)).toEqual(['started', 'text', 'finished']);
    ws.receive({ type: 'refused', id: 2, error: { code: 'queue_full', message: 'full' } });
    await expect(second.done).rejects.toEqual(new ApiError('queue_full', 'full'));
  });

  it('cancels through the socket, and watches the status over it', async () => {
    pageAt('h:1');
    const t = new HttpTransport('https://lab.example');
    const run = t.generate({ prompt: 'x' }, () => {});
    const seen: number[] = [];
    const stop = t.watchStatus(500, (info) => seen.push(info.metrics!.queued));
    const ws = FakeWebSocket.made[0];
    expect(ws.url).toBe('wss://lab.example/api/events');
    ws.onopen?.();
    run.cancel();
    ws.receive({ type: 'refused', id: 1, error: { code: 'cancelled', message: 'cancelled before it started' } });
    await expect(run.done).resolves.toBeUndefined();
    ws.receive({ type: 'status', info: { metrics: { queued: 2 } } });
    stop();
    expect(seen).toEqual([2]);
    expect(ws.sent).toEqual([
      { type: 'generate', id: 1, request: { prompt: 'x' } },
      { type: 'status', every_ms: 500 },
      { type: 'cancel', id: 1 },
      { type: 'status', every_ms: 0 },
    ]);
  });

  it('maps error bodies to ApiError with code and status', async () => {
    vi.stubGlobal(
      'fetch',
      vi.fn(async () => json(503, { error: { code: 'queue_full', message: 'full' } })),
    );
    await expect(new HttpTransport().info()).rejects.toEqual(new ApiError('queue_full', 'full', 503));
  });

  it('says which server does not answer instead of the browser\'s "Failed to fetch"', async () => {
    vi.stubGlobal('fetch', vi.fn().mockRejectedValue(new TypeError('Failed to fetch')));
    vi.stubGlobal('location', { origin: 'http://127.0.0.1:8080', protocol: 'http:', host: '127.0.0.1:8080' });
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
    const expected = "the playground's server is not answering at http://127.0.0.1:8080; is `medusa serve` still running?";
    await expect(new HttpTransport().listRuns()).rejects.toEqual(new ApiError('network', expected));
    await expect(new HttpTransport().listTrainingJobs()).rejects.toEqual(new ApiError('network', expected));
    const watch = new HttpTransport().watchTraining(1, () => {});
    await expect(watch.done).rejects.toEqual(new ApiError('network', expected));
    // A transport for another address names that one.
    await expect(new HttpTransport('http://lab:9000').info()).rejects.toEqual(
      new ApiError('network', notAnsweringMessage('http://lab:9000', { origin: 'unused' })),
    );
    expect(notAnsweringMessage('http://lab:9000/', { origin: 'x' })).toBe(
      "the playground's server is not answering at http://lab:9000; is `medusa serve` still running?",
    );
    // The browser's own words stay in the console.
    expect(warn).toHaveBeenCalledWith('fetch failed:', new TypeError('Failed to fetch'));
    warn.mockRestore();
  });

  it('asks where a new job\'s heads would go', async () => {
    const fetch = vi.fn().mockResolvedValue(json(200, { model: '/m/a b.gguf', heads_path: '/m/a b-2.medusa.gguf' }));
    vi.stubGlobal('fetch', fetch);
    const planned = await new HttpTransport().plannedHeads('/m/a b.gguf');
    expect(fetch).toHaveBeenCalledWith('/api/training/heads?model=%2Fm%2Fa+b.gguf', undefined);
    expect(planned.heads_path).toBe('/m/a b-2.medusa.gguf');
  });

  it('builds history queries and export URLs from the defined fields', async () => {
    const fetch = vi.fn().mockResolvedValue(json(200, { runs: [] }));
    vi.stubGlobal('fetch', fetch);
    await new HttpTransport().listRuns({ mode: 'medusa', limit: 50, sort: 'total_ms', model: '' });
    expect(fetch).toHaveBeenCalledWith('/api/runs?mode=medusa&limit=50&sort=total_ms', undefined);
    expect(new HttpTransport().exportUrl({ status: 'finished' }, 'csv')).toBe(
      '/api/runs/export?status=finished&format=csv',
    );
    expect(queryString({})).toBe('');
  });

  it('posts comparisons and model loads, with a context size', async () => {
    const fetch = vi.fn().mockResolvedValue(json(201, { id: 1 }));
    vi.stubGlobal('fetch', fetch);
    await new HttpTransport().createComparison([3, 4]);
    expect(fetch.mock.calls[0][1].body).toBe('{"run_ids":[3,4]}');
    fetch.mockResolvedValue(json(202, {}));
    await new HttpTransport().loadModel({ model: '/m.gguf', heads: null, ctx_size: 2048 });
    expect(fetch.mock.calls[1][0]).toBe('/api/model');
    expect(fetch.mock.calls[1][1].body).toBe('{"model":"/m.gguf","heads":null,"ctx_size":2048}');
    fetch.mockResolvedValue(json(200, { default_tree: 'chain-2' }));
    const info = await new HttpTransport().setTree({ tree: 'chain-2' });
    expect(info.default_tree).toBe('chain-2');
    expect(fetch.mock.calls[2][0]).toBe('/api/model/tree');
    expect(fetch.mock.calls[2][1].method).toBe('PUT');
    expect(fetch.mock.calls[2][1].body).toBe('{"tree":"chain-2"}');
  });
});

describe('HttpTransport deletes and imports', () => {
  it('posts the run ids to delete and answers the report', async () => {
    const report = { deleted: 2, comparisons_changed: [3], comparisons_removed: [] };
    const fetch = vi.fn().mockResolvedValue(json(200, report));
    vi.stubGlobal('fetch', fetch);
    expect(await new HttpTransport().deleteRuns([1, 2])).toEqual(report);
    expect(fetch.mock.calls[0][0]).toBe('/api/runs/delete');
    expect(fetch.mock.calls[0][1].method).toBe('POST');
    expect(fetch.mock.calls[0][1].body).toBe('{"run_ids":[1,2]}');
  });

  it('maps a refused deletion to an ApiError', async () => {
    vi.stubGlobal('fetch', vi.fn(async () => json(400, { error: { code: 'invalid_parameter', message: 'run 4 is running' } })));
    await expect(new HttpTransport().deleteRuns([4])).rejects.toEqual(new ApiError('invalid_parameter', 'run 4 is running', 400));
  });

  it('posts an export document as it is to import it', async () => {
    const report = { imported: 1, skipped_duplicates: 0, rejected: 0, rejections: [], comparisons_imported: 0, comparisons_skipped: 0 };
    const fetch = vi.fn().mockResolvedValue(json(200, report));
    vi.stubGlobal('fetch', fetch);
    const document = { format: 'medusa-runs', runs: [{ uid: 'a' }] };
    const t = new HttpTransport('http://h');
    expect(await t.importRuns(document)).toEqual(report);
    expect(fetch.mock.calls[0][0]).toBe('http://h/api/runs/import');
    expect(JSON.parse(fetch.mock.calls[0][1].body)).toEqual(document);
  });

  it('sends search and model filters as typed', async () => {
    const fetch = vi.fn().mockResolvedValue(json(200, { runs: [] }));
    vi.stubGlobal('fetch', fetch);
    await new HttpTransport().listRuns({ search: 'giraff neck', model: 'smollm' });
    expect(fetch.mock.calls[0][0]).toBe('/api/runs?search=giraff+neck&model=smollm');
  });
});

describe('HttpTransport remote engines', () => {
  const lab = { name: 'lab', url: 'http://gpu-box:8000', has_key: true, saved: true, models: ['m-1'], error: null };

  it('lists the remote engines', async () => {
    const fetch = vi.fn().mockResolvedValue(json(200, [lab]));
    vi.stubGlobal('fetch', fetch);
    expect(await new HttpTransport('http://h').listRemotes()).toEqual([lab]);
    expect(fetch.mock.calls[0]).toEqual(['http://h/api/remotes?refresh=true', undefined]);
  });

  it('posts a remote engine to add, key included', async () => {
    const fetch = vi.fn().mockResolvedValue(json(201, lab));
    vi.stubGlobal('fetch', fetch);
    const added = await new HttpTransport().addRemote({ name: 'lab', url: 'http://gpu-box:8000', api_key: 'sk-1' });
    expect(added).toEqual(lab);
    expect(fetch.mock.calls[0][0]).toBe('/api/remotes');
    expect(fetch.mock.calls[0][1].method).toBe('POST');
    expect(fetch.mock.calls[0][1].body).toBe('{"name":"lab","url":"http://gpu-box:8000","api_key":"sk-1"}');
  });

  it('deletes a remote engine by its name', async () => {
    const fetch = vi.fn().mockResolvedValue(new Response(null, { status: 204 }));
    vi.stubGlobal('fetch', fetch);
    await expect(new HttpTransport().removeRemote('lab.2')).resolves.toBeUndefined();
    expect(fetch.mock.calls[0]).toEqual(['/api/remotes/lab.2', { method: 'DELETE' }]);
  });

  it('answers refusals with the backend code and message', async () => {
    vi.stubGlobal(
      'fetch',
      vi.fn(async () => json(409, { error: { code: 'remote_exists', message: "there is a remote engine named 'lab' already; remove it first" } })),
    );
    await expect(new HttpTransport().addRemote({ name: 'lab', url: 'http://h:1' })).rejects.toEqual(
      new ApiError('remote_exists', "there is a remote engine named 'lab' already; remove it first", 409),
    );
    vi.stubGlobal('fetch', vi.fn(async () => json(404, { error: { code: 'remote_not_found', message: 'no lab' } })));
    await expect(new HttpTransport().removeRemote('lab')).rejects.toEqual(new ApiError('remote_not_found', 'no lab', 404));
  });
});

describe('HttpTransport models', () => {
  /** A body arriving in these chunks. */
  const streamed = (chunks: string[]) =>
    new ReadableStream<Uint8Array>({
      start(controller) {
        for (const chunk of chunks) controller.enqueue(new TextEncoder().encode(chunk));
        controller.close();
      },
    });

  it('reads lines that arrive split across chunks', async () => {
    const lines: string[] = [];
    await readLines(streamed(['{"a":1}\n{"b"', ':2}\n\n', '{"c":3}']), (line) => lines.push(line));
    expect(lines).toEqual(['{"a":1}', '{"b":2}', '{"c":3}']);
  });

  it('hands each event of a download to the caller, in order', async () => {
    const body = '{"type":"progress","downloaded":0,"total":4,"resumed_from":0}\n{"type":"done","path":"/m/x.gguf","downloaded":true,"checksum_verified":true}\n';
    const fetch = vi.fn().mockResolvedValue(new Response(streamed([body.slice(0, 30), body.slice(30)]), { status: 200 }));
    vi.stubGlobal('fetch', fetch);
    const events: string[] = [];
    await new HttpTransport().downloadModel({ repo: 'a/b', file: 'x.gguf' }, (e) => events.push(e.type));
    expect(events).toEqual(['progress', 'done']);
    expect(fetch.mock.calls[0][0]).toBe('/api/catalog/download');
    expect(fetch.mock.calls[0][1].body).toBe('{"repo":"a/b","file":"x.gguf"}');
  });

  it('asks for a repository by its two parts and deletes files by name', async () => {
    const fetch = vi.fn(async () => new Response(null, { status: 204 }));
    vi.stubGlobal('fetch', fetch);
    fetch.mockResolvedValueOnce(json(200, { repo: 'Qwen/Q-GGUF', license: null, files: [] }));
    await new HttpTransport().catalogFiles('Qwen/Q-GGUF');
    await new HttpTransport().deleteModel({ file_name: 'a b.gguf', partial: true });
    await new HttpTransport().searchCatalog(' qwen ');
    expect(fetch.mock.calls.map((c) => (c as unknown[])[0])).toEqual([
      '/api/catalog/Qwen/Q-GGUF',
      '/api/models/local/a%20b.gguf?partial=true',
      '/api/catalog?q=qwen',
    ]);
  });
});

describe('HttpTransport training', () => {
  const job = (id: number, status: string, answered = 0) => ({ id, status, phase: 'collecting', figures: { answered } });
  const encoder = new TextEncoder();

  it('starts, lists, reads, cancels, resumes and deletes jobs at their addresses', async () => {
    const fetch = vi.fn(async () => new Response(null, { status: 204 }));
    vi.stubGlobal('fetch', fetch);
    fetch.mockResolvedValueOnce(json(201, job(3, 'running')));
    fetch.mockResolvedValueOnce(json(200, [job(3, 'running'), job(2, 'finished')]));
    fetch.mockResolvedValueOnce(json(200, job(2, 'finished')));
    fetch.mockResolvedValueOnce(new Response(null, { status: 204 }));
    fetch.mockResolvedValueOnce(json(200, job(3, 'running', 10)));
    fetch.mockResolvedValueOnce(json(200, { id: 2, freed_bytes: 4096 }));
    const t = new HttpTransport('http://h');
    expect(await t.startTraining({ model: '/m/a.gguf', samples: 12, epochs: 2 })).toEqual(job(3, 'running'));
    expect((await t.listTrainingJobs()).map((j) => j.id)).toEqual([3, 2]);
    expect((await t.getTrainingJob(2)).status).toBe('finished');
    await expect(t.cancelTraining(3)).resolves.toBeUndefined();
    expect((await t.resumeTraining(3)).figures.answered).toBe(10);
    expect(await t.deleteTrainingJob(2)).toEqual({ id: 2, freed_bytes: 4096 });
    const calls = fetch.mock.calls as unknown as [string, RequestInit | undefined][];
    expect(calls.map(([url, init]) => [init?.method ?? 'GET', url])).toEqual([
      ['POST', 'http://h/api/training'],
      ['GET', 'http://h/api/training'],
      ['GET', 'http://h/api/training/2'],
      ['POST', 'http://h/api/training/3/cancel'],
      ['POST', 'http://h/api/training/3/resume'],
      ['DELETE', 'http://h/api/training/2'],
    ]);
    expect(calls[0][1]?.body).toBe('{"model":"/m/a.gguf","samples":12,"epochs":2}');
    expect((calls[0][1]?.headers as Record<string, string>)['Content-Type']).toBe('application/json');
  });

  it('answers a refused start or cancel with the backend code', async () => {
    vi.stubGlobal(
      'fetch',
      vi.fn(async () => json(409, { error: { code: 'training_in_progress', message: 'training job 2 is running; one job trains at a time' } })),
    );
    await expect(new HttpTransport().startTraining({ model: '/m.gguf' })).rejects.toEqual(
      new ApiError('training_in_progress', 'training job 2 is running; one job trains at a time', 409),
    );
    vi.stubGlobal('fetch', vi.fn(async () => json(409, { error: { code: 'training_tuning', message: 'the tune cannot be stopped' } })));
    await expect(new HttpTransport().cancelTraining(2)).rejects.toEqual(new ApiError('training_tuning', 'the tune cannot be stopped', 409));
  });

  it('reads the data lines of server-sent events', () => {
    expect(sseData('data: {"id":1}')).toBe('{"id":1}');
    expect(sseData('data:{"id":1}')).toBe('{"id":1}');
    expect(sseData(':')).toBeNull();
    expect(sseData('event: message')).toBeNull();
  });

  it('follows a job through its events until the stream ends', async () => {
    const text =
      `data: ${JSON.stringify(job(4, 'running', 1))}\n\n:\n\n` +
      `data: ${JSON.stringify(job(4, 'running', 2))}\n\ndata: ${JSON.stringify(job(4, 'cancelled', 2))}\n\n`;
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        // Split mid-line, as the network may.
        for (const part of [text.slice(0, 25), text.slice(25, 90), text.slice(90)]) controller.enqueue(encoder.encode(part));
        controller.close();
      },
    });
    const fetch = vi.fn().mockResolvedValue(new Response(body, { status: 200, headers: { 'Content-Type': 'text/event-stream' } }));
    vi.stubGlobal('fetch', fetch);
    const seen: string[] = [];
    const watch = new HttpTransport('http://h').watchTraining(4, (j) => seen.push(`${j.status} ${j.figures.answered}`));
    await watch.done;
    expect(seen).toEqual(['running 1', 'running 2', 'cancelled 2']);
    expect(fetch.mock.calls[0][0]).toBe('http://h/api/training/4/events');
  });

  it('stops following on stop(), the job going on', async () => {
    let push: (text: string) => void = () => {};
    const fetch = vi.fn(async (_url: string, init: RequestInit) => {
      const body = new ReadableStream<Uint8Array>({
        start(controller) {
          push = (text) => controller.enqueue(encoder.encode(text));
          init.signal?.addEventListener('abort', () => controller.error(new DOMException('aborted', 'AbortError')));
        },
      });
      return new Response(body, { status: 200 });
    });
    vi.stubGlobal('fetch', fetch);
    const seen: number[] = [];
    const watch = new HttpTransport().watchTraining(5, (j) => seen.push(j.figures.answered));
    await vi.waitFor(() => expect(fetch).toHaveBeenCalled());
    push(`data: ${JSON.stringify(job(5, 'running', 1))}\n\n`);
    await vi.waitFor(() => expect(seen).toEqual([1]));
    watch.stop();
    await expect(watch.done).resolves.toBeUndefined();
    expect(seen).toEqual([1]);
  });

  it('rejects a watch of a job that is not there', async () => {
    vi.stubGlobal('fetch', vi.fn(async () => json(404, { error: { code: 'not_found', message: 'training job 9 not found' } })));
    await expect(new HttpTransport().watchTraining(9, () => {}).done).rejects.toEqual(
      new ApiError('not_found', 'training job 9 not found', 404),
    );
  });
});

describe('errors in the app', () => {
  it('speak of what the app offers, not of command-line flags', async () => {
    const heads = await errorFrom(json(409, { error: { code: 'no_medusa_heads', message: 'pass a heads file (--heads PATH)' } }));
    expect(heads.message).toBe(
      'Medusa mode needs heads for this model: open it with a heads file in Settings, or use normal, lookup or auto mode.',
    );
    const long = await errorFrom(
      json(400, {
        error: {
          code: 'prompt_too_long',
          message: 'the prompt has 5000 tokens but the context holds at most 4000 prompt tokens; shorten it or raise --ctx-size',
        },
      }),
    );
    expect(long.message).toBe(
      'the prompt has 5000 tokens but the context holds at most 4000 prompt tokens: start a new chat, shorten the message, or raise the context size in Settings.',
    );
    expect(long.message).not.toContain('--');
    const context = await errorFrom(
      json(500, {
        error: {
          code: 'context_failed',
          message:
            'could not create a llama.cpp context: out of memory (context of 1048576 tokens for each of 4 requests); try a smaller --ctx-size or --parallel',
        },
      }),
    );
    expect(context.message).toBe(
      'could not create a llama.cpp context: out of memory (context of 1048576 tokens for each of 4 requests); try a smaller context size in Settings.',
    );
    const other = await errorFrom(json(400, { error: { code: 'empty_prompt', message: 'the prompt is empty' } }));
    expect(other.message).toBe('the prompt is empty');
  });
});

describe('attachmentName', () => {
  it('reads the file name of a download', () => {
    expect(attachmentName('attachment; filename="medusa-runs-1.csv"')).toBe('medusa-runs-1.csv');
    expect(attachmentName(null)).toBeNull();
  });
});
