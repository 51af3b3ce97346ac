// One definition of each figure a run shows, for the hover text wherever it appears.

import type { DepthCount } from './run';

export const TOKENS_PER_STEP =
  "tokens per step: what one step of the model yields, its own token included (1.00 in normal decoding; the mean accepted length)";

export const DRAFTED_PER_STEP =
  'drafted per step: the guessed tokens the model checked in one step, the whole tree, rejected branches included';

export const DRAFTED_ACCEPTED =
  'drafted tokens on the paths the model verified (one per depth a step reached), and how many of them it kept';

/**
 * A bar of acceptance at depth `depth` (1-based) in words: the share, with its counts when known,
 * and why a deeper bar can stand above a shallower one.
 */
export function acceptanceText(label: string, depth: number, rate: number, count?: DepthCount): string {
  const share = `${(rate * 100).toFixed(1)}%`;
  const counted = count ? `${count.hits} of ${count.seen} steps (${share})` : `${share} of the steps`;
  return (
    `${label}: ${counted} that drafted ${depth} deep had their guess at depth ${depth} accepted. ` +
    'Each depth counts only the steps that reached it, so a deeper one can be higher.'
  );
}
