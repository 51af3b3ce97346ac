import { describe, expect, it } from 'vitest';
import type { RunRecord } from './api/types';
import { buildQuery, compareSelected, promptText } from './history';

describe('history', () => {
  it('shows a chat by its last user message', () => {
    expect(promptText({ kind: 'text', content: 'Once' })).toBe('Once');
    expect(
      promptText({
        kind: 'chat',
        content: [
          { role: 'user', content: 'a' },
          { role: 'assistant', content: 'b' },
          { role: 'user', content: 'c' },
          { role: 'assistant', content: 'd' },
        ],
      }),
    ).toBe('c');
  });

  it('builds the query of a page from the filters', () => {
    const q = buildQuery({ mode: 'medusa', status: '', model: ' smol ', since: '', until: '' }, 'tokens_per_second', 'desc', 2);
    expect(q).toEqual({ sort: 'tokens_per_second', order: 'desc', limit: 50, offset: 100, mode: 'medusa', model: 'smol' });
    const dated = buildQuery({ mode: '', status: 'finished', model: '', since: '2026-01-02', until: '2026-01-03' }, 'created_at', 'asc', 0);
    expect(new Date(dated.since!).getDate()).toBe(2);
    expect(new Date(dated.until!).getHours()).toBe(23);
  });

  it('compares selected runs with the first normal one', () => {
    const run = (id: number, mode: string, output: string, tps: number) =>
      ({ id, mode, output, tokens_per_second: tps }) as unknown as RunRecord;
    const figures = compareSelected([run(1, 'medusa', 'abc', 30), run(2, 'normal', 'abc', 20), run(3, 'lookup', 'abX', 10)]);
    expect(figures.map((f) => [f.run.id, f.speedup, f.identical, f.firstDifference])).toEqual([
      [1, 1.5, true, null],
      [2, null, null, null],
      [3, 0.5, false, 2],
    ]);
  });
});
