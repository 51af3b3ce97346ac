import { describe, expect, it } from 'vitest';
import type { Info } from './api/types';
import { decodeCostsText, draftFields, forecastText, headCount, loadedTreeNames, treeApplies, treeHint, treeLabel } from './trees';

describe('trees', () => {
  it('offers the trees the backend lists for the model served now', () => {
    expect(loadedTreeNames(null)).toEqual(['auto']);
    const names = ['auto', 'tuned', 'chain-1'];
    expect(loadedTreeNames({ tree_names: names } as unknown as Info)).toEqual(names);
  });

  it('labels a tree by its name or its paths', () => {
    expect(treeLabel('chain-2')).toBe('chain-2');
    expect(treeLabel([[0], [0, 1]])).toBe('[[0],[0,1]]');
  });

  it('sends a tree for medusa runs and auto runs with heads, a length for lookup runs only', () => {
    expect(draftFields('medusa', 'auto', 'auto', 4)).toEqual({});
    expect(draftFields('normal', 'chain-2', '4', 4)).toEqual({});
    expect(draftFields('draft', 'chain-2', '4', 4)).toEqual({ draft_length: 4 });
    expect(draftFields('medusa', 'mc_sim_7b_63', '4', 4)).toEqual({ tree: 'mc_sim_7b_63' });
    expect(draftFields('lookup', 'mc_sim_7b_63', '8', 4)).toEqual({ draft_length: 8 });
    expect(draftFields('lookup', 'auto', 'auto', 0)).toEqual({});
    // Auto mode: a named tree beside lookup's guesses; the lookup length is never sent.
    expect(draftFields('auto', 'mc_sim_7b_63', '8', 4)).toEqual({ tree: 'mc_sim_7b_63' });
    expect(draftFields('auto', 'tuned', 'auto', 2)).toEqual({ tree: 'tuned' });
    expect(draftFields('auto', 'auto', '8', 4)).toEqual({});
    // Without heads auto drafts with lookup alone, and a tree left from other heads is not sent.
    expect(draftFields('auto', 'chain-2', '8', 0)).toEqual({});
  });

  it('shows the tree picker for medusa, and for auto only with heads', () => {
    expect(treeApplies('medusa', 4)).toBe(true);
    expect(treeApplies('medusa', 0)).toBe(true);
    expect(treeApplies('auto', 1)).toBe(true);
    expect(treeApplies('auto', 0)).toBe(false);
    expect(treeApplies('lookup', 4)).toBe(false);
    expect(treeApplies('normal', 4)).toBe(false);
  });

  it('counts the loaded heads', () => {
    expect(headCount(null)).toBe(0);
    expect(headCount({ model: { heads: { head_count: 3 } } } as unknown as Info)).toBe(3);
    expect(headCount({ model: { heads: null } } as unknown as Info)).toBe(0);
  });

  it('says what each mode makes of the tree', () => {
    const ctx = { decision: 'medusa with a 12-node tree', settingsTree: null, tunedNodes: 9 };
    expect(treeHint('auto', ['medusa'], ctx)).toBe('Auto: medusa with a 12-node tree, drafted as far as it pays.');
    expect(treeHint('auto', ['medusa'], { ...ctx, settingsTree: 'chain-2' })).toBe(
      'Auto: the tree set in Settings, chain-2, drafted in full at every step.',
    );
    expect(treeHint('auto', ['auto'], ctx)).toBe(
      'Auto mode: lookup and the heads each draft as far as they are expected to pay at each step.',
    );
    expect(treeHint('mc_sim_7b_63', ['auto'], ctx)).toBe(
      "Auto mode: mc_sim_7b_63 is drafted in full beside lookup's guesses at every step, whatever it costs, so that every guess of both shows.",
    );
    expect(treeHint('tuned', ['auto'], ctx)).toBe(
      "Auto mode: the tuner's fastest tree (9 nodes) is drafted in full beside lookup's guesses at every step, whatever it costs, so that every guess of both shows.",
    );
    expect(treeHint('chain-2', ['medusa', 'auto'], ctx)).toBe(
      'Medusa mode: chain-2 is drafted in full at every step, whatever it costs here, so that every guess of the heads shows. ' +
        "Auto mode: chain-2 is drafted in full beside lookup's guesses at every step, whatever it costs, so that every guess of both shows.",
    );
  });

  it('puts a forecast in words', () => {
    const forecast = {
      name: 'mc_sim_7b_63',
      nodes: 63,
      expected_tokens: 2.174,
      step_ms: 300.2,
      predicted_speedup: 0.0634,
      extra_token_ms: 4.61,
      speedup_low: 0.0634,
      speedup_high: 0.0634,
      verdict: 'slower' as const,
    };
    expect(forecastText(forecast)).toBe(
      'about 0.06× normal speed here (slower than normal): a step would keep 2.17 tokens on average instead of 1, and each drafted token it checks adds 4.6 ms to the step on this machine',
    );
    // Ends that differ only past the figures shown are no range.
    expect(forecastText({ ...forecast, speedup_low: 0.1011, speedup_high: 0.0998 })).not.toContain('between');
    expect(forecastText({ ...forecast, predicted_speedup: 1.2, speedup_low: 0.8, speedup_high: 1.5, verdict: 'uncertain' })).toBe(
      'about 1.20× normal speed here, between 0.80× and 1.50× (too close to call, so auto does not draft it): a step would keep 2.17 tokens on average instead of 1, and each drafted token it checks adds 4.6 ms to the step on this machine',
    );
  });

  it('puts decode costs in words with their spread', () => {
    expect(
      decodeCostsText({
        points: [
          { tokens: 1, ms: 7.5, low_ms: 7.5, high_ms: 7.5 },
          { tokens: 2, ms: 12.84, low_ms: 12.1, high_ms: 13.62 },
        ],
        source: 'measured',
        busy: 'the decodes got 55% of their threads\' time: other work shared the cores',
        updated_by_steps: [1],
      }),
    ).toBe(
      '1: 7.5, 2: 12.8 (12.1–13.6) ms by tokens per decode, measured at load; updated by real steps for 1 tokens; ' +
        "not kept, the machine was busy: the decodes got 55% of their threads' time: other work shared the cores",
    );
  });
});
