import { describe, expect, it } from 'vitest';
import type { Comparison } from './api/types';
import { comparisonLosses, deleteQuestion, deleteReportText, importReportText, parseExport } from './curation';

// Only the fields the helpers read.
const comparison = (id: number, runIds: number[]) => ({ id, runs: runIds.map((run_id) => ({ run_id })) }) as unknown as Comparison;

describe('deleting runs', () => {
  const comparisons = [comparison(3, [1, 2, 3]), comparison(4, [5, 6])];

  it('counts what each comparison loses, and when it loses every run', () => {
    const runs = [
      { id: 1, comparison_id: 3 },
      { id: 5, comparison_id: 4 },
      { id: 6, comparison_id: 4 },
      { id: 9, comparison_id: null },
    ];
    expect(comparisonLosses(runs, comparisons)).toEqual([
      { id: 3, losing: 1, removed: false },
      { id: 4, losing: 2, removed: true },
    ]);
  });

  it('never calls a comparison removed when it is not in the list', () => {
    expect(comparisonLosses([{ id: 7, comparison_id: 8 }], comparisons)).toEqual([{ id: 8, losing: 1, removed: false }]);
  });

  it('asks with the number of runs and the comparisons affected', () => {
    expect(deleteQuestion(1, [])).toBe('Delete 1 run? This cannot be undone.');
    expect(
      deleteQuestion(3, [
        { id: 3, losing: 1, removed: false },
        { id: 4, losing: 2, removed: true },
      ]),
    ).toBe('Delete 3 runs? Comparison #3 loses 1 run. Comparison #4 goes with them. This cannot be undone.');
    expect(deleteQuestion(1, [{ id: 5, losing: 1, removed: true }])).toBe('Delete 1 run? Comparison #5 goes with it. This cannot be undone.');
    expect(deleteQuestion(2, [{ id: 6, losing: 2, removed: false }])).toBe('Delete 2 runs? Comparison #6 loses 2 runs. This cannot be undone.');
  });

  it('reports a deletion', () => {
    expect(deleteReportText({ deleted: 2, comparisons_changed: [3], comparisons_removed: [] })).toBe(
      'Deleted 2 runs; comparison #3 measured again from the runs left',
    );
    expect(deleteReportText({ deleted: 1, comparisons_changed: [], comparisons_removed: [4] })).toBe(
      'Deleted 1 run; comparison #4 removed (no run left)',
    );
  });
});

describe('importing runs', () => {
  it('reports the counts', () => {
    const report = { imported: 1, skipped_duplicates: 2, rejected: 0, rejections: [], comparisons_imported: 0, comparisons_skipped: 0, training_jobs_imported: 0 };
    expect(importReportText(report)).toBe('Imported 1 run; skipped 2 duplicates; rejected 0');
    expect(importReportText({ ...report, comparisons_imported: 1, comparisons_skipped: 1 })).toBe(
      'Imported 1 run; skipped 2 duplicates; rejected 0; 1 comparison imported, 1 skipped',
    );
    expect(importReportText({ ...report, training_jobs_imported: 2 })).toBe(
      'Imported 1 run; skipped 2 duplicates; rejected 0; 2 training jobs imported',
    );
  });

  it('reads only JSON objects as export documents', () => {
    expect(parseExport('{"runs":[]}')).toEqual({ runs: [] });
    expect(() => parseExport('id,mode\n1,normal')).toThrow(/not JSON/);
    expect(() => parseExport('[1]')).toThrow(/not a history export/);
  });
});
