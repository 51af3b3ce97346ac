import { describe, expect, it } from 'vitest';
import { applyEvent, emptyRun, firstDifference, headOf, isDone, meanDrafted } from './run';

describe('applyEvent', () => {
  it('merges consecutive text from one source and tags drafted tokens', () => {
    const run = emptyRun();
    applyEvent(run, { type: 'started', run_id: 7, prompt_tokens: 5 }, 1000);
    applyEvent(run, { type: 'text', text: 'The', token_ids: [1], sources: ['model'] });
    applyEvent(run, { type: 'text', text: ' cat', token_ids: [2], sources: ['model'] });
    applyEvent(run, {
      type: 'text',
      text: ' sat on',
      token_ids: [3, 4],
      sources: ['medusa_head_1', 'medusa_head_2'],
    });
    expect(run.runId).toBe(7);
    expect(run.text).toBe('The cat sat on');
    expect(run.tokens).toBe(4);
    expect(run.segments).toEqual([
      { text: 'The cat', source: 'model', token: 0 },
      { text: ' sat on', source: 'medusa_head_1', token: 2 },
    ]);
    expect(isDone(run)).toBe(false);
  });

  it('counts each piece of a remote engine’s text, which has no token ids, as one token', () => {
    const run = emptyRun();
    applyEvent(run, { type: 'text', text: 'Hello', token_ids: [], sources: [] });
    applyEvent(run, { type: 'text', text: '', token_ids: [], sources: [] });
    applyEvent(run, { type: 'text', text: ' there', token_ids: [], sources: [] });
    expect(run.tokens).toBe(2);
    expect(run.text).toBe('Hello there');
    expect(run.segments).toEqual([{ text: 'Hello there', source: 'model', token: 0 }]);
  });

  it('records a failure as the end of the run', () => {
    const run = emptyRun();
    applyEvent(run, { type: 'failed', run_id: 3, code: 'queue_full', message: 'full' }, 5);
    expect(run.error).toEqual({ code: 'queue_full', message: 'full' });
    expect(run.endedAt).toBe(5);
    expect(isDone(run)).toBe(true);
  });
});

describe('meanDrafted', () => {
  it('averages the tree sizes of the steps', () => {
    expect(meanDrafted([])).toBe(0);
    expect(meanDrafted([{ tree_size: 63 }, { tree_size: 0 }, { tree_size: 30 }])).toBe(31);
  });
});

describe('helpers', () => {
  it('finds the first differing character', () => {
    expect(firstDifference('abc', 'abc')).toBeNull();
    expect(firstDifference('abc', 'abd')).toBe(2);
    expect(firstDifference('ab', 'abc')).toBe(2);
  });

  it('reads the head number of a source', () => {
    expect(headOf('medusa_head_3')).toBe(3);
    expect(headOf('model')).toBeNull();
    expect(headOf('lookup')).toBeNull();
  });
});
