// The history table: prompt text, query from filters, figures of selected runs.

import type {
  Comparison,
  DivergenceRequest,
  ListedRun,
  Mode,
  PromptRecord,
  RunQuery,
  RunRecord,
  RunStatus,
  SortKey,
  StepRecord,
} from './api/types';
import { formatSpeedup, isNoise, verdictText } from './compare';
import { firstDifference } from './run';
import { counted } from './words';
import { draftedText, stepFigures, type RunFigures } from './runFigures';

/** The text a person recognises a prompt by: the raw text, or the last user message. */
export function promptText(prompt: PromptRecord): string {
  if (prompt.kind === 'text') return prompt.content;
  const users = prompt.content.filter((m) => m.role === 'user');
  return (users[users.length - 1] ?? prompt.content[prompt.content.length - 1])?.content ?? '';
}

export interface HistoryFilters {
  mode: Mode | '';
  status: RunStatus | '';
  /** A remote engine's name, `local` for the model served here, '' for every run. */
  engine: string;
  /** Text the model name contains, in any case. */
  model: string;
  /** Words the prompt or the answer contains (each as a word or the start of one). */
  search: string;
  /** yyyy-mm-dd, local dates. */
  since: string;
  until: string;
}

export const PAGE_SIZE = 50;

/** The query for one page of runs under `filters`, sorted by `sort`. */
export function buildQuery(
  filters: HistoryFilters,
  sort: SortKey,
  order: 'asc' | 'desc',
  page: number,
): RunQuery {
  const query: RunQuery = { sort, order, limit: PAGE_SIZE, offset: page * PAGE_SIZE };
  if (filters.mode) query.mode = filters.mode;
  if (filters.status) query.status = filters.status;
  if (filters.engine) query.engine = filters.engine;
  if (filters.model.trim()) query.model = filters.model.trim();
  if (filters.search.trim()) query.search = filters.search.trim();
  if (filters.since) query.since = new Date(`${filters.since}T00:00:00`).toISOString();
  // The whole last day counts.
  if (filters.until) query.until = new Date(`${filters.until}T23:59:59.999`).toISOString();
  return query;
}

export interface SelectedFigures {
  run: RunRecord;
  /**
   * Decode speed over the baseline's (the first normal run selected, else the first); in a
   * comparison, over the run's own round's normal run, as the comparison measured it.
   */
  speedup: number | null;
  /** How the speed-up is shown. */
  speedupCell: SpeedupCell;
  /** Null for the baseline itself. Token by token where both runs kept their tokens. */
  identical: boolean | null;
  /** Where it first departs from the baseline: "token 4" (1-based) or "character 12" (0-based). */
  differsAt: string | null;
}

/** A speed-up in words: `gain` only where Compare's rules call it one. */
export interface SpeedupCell {
  text: string;
  tone: 'gain' | 'plain' | 'muted';
  title: string | null;
}

/** The comparison whose runs are exactly `runs`, if there is one. */
export function comparisonOf(runs: readonly RunRecord[], comparisons: readonly Comparison[]): Comparison | null {
  const ids = new Set(runs.map((r) => r.id));
  return comparisons.find((c) => c.runs.length === ids.size && c.runs.every((m) => ids.has(m.run_id))) ?? null;
}

/** The run the others are measured against: the first normal run selected, else the first. */
export function selectedBaseline(runs: RunRecord[]): RunRecord | undefined {
  return runs.find((r) => r.mode === 'normal') ?? runs[0];
}

/** Where `run`'s output departs from `baseline`'s: by token where both kept theirs, else by text. */
function departure(baseline: RunRecord, run: RunRecord): string | null {
  if (baseline.token_ids && run.token_ids) {
    const at = firstDifference(baseline.token_ids, run.token_ids);
    return at === null ? null : `token ${at + 1}`;
  }
  const at = firstDifference(baseline.output ?? '', run.output ?? '');
  return at === null ? null : `character ${at}`;
}

/**
 * The selected runs against the baseline. Runs of `comparison` show its own figures (paired by
 * round, judged by its verdicts), so History never calls a gain what Compare called noise.
 */
export function compareSelected(runs: RunRecord[], comparison: Comparison | null = null): SelectedFigures[] {
  const baseline = selectedBaseline(runs);
  return runs.map((run) => {
    if (run === baseline || !baseline) {
      return { run, speedup: null, speedupCell: { text: 'baseline', tone: 'muted', title: null }, identical: null, differsAt: null };
    }
    const differsAt = departure(baseline, run);
    const member = comparison?.runs.find((m) => m.run_id === run.id);
    const speedup = member && comparison ? member.speedup : speedRatio(run, baseline);
    const speedupCell = member && comparison
      ? comparedCell(run, member.round, speedup, comparison)
      : selectedCell(run, baseline, speedup);
    return { run, speedup, speedupCell, identical: differsAt === null, differsAt };
  });
}

/** Decode speeds where both runs have them, else tokens/s: one measure for both. */
function speedRatio(run: RunRecord, baseline: RunRecord): number | null {
  const decode = run.decode_tokens_per_second !== null && baseline.decode_tokens_per_second !== null;
  const [speed, base] = decode
    ? [run.decode_tokens_per_second, baseline.decode_tokens_per_second]
    : [run.tokens_per_second, baseline.tokens_per_second];
  return speed !== null && base !== null && base > 0 ? speed / base : null;
}

function comparedCell(run: RunRecord, round: number, speedup: number | null, comparison: Comparison): SpeedupCell {
  if (run.mode === 'normal') {
    return { text: `round ${round + 1} baseline`, tone: 'muted', title: "each round's runs are measured against that round's normal run" };
  }
  if (speedup === null) return { text: '–', tone: 'muted', title: 'no finished normal run in its round' };
  const figures = comparison.modes.find((m) => m.mode === run.mode);
  if (!figures) return { text: formatSpeedup(speedup), tone: 'plain', title: null };
  const { text } = verdictText(figures);
  if (isNoise(figures.verdict)) return { text: `noise (measured ${formatSpeedup(speedup)})`, tone: 'muted', title: text };
  return { text: formatSpeedup(speedup), tone: figures.verdict === 'faster' ? 'gain' : 'plain', title: text };
}

/** Runs picked by hand: one run each, so nothing is called a gain (Compare repeats). */
function selectedCell(run: RunRecord, baseline: RunRecord, speedup: number | null): SpeedupCell {
  const measured = formatSpeedup(speedup);
  if (!samePrompt(baseline.prompt, run.prompt)) {
    return { text: `${measured} (another prompt)`, tone: 'muted', title: 'against a run of another prompt: different work' };
  }
  if (speedup === null) return { text: '–', tone: 'muted', title: 'one of the two runs has no speed' };
  if (run.mode === 'normal') {
    return { text: `${measured} (normal again)`, tone: 'muted', title: "both decoded plainly: the difference is the machine's noise" };
  }
  if (run.draft_tokens === 0) {
    return {
      text: `noise (measured ${measured})`,
      tone: 'muted',
      title: "it drafted nothing, so it decoded as normal does: the difference is the machine's",
    };
  }
  return { text: measured, tone: 'plain', title: 'one run each: Compare repeats the runs to tell speed from noise' };
}

/** Whether two runs were asked the same thing: the same text, or the same messages in order. */
export function samePrompt(a: PromptRecord, b: PromptRecord): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

/**
 * The letter of each run's prompt (A for the first run's, then B, C… as new prompts come), or
 * null when all the runs were asked the same thing.
 */
export function promptLetters(runs: Pick<RunRecord, 'prompt'>[]): string[] | null {
  const seen: PromptRecord[] = [];
  const letters = runs.map((run) => {
    let index = seen.findIndex((p) => samePrompt(p, run.prompt));
    if (index < 0) index = seen.push(run.prompt) - 1;
    return index < 26 ? String.fromCharCode(65 + index) : String(index + 1);
  });
  return seen.length > 1 ? letters : null;
}

/**
 * What a side by side of `runs` must say when they were not all asked the same thing: that their
 * outputs differ because their prompts do, and that their speeds are of different work. Null
 * when they share one prompt.
 */
export function promptMismatchText(runs: Pick<RunRecord, 'prompt'>[]): string | null {
  const letters = promptLetters(runs);
  if (!letters) return null;
  const count = new Set(letters).size;
  const sameLast = new Set(runs.map((r) => promptText(r.prompt))).size === 1;
  const how = sameLast
    ? `These runs were asked ${count} different prompts that end with the same message (their system prompts, earlier turns or chat format differ; marked ${[...new Set(letters)].join(', ')} in the Prompt row).`
    : `These runs were asked ${count} different prompts (marked ${[...new Set(letters)].join(', ')} in the Prompt row).`;
  return (
    `${how} Where a run’s prompt is not the baseline’s, its output differs because it answers something else, ` +
    'not because of how it was decoded, and its speed-up sets different work side by side. ' +
    'Select runs of one prompt to see what decoding changes.'
  );
}

function greedy(run: RunRecord): boolean {
  const sampling = run.sampling as { temperature?: unknown } | null;
  return sampling?.temperature === 0;
}

/**
 * The question for the model served now: where `run` parted from `baseline`, a normal run, and
 * how likely each token there was. Null unless both are greedy answers to the same prompt by
 * `servedModel` (the path of the model loaded now), kept their tokens, and differ.
 */
export function divergenceQuestion(
  baseline: RunRecord,
  run: RunRecord,
  servedModel: string | null,
): DivergenceRequest | null {
  const expected = baseline.token_ids;
  const got = run.token_ids;
  const comparable =
    baseline.mode === 'normal' &&
    run !== baseline &&
    baseline.engine === null &&
    run.engine === null &&
    baseline.model.path === servedModel &&
    run.model.path === servedModel &&
    greedy(baseline) &&
    greedy(run) &&
    JSON.stringify(baseline.prompt) === JSON.stringify(run.prompt);
  if (!comparable || !expected || !got || firstDifference(expected, got) === null) return null;
  const prompt = baseline.prompt;
  return prompt.kind === 'text'
    ? { prompt: prompt.content, expected, got }
    : { messages: prompt.content.map((m) => ({ role: m.role, content: m.content })), expected, got };
}

/** The order after a click on column `key`: the same column flips, another starts descending. */
export function nextSort(
  current: { sort: SortKey; order: 'asc' | 'desc' },
  key: SortKey,
): { sort: SortKey; order: 'asc' | 'desc' } {
  if (current.sort === key) return { sort: key, order: current.order === 'asc' ? 'desc' : 'asc' };
  return { sort: key, order: 'desc' };
}

/** The ids picked to compare with `id` added at the end, or removed when it was there. */
export function togglePick(picks: number[], id: number): number[] {
  return picks.includes(id) ? picks.filter((p) => p !== id) : [...picks, id];
}

/**
 * Whether `run` is a run's whole record (from `getRun`), with its tokens, rather than a listing's
 * entry, which leaves them out.
 */
export function isWholeRun(run: ListedRun | RunRecord): run is RunRecord {
  return 'token_ids' in run;
}

/** The picked runs whose records are at hand, in the order they were picked. */
export function pickedRuns(picks: number[], records: Record<number, RunRecord>): RunRecord[] {
  return picks.flatMap((id) => (records[id] ? [records[id]] : []));
}

/** Milliseconds between replayed steps at `stepsPerSecond` (kept within 0.5..100). */
export function replayDelayMs(stepsPerSecond: number): number {
  const speed = Number.isFinite(stepsPerSecond) ? Math.min(100, Math.max(0.5, stepsPerSecond)) : 10;
  return 1000 / speed;
}

export interface ReplayTotals {
  steps: number;
  tokens: number;
  /** Tokens per step, the model's own included (1 before any step). */
  meanAccepted: number;
  /** Drafted tree nodes, and of them the accepted ones (tokens beyond the model's own). */
  drafted: number;
  acceptedDrafts: number;
  draftMs: number;
  verifyMs: number;
}

/** Running totals of the first `count` steps of a stored run (at the end, the run's figures). */
export function replayTotals(steps: StepRecord[], count: number): ReplayTotals {
  const shown = steps.slice(0, Math.max(0, count));
  const figures = stepFigures(shown);
  const sum = (f: (s: StepRecord) => number) => shown.reduce((t, s) => t + f(s), 0);
  return {
    steps: figures.steps,
    tokens: figures.tokens!,
    meanAccepted: figures.tokensPerStep,
    drafted: figures.drafted!,
    acceptedDrafts: figures.accepted!,
    draftMs: sum((s) => s.draft_ms),
    verifyMs: sum((s) => s.verify_ms),
  };
}

/**
 * The tokens a run had written by the end of the replayed steps whose accepted tokens number
 * `accepted`: the first, from reading the prompt, and the steps' own. The end token a step accepts
 * is not written, so the count stops at the `written` that the run's details show.
 */
export function replayedTokens(accepted: number, written: number): number {
  return Math.min(written, accepted + (written > 0 ? 1 : 0));
}

/** How much a stored run drafted (`figures` from its steps), or why it drafted nothing. */
export function draftingText(mode: Mode, figures: RunFigures): string {
  if (!figures.drafted) {
    if (mode === 'lookup') return 'nothing: no earlier text matched the latest tokens where drafting would pay';
    if (mode === 'auto') {
      return (
        'nothing: neither an earlier match nor the heads had a draft that the budget expected to pay ' +
        'on this machine; choose a named tree to see every guess'
      );
    }
    return (
      'nothing: under auto drafting the draft budget found no draft that pays on this machine ' +
      '(each extra token costs a share of a step here); choose a named tree to see the heads guess'
    );
  }
  return draftedText(figures)!;
}
