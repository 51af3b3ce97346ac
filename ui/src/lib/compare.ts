// Figures of a side-by-side comparison: the order runs go in, where outputs part, and what the
// stored comparison's medians and ranges say.

import type { Divergence, Mode, ModeFigures, SpeedVerdict, Spread, TokenChoice } from './api/types';
import { placeText, type RunTarget } from './engines';
import { MODE_LABELS, MODES } from './modes';
import { firstDifference } from './run';

export interface ComparedText {
  mode: Mode;
  text: string;
}

export interface Difference {
  mode: Mode;
  identical: boolean | null;
  /** Character index of the first difference from the baseline, null when identical. */
  firstDifference: number | null;
}

/** Each run's text against the first one (the normal baseline). */
export function differences(runs: ComparedText[]): Difference[] {
  const [baseline] = runs;
  return runs.map((run, i) => {
    if (i === 0) return { mode: run.mode, identical: null, firstDifference: null };
    const diff = firstDifference(baseline.text, run.text);
    return { mode: run.mode, identical: diff === null, firstDifference: diff };
  });
}

/**
 * A compared mode's name, with where it ran when that was a remote engine: "Medusa", "Normal on
 * lab · SmolLM2-135M-Instruct".
 */
export function sideLabel(mode: Mode, target: RunTarget): string {
  return target ? `${MODE_LABELS[mode]} on ${placeText(target)}` : MODE_LABELS[mode];
}

/** "1.34×", or "–" when unknown. */
export function formatSpeedup(speedup: number | null): string {
  return speedup === null ? '–' : `${speedup.toFixed(2)}×`;
}

/** Where the baseline's text is marked: the earliest point any other run departs from it. */
export function baselineDifference(results: Difference[]): number | null {
  const points = results.slice(1).flatMap((v) => (v.firstDifference === null ? [] : [v.firstDifference]));
  return points.length ? Math.min(...points) : null;
}

/** The runs to compare: normal first (the baseline), then the speculative modes chosen and available. */
export function comparedModes(wanted: Partial<Record<Mode, boolean>>, available: readonly Mode[]): Mode[] {
  return MODES.filter(
    (m) => m === 'normal' || (wanted[m] === true && available.includes(m)),
  );
}

/**
 * The places of `count` modes in round `round`, in the balanced order the server's comparisons
 * and `medusa bench` use (a Williams design): over a full cycle (`count` rounds for an even
 * count, twice that for an odd one) every mode holds every place and follows every other mode
 * equally often, so that whatever one run leaves behind for the next favours no mode.
 */
export function balancedOrder(count: number, round: number): number[] {
  if (count === 0) return [];
  const first = Array.from({ length: count }, (_, j) =>
    j === 0 ? 0 : j % 2 === 1 ? (j + 1) / 2 : count - j / 2,
  );
  const cycle = count % 2 === 0 ? count : 2 * count;
  const row = round % cycle;
  const order = first.map((w) => (w + row) % count);
  return row >= count ? order.reverse() : order;
}

/** Every run of a comparison in order: `repeats` rounds, each in the balanced order. */
export function runOrder(modes: readonly Mode[], repeats: number): Mode[] {
  const order: Mode[] = [];
  for (let round = 0; round < repeats; round++) {
    for (const i of balancedOrder(modes.length, round)) order.push(modes[i]);
  }
  return order;
}

/** "98.1 (95.0–101.2)": the median and, over several runs, the range. */
export function formatSpread(spread: Spread | null, digits = 1, unit = ''): string {
  if (!spread) return '–';
  const f = (v: number) => `${v.toFixed(digits)}${unit}`;
  return spread.count > 1 ? `${f(spread.median)} (${f(spread.min)}–${f(spread.max)})` : f(spread.median);
}

export type Tone = 'faster' | 'neutral' | 'warning';

/** Whether a mode's speed-up is known to be the machine's noise rather than drafting's. */
export function isNoise(verdict: SpeedVerdict | null): boolean {
  return (
    verdict === 'within_noise' ||
    verdict === 'unexplained' ||
    verdict === 'drafted_nothing' ||
    verdict === 'barely_drafted' ||
    verdict === 'rounds_disagree'
  );
}

/**
 * A comparison's headline: the best median speed-up among the modes whose speed-up is not known
 * to be noise; null when there is none.
 */
export function headlineSpeedup(modes: readonly ModeFigures[]): number | null {
  const measured = modes.filter((m) => m.mode !== 'normal' && m.speedup !== null && !isNoise(m.verdict));
  return measured.length ? Math.max(...measured.map((m) => m.speedup!.median)) : null;
}

/** Why a speed-up outside what the mode drafted can explain is the machine's noise, either way. */
function unexplainedText(figures: ModeFigures): string {
  const measured = formatSpeedup(figures.speedup?.median ?? null);
  const tokens = (figures.mean_accepted ?? 1).toFixed(2);
  const slowest = figures.explainable?.slowest ?? null;
  if (slowest !== null && (figures.speedup?.median ?? 1) < 1) {
    const drafted = (figures.drafted_per_step ?? 0).toFixed(2);
    return (
      `noise: at ${tokens} tokens per step from ${drafted} drafted per step, checking the drafts ` +
      `cannot make it slower than ${formatSpeedup(slowest)}, yet it measured ${measured}`
    );
  }
  return `noise: at ${tokens} tokens per step, drafting cannot make it ${measured} as fast`;
}

/** A mode's verdict against normal in words, and how loudly to show it. */
export function verdictText(figures: ModeFigures): { text: string; tone: Tone } {
  const verdict: SpeedVerdict | null = figures.verdict;
  const speedup = figures.speedup;
  switch (verdict) {
    case 'faster':
      return { text: 'faster in every round', tone: 'faster' };
    case 'slower':
      return { text: 'slower in every round', tone: 'neutral' };
    case 'within_noise':
      return { text: 'within noise: the ranges of the two speeds overlap', tone: 'neutral' };
    case 'unexplained':
      return { text: unexplainedText(figures), tone: 'warning' };
    case 'drafted_nothing':
      return {
        text: `noise: drafted nothing, so it decoded as normal does and the ${formatSpeedup(speedup?.median ?? null)} is the machine's`,
        tone: 'warning',
      };
    case 'barely_drafted':
      return {
        text:
          `noise: it drafted only ${(figures.drafted_per_step ?? 0).toFixed(2)} tokens per step, too few to move ` +
          `the speed as far as ${formatSpeedup(speedup?.median ?? null)} either way`,
        tone: 'warning',
      };
    case 'rounds_disagree':
      return {
        text: speedup
          ? `noise: faster in some rounds and slower in others (${formatSpeedup(speedup.min)} to ${formatSpeedup(speedup.max)})`
          : 'noise: faster in some rounds and slower in others',
        tone: 'warning',
      };
    case 'single_run':
      return { text: 'one run each: repeat to tell speed from noise', tone: 'neutral' };
    default:
      return { text: 'no finished pair of runs to compare', tone: 'neutral' };
  }
}

/** "first choice", "second choice", … for a token's rank in the model's next-token distribution. */
function choiceName(rank: number): string {
  const names = ['first', 'second', 'third', 'fourth', 'fifth'];
  return rank <= names.length ? `${names[rank - 1]} choice` : `choice no. ${rank}`;
}

/** One token as a person reads it: its text quoted (spaces kept), its log-probability and rank. */
function describeChoice(choice: TokenChoice): string {
  return `“${choice.text}” (log-prob ${choice.logprob.toFixed(2)}, the model's ${choiceName(choice.rank)})`;
}

/**
 * Where a mode's output parted from normal's, in words: both tokens with the model's
 * log-probabilities, and whether that is a near-tie (a different order of sums can tip it) or a
 * fault worth reporting.
 */
export function divergenceText(divergence: Divergence, modeLabel: string): string {
  const where = `Parted from normal at token ${divergence.at + 1}: normal wrote ${describeChoice(divergence.expected)}, ${modeLabel.toLowerCase()} ${describeChoice(divergence.got)}.`;
  const gap = Math.abs(divergence.expected.logprob - divergence.got.logprob).toFixed(2);
  return divergence.near_tie
    ? `${where} A near-tie (${gap} apart): the two tokens were almost equally likely, and summing in another order tipped it. Not a drafting fault.`
    : `${where} Not a near-tie (${gap} apart): this is a fault, worth reporting.`;
}
