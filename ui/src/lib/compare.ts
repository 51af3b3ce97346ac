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
