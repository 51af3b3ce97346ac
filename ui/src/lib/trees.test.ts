import { describe, expect, it } from 'vitest';
import { draftFields, forecastText, treeLabel, treeNames } from './trees';

describe('trees', () => {
  it('offers the trees the heads can fill', () => {
    expect(treeNames(0)).toEqual(['auto']);
    expect(treeNames(2)).toEqual(['auto', 'chain-1', 'chain-2']);
    expect(treeNames(4)).toEqual(['auto', 'mc_sim_7b_63', 'chain-1', 'chain-2', 'chain-3', 'chain-4']);
    expect(treeNames(1, true)).toEqual(['auto', 'tuned', 'chain-1']);
    expect(treeNames(0, true)).toEqual(['auto']);
  });

  it('labels a tree by its name or its paths', () => {
    expect(treeLabel('chain-2')).toBe('chain-2');
    expect(treeLabel([[0], [0, 1]])).toBe('[[0],[0,1]]');
  });

  it('sends a tree for medusa runs and a length for lookup runs, none for auto', () => {
    expect(draftFields('medusa', 'auto')).toEqual({});
    expect(draftFields('normal', 'chain-2', '4')).toEqual({});
    expect(draftFields('medusa', 'mc_sim_7b_63', '4')).toEqual({ tree: 'mc_sim_7b_63' });
    expect(draftFields('lookup', 'mc_sim_7b_63', '8')).toEqual({ draft_length: 8 });
    expect(draftFields('lookup', 'auto', 'auto')).toEqual({});
  });

  it('puts a forecast in words', () => {
    const forecast = {
      name: 'mc_sim_7b_63',
      nodes: 63,
      expected_tokens: 2.174,
      step_ms: 300.2,
      predicted_speedup: 0.0634,
      extra_token_ms: 4.61,
    };
    expect(forecastText(forecast)).toBe(
      'about 0.06x here at 2.17 tokens per step: each extra token costs 4.6 ms on this machine',
    );
  });
});
