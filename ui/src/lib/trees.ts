import type { DecodeCosts, Info, TreeChoice, TreeForecast } from './api/types';

/** The lookup draft lengths a user can pick. */
export const LOOKUP_LENGTHS = ['auto', '2', '4', '8', '16'];

/** How many Medusa heads the loaded model has (0 without heads or a model). */
export function headCount(info: Info | null): number {
  return info?.model?.heads?.head_count ?? 0;
}

/**
 * Whether `mode` drafts a Medusa tree the user may name: Medusa mode, and auto mode when heads
 * are loaded (without them auto drafts with lookup alone, and the server refuses a tree).
 */
export function treeApplies(mode: string, heads: number): boolean {
  return mode === 'medusa' || (mode === 'auto' && heads > 0);
}

/**
 * The draft fields of a request in `mode` with `heads` heads loaded: a named tree for Medusa
 * runs and for auto runs with heads (drafted in full beside lookup's guesses), a fixed length
 * for lookup and draft-model runs only; none for `auto` picks (the server's default).
 */
export function draftFields(
  mode: string,
  tree: string,
  length: string,
  heads: number,
): { tree?: string; draft_length?: number } {
  if (treeApplies(mode, heads) && tree !== 'auto') return { tree };
  if ((mode === 'lookup' || mode === 'draft' || mode === 'eagle') && length !== 'auto') return { draft_length: Number(length) };
  return {};
}

/** The tree picker's names for what `info` loaded, as the backend lists them. */
export function loadedTreeNames(info: Info | null): string[] {
  return info?.tree_names?.length ? info.tree_names : ['auto'];
}

/** What the tree picker's hint knows of the loaded heads. */
export interface TreeHintContext {
  /** The Medusa plan's decision in words, if any. */
  decision: string | null;
  /** The tree set in Settings for Medusa mode's `auto`, as named. */
  settingsTree: string | null;
  /** Nodes of the tuner's fastest tree (0 without one). */
  tunedNodes: number;
}

/**
 * The tree picker's hint for `tree` drafted by `modes` (Medusa, auto, or both in Compare): what
 * each mode makes of it.
 */
export function treeHint(tree: string, modes: readonly string[], ctx: TreeHintContext): string {
  const parts: string[] = [];
  if (modes.includes('medusa')) {
    const prefix = modes.includes('auto') ? 'Medusa mode: ' : '';
    parts.push(
      prefix +
        (tree === 'auto'
          ? ctx.settingsTree
            ? `Auto: the tree set in Settings, ${ctx.settingsTree}, drafted in full at every step.`
            : `Auto: ${ctx.decision ?? 'the tree sized for this machine'}, drafted as far as it pays.`
          : tree === 'tuned'
            ? `The tuner's fastest tree for this machine (${ctx.tunedNodes} nodes), drafted in full at every step, even where plain decoding is faster still.`
            : `${tree} is drafted in full at every step, whatever it costs here, so that every guess of the heads shows.`),
    );
  }
  if (modes.includes('auto')) {
    const named = tree === 'tuned' ? `the tuner's fastest tree (${ctx.tunedNodes} nodes)` : tree;
    parts.push(
      'Auto mode: ' +
        (tree === 'auto'
          ? 'lookup and the heads each draft as far as they are expected to pay at each step.'
          : `${named} is drafted in full beside lookup's guesses at every step, whatever it costs, so that every guess of both shows.`),
    );
  }
  return parts.join(' ');
}

/**
 * What picking `tree` for `modes` is forecast to do here, where the loaded heads' plan has a
 * forecast of it: Medusa mode's alone (in auto mode lookup's guesses come on top of the heads'
 * tree, which no forecast covers). `auto` stands for the tree set in Settings, if any.
 */
export function treeForecast(info: Info | null, tree: string, modes: readonly string[]): TreeForecast | null {
  if (!modes.includes('medusa')) return null;
  const settingsTree = info?.default_tree ? treeLabel(info.default_tree) : null;
  const name = tree === 'auto' ? settingsTree : tree;
  return info?.model?.medusa_plan?.forecasts.find((f) => f.name === name) ?? null;
}

/** A tree as the user named it: its name, or its rank paths as JSON. */
export function treeLabel(tree: TreeChoice): string {
  return typeof tree === 'string' ? tree : JSON.stringify(tree);
}

function speedText(x: number): string {
  return x >= 10 ? x.toFixed(0) : x.toFixed(2);
}

const VERDICT_WORDS: Record<TreeForecast['verdict'], string> = {
  faster: 'faster than normal',
  slower: 'slower than normal',
  uncertain: 'too close to call, so auto does not draft it',
};

/**
 * What a named tree drafted in full is predicted to do here, in plain words: its speed against
 * normal decoding with the range the decode costs' spread allows, the tokens a step keeps, and
 * what checking one more drafted token costs.
 */
export function forecastText(f: TreeForecast): string {
  // A range whose ends read the same is no range.
  const [low, high] = [speedText(f.speedup_low), speedText(f.speedup_high)];
  const range = low === high ? '' : `, between ${low}× and ${high}×`;
  return (
    `about ${speedText(f.predicted_speedup)}× normal speed here${range} (${VERDICT_WORDS[f.verdict]}): ` +
    `a step would keep ${f.expected_tokens.toFixed(2)} tokens on average instead of 1, and each drafted token ` +
    `it checks adds ${f.extra_token_ms.toFixed(1)} ms to the step on this machine`
  );
}

/** Decode costs in words: each batch size's time with the range it was seen in, and where they came from. */
export function decodeCostsText(costs: DecodeCosts): string {
  const figures = costs.points.map((p) =>
    p.low_ms === p.high_ms
      ? `${p.tokens}: ${p.ms.toFixed(1)}`
      : `${p.tokens}: ${p.ms.toFixed(1)} (${p.low_ms.toFixed(1)}–${p.high_ms.toFixed(1)})`,
  );
  const source = { given: 'given', measured: 'measured at load', cached: 'kept from an earlier load' }[costs.source];
  let text = `${figures.join(', ')} ms by tokens per decode, ${source}`;
  if (costs.updated_by_steps.length > 0) text += `; updated by real steps for ${costs.updated_by_steps.join(', ')} tokens`;
  if (costs.busy) text += `; not kept, the machine was busy: ${costs.busy}`;
  return text;
}
