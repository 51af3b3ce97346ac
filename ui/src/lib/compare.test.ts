import { describe, expect, it } from 'vitest';
import type { Divergence, ModeFigures } from './api/types';
import {
  balancedOrder,
  baselineDifference,
  comparedModes,
  differences,
  divergenceText,
  formatSpeedup,
  formatSpread,
  headlineSpeedup,
  isNoise,
  runOrder,
  sideLabel,
  verdictText,
} from './compare';

const spread = (median: number, min: number, max: number, count = 3) => ({ median, min, max, count });

function figures(over: Partial<ModeFigures>): ModeFigures {
  return {
    mode: 'medusa',
    runs: 3,
    decode_tokens_per_second: spread(100, 95, 105),
    ttft_ms: spread(40, 38, 45),
    mean_accepted: 1.0,
    drafted_tokens: 12,
    drafted_per_step: 2.5,
    speedup: spread(1.01, 0.97, 1.04),
    explainable: { slowest: 0.22, fastest: 1.0 },
    verdict: 'within_noise',
    ...over,
  };
}

describe('compare', () => {
  it('headlines the best speed-up that is not noise', () => {
    const normal = figures({ mode: 'normal', speedup: null, verdict: null });
    const lookup = figures({ mode: 'lookup', speedup: spread(3.82, 3.5, 4), verdict: 'drafted_nothing' });
    const medusa = figures({ mode: 'medusa', speedup: spread(1.3, 1.2, 1.4), verdict: 'faster' });
    expect(headlineSpeedup([normal, lookup, medusa])).toBe(1.3);
    expect(headlineSpeedup([normal, lookup])).toBeNull();
  });

  it('calls overlapping ranges, unexplained gains and plain decoding noise', () => {
    expect((['within_noise', 'unexplained', 'drafted_nothing', 'barely_drafted', 'rounds_disagree'] as const).every(isNoise)).toBe(true);
    expect((['faster', 'slower', 'single_run', null] as const).some(isNoise)).toBe(false);
  });


  it('measures each text against the first', () => {
    expect(
      differences([
        { mode: 'normal', text: 'abc' },
        { mode: 'medusa', text: 'abc' },
        { mode: 'lookup', text: 'abd' },
      ]),
    ).toEqual([
      { mode: 'normal', identical: null, firstDifference: null },
      { mode: 'medusa', identical: true, firstDifference: null },
      { mode: 'lookup', identical: false, firstDifference: 2 },
    ]);
  });

  it('formats speed-ups and spreads', () => {
    expect(formatSpeedup(1.234)).toBe('1.23×');
    expect(formatSpeedup(null)).toBe('–');
    expect(formatSpread(spread(98.14, 95, 101.2))).toBe('98.1 (95.0–101.2)');
    expect(formatSpread(spread(0.981, 0.95, 1.012), 2, '×')).toBe('0.98× (0.95×–1.01×)');
    expect(formatSpread(spread(98.14, 98.14, 98.14, 1))).toBe('98.1');
    expect(formatSpread(null)).toBe('–');
  });

  it('marks the baseline where the first run departs from it', () => {
    const results = differences([
      { mode: 'normal', text: 'abcdef' },
      { mode: 'medusa', text: 'abcdeX' },
      { mode: 'lookup', text: 'abX' },
    ]);
    expect(baselineDifference(results)).toBe(2);
    expect(
      baselineDifference(
        differences([
          { mode: 'normal', text: 'a' },
          { mode: 'lookup', text: 'a' },
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
    // Auto runs last when chosen and offered; it is offered even without heads (lookup alone).
    expect(comparedModes({ medusa: true, lookup: true, auto: true }, ['normal', 'medusa', 'lookup', 'auto'])).toEqual([
      'normal',
      'medusa',
      'lookup',
      'auto',
    ]);
    expect(comparedModes({ medusa: true, lookup: false, auto: true }, ['normal', 'lookup', 'auto'])).toEqual([
      'normal',
      'auto',
    ]);
    expect(comparedModes({ medusa: true, lookup: true, auto: false }, ['normal', 'medusa', 'lookup', 'auto'])).toEqual([
      'normal',
      'medusa',
      'lookup',
    ]);
    expect(comparedModes({ auto: true }, ['normal', 'medusa', 'lookup'])).toEqual(['normal']);
  });

  it('orders the modes so that each holds every place and follows every other equally often', () => {
    expect(runOrder(['normal', 'medusa', 'lookup'], 6)).toEqual([
      'normal', 'medusa', 'lookup',
      'medusa', 'lookup', 'normal',
      'lookup', 'normal', 'medusa',
      'lookup', 'medusa', 'normal',
      'normal', 'lookup', 'medusa',
      'medusa', 'normal', 'lookup',
    ]);
    expect(runOrder(['normal', 'lookup'], 2)).toEqual(['normal', 'lookup', 'lookup', 'normal']);
    expect(runOrder(['normal', 'lookup'], 0)).toEqual([]);
    for (let count = 1; count <= 5; count++) {
      const cycle = count % 2 === 0 ? count : 2 * count;
      const places = Array.from({ length: count }, () => new Array(count).fill(0));
      const follows = Array.from({ length: count }, () => new Array(count).fill(0));
      for (let round = 0; round < cycle; round++) {
        const order = balancedOrder(count, round);
        order.forEach((mode, place) => places[mode][place]++);
        for (let k = 1; k < count; k++) follows[order[k - 1]][order[k]]++;
      }
      const perPlace = cycle / count;
      expect(places.flat().every((n) => n === perPlace)).toBe(true);
      const offDiagonal = follows.flatMap((row, a) => row.filter((_, b) => a !== b));
      expect(new Set(offDiagonal).size).toBeLessThanOrEqual(1);
    }
  });

  it('shows only a real speed-up loudly', () => {
    expect(verdictText(figures({ verdict: 'faster' })).tone).toBe('faster');
    expect(verdictText(figures({ verdict: 'within_noise' }))).toEqual({
      text: 'within noise: the ranges of the two speeds overlap',
      tone: 'neutral',
    });
    expect(verdictText(figures({ verdict: 'unexplained', speedup: spread(9.75, 8, 11) }))).toEqual({
      text: 'noise: at 1.00 tokens per step, drafting cannot make it 9.75× as fast',
      tone: 'warning',
    });
    // A slowdown says how slow drafting could have made it.
    expect(
      verdictText(
        figures({
          verdict: 'unexplained',
          mean_accepted: 1.15,
          drafted_per_step: 0.5,
          explainable: { slowest: 0.634, fastest: 1.15 },
          speedup: spread(0.27, 0.25, 0.3),
        }),
      ),
    ).toEqual({
      text: 'noise: at 1.15 tokens per step from 0.50 drafted per step, checking the drafts cannot make it slower than 0.63×, yet it measured 0.27×',
      tone: 'warning',
    });
    expect(verdictText(figures({ verdict: 'drafted_nothing', drafted_tokens: 0, speedup: spread(0.39, 0.07, 0.54) }))).toEqual({
      text: "noise: drafted nothing, so it decoded as normal does and the 0.39× is the machine's",
      tone: 'warning',
    });
    expect(
      verdictText(figures({ verdict: 'barely_drafted', mean_accepted: 1.03, drafted_per_step: 0.1, speedup: spread(0.73, 0.72, 0.74) })),
    ).toEqual({
      text: 'noise: it drafted only 0.10 tokens per step, too few to move the speed as far as 0.73× either way',
      tone: 'warning',
    });
    expect(verdictText(figures({ verdict: 'rounds_disagree', speedup: spread(1.1, 0.9, 1.2) }))).toEqual({
      text: 'noise: faster in some rounds and slower in others (0.90× to 1.20×)',
      tone: 'warning',
    });
    // No figure is glued to the word noise.
    for (const verdict of ['unexplained', 'drafted_nothing', 'barely_drafted', 'rounds_disagree'] as const) {
      expect(verdictText(figures({ verdict, speedup: spread(2.16, 2, 2.3) })).text).not.toMatch(/^noise:? *\d/);
    }
    expect(verdictText(figures({ verdict: 'single_run' })).tone).toBe('neutral');
    expect(verdictText(figures({ verdict: 'slower' })).tone).toBe('neutral');
    expect(verdictText(figures({ verdict: null })).text).toBe('no finished pair of runs to compare');
  });
});

describe('sideLabel', () => {
  it('names a mode, and the remote engine and model it ran on', () => {
    expect(sideLabel('medusa', null)).toBe('Medusa');
    expect(sideLabel('normal', { engine: 'lab', model: 'SmolLM2-135M-Instruct' })).toBe('Normal on lab · SmolLM2-135M-Instruct');
    expect(sideLabel('lookup', { engine: 'lab', model: null })).toBe('Prompt lookup on lab');
  });
});

describe('divergenceText', () => {
  const divergence = (expected: number, got: number, nearTie: boolean): Divergence => ({
    at: 6,
    expected: { token_id: 11, text: ' recursion', bytes: [], logprob: expected, rank: 1 },
    got: { token_id: 12, text: ' a', bytes: [], logprob: got, rank: 2 },
    near_tie: nearTie,
  });

  it('names both tokens with their log-probabilities and calls a small gap a near-tie', () => {
    expect(divergenceText(divergence(-0.71, -0.734, true), 'Medusa')).toBe(
      "Parted from normal at token 7: normal wrote “ recursion” (log-prob -0.71, the model's first choice), " +
        "medusa “ a” (log-prob -0.73, the model's second choice). A near-tie (0.02 apart): the two tokens were " +
        'almost equally likely, and summing in another order tipped it. Not a drafting fault.',
    );
  });

  it('calls a wide gap a fault', () => {
    expect(divergenceText(divergence(-0.1, -3.1, false), 'Prompt lookup')).toContain(
      'Not a near-tie (3.00 apart): this is a fault, worth reporting.',
    );
  });
});
