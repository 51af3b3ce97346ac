import { describe, expect, it } from 'vitest';
import { aggregateTokensPerSecond, laneStatus, promptLines } from './lanes';
import { applyEvent, emptyRun } from './run';
import type { FinishedEvent } from './api/types';

const finished = (stop_reason: string) => ({ type: 'finished', run_id: 1, stop_reason }) as FinishedEvent;

describe('lanes', () => {
  it('follows a run from queued to its end', () => {
    const run = emptyRun();
    expect(laneStatus(run)).toBe('queued');
    applyEvent(run, { type: 'started', run_id: 1, prompt_tokens: 2 });
    expect(laneStatus(run)).toBe('running');
    applyEvent(run, finished('cancelled'));
    expect(laneStatus(run)).toBe('cancelled');
    expect(laneStatus(applyEvent(emptyRun(), finished('max_tokens')))).toBe('finished');
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
  });

  it('takes one prompt per non-empty line', () => {
    expect(promptLines(' a \n\n b\n')).toEqual(['a', 'b']);
  });
});
