import { describe, expect, it } from 'vitest';
import { baselineDifference, comparedModes, formatSpeedup, verdicts } from './compare';

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

  it('marks the baseline where the first run departs from it', () => {
    const results = verdicts([
      { mode: 'normal', text: 'abcdef', tokensPerSecond: 10 },
      { mode: 'medusa', text: 'abcdeX', tokensPerSecond: 10 },
      { mode: 'lookup', text: 'abX', tokensPerSecond: 10 },
    ]);
    expect(baselineDifference(results)).toBe(2);
    expect(
      baselineDifference(
        verdicts([
          { mode: 'normal', text: 'a', tokensPerSecond: 1 },
          { mode: 'lookup', text: 'a', tokensPerSecond: 2 },
        ]),
      ),
    ).toBeNull();
  });

  it('runs normal first, then the chosen modes the backend offers', () => {
    expect(comparedModes({ medusa: true, lookup: true }, ['normal', 'medusa', 'lookup'])).toEqual([
      'normal',
      'medusa',
      'lookup',
    ]);
    expect(comparedModes({ medusa: true, lookup: true }, ['normal', 'lookup'])).toEqual(['normal', 'lookup']);
    expect(comparedModes({ medusa: false, lookup: true }, ['normal', 'medusa', 'lookup'])).toEqual(['normal', 'lookup']);
  });
});
