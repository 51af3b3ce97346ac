// Loading models: another model picked on disk (Settings' models card, the chat's model picker),
// and the model in use reloaded with another context size (the same model, heads and tree).

import type { TreeSpec } from './api/contract';
import type { Info, LoadModelRequest } from './api/types';

/** The Medusa paper's tree (`mc_sim_7b_63`), as the engine defines it. */
const MC_SIM_7B_63 =
  '[0] [0,0] [1] [0,1] [2] [0,0,0] [1,0] [0,2] [3] [0,3] [4] [0,4] [2,0] [0,5] [0,0,1] [5] [0,6] [6] [0,7] ' +
  '[0,1,0] [1,1] [7] [0,8] [0,0,2] [3,0] [0,9] [8] [9] [1,0,0] [0,2,0] [1,2] [0,0,3] [4,0] [2,1] [0,0,4] ' +
  '[0,0,5] [0,0,0,0] [0,1,1] [0,0,6] [0,3,0] [5,0] [1,3] [0,0,7] [0,0,8] [0,0,9] [6,0] [0,4,0] [1,4] [7,0] ' +
  '[0,1,2] [2,0,0] [3,1] [2,2] [8,0] [0,5,0] [1,5] [1,0,1] [0,2,1] [9,0] [0,6,0] [0,0,0,1] [1,6] [0,7,0]';

/** The paths of `tree` in one order, to compare trees whatever order they were listed in. */
function canonical(paths: number[][]): string {
  return paths
    .map((p) => JSON.stringify(p))
    .sort()
    .join(' ');
}

const MC_SIM_CANONICAL = canonical(MC_SIM_7B_63.split(' ').map((p) => JSON.parse(p)));

/** The name a load request can give `tree` by (`chain-N`, `mc_sim_7b_63`), if it has one. */
export function treeName(tree: TreeSpec): string | null {
  const chain = tree.length >= 1 && tree.length <= 8 && tree.every((p, i) => p.length === i + 1 && p.every((r) => r === 0));
  if (chain) return `chain-${tree.length}`;
  return canonical(tree) === MC_SIM_CANONICAL ? 'mc_sim_7b_63' : null;
}

/**
 * What opens the model file `model` with `heads` (the heads made for it, if any): a draft model
 * and a drafter are for one model, so none is carried over, and the tree is the heads' own.
 */
export function openModelRequest(model: string, heads: string | null): LoadModelRequest {
  return { model, heads, draft_model: null, drafter: null, tree: null };
}

/**
 * What reloads the model in use with `ctxSize` context cells per request and exact mode on or
 * off: its model and heads, and the tree it was given, by name, or else `givenTree` (what the
 * page last loaded it with). A tree sized or stored with the heads needs no name: the load
 * settles on it again.
 */
export function engineReload(
  info: Info,
  ctxSize: number,
  exact: boolean,
  givenTree: string | null = null,
): LoadModelRequest | null {
  const model = info.model;
  if (!model) return null;
  const given = model.medusa_plan?.origin === 'given' && info.tree ? (treeName(info.tree) ?? givenTree) : null;
  return {
    model: model.path,
    heads: info.heads_path,
    draft_model: model.draft_model?.path ?? null,
    drafter: model.eagle?.path ?? null,
    tree: given,
    ctx_size: ctxSize,
    exact,
  };
}

/**
 * A load this page asked for, followed until it ends: `from` is what was loaded before it, and
 * `seenLoading` whether the engine was seen loading since. A load too quick to be seen ends when
 * what is loaded differs from `from`.
 */
export interface PendingLoad<T> {
  from: T;
  seenLoading: boolean;
}

/** Marks `pending` seen going once the engine reports loading. */
export function noteLoading<T>(pending: PendingLoad<T> | null, loading: boolean): void {
  if (pending && loading && !pending.seenLoading) pending.seenLoading = true;
}

/** Whether `pending` has ended: nothing loads now and it was seen going, or `now` differs. */
export function loadEnded<T>(
  pending: PendingLoad<T> | null,
  loading: boolean,
  now: T | null,
  same: (a: T, b: T) => boolean = (a, b) => a === b,
): boolean {
  if (!pending || loading) return false;
  return pending.seenLoading || (now !== null && !same(now, pending.from));
}
