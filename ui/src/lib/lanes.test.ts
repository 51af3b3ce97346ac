import { describe, expect, it } from 'vitest';
import {
  aggregateTokensPerSecond,
  CANCELLED_BEFORE_START,
  laneActive,
  laneCounts,
  laneStatus,
  PRESET_PROMPTS,
  PRESETS,
  promptLines,
  slotCells,
} from './lanes';
import { applyEvent, emptyRun } from './run';
import type { RunEvent } from './api/types';

const finished = (stop_reason: string) => ({ type: 'finished', run_id: 1, stop_reason }) as unknown as RunEvent;

describe('lanes', () => {
  it('follows a run from queued to its end', () => {
    const run = emptyRun();
    expect(laneStatus(run)).toBe('queued');
    applyEvent(run, { type: 'started', run_id: 1, prompt_tokens: 2 });
    expect(laneStatus(run)).toBe('running');
    applyEvent(run, finished('cancelled'));
    expect(laneStatus(run)).toBe('cancelled');
    expect(laneStatus(applyEvent(emptyRun(), finished('max_tokens')))).toBe('finished');
    expect(laneStatus(applyEvent(emptyRun(), { type: 'failed', run_id: 2, code: 'queue_full', message: '' }))).toBe(
      'failed',
    );
  });

  it('counts a lane stopped in the queue as cancelled, not failed', () => {
    const run = emptyRun();
    run.error = { code: CANCELLED_BEFORE_START, message: 'stopped before it started' };
    expect(laneStatus(run)).toBe('cancelled');
    expect(laneActive('cancelled')).toBe(false);
    expect(laneActive('queued')).toBe(true);
    expect(laneActive('running')).toBe(true);
  });

  it('sums tokens over wall time, stopping the clock when all are done', () => {
    const a = emptyRun();
    const b = emptyRun();
    applyEvent(a, { type: 'text', text: 'x', token_ids: [1, 2, 3], sources: ['model', 'model', 'model'] });
    applyEvent(b, { type: 'text', text: 'y', token_ids: [4], sources: ['model'] });
    expect(aggregateTokensPerSecond([a, b], 0, 2000)).toBe(2);
    applyEvent(a, finished('max_tokens'), 1000);
    applyEvent(b, finished('max_tokens'), 500);
    expect(aggregateTokensPerSecond([a, b], 0, 9000)).toBe(4);
    expect(aggregateTokensPerSecond([], 0, 9000)).toBe(0);
  });

  it('counts lanes per status', () => {
    const running = applyEvent(emptyRun(), { type: 'started', run_id: 1, prompt_tokens: 2 });
    expect(laneCounts([emptyRun(), emptyRun(), running, applyEvent(emptyRun(), finished('eos'))])).toEqual({
      queued: 2,
      running: 1,
      finished: 1,
      failed: 0,
      cancelled: 0,
    });
  });

  it('draws one cell per slot', () => {
    expect(slotCells({ slots: 4, active: 3 })).toEqual([true, true, true, false]);
    expect(slotCells({ slots: 2, active: 5 })).toEqual([true, true]);
  });

  it('takes one prompt per non-empty line', () => {
    expect(promptLines(' a \n\n b\n')).toEqual(['a', 'b']);
  });

  it('offers up to 16 distinct one-line presets', () => {
    expect(PRESETS.map((p) => p.count)).toEqual([3, 4, 8, 16]);
    expect(PRESETS.at(-1)!.label).toBe('All 16: the queue at work');
    expect(new Set(PRESET_PROMPTS).size).toBe(16);
    expect(promptLines(PRESET_PROMPTS.join('\n'))).toEqual(PRESET_PROMPTS);
  });
});
