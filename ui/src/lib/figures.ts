// One definition of each figure a run shows, for the hover text wherever it appears.

import type { DepthFigure } from './runFigures';
import { counted } from './words';

export const TOKENS_PER_STEP =
  "tokens per step: what one step of the model yields, its own token included (1.00 in normal decoding; the mean accepted length)";

export const DRAFTED_PER_STEP =
  'drafted per step: the guessed tokens the model checked in one step, the whole tree, rejected branches included (the draft depth counts one per depth instead)';

export const DRAFTED_ACCEPTED =
  "as the engine reported them: the tokens its chains drafted (llama-server's draft_n) and how many it kept";

/** Accepted of tried: of the guesses the model judged (under an accepted parent), those it kept. */
export interface GuessCount {
  accepted: number;
  tried: number;
}

/**
 * A bar of acceptance at depth `figure.depth` in words: the share of steps, with its counts when
 * known, why a deeper bar can stand above a shallower one, and, when `guesses` is given, how it
 * stands to the per-guess figure of the inspector's table.
 */
export function acceptanceText(label: string, figure: DepthFigure, guesses?: GuessCount | null): string {
  const { depth, rate, kept, drafted } = figure;
  const share = `${(rate * 100).toFixed(1)}%`;
  const tally = kept !== null && drafted !== null ? `${kept} of ${drafted} steps (${share})` : `${share} of the steps`;
  const text =
    `${label}: steps kept, ${tally} that drafted ${depth} deep kept their guess at depth ${depth}. ` +
    'Each depth counts every step that reached it, also those whose shallower guess was rejected, so a deeper one can be higher.';
  if (!guesses || guesses.tried === 0) return text;
  const perGuess = ((guesses.accepted / guesses.tried) * 100).toFixed(1);
  return (
    `${text} Accepted of tried (the step inspector's table) counts guesses the model judged instead, ` +
    `only those under an accepted parent: ${guesses.accepted} of ${guesses.tried} (${perGuess}%).`
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
