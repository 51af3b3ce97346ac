// The decoding modes as the menus list and name them.

import type { Mode } from './api/types';

/** Every mode, in the order menus list them. */
export const MODES: readonly Mode[] = ['normal', 'medusa', 'lookup', 'auto', 'draft', 'eagle'];

/** A mode's short name, for headings, pills and filters. */
export const MODE_LABELS: Record<Mode, string> = {
  normal: 'Normal',
  medusa: 'Medusa',
  lookup: 'Prompt lookup',
  auto: 'Auto',
  draft: 'Draft model',
  eagle: 'EAGLE drafter',
};

/**
 * Auto mode's name in a mode menu, given the loaded model's head count (null: no model known
 * yet) and whether a draft model and an EAGLE drafter are loaded. Without heads it drafts with
 * lookup (and the other drafters), so the menu says so rather than promising them.
 */
export function autoModeLabel(headCount: number | null, draftModel = false, eagle = false): string {
  const drafters = [
    'lookup',
    ...(headCount !== 0 ? ['Medusa'] : []),
    ...(draftModel ? ['draft model'] : []),
    ...(eagle ? ['EAGLE'] : []),
  ];
  if (drafters.length === 1) return 'Auto (lookup where it pays; no heads loaded)';
  return `Auto (${drafters.join(' + ')}, where each pays)`;
}

/**
 * The mode a menu keeps once it knows what the loaded model offers (`modes`; `loaded`: whether
 * a model is loaded): the chosen one where offered, else normal. While no model is loaded yet
 * nothing is offered, and the choice stays as it is.
 */
export function availableMode(mode: Mode, modes: readonly Mode[], loaded: boolean): Mode {
  return !loaded || modes.includes(mode) ? mode : 'normal';
}

/**
 * How a run's acceptance per depth is labelled: Medusa head k drafts depth k, so its bars are
 * heads; lookup, the draft model and auto (which merges drafters at each depth) have depths, not
 * heads; the draft model's bars take its colour.
 */
export function acceptanceKind(mode: string): 'head' | 'depth' | 'draft' {
  if (mode === 'medusa') return 'head';
  return mode === 'draft' ? 'draft' : 'depth';
}
