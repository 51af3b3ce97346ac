// The history table: prompt text, query from filters, figures of selected runs.

import type { PromptRecord, RunQuery, RunRecord, RunStatus, SortKey, Mode } from './api/types';
import { firstDifference } from './run';

/** The text a person recognises a prompt by: the raw text, or the last user message. */
export function promptText(prompt: PromptRecord): string {
  if (prompt.kind === 'text') return prompt.content;
  const users = prompt.content.filter((m) => m.role === 'user');
  return (users[users.length - 1] ?? prompt.content[prompt.content.length - 1])?.content ?? '';
}

export interface HistoryFilters {
  mode: Mode | '';
  status: RunStatus | '';
  model: string;
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
  if (filters.model.trim()) query.model = filters.model.trim();
  if (filters.since) query.since = new Date(`${filters.since}T00:00:00`).toISOString();
  // The whole last day counts.
  if (filters.until) query.until = new Date(`${filters.until}T23:59:59.999`).toISOString();
  return query;
}

export interface SelectedFigures {
  run: RunRecord;
  /** Tokens/s over the baseline's (the first normal run selected, else the first). */
  speedup: number | null;
  identical: boolean | null;
  firstDifference: number | null;
}

export function compareSelected(runs: RunRecord[]): SelectedFigures[] {
  const baseline = runs.find((r) => r.mode === 'normal') ?? runs[0];
  return runs.map((run) => {
    if (run === baseline || !baseline) {
      return { run, speedup: null, identical: null, firstDifference: null };
    }
    const diff = firstDifference(baseline.output ?? '', run.output ?? '');
    const base = baseline.tokens_per_second ?? 0;
    return {
      run,
      speedup: base > 0 && run.tokens_per_second !== null ? run.tokens_per_second / base : null,
      identical: diff === null,
      firstDifference: diff,
    };
  });
}
