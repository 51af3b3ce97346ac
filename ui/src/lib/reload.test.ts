import { describe, expect, it } from 'vitest';
import { engineReload, loadEnded, noteLoading, openModelRequest, treeName, type PendingLoad } from './reload';
import type { Info } from './api/types';

const MC_SIM_PATHS = [
  [0], [0, 0], [1], [0, 1], [2], [0, 0, 0], [1, 0], [0, 2], [3], [0, 3], [4], [0, 4], [2, 0], [0, 5], [0, 0, 1], [5],
  [0, 6], [6], [0, 7], [0, 1, 0], [1, 1], [7], [0, 8], [0, 0, 2], [3, 0], [0, 9], [8], [9], [1, 0, 0], [0, 2, 0],
  [1, 2], [0, 0, 3], [4, 0], [2, 1], [0, 0, 4], [0, 0, 5], [0, 0, 0, 0], [0, 1, 1], [0, 0, 6], [0, 3, 0], [5, 0],
  [1, 3], [0, 0, 7], [0, 0, 8], [0, 0, 9], [6, 0], [0, 4, 0], [1, 4], [7, 0], [0, 1, 2], [2, 0, 0], [3, 1], [2, 2],
  [8, 0], [0, 5, 0], [1, 5], [1, 0, 1], [0, 2, 1], [9, 0], [0, 6, 0], [0, 0, 0, 1], [1, 6], [0, 7, 0],
];

function loaded(origin: 'given' | 'stored' | 'tuned' | null, tree: number[][] | null): Info {
  return {
    model: { path: '/m.gguf', n_ctx: 1024, medusa_plan: origin ? { origin } : null },
    heads_path: '/h.medusa.gguf',
    tree,
  } as unknown as Info;
}

describe('treeName', () => {
  it('names chains and the Medusa paper tree, in any order of paths', () => {
    expect(treeName([[0], [0, 0], [0, 0, 0]])).toBe('chain-3');
    expect(treeName([[0]])).toBe('chain-1');
    expect(treeName(MC_SIM_PATHS)).toBe('mc_sim_7b_63');
    expect(treeName([...MC_SIM_PATHS].reverse())).toBe('mc_sim_7b_63');
    expect(treeName(MC_SIM_PATHS.slice(1))).toBeNull();
    expect(treeName([[0], [1]])).toBeNull();
    expect(treeName([[0], [0, 1]])).toBeNull();
  });
});

describe('engineReload', () => {
  it('reloads the same model, heads and draft model with the new context size', () => {
    expect(engineReload(loaded('stored', [[0], [1]]), 2048, false)).toEqual({
      model: '/m.gguf',
      heads: '/h.medusa.gguf',
      draft_model: null,
      drafter: null,
      tree: null,
      ctx_size: 2048,
      exact: false,
    });
    const withDraft = loaded('stored', [[0]]);
    (withDraft.model as unknown as { draft_model: { path: string } }).draft_model = { path: '/d.gguf' };
    expect(engineReload(withDraft, 2048, true)?.draft_model).toBe('/d.gguf');
    expect(engineReload(loaded('tuned', [[0]]), 4096, true, 'chain-4')?.tree).toBeNull();
    expect(engineReload(loaded(null, null), 512, true)?.tree).toBeNull();
  });

  it('keeps a tree the model was given, by name', () => {
    expect(engineReload(loaded('given', [[0], [0, 0]]), 2048, true)?.tree).toBe('chain-2');
    expect(engineReload(loaded('given', MC_SIM_PATHS), 2048, true)?.tree).toBe('mc_sim_7b_63');
    expect(engineReload(loaded('given', [[0], [1]]), 2048, true, '/trees/wide.json')?.tree).toBe('/trees/wide.json');
    expect(engineReload(loaded('given', [[0], [1]]), 2048, true)?.tree).toBeNull();
  });

  it('has nothing to reload without a model', () => {
    expect(engineReload({ model: null } as unknown as Info, 2048, true)).toBeNull();
  });
});

describe('a load the page asked for', () => {
  it('ends once it was seen going and nothing loads any more', () => {
    const pending: PendingLoad<string> = { from: 'a.gguf', seenLoading: false };
    expect(loadEnded(pending, false, 'a.gguf')).toBe(false);
    noteLoading(pending, true);
    expect(pending.seenLoading).toBe(true);
    expect(loadEnded(pending, true, 'a.gguf')).toBe(false);
    expect(loadEnded(pending, false, 'a.gguf')).toBe(true);
  });

  it('ends when what is loaded changed, though it was too quick to be seen', () => {
    const pending: PendingLoad<{ n: number }> = { from: { n: 512 }, seenLoading: false };
    const same = (a: { n: number }, b: { n: number }) => a.n === b.n;
    expect(loadEnded(pending, false, { n: 512 }, same)).toBe(false);
    expect(loadEnded(pending, false, { n: 1024 }, same)).toBe(true);
    expect(loadEnded(pending, false, null, same)).toBe(false);
    expect(loadEnded(null, false, { n: 1024 }, same)).toBe(false);
  });
});

describe('openModelRequest', () => {
  it('opens a model with the heads made for it, no draft model and the heads’ own tree', () => {
    expect(openModelRequest('/m/a.gguf', '/m/a.medusa.gguf')).toEqual({
      model: '/m/a.gguf',
      heads: '/m/a.medusa.gguf',
      draft_model: null,
      drafter: null,
      tree: null,
    });
    expect(openModelRequest('/m/b.gguf', null)).toEqual({ model: '/m/b.gguf', heads: null, draft_model: null, drafter: null, tree: null });
  });
});
