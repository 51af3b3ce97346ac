import type { Info, TreeChoice, TreeForecast } from './api/types';

/**
 * The trees a user can pick for heads of `headCount` heads: auto, the tuner's fastest tree when
 * there is one, then the fixed ones.
 */
export function treeNames(headCount: number, tuned = false): string[] {
  const names = ['auto'];
  if (headCount > 0 && tuned) names.push('tuned');
  if (headCount >= 4) names.push('mc_sim_7b_63');
  for (let depth = 1; depth <= Math.min(headCount, 8); depth++) names.push(`chain-${depth}`);
  return names;
}

/** The lookup draft lengths a user can pick. */
export const LOOKUP_LENGTHS = ['auto', '2', '4', '8', '16'];

/**
 * The draft fields of a request in `mode`: a fixed tree for Medusa runs, a fixed length for
 * lookup runs; none for auto (the server's default).
 */
export function draftFields(mode: string, tree: string, length = 'auto'): { tree?: string; draft_length?: number } {
  if (mode === 'medusa' && tree !== 'auto') return { tree };
  if (mode === 'lookup' && length !== 'auto') return { draft_length: Number(length) };
  return {};
}

/** The tree picker's names for what `info` loaded. */
export function loadedTreeNames(info: Info | null): string[] {
  return treeNames(info?.model?.heads?.head_count ?? 0, !!info?.model?.medusa_plan?.tuned_tree);
}

/** A tree as the user named it: its name, or its rank paths as JSON. */
export function treeLabel(tree: TreeChoice): string {
  return typeof tree === 'string' ? tree : JSON.stringify(tree);
}

/** What a named tree drafted in full is predicted to do here, in words. */
export function forecastText(f: TreeForecast): string {
  const speed = f.predicted_speedup >= 10 ? f.predicted_speedup.toFixed(0) : f.predicted_speedup.toFixed(2);
  return (
    `about ${speed}x here at ${f.expected_tokens.toFixed(2)} tokens per step: ` +
    `each extra token costs ${f.extra_token_ms.toFixed(1)} ms on this machine`
  );
}
