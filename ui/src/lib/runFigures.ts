// The figures of one run, each computed once, from one record: the run's recorded steps when it
// has them, else its summary (normal runs, remote engines, runs that recorded no steps). Every
// place that shows a run's steps, tokens per step, drafted and accepted tokens or acceptance per
// depth takes them from here, so that one run reads the same everywhere.
//
// Two pairs of figures count different things and carry different names:
// - drafted (whole trees: every guess, rejected branches included) against draft depth (one
//   per depth each step's tree reached, llama-server's `draft_n`): a step keeps at most one
//   guess per depth, so the accepted count is the same for both;
// - steps kept per depth (of the steps that drafted d deep, those whose path reached depth d)
//   against accepted of tried (of the guesses the model judged, those it kept; see
//   `acceptanceByHeadAndRank` in inspector.ts).

import { counted } from './words';

/** What a step contributes to a run's figures (`StepEvent` and `StepRecord` both have it). */
export interface FigureStep {
  tree_size: number;
  tree_depth: number;
  accepted_len: number;
  depth_hits: readonly boolean[];
}

/** What a run's summary holds of the same figures (`FinishedEvent`, `RunRecord`). */
export interface FigureSummary {
  steps: number | null;
  mean_accepted: number | null;
  acceptance_by_depth: readonly number[] | null;
  draft_tokens: number | null;
  accepted_draft_tokens: number | null;
}

/** One depth (1-based) of the acceptance bars. */
export interface DepthFigure {
  depth: number;
  /** Steps whose path reached this depth: their guess here was accepted. Null from a summary alone. */
  kept: number | null;
  /** Steps whose tree drafted this deep. Null from a summary alone. */
  drafted: number | null;
  /** `kept / drafted`, 0..1. */
  rate: number;
}

export interface RunFigures {
  /** Where they come from: the recorded steps, or the summary alone. */
  from: 'steps' | 'summary';
  /** Decode steps after the prompt (the first token, read with the prompt, is no step). */
  steps: number;
  /** Tokens the steps yielded, the model's own included. Null from a summary alone. */
  tokens: number | null;
  /** `tokens / steps`; 1 with no step. */
  tokensPerStep: number;
  /** Drafted tokens in the whole trees. Null from a summary alone. */
  drafted: number | null;
  /** One per depth each step's tree reached: the most a step could have kept. */
  draftDepth: number | null;
  /** Drafted tokens the model kept (the same count for trees and depths). */
  accepted: number | null;
  byDepth: DepthFigure[];
}

/** The figures of `steps` (all of a run's, or the first ones of a replay). */
export function stepFigures(steps: readonly FigureStep[]): RunFigures {
  let tokens = 0;
  let drafted = 0;
  let draftDepth = 0;
  const byDepth: DepthFigure[] = [];
  for (const step of steps) {
    tokens += step.accepted_len;
    drafted += step.tree_size;
    draftDepth += step.tree_depth;
    step.depth_hits.forEach((hit, d) => {
      byDepth[d] ??= { depth: d + 1, kept: 0, drafted: 0, rate: 0 };
      byDepth[d].drafted! += 1;
      byDepth[d].kept! += hit ? 1 : 0;
    });
  }
  for (const figure of byDepth) figure.rate = figure.kept! / figure.drafted!;
  return {
    from: 'steps',
    steps: steps.length,
    tokens,
    tokensPerStep: steps.length ? tokens / steps.length : 1,
    drafted,
    draftDepth,
    accepted: tokens - steps.length,
    byDepth,
  };
}

/**
 * A run's figures: from its recorded steps when it has any (so that the figures agree with the
 * replay and the inspector that show those steps), else from its summary.
 */
export function runFigures(summary: FigureSummary | null, steps: readonly FigureStep[]): RunFigures {
  if (steps.length > 0 || !summary) return stepFigures(steps);
  return {
    from: 'summary',
    steps: summary.steps ?? 0,
    tokens: null,
    tokensPerStep: summary.mean_accepted ?? 1,
    drafted: null,
    draftDepth: summary.draft_tokens,
    accepted: summary.accepted_draft_tokens,
    byDepth: (summary.acceptance_by_depth ?? []).map((rate, d) => ({ depth: d + 1, kept: null, drafted: null, rate })),
  };
}

/** "139 tokens (10.7 per step), 10 accepted": what the trees held and what was kept of it. */
export function draftedText(figures: RunFigures): string | null {
  if (figures.drafted === null) return null;
  const perStep = figures.steps ? (figures.drafted / figures.steps).toFixed(1) : '0.0';
  return `${counted(figures.drafted, 'token')} (${perStep} per step), ${figures.accepted ?? 0} accepted`;
}

/** "19, 10 accepted": the depths drafted and what was kept, when any were drafted. */
export function draftDepthText(figures: RunFigures): string | null {
  if (!figures.draftDepth) return null;
  return `${figures.draftDepth}, ${figures.accepted ?? 0} accepted`;
}

/** Hover text of the drafted figure: what it counts, and how it stands to the draft depth. */
export function draftedTitle(figures: RunFigures): string {
  const base = 'drafted: every token of the drafted trees, rejected branches included';
  if (figures.drafted === null || figures.draftDepth === null) return base;
  return (
    `${base}. A step keeps at most one guess per depth, so its ${figures.drafted} tokens over ` +
    `${figures.draftDepth} depths gave at most ${figures.draftDepth} to accept; ${figures.accepted ?? 0} were.`
  );
}

/** Hover text of the draft depth: what it counts, and how it stands to the drafted tokens. */
export function draftDepthTitle(figures: RunFigures): string {
  const base =
    "draft depth: one drafted token per depth each step's tree reached (llama-server's draft_n), the most the steps could have kept";
  if (figures.drafted === null || figures.draftDepth === null) return base;
  return `${base}; the trees held ${figures.drafted} tokens at these ${figures.draftDepth} depths.`;
}

/** The steps behind a run's tokens per step: "1.77 over 13 steps". */
export function tokensPerStepText(figures: RunFigures): string {
  return `${figures.tokensPerStep.toFixed(2)} over ${counted(figures.steps, 'step')}`;
}
