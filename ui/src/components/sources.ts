// How token sources are coloured in the UI (their names are in lib/inspector.ts).

import { headOf } from '../lib/run';

/** The CSS colour variable a source is tinted with. */
export function sourceColor(source: string): string {
  if (source === 'lookup') return 'var(--src-lookup)';
  if (source === 'draft_model') return 'var(--src-draft)';
  if (source === 'eagle') return 'var(--src-eagle)';
  const head = headOf(source);
  if (head === null) return 'var(--src-model)';
  return head <= 4 ? `var(--head-${head})` : 'var(--head-other)';
}
