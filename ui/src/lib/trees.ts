/** The trees a user can pick for heads of `headCount` heads: auto, then the fixed ones. */
export function treeNames(headCount: number): string[] {
  const names = ['auto'];
  if (headCount >= 4) names.push('mc_sim_7b_63');
  for (let depth = 1; depth <= Math.min(headCount, 8); depth++) names.push(`chain-${depth}`);
  return names;
}

/** The `tree` field of a request: none for auto (the server's default). */
export function treeField(mode: string, tree: string): { tree?: string } {
  return mode === 'medusa' && tree !== 'auto' ? { tree } : {};
}
