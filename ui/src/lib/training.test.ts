import { describe, expect, it } from 'vitest';
import type { Info, ModelsOnDisk, TrainingFigures, TrainingJob, TrainingReport } from './api/types';
import {
  canCancel,
  canResume,
  defaultJob,
  deletedText,
  deleteQuestion,
  durationText,
  headAccuracy,
  headCount,
  headsText,
  jobNameParts,
  latestRun,
  lossColumns,
  modelChoices,
  phaseName,
  phaseShare,
  phaseTimes,
  progressText,
  settingsText,
  statusText,
  timeLeftText,
  top1Columns,
  trainingRequest,
  treeColumns,
  tuneText,
  withJob,
} from './training';

function figures(over: Partial<TrainingFigures> = {}): TrainingFigures {
  return {
    answered: 0,
    prompts: 40,
    answer_tokens: 0,
    epoch: 0,
    epochs: 3,
    step: 0,
    steps: 0,
    tuned: 0,
    tune_prompts: 8,
    seconds_left: null,
    phase_seconds: [],
    losses: [],
    evaluations: [],
    ...over,
  };
}

function job(id: number, over: Partial<TrainingJob> = {}): TrainingJob {
  return {
    id,
    uid: `u${id}`,
    created_at: '2026-01-02T03:04:05Z',
    updated_at: '2026-01-02T03:04:05Z',
    status: 'running',
    phase: 'collecting',
    name: 'm.medusa.gguf',
    model_name: 'm',
    model_path: '/models/m.gguf',
    settings: {
      prompts_file: null,
      samples: 40,
      max_tokens: 192,
      epochs: 3,
      heads: 4,
      vocab_subset: null,
      path_input: true,
      heldout_every: 10,
      evaluations_per_epoch: 4,
      tune_prompts: 8,
      tune_max_tokens: 128,
    },
    data_path: null,
    heads_path: null,
    figures: figures(),
    report: null,
    error: null,
    ...over,
  };
}

describe('job state in words', () => {
  it('names phases, unknown ones readably', () => {
    expect(phaseName('loading_model')).toBe('Loading the model');
    expect(phaseName('collecting')).toBe('Collecting answers');
    expect(phaseName('new_phase')).toBe('New phase');
  });

  it('says the status with the phase it is in or stopped in', () => {
    expect(statusText({ status: 'running', phase: 'collecting' })).toBe('Running: collecting answers');
    expect(statusText({ status: 'cancelled', phase: 'training' })).toBe('Cancelled while training');
    expect(statusText({ status: 'failed', phase: 'writing' })).toBe('Failed while writing the heads');
    expect(statusText({ status: 'interrupted', phase: 'loading_model' })).toBe(
      'Interrupted while loading the model (the server stopped)',
    );
    expect(statusText({ status: 'finished', phase: 'done' })).toBe('Finished');
  });

  it('rounds the time left', () => {
    expect(timeLeftText(null)).toBe('');
    expect(timeLeftText(-1)).toBe('');
    expect(timeLeftText(3.2)).toBe('a few seconds left');
    expect(timeLeftText(42)).toBe('about 40 s left');
    expect(timeLeftText(125)).toBe('about 2 min left');
    expect(timeLeftText(3600)).toBe('about 1 h left');
    expect(timeLeftText(4830)).toBe('about 1 h 21 min left');
  });

  it('writes durations by their size', () => {
    expect(durationText(0.188)).toBe('0.2 s');
    expect(durationText(11.53)).toBe('12 s');
    expect(durationText(162.9)).toBe('2 min 43 s');
    expect(durationText(120)).toBe('2 min');
    expect(durationText(3780)).toBe('1 h 3 min');
    expect(phaseTimes([{ phase: 'starting', seconds: 0.19 }, { phase: 'tuning', seconds: 61 }])).toEqual([
      { phase: 'Starting', text: '0.2 s' },
      { phase: 'Tuning', text: '1 min 1 s' },
    ]);
  });

  it('counts the phase under way, with the time left', () => {
    const collecting = job(1, { figures: figures({ answered: 12, answer_tokens: 1234, seconds_left: 130 }) });
    expect(progressText(collecting)).toBe('Collecting answers: 12 of 40 (1,234 tokens) · about 2 min left');
    const training = job(1, { phase: 'training', figures: figures({ epoch: 1, step: 40, steps: 120 }) });
    expect(progressText(training)).toBe('Training: epoch 1 of 3, step 40 of 120');
    const tuning = job(1, { phase: 'tuning', figures: figures({ tuned: 2, seconds_left: 5 }) });
    expect(progressText(tuning)).toBe('Tuning: 2 of 8 prompts · a few seconds left');
    expect(progressText(job(1, { phase: 'loading_model' }))).toBe('Loading the model');
  });

  it('says where a stopped job got to, without a time left', () => {
    const cancelled = job(1, { status: 'cancelled', figures: figures({ answered: 10, answer_tokens: 524, seconds_left: 30 }) });
    expect(progressText(cancelled)).toBe('Answers collected: 10 of 40 (524 tokens)');
    const resumedLoad = job(1, { phase: 'loading_model', status: 'cancelled', figures: figures({ answered: 10, answer_tokens: 524 }) });
    expect(progressText(resumedLoad)).toBe('Loading the model; answers collected: 10 of 40 (524 tokens)');
    const trained = job(1, { status: 'failed', phase: 'training', figures: figures({ epoch: 2, step: 7, steps: 9 }) });
    expect(progressText(trained)).toBe('Trained: epoch 2 of 3, step 7 of 9');
  });

  it('sums up a finished job', () => {
    const done = job(1, {
      status: 'finished',
      phase: 'done',
      figures: figures({ answered: 12, prompts: 12, answer_tokens: 183, epochs: 2, step: 2, steps: 2, tuned: 2, tune_prompts: 2 }),
    });
    expect(progressText(done)).toBe('Done: 12 answers (183 tokens), 2 epochs, 2 steps, 2 of 2 prompts tuned on');
  });

  it('says what a job runs with', () => {
    expect(settingsText(job(1).settings)).toBe('40 prompts, 192 tokens each; 4 heads, 3 epochs; tuned on 8 prompts');
    expect(
      settingsText({ ...job(1).settings, prompts_file: '/p.txt', samples: 1200, vocab_subset: 4096, epochs: 1, tune_prompts: 1 }),
    ).toBe('1,200 prompts from /p.txt, 192 tokens each; 4 heads, 4,096 frequent tokens, 1 epoch; tuned on 1 prompt');
  });

  it('measures the phase’s share where it is counted', () => {
    expect(phaseShare(job(1, { figures: figures({ answered: 10 }) }))).toBe(0.25);
    expect(phaseShare(job(1, { phase: 'training', figures: figures({ step: 3, steps: 0 }) }))).toBeNull();
    expect(phaseShare(job(1, { phase: 'tuning', figures: figures({ tuned: 2 }) }))).toBe(0.25);
    expect(phaseShare(job(1, { phase: 'writing' }))).toBeNull();
  });

  it('offers cancel while running but not in the final tune, resume once stopped', () => {
    expect(canCancel({ status: 'running', phase: 'collecting' })).toBe(true);
    expect(canCancel({ status: 'running', phase: 'tuning' })).toBe(false);
    expect(canCancel({ status: 'cancelled', phase: 'collecting' })).toBe(false);
    expect(['running', 'cancelled', 'failed', 'interrupted', 'finished'].map((s) => canResume({ status: s as TrainingJob['status'] }))).toEqual([
      false,
      true,
      true,
      true,
      false,
    ]);
  });
});

describe('deleting a job', () => {
  it('asks, naming the heads that stay when the job wrote them', () => {
    const base = { id: 4, name: 'tiny-2.medusa.gguf', status: 'finished' as const, heads_path: '/m/tiny-2.medusa.gguf' };
    expect(deleteQuestion(base)).toBe(
      'Delete training job 4 (tiny-2.medusa.gguf) and the answers it collected? The heads it wrote stay (/m/tiny-2.medusa.gguf).',
    );
    // A job that stopped before writing its heads has none to keep.
    expect(deleteQuestion({ ...base, status: 'cancelled' })).toBe(
      'Delete training job 4 (tiny-2.medusa.gguf) and the answers it collected?',
    );
    expect(deleteQuestion({ ...base, name: 'tiny (job 4)', heads_path: null })).toBe(
      'Delete training job 4 (tiny (job 4)) and the answers it collected?',
    );
  });

  it('says where the heads go before the job writes them, and where they went after', () => {
    expect(headsText({ status: 'running', heads_path: '/m/tiny-2.medusa.gguf' })).toBe(
      'Heads will be written to /m/tiny-2.medusa.gguf',
    );
    expect(headsText({ status: 'cancelled', heads_path: '/m/tiny-2.medusa.gguf' })).toBe(
      'Heads will be written to /m/tiny-2.medusa.gguf',
    );
    expect(headsText({ status: 'finished', heads_path: '/m/tiny-2.medusa.gguf' })).toBe(
      'Heads written to /m/tiny-2.medusa.gguf',
    );
    expect(headsText({ status: 'interrupted', heads_path: null })).toBeNull();
  });

  it('says what was freed', () => {
    expect(deletedText({ id: 4, freed_bytes: 230_000_000 })).toBe('Deleted job 4, freeing 230 MB of collected answers.');
    expect(deletedText({ id: 5, freed_bytes: 0 })).toBe('Deleted job 5.');
  });
});

describe('the job list', () => {
  it('keeps whole the end of a name that tells jobs apart', () => {
    expect(jobNameParts('SmolLM2-135M-Instruct.Q4_1-3.medusa.gguf')).toEqual({
      start: 'SmolLM2-135M-Instruct.Q4_1',
      end: '-3.medusa.gguf',
    });
    expect(jobNameParts('SmolLM2-135M-Instruct.Q4_1.medusa.gguf')).toEqual({
      start: 'SmolLM2-135M-Instruct.Q4_1',
      end: '.medusa.gguf',
    });
    expect(jobNameParts('SmolLM2 (job 12)')).toEqual({ start: 'SmolLM2', end: ' (job 12)' });
    expect(jobNameParts('heads')).toEqual({ start: 'heads', end: '' });
  });

  it('opens on the chosen job, else the running one, else the latest', () => {
    const jobs = [job(3, { status: 'finished' }), job(2), job(1, { status: 'cancelled' })];
    expect(defaultJob(jobs, 1)).toBe(1);
    expect(defaultJob(jobs, 9)).toBe(2);
    expect(defaultJob(jobs, null)).toBe(2);
    expect(defaultJob([job(3, { status: 'finished' }), job(2, { status: 'failed' })], null)).toBe(3);
    expect(defaultJob([], null)).toBeNull();
  });

  it('replaces a job’s snapshot in place, and puts a new one first', () => {
    const jobs = [job(2), job(1)];
    const later = job(2, { phase: 'training' });
    expect(withJob(jobs, later).map((j) => [j.id, j.phase])).toEqual([
      [2, 'training'],
      [1, 'collecting'],
    ]);
    expect(withJob(jobs, job(3)).map((j) => j.id)).toEqual([3, 2, 1]);
  });
});

describe('the models to train for', () => {
  const disk: ModelsOnDisk = {
    download_dir: '/cache',
    folders: [
      {
        path: '/cache',
        models: [
          { file_name: 'a.gguf', path: '/cache/a.gguf', size_bytes: 1, quantization: null, partial: false, heads: false, loaded: false, deletable: true },
          { file_name: 'a.medusa.gguf', path: '/cache/a.medusa.gguf', size_bytes: 1, quantization: null, partial: false, heads: true, loaded: false, deletable: true },
          { file_name: 'b.gguf', path: '/cache/b.gguf', size_bytes: 1, quantization: null, partial: true, heads: false, loaded: false, deletable: true },
          { file_name: 'c.gguf', path: '/cache/c.gguf', size_bytes: 1, quantization: null, partial: false, heads: false, loaded: true, deletable: true },
        ],
      },
      {
        path: '/work',
        models: [{ file_name: 'a.gguf', path: '/work/a.gguf', size_bytes: 1, quantization: null, partial: false, heads: false, loaded: false, deletable: false }],
      },
    ],
  };

  it('lists models that are neither heads nor partial, the loaded one first', () => {
    const info = { model: { path: '/cache/c.gguf' } } as Info;
    expect(modelChoices(disk, info)).toEqual([
      { path: '/cache/c.gguf', label: 'c.gguf, loaded now' },
      { path: '/cache/a.gguf', label: 'a.gguf (/cache)' },
      { path: '/work/a.gguf', label: 'a.gguf (/work)' },
    ]);
  });

  it('offers the loaded model even when no folder holds it', () => {
    const info = { model: { path: '/elsewhere/x.gguf' } } as Info;
    expect(modelChoices(null, info)).toEqual([{ path: '/elsewhere/x.gguf', label: 'x.gguf, loaded now' }]);
    expect(modelChoices(null, null)).toEqual([]);
  });
});

describe('the form', () => {
  it('leaves empty fields out for the backend’s defaults', () => {
    expect(trainingRequest({ model: ' /m.gguf ', prompts: ' ', samples: null, maxTokens: 192, epochs: 3, tunePrompts: '' })).toEqual({
      model: '/m.gguf',
      max_tokens: 192,
      epochs: 3,
    });
  });

  it('passes every field given, numbers as numbers', () => {
    expect(trainingRequest({ model: '/m.gguf', prompts: '/p.txt', samples: 12, maxTokens: '16', epochs: 2, tunePrompts: 2 })).toEqual({
      model: '/m.gguf',
      prompts: '/p.txt',
      samples: 12,
      max_tokens: 16,
      epochs: 2,
      tune_prompts: 2,
    });
  });

  it('sends a count the backend will refuse as typed, for it to name the field', () => {
    expect(trainingRequest({ model: '/m.gguf', prompts: '', samples: 0, maxTokens: null, epochs: -1, tunePrompts: null })).toEqual({
      model: '/m.gguf',
      samples: 0,
      epochs: -1,
    });
  });
});

describe('chart data', () => {
  const losses = [
    { step: 1, loss: 39, head_losses: [11.7, 13.8, null, 14.2] },
    { step: 2, loss: 29, head_losses: [8.4, 10.6, 10.7, 10.8] },
  ];
  const evaluations = [
    { step: 0, epoch: 0, loss: 44, top1: [0, 0], top5: [0.1, 0], tree_tokens_per_step: 1.14 },
    { step: 2, epoch: 1, loss: 35, top1: [0.125, 0.0333333], top5: [0.2, 0.1], tree_tokens_per_step: 1.22 },
  ];

  it('draws the loss of each head, with gaps where a head had no target', () => {
    expect(lossColumns(losses, 4)).toEqual([
      [1, 2],
      [11.7, 8.4],
      [13.8, 10.6],
      [null, 10.7],
      [14.2, 10.8],
    ]);
    expect(lossColumns([], 4)).toEqual([[], [], [], [], []]);
  });

  it('draws top-1 in percent and the tree’s tokens per step from the evaluations', () => {
    expect(top1Columns(evaluations, 3)).toEqual([
      [0, 2],
      [0, 12.5],
      [0, 3.33],
      [null, null],
    ]);
    expect(treeColumns(evaluations)).toEqual([
      [0, 2],
      [1.14, 1.22],
    ]);
  });

  it('draws only the latest attempt of a job trained again', () => {
    const again = [{ step: 1 }, { step: 2 }, { step: 3 }, { step: 1 }, { step: 2 }];
    expect(latestRun(again)).toEqual([{ step: 1 }, { step: 2 }]);
    expect(latestRun([{ step: 0 }, { step: 0 }])).toEqual([{ step: 0 }]);
    expect(latestRun([])).toEqual([]);
  });

  it('counts the heads from the settings and the figures', () => {
    expect(headCount(figures(), 4)).toBe(4);
    expect(headCount(figures({ losses }), 0)).toBe(4);
    expect(headCount(figures({ evaluations }), 0)).toBe(2);
  });
});

describe('the report', () => {
  const report: TrainingReport = {
    heads_path: '/models/m.medusa.gguf',
    file_bytes: 5319616,
    prompts: 12,
    generated_tokens: 183,
    train_positions: 156,
    heldout_positions: 15,
    untrained_top1: [0, 0.01],
    heldout_top1: [0.25, 0.0667],
    heldout_top5: [0.5],
    tree_nodes: 16,
    expected_tokens_per_step: 1.2176,
    tree_tokens_per_step: 1.2184,
    tune: null,
  };

  it('gives each head’s accuracy in percent', () => {
    expect(headAccuracy(report)).toEqual([
      { head: 1, top1: '25.0%', top5: '50.0%', untrained: '0.0%' },
      { head: 2, top1: '6.7%', top5: '–', untrained: '1.0%' },
    ]);
  });

  it('says what the tune measured and decided', () => {
    expect(tuneText(null)).toBe('Not tuned.');
    expect(
      tuneText({
        measured_tokens_per_step: 1.296875,
        chosen_nodes: null,
        chosen_expected_tokens_per_step: null,
        predicted_speedup: null,
        decision: 'plain decoding: no tree is surely faster on this machine',
      }),
    ).toBe('Measured 1.30 tokens per step. Plain decoding: no tree is surely faster on this machine');
    expect(
      tuneText({
        measured_tokens_per_step: null,
        chosen_nodes: 8,
        chosen_expected_tokens_per_step: 1.5,
        predicted_speedup: 1.234,
        decision: 'medusa with 8 nodes',
      }),
    ).toBe('Chose a tree of 8 nodes (1.50 tokens per step expected), 1.23× predicted speed-up. Medusa with 8 nodes');
  });
});
