// The mode and tree a reopened chat goes on with: those its last answer's run used, when the
// model loaded now still offers them, and otherwise what is picked instead with a sentence saying
// why. Pure, so it is unit-tested directly.

import type { Info, Mode, RunRecord } from './api/types';
import { MODE_LABELS, MODES } from './modes';
import { headCount, loadedTreeNames, treeApplies } from './trees';

export interface RestoredDrafting {
  mode: Mode;
  tree: string;
  /** Why the chat does not go on exactly as its last answer was written; null when it does. */
  note: string | null;
}

const paths = (tree: unknown) => JSON.stringify(tree);

/** A chain of `n` nodes (`chain-N`): the top guess of each of the first `n` heads. */
function chain(n: number): number[][] {
  return Array.from({ length: n }, (_, i) => new Array(i + 1).fill(0));
}

/** The paths of tree `name` where `info` tells them (`chain-N`, `tuned`); null otherwise. */
function namedPaths(name: string, info: Info | null): unknown {
  const length = /^chain-(\d+)$/.exec(name);
  if (length) return chain(Number(length[1]));
  return name === 'tuned' ? (info?.model?.medusa_plan?.tuned_tree ?? null) : null;
}

/**
 * The tree picker's name for a tree `mode` drafted as `recorded` rank paths, as far as `info`
 * tells: `auto` when it is what `auto` drafts now (or nothing was drafted), `tuned` or `chain-N`
 * when it is that tree; null when no name the picker offers is known to draft it.
 */
export function treeNameOf(recorded: unknown, mode: string, info: Info | null): string | null {
  if (recorded === null || recorded === undefined) return 'auto';
  // In Medusa mode `auto` drafts the tree set in Settings, else the plan's.
  const settingsTree = mode === 'medusa' ? (info?.default_tree ?? null) : null;
  const autoTree =
    settingsTree === null
      ? (info?.model?.medusa_plan?.tree ?? null)
      : typeof settingsTree === 'string'
        ? namedPaths(settingsTree, info)
        : settingsTree;
  if (autoTree !== null && paths(autoTree) === paths(recorded)) return 'auto';
  if (!Array.isArray(recorded) || recorded.length === 0) return null;
  for (const name of ['tuned', `chain-${recorded.length}`]) {
    const named = namedPaths(name, info);
    if (named !== null && paths(named) === paths(recorded)) return name;
  }
  return null;
}

/** Why the loaded model does not offer `mode`. */
function missing(mode: Mode): string {
  if (mode === 'medusa') return 'needs Medusa heads, and none are loaded (load them in Settings)';
  if (mode === 'draft') return 'needs a draft model, and none is loaded (load one in Settings)';
  if (mode === 'eagle') return 'needs an EAGLE drafter, and none is loaded (load one in Settings)';
  return 'the model loaded now does not offer';
}

/**
 * What a reopened chat picks from its last answer's `run`. `remembered`: the tree that answer was
 * asked with, where this browser kept it (otherwise the run's recorded paths are matched to a
 * name). A run of a remote engine takes up its mode alone (the engine drafts as it was started).
 * While no model is loaded yet nothing is judged unavailable.
 */
export function restoredDrafting(run: RunRecord, info: Info | null, remembered: string | null): RestoredDrafting {
  const mode = (MODES as readonly string[]).includes(run.mode) ? (run.mode as Mode) : null;
  if (mode === null) return { mode: 'normal', tree: 'auto', note: `The last answer ran in a mode this page does not know (${run.mode}): Normal is picked.` };
  if (run.engine !== null) return { mode, tree: 'auto', note: null };
  const loaded = !!info?.model;
  if (loaded && !info!.modes.includes(mode)) {
    return { mode: 'normal', tree: 'auto', note: `The last answer was written in ${MODE_LABELS[mode]} mode, which ${missing(mode)}: Normal is picked.` };
  }
  const name = remembered ?? treeNameOf(run.tree, mode, info);
  if (!loaded || name === 'auto') return { mode, tree: name ?? 'auto', note: null };
  if (name === null) {
    const nodes = Array.isArray(run.tree) ? `${run.tree.length}-node ` : '';
    return { mode, tree: 'auto', note: `The last answer drafted a ${nodes}tree that the tree menu has no name for: Tree: auto is picked.` };
  }
  if (!treeApplies(mode, headCount(info))) {
    return { mode, tree: 'auto', note: `The last answer drafted Tree: ${name}; no heads are loaded now, so ${MODE_LABELS[mode]} mode drafts no tree.` };
  }
  if (!loadedTreeNames(info).includes(name)) {
    return { mode, tree: 'auto', note: `The last answer drafted Tree: ${name}, which the heads loaded now do not offer: Tree: auto is picked.` };
  }
  return { mode, tree: name, note: null };
}
