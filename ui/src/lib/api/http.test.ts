import { afterEach, describe, expect, it, vi } from 'vitest';
import { attachmentName, errorFrom, HttpTransport, queryString } from './http';
import { ApiError } from './transport';
import type { RunEvent } from './types';

function sseResponse(chunks: string[]): Response {
  const encoder = new TextEncoder();
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      for (const c of chunks) controller.enqueue(encoder.encode(c));
      controller.close();
    },
  });
  return new Response(body, { status: 200, headers: { 'Content-Type': 'text/event-stream' } });
}

function json(status: number, body: unknown): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { 'Content-Type': 'application/json' },
  });
}

afterEach(() => vi.unstubAllGlobals());

describe('HttpTransport', () => {
  it('streams generation events in order', async () => {
    const fetch = vi.fn().mockResolvedValue(
      sseResponse([
        'data: {"type":"started","run_id":4,"prompt_tokens":3}\n\ndata: {"type":"te',
        'xt","text":"Hi","token_ids":[1],"sources":["model"]}\n\n',
        'data: {"type":"finished","run_id":4}\n\n',
      ]),
    );
    vi.stubGlobal('fetch', fetch);
    const events: RunEvent[] = [];
    await new HttpTransport('http://h').generate({ prompt: 'x', mode: 'lookup' }, (e) => events.push(e)).done;
    expect(events.map((e) => e.type)).toEqual(['started', 'text', 'finished']);
    expect(fetch).toHaveBeenCalledWith(
      'http://h/api/generate',
      expect.objectContaining({ method: 'POST', body: '{"prompt":"x","mode":"lookup"}' }),
    );
  });

  it('maps error bodies to ApiError with code and status', async () => {
    vi.stubGlobal(
      'fetch',
      vi.fn(async () => json(503, { error: { code: 'queue_full', message: 'full' } })),
    );
    const run = new HttpTransport().generate({ prompt: 'x' }, () => {});
    await expect(run.done).rejects.toEqual(new ApiError('queue_full', 'full', 503));
    await expect(new HttpTransport().info()).rejects.toMatchObject({ code: 'queue_full', status: 503 });
  });

  it('reports an unreachable server as a network error', async () => {
    vi.stubGlobal('fetch', vi.fn().mockRejectedValue(new TypeError('Failed to fetch')));
    await expect(new HttpTransport().listRuns()).rejects.toMatchObject({ code: 'network' });
  });

  it('cancels a started run by id and still delivers its last events', async () => {
    let release: () => void = () => {};
    const fetch = vi.fn(async (url: string) => {
      if (url.endsWith('/cancel')) {
        release();
        return new Response(null, { status: 204 });
      }
      const encoder = new TextEncoder();
      const body = new ReadableStream<Uint8Array>({
        start(controller) {
          controller.enqueue(encoder.encode('data: {"type":"started","run_id":5,"prompt_tokens":1}\n\n'));
          release = () => {
            controller.enqueue(encoder.encode('data: {"type":"finished","run_id":5,"stop_reason":"cancelled"}\n\n'));
            controller.close();
          };
        },
      });
      return new Response(body, { status: 200 });
    });
    vi.stubGlobal('fetch', fetch);
    const events: RunEvent[] = [];
    const run = new HttpTransport().generate({ prompt: 'x' }, (e) => {
      events.push(e);
      if (e.type === 'started') run.cancel();
    });
    await run.done;
    expect(fetch.mock.calls[1][0]).toBe('/api/runs/5/cancel');
    expect(events.map((e) => e.type)).toEqual(['started', 'finished']);
  });

  it('cancels a run that has not started by aborting the request', async () => {
    let signal: AbortSignal | undefined;
    vi.stubGlobal(
      'fetch',
      vi.fn((_url: string, init: RequestInit) => {
        signal = init.signal ?? undefined;
        return new Promise((_, reject) =>
          signal!.addEventListener('abort', () => reject(new DOMException('aborted', 'AbortError'))),
        );
      }),
    );
    const run = new HttpTransport().generate({ prompt: 'x' }, () => {});
    run.cancel();
    await expect(run.done).resolves.toBeUndefined();
    expect(signal?.aborted).toBe(true);
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

  it('posts comparisons and model loads', async () => {
    const fetch = vi.fn().mockResolvedValue(json(201, { id: 1 }));
    vi.stubGlobal('fetch', fetch);
    await new HttpTransport().createComparison([3, 4]);
    expect(fetch.mock.calls[0][1].body).toBe('{"run_ids":[3,4]}');
    fetch.mockResolvedValue(json(202, {}));
    await new HttpTransport().loadModel({ model: '/m.gguf', heads: null });
    expect(fetch.mock.calls[1][0]).toBe('/api/model');
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

describe('errors in the app', () => {
  it('speak of what the app offers, not of command-line flags', async () => {
    const heads = await errorFrom(json(409, { error: { code: 'no_medusa_heads', message: 'pass a heads file (--heads PATH)' } }));
    expect(heads.message).toBe(
      'Medusa mode needs heads for this model: open it with a heads file in Settings, or use normal or lookup mode.',
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
      'the prompt has 5000 tokens but the context holds at most 4000 prompt tokens: start a new chat or shorten the message (the context size is set when the server or app starts).',
    );
    expect(long.message).not.toContain('--');
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
