import { describe, expect, it } from 'vitest';
import { formatSpeedup, verdicts } from './compare';

describe('verdicts', () => {
  it('measures each run against the first', () => {
    expect(
      verdicts([
        { mode: 'normal', text: 'abc', tokensPerSecond: 100 },
        { mode: 'medusa', text: 'abc', tokensPerSecond: 150 },
        { mode: 'lookup', text: 'abd', tokensPerSecond: 80 },
      ]),
    ).toEqual([
      { mode: 'normal', speedup: null, identical: null, firstDifference: null },
      { mode: 'medusa', speedup: 1.5, identical: true, firstDifference: null },
      { mode: 'lookup', speedup: 0.8, identical: false, firstDifference: 2 },
    ]);
  });

  it('formats speed-ups', () => {
    expect(formatSpeedup(1.234)).toBe('1.23×');
    expect(formatSpeedup(null)).toBe('–');
  });
});
