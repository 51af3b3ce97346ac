// What deleting runs will do to their comparisons, and the reports of deletions and imports, in
// words: History's confirmation and notes.

import type { Comparison, DeleteReport, ImportReport, RunRecord } from './api/types';
import { counted } from './words';

export interface ComparisonLoss {
  id: number;
  /** How many of the runs to delete belong to it. */
  losing: number;
  /** Whether it would lose every run it has (the backend then removes it). */
  removed: boolean;
}

/**
 * The comparisons the runs to delete belong to, with how many runs each would lose. A comparison's
 * size comes from the comparison list; one not listed (older than the list's page) counts only
 * the runs at hand, so it is never said to be removed on a guess.
 */
export function comparisonLosses(runs: Pick<RunRecord, 'id' | 'comparison_id'>[], comparisons: Comparison[]): ComparisonLoss[] {
  const losing = new Map<number, number>();
  for (const run of runs) {
    if (run.comparison_id !== null) losing.set(run.comparison_id, (losing.get(run.comparison_id) ?? 0) + 1);
  }
  return [...losing].map(([id, count]) => {
    const known = comparisons.find((c) => c.id === id);
    return { id, losing: count, removed: known !== undefined && count >= known.runs.length };
  });
}

/**
 * The confirmation's question, then what each comparison would lose: `Delete 3 runs? Comparison #3
 * loses 1 run. Comparison #4 goes with them. This cannot be undone.`
 */
export function deleteQuestion(count: number, losses: ComparisonLoss[]): string {
  const them = count === 1 ? 'it' : 'them';
  const parts = losses.map((l) =>
    l.removed ? `Comparison #${l.id} goes with ${them}.` : `Comparison #${l.id} loses ${counted(l.losing, 'run')}.`,
  );
  return [`Delete ${counted(count, 'run')}?`, ...parts, 'This cannot be undone.'].join(' ');
}

/** `Deleted 2 runs; comparison #3 measured again from the runs left`. */
export function deleteReportText(report: DeleteReport): string {
  const parts = [`Deleted ${counted(report.deleted, 'run')}`];
  for (const id of report.comparisons_changed) parts.push(`comparison #${id} measured again from the runs left`);
  for (const id of report.comparisons_removed) parts.push(`comparison #${id} removed (no run left)`);
  return parts.join('; ');
}

/** How many reasons an import note lists; the rest are counted. */
export const REASONS_SHOWN = 3;

/** The import's counts in one line; the first rejection reasons go under it. */
export function importReportText(report: ImportReport): string {
  const parts = [
    `Imported ${counted(report.imported, 'run')}`,
    `skipped ${counted(report.skipped_duplicates, 'duplicate')}`,
    `rejected ${report.rejected}`,
  ];
  if (report.comparisons_imported || report.comparisons_skipped) {
    parts.push(`${counted(report.comparisons_imported, 'comparison')} imported, ${report.comparisons_skipped} skipped`);
  }
  if (report.training_jobs_imported) {
    parts.push(`${counted(report.training_jobs_imported, 'training job')} imported`);
  }
  return parts.join('; ');
}

/**
 * The JSON of an export file, or an error saying why it is not one. Only the shape an import
 * needs is checked here; the backend validates every run.
 */
export function parseExport(text: string): unknown {
  let document: unknown;
  try {
    document = JSON.parse(text);
  } catch {
    throw new Error('the file is not JSON: import a JSON export (Export → JSON)');
  }
  if (document === null || typeof document !== 'object' || Array.isArray(document)) {
    throw new Error('the file is not a history export: import a JSON export (Export → JSON)');
  }
  return document;
}
