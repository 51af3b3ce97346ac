import { beforeEach, describe, expect, it, vi } from 'vitest';

const { invoke, FakeChannel } = vi.hoisted(() => ({
  invoke: vi.fn(),
  FakeChannel: class<T> {
    onmessage: (message: T) => void = () => {};
  },
}));
vi.mock('@tauri-apps/api/core', () => ({ invoke, Channel: FakeChannel }));
const { dragDrop, unlisten } = vi.hoisted(() => ({
  dragDrop: { handler: null as null | ((event: { payload: unknown }) => void) },
  unlisten: vi.fn(),
}));
vi.mock('@tauri-apps/api/webview', () => ({
  getCurrentWebview: () => ({
    onDragDropEvent: async (handler: (event: { payload: unknown }) => void) => {
      dragDrop.handler = handler;
      return unlisten;
    },
  }),
}));

const { TauriTransport, toApiError } = await import('./tauri');
const { ApiError, Run } = await import('./transport');

beforeEach(() => {
  invoke.mockReset();
});

describe('TauriTransport file drops', () => {
  it('hands the dropped paths on, ignores the drag moving, and stops listening', async () => {
    const dropped: string[][] = [];
    const stop = new TauriTransport().onFileDrop((paths) => dropped.push(paths));
    await Promise.resolve();
    dragDrop.handler?.({ payload: { type: 'over', position: { x: 1, y: 1 } } });
    dragDrop.handler?.({ payload: { type: 'drop', paths: ['/m/a.gguf'], position: { x: 1, y: 1 } } });
    expect(dropped).toEqual([['/m/a.gguf']]);
    await Promise.resolve();
    stop();
    expect(unlisten).toHaveBeenCalledOnce();
  });
});

describe('TauriTransport downloads', () => {
  it('passes each event on and resolves once the last one came', async () => {
    const events: string[] = [];
    invoke.mockImplementation(async (_command: string, args: { onEvent: InstanceType<typeof FakeChannel<{ type: string }>> }) => {
      args.onEvent.onmessage({ type: 'progress' });
      // The last event arrives after the command resolved.
      setTimeout(() => args.onEvent.onmessage({ type: 'done' }), 10);
    });
    await new TauriTransport().downloadModel({ repo: 'a/b', file: 'x.gguf' }, (e) => events.push(e.type));
    expect(events).toEqual(['progress', 'done']);
    expect(invoke.mock.calls[0][0]).toBe('download_model');
    expect(invoke.mock.calls[0][1].request).toEqual({ repo: 'a/b', file: 'x.gguf' });
  });
});

describe('TauriTransport training', () => {
  type Job = { id: number; status: string };
  type JobChannel = InstanceType<typeof FakeChannel<Job>>;

  it('calls the training commands with their arguments', async () => {
    invoke.mockResolvedValue({ id: 3, status: 'running' });
    const t = new TauriTransport();
    await t.startTraining({ model: '/m/a.gguf', samples: 12 });
    invoke.mockResolvedValueOnce([]);
    expect(await t.listTrainingJobs()).toEqual([]);
    await t.getTrainingJob(3);
    invoke.mockResolvedValueOnce(null);
    expect(await t.cancelTraining(3)).toBeUndefined();
    await t.resumeTraining(3);
    invoke.mockResolvedValueOnce({ id: 2, freed_bytes: 10 });
    expect(await t.deleteTrainingJob(2)).toEqual({ id: 2, freed_bytes: 10 });
    invoke.mockResolvedValueOnce({ model: '/m/a.gguf', heads_path: '/m/a-2.medusa.gguf' });
    expect((await t.plannedHeads('/m/a.gguf')).heads_path).toBe('/m/a-2.medusa.gguf');
    expect(invoke.mock.calls).toEqual([
      ['start_training', { request: { model: '/m/a.gguf', samples: 12 } }],
      ['list_training_jobs', undefined],
      ['get_training_job', { id: 3 }],
      ['cancel_training', { id: 3 }],
      ['resume_training', { id: 3 }],
      ['delete_training_job', { id: 2 }],
      ['planned_heads', { model: '/m/a.gguf' }],
    ]);
  });

  it('turns a refused start into an ApiError', async () => {
    invoke.mockRejectedValue({ code: 'training_in_progress', message: 'training job 2 is running' });
    await expect(new TauriTransport().startTraining({ model: '/m.gguf' })).rejects.toEqual(
      new ApiError('training_in_progress', 'training job 2 is running'),
    );
  });

  it('follows a job through its channel and resolves once its last update came', async () => {
    invoke.mockImplementation(async (_command: string, args: { onEvent: JobChannel }) => {
      args.onEvent.onmessage({ id: 4, status: 'running' });
      // The last update arrives after the command resolved.
      setTimeout(() => args.onEvent.onmessage({ id: 4, status: 'finished' }), 10);
    });
    const seen: string[] = [];
    await new TauriTransport().watchTraining(4, (job) => seen.push(job.status)).done;
    expect(seen).toEqual(['running', 'finished']);
    expect(invoke.mock.calls[0][0]).toBe('watch_training');
    expect(invoke.mock.calls[0][1].id).toBe(4);
  });

  it('stops listening on stop() while the command goes on', async () => {
    let channel: JobChannel | undefined;
    invoke.mockImplementation((_command: string, args: { onEvent: JobChannel }) => {
      channel = args.onEvent;
      return new Promise(() => {});
    });
    const seen: string[] = [];
    const watch = new TauriTransport().watchTraining(5, (job) => seen.push(job.status));
    channel!.onmessage({ id: 5, status: 'running' });
    watch.stop();
    await expect(watch.done).resolves.toBeUndefined();
    channel!.onmessage({ id: 5, status: 'finished' });
    expect(seen).toEqual(['running']);
  });

  it('rejects a watch the backend refuses', async () => {
    invoke.mockRejectedValue({ code: 'not_found', message: 'training job 9 not found' });
    await expect(new TauriTransport().watchTraining(9, () => {}).done).rejects.toEqual(
      new ApiError('not_found', 'training job 9 not found'),
    );
  });
});

describe('TauriTransport', () => {
  it('calls the commands with camelCase arguments', async () => {
    invoke.mockResolvedValue([]);
    const t = new TauriTransport();
    await t.listRuns({ mode: 'normal' });
    await t.createComparison([1, 2]);
    await t.getRun(5);
    await t.loadModel({ model: '/m.gguf', ctx_size: 4096 });
    await t.setTree({ tree: [[0], [1]] });
    expect(invoke.mock.calls).toEqual([
      ['list_runs', { query: { mode: 'normal' } }],
      ['create_comparison', { runIds: [1, 2] }],
      ['get_run', { id: 5 }],
      ['load_model', { request: { model: '/m.gguf', ctx_size: 4096 } }],
      ['set_tree', { request: { tree: [[0], [1]] } }],
    ]);
  });

  it('answers lists in the HTTP API\'s shapes', async () => {
    invoke.mockResolvedValueOnce({ runs: [{ id: 3 }] }).mockResolvedValueOnce({ comparisons: [{ id: 4 }] });
    const t = new TauriTransport();
    expect(await t.listRuns()).toEqual([{ id: 3 }]);
    expect(await t.listComparisons(5)).toEqual([{ id: 4 }]);
    expect(invoke.mock.calls[1]).toEqual(['list_comparisons', { limit: 5 }]);
  });

  it('streams events from the channel and resolves after the last', async () => {
    let channel: InstanceType<typeof FakeChannel<unknown>> | undefined;
    invoke.mockImplementation(async (_cmd: string, args: { onEvent: typeof channel }) => {
      channel = args.onEvent;
      return 9;
    });
    const seen: string[] = [];
    const run = new TauriTransport().generate({ prompt: 'x' }, (e) => seen.push(e.type));
    expect(run).toBeInstanceOf(Run);
    await new Promise((r) => setTimeout(r, 0));
    channel!.onmessage({ type: 'started', run_id: 9, prompt_tokens: 1 });
    channel!.onmessage({ type: 'text', text: 'a', token_ids: [1], sources: ['model'] });
    channel!.onmessage({ type: 'finished', run_id: 9 });
    await run.done;
    expect(seen).toEqual(['started', 'text', 'finished']);
  });

  it('sends a generation once the one asked for before it has started, and none cancelled before its turn', async () => {
    const accept: ((id: number) => void)[] = [];
    invoke.mockImplementation((cmd: string) =>
      cmd === 'generate' ? new Promise<number>((resolve) => accept.push(resolve)) : Promise.resolve(null),
    );
    const t = new TauriTransport();
    t.generate({ prompt: 'a' }, () => {});
    t.generate({ prompt: 'b' }, () => {});
    const third = t.generate({ prompt: 'c' }, () => {});
    await new Promise((r) => setTimeout(r, 0));
    expect(invoke.mock.calls.map((c) => c[1].request.prompt)).toEqual(['a']);
    third.cancel();
    accept[0](1);
    await new Promise((r) => setTimeout(r, 0));
    expect(invoke.mock.calls.map((c) => c[1].request.prompt)).toEqual(['a', 'b']);
    accept[1](2);
    // The third was stopped before its turn: never sent, and done at once.
    await third.done;
    expect(invoke.mock.calls.filter((c) => c[0] === 'generate')).toHaveLength(2);
  });

  it('cancels through cancel_run with the run id', async () => {
    invoke.mockResolvedValueOnce(12).mockResolvedValue(null);
    const run = new TauriTransport().generate({ prompt: 'x' }, () => {});
    await new Promise((r) => setTimeout(r, 0));
    run.cancel();
    expect(invoke).toHaveBeenLastCalledWith('cancel_run', { runId: 12 });
  });

  it('deletes runs through delete_runs with camelCase ids', async () => {
    const report = { deleted: 1, comparisons_changed: [], comparisons_removed: [7] };
    invoke.mockResolvedValue(report);
    expect(await new TauriTransport().deleteRuns([5])).toEqual(report);
    expect(invoke).toHaveBeenCalledWith('delete_runs', { runIds: [5] });
  });

  it('imports through the import_runs command', async () => {
    invoke.mockResolvedValue({ imported: 0 });
    expect(await new TauriTransport().importRuns({ runs: [] })).toEqual({ imported: 0 });
    expect(invoke).toHaveBeenCalledWith('import_runs', { document: { runs: [] } });
  });

  it('lists, adds and removes remote engines through their commands', async () => {
    const lab = { name: 'lab', url: 'http://gpu-box:8000', has_key: false, saved: true, models: [], error: null };
    invoke.mockResolvedValueOnce([lab]).mockResolvedValueOnce(lab).mockResolvedValueOnce(null);
    const t = new TauriTransport();
    expect(await t.listRemotes()).toEqual([lab]);
    expect(await t.addRemote({ name: 'lab', url: 'http://gpu-box:8000' })).toEqual(lab);
    expect(await t.removeRemote('lab')).toBeUndefined();
    expect(invoke.mock.calls).toEqual([
      ['list_remotes', undefined],
      ['add_remote', { request: { name: 'lab', url: 'http://gpu-box:8000' } }],
      ['remove_remote', { name: 'lab' }],
    ]);
  });

  it('turns a refused remote engine into an ApiError', async () => {
    invoke.mockRejectedValue({ code: 'invalid_remote', message: 'only http:// addresses' });
    await expect(new TauriTransport().addRemote({ name: 'lab', url: 'https://h' })).rejects.toEqual(
      new ApiError('invalid_remote', 'only http:// addresses'),
    );
  });

  it('watches the status by asking for it on a timer, until stopped', async () => {
    vi.useFakeTimers();
    try {
      let n = 0;
      invoke.mockImplementation(async () => ({ metrics: { active: ++n } }));
      const seen: number[] = [];
      const stop = new TauriTransport().watchStatus(500, (info) => seen.push(info.metrics!.active));
      await vi.advanceTimersByTimeAsync(0);
      expect(seen).toEqual([1]);
      await vi.advanceTimersByTimeAsync(1000);
      expect(seen).toEqual([1, 2, 3]);
      stop();
      await vi.advanceTimersByTimeAsync(2000);
      expect(seen).toEqual([1, 2, 3]);
      expect(invoke.mock.calls).toEqual([['info', undefined], ['info', undefined], ['info', undefined]]);
    } finally {
      vi.useRealTimers();
    }
  });

  it('ends a status watch that cannot read the status', async () => {
    vi.useFakeTimers();
    try {
      invoke.mockRejectedValue('the backend is gone');
      const ended: unknown[] = [];
      new TauriTransport().watchStatus(500, () => {}, (err) => ended.push(err));
      await vi.advanceTimersByTimeAsync(2000);
      expect(ended).toEqual([new ApiError('desktop', 'the backend is gone')]);
      expect(invoke).toHaveBeenCalledTimes(1);
    } finally {
      vi.useRealTimers();
    }
  });

  it('turns rejections into ApiError', async () => {
    invoke.mockRejectedValue({ code: 'empty_prompt', message: 'the prompt is empty' });
    await expect(new TauriTransport().info()).rejects.toEqual(
      new ApiError('empty_prompt', 'the prompt is empty'),
    );
    expect(toApiError('boom')).toEqual(new ApiError('desktop', 'boom'));
  });
});
