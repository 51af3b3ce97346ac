import { describe, expect, it } from 'vitest';
import type { Info, RunRecord } from './api/types';
import { restoredDrafting, treeNameOf } from './chatRestore';

const PLAN_TREE = [[0], [1], [0, 0]];
const TUNED = [[0], [1]];

/** What the backend says of a model with `heads` heads whose plan drafts PLAN_TREE. */
function info(heads = 4, overrides: Partial<Info> = {}): Info {
  return {
    modes: heads > 0 ? ['normal', 'medusa', 'lookup', 'auto'] : ['normal', 'lookup', 'auto'],
    tree_names: heads > 0 ? ['auto', 'tuned', 'mc_sim_7b_63', 'chain-1', 'chain-2', 'chain-3'] : ['auto'],
    default_tree: null,
    model: {
      heads: heads > 0 ? { head_count: heads } : null,
      medusa_plan: heads > 0 ? { tree: PLAN_TREE, tuned_tree: TUNED } : null,
      draft_model: null,
    },
    ...overrides,
  } as unknown as Info;
}

function run(mode: string, tree: unknown = null, engine: string | null = null): RunRecord {
  return { id: 7, mode, tree, engine } as unknown as RunRecord;
}

describe('treeNameOf', () => {
  it('names what auto drafts, the tuned tree and chains; nothing else', () => {
    expect(treeNameOf(null, 'medusa', info())).toBe('auto');
    expect(treeNameOf(PLAN_TREE, 'medusa', info())).toBe('auto');
    expect(treeNameOf(PLAN_TREE, 'auto', info())).toBe('auto');
    expect(treeNameOf(TUNED, 'medusa', info())).toBe('tuned');
    expect(treeNameOf([[0], [0, 0]], 'auto', info())).toBe('chain-2');
    expect(treeNameOf([[0], [0, 1]], 'medusa', info())).toBeNull();
    expect(treeNameOf([], 'medusa', info())).toBeNull();
  });

  it('takes the tree set in Settings as what Medusa mode’s auto drafts', () => {
    const set = info(4, { default_tree: 'chain-3' });
    expect(treeNameOf([[0], [0, 0], [0, 0, 0]], 'medusa', set)).toBe('auto');
    // Auto mode does not draft the Settings tree for `auto`: there it is the named chain.
    expect(treeNameOf([[0], [0, 0], [0, 0, 0]], 'auto', set)).toBe('chain-3');
    expect(treeNameOf(PLAN_TREE, 'medusa', set)).toBeNull();
    expect(treeNameOf([[2]], 'medusa', info(4, { default_tree: [[2]] }))).toBe('auto');
  });
});

describe('restoredDrafting', () => {
  it('takes up the mode and the tree the answer was asked with', () => {
    expect(restoredDrafting(run('medusa', PLAN_TREE), info(), 'mc_sim_7b_63')).toEqual({ mode: 'medusa', tree: 'mc_sim_7b_63', note: null });
    expect(restoredDrafting(run('auto', PLAN_TREE), info(), 'auto')).toEqual({ mode: 'auto', tree: 'auto', note: null });
    expect(restoredDrafting(run('lookup'), info(), null)).toEqual({ mode: 'lookup', tree: 'auto', note: null });
    expect(restoredDrafting(run('normal'), info(), null)).toEqual({ mode: 'normal', tree: 'auto', note: null });
  });

  it('names the tree from its paths when the answer was asked elsewhere', () => {
    expect(restoredDrafting(run('medusa', [[0], [0, 0]]), info(), null)).toEqual({ mode: 'medusa', tree: 'chain-2', note: null });
    expect(restoredDrafting(run('auto', TUNED), info(), null)).toEqual({ mode: 'auto', tree: 'tuned', note: null });
    expect(restoredDrafting(run('medusa', [[0], [0, 1]]), info(), null)).toEqual({
      mode: 'medusa',
      tree: 'auto',
      note: 'The last answer drafted a 2-node tree that the tree menu has no name for: Tree: auto is picked.',
    });
  });

  it('says what it picks instead of a mode or tree no longer offered', () => {
    expect(restoredDrafting(run('medusa', PLAN_TREE), info(0), 'chain-2')).toEqual({
      mode: 'normal',
      tree: 'auto',
      note: 'The last answer was written in Medusa mode, which needs Medusa heads, and none are loaded (load them in Settings): Normal is picked.',
    });
    expect(restoredDrafting(run('draft'), info(), null)).toEqual({
      mode: 'normal',
      tree: 'auto',
      note: 'The last answer was written in Draft model mode, which needs a draft model, and none is loaded (load one in Settings): Normal is picked.',
    });
    expect(restoredDrafting(run('medusa', [[0], [0, 0]]), info(2, { tree_names: ['auto', 'chain-1'] }), 'chain-2')).toEqual({
      mode: 'medusa',
      tree: 'auto',
      note: 'The last answer drafted Tree: chain-2, which the heads loaded now do not offer: Tree: auto is picked.',
    });
    expect(restoredDrafting(run('auto', [[0]]), info(0), 'chain-1')).toEqual({
      mode: 'auto',
      tree: 'auto',
      note: 'The last answer drafted Tree: chain-1; no heads are loaded now, so Auto mode drafts no tree.',
    });
    expect(restoredDrafting(run('beam'), info(), null)).toEqual({
      mode: 'normal',
      tree: 'auto',
      note: 'The last answer ran in a mode this page does not know (beam): Normal is picked.',
    });
  });

  it('keeps a remote engine’s mode alone, and judges nothing before a model is loaded', () => {
    expect(restoredDrafting(run('medusa', null, 'lab'), info(0), 'chain-2')).toEqual({ mode: 'medusa', tree: 'auto', note: null });
    expect(restoredDrafting(run('medusa', PLAN_TREE), null, 'mc_sim_7b_63')).toEqual({ mode: 'medusa', tree: 'mc_sim_7b_63', note: null });
    expect(restoredDrafting(run('draft'), { ...info(), model: null } as Info, null)).toEqual({ mode: 'draft', tree: 'auto', note: null });
  });
});
