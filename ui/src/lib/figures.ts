// One definition of each figure a run shows, for the hover text wherever it appears.

import type { DepthCount } from './run';
import { counted } from './words';

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

/**
 * The draft model's decodes in words: it reads and guesses for every drafting request in the
 * same decodes, so its tokens per decode grow with the requests drafting together.
 */
export function draftModelDecodesText(metrics: { draft_model_decodes: number; draft_model_tokens: number }): string {
  const { draft_model_decodes: decodes, draft_model_tokens: tokens } = metrics;
  if (decodes === 0) return 'no decodes yet';
  const each = (tokens / decodes).toFixed(1);
  return `${counted(decodes, 'decode')}, ${counted(tokens, 'token')} (${each} per decode, every drafting request's in the same ones)`;
}
