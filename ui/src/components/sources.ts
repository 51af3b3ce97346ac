// How token sources are named and coloured in the UI.

import { sourceName } from '../lib/inspector';
import { headOf } from '../lib/run';

/** The CSS colour variable a source is tinted with. */
export function sourceColor(source: string): string {
  if (source === 'lookup') return 'var(--src-lookup)';
  const head = headOf(source);
  if (head === null) return 'var(--src-model)';
  return head <= 4 ? `var(--head-${head})` : 'var(--head-other)';
}

/** A person's name for a source: "model", "lookup", "head 1" (heads are 0-based inside). */
export function sourceLabel(source: string): string {
  return sourceName(source);
}
