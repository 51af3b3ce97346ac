// Figures of a side-by-side comparison, computed from the runs as they finish.

import type { Mode } from './api/types';
import { firstDifference } from './run';

export interface ComparedRun {
  mode: Mode;
  text: string;
  tokensPerSecond: number;
}

export interface Verdict {
  mode: Mode;
  /** Tokens/s over the baseline's; null for the baseline. */
  speedup: number | null;
  identical: boolean | null;
  /** Character index of the first difference from the baseline, null when identical. */
  firstDifference: number | null;
}

/** Each run against the first one (the normal baseline). */
export function verdicts(runs: ComparedRun[]): Verdict[] {
  const [baseline] = runs;
  return runs.map((run, i) => {
    if (i === 0) return { mode: run.mode, speedup: null, identical: null, firstDifference: null };
    const diff = firstDifference(baseline.text, run.text);
    return {
      mode: run.mode,
      speedup: baseline.tokensPerSecond > 0 ? run.tokensPerSecond / baseline.tokensPerSecond : null,
      identical: diff === null,
      firstDifference: diff,
    };
  });
}

/** "1.34×", or "–" when unknown. */
export function formatSpeedup(speedup: number | null): string {
  return speedup === null ? '–' : `${speedup.toFixed(2)}×`;
}

/** Where the baseline's text is marked: the earliest point any other run departs from it. */
export function baselineDifference(results: Verdict[]): number | null {
  const points = results.slice(1).flatMap((v) => (v.firstDifference === null ? [] : [v.firstDifference]));
  return points.length ? Math.min(...points) : null;
}

/** The runs to compare: normal first (the baseline), then the speculative modes chosen and available. */
export function comparedModes(wanted: Partial<Record<Mode, boolean>>, available: readonly Mode[]): Mode[] {
  return (['normal', 'medusa', 'lookup'] as Mode[]).filter(
    (m) => m === 'normal' || (wanted[m] === true && available.includes(m)),
  );
}
