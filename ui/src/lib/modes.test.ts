import { describe, expect, it } from 'vitest';
import { acceptanceKind, autoModeLabel, availableMode, MODE_LABELS, MODES } from './modes';

describe('modes', () => {
  it('lists every mode in menu order with its name', () => {
    expect(MODES).toEqual(['normal', 'medusa', 'lookup', 'auto', 'draft', 'eagle']);
    expect(MODES.map((m) => MODE_LABELS[m])).toEqual(['Normal', 'Medusa', 'Prompt lookup', 'Auto', 'Draft model', 'EAGLE drafter']);
  });

  it('keeps the chosen mode while the model loads and falls back only when it lacks it', () => {
    // Loading: nothing is offered yet, and auto stays the choice.
    expect(availableMode('auto', [], false)).toBe('auto');
    expect(availableMode('auto', ['normal', 'lookup', 'auto'], true)).toBe('auto');
    // A model without heads: Medusa mode is not offered.
    expect(availableMode('medusa', ['normal', 'lookup', 'auto'], true)).toBe('normal');
  });

  it('names auto mode by what it drafts with', () => {
    expect(autoModeLabel(4)).toBe('Auto (lookup + Medusa, where each pays)');
    expect(autoModeLabel(null)).toBe('Auto (lookup + Medusa, where each pays)');
    expect(autoModeLabel(0)).toBe('Auto (lookup where it pays; no heads loaded)');
    expect(autoModeLabel(4, true)).toBe('Auto (lookup + Medusa + draft model, where each pays)');
    expect(autoModeLabel(0, true)).toBe('Auto (lookup + draft model, where each pays)');
    expect(autoModeLabel(4, false, true)).toBe('Auto (lookup + Medusa + EAGLE, where each pays)');
  });

  it('labels acceptance bars by head only in medusa mode', () => {
    expect(acceptanceKind('medusa')).toBe('head');
    expect(acceptanceKind('auto')).toBe('depth');
    expect(acceptanceKind('lookup')).toBe('depth');
    expect(acceptanceKind('normal')).toBe('depth');
    expect(acceptanceKind('draft')).toBe('draft');
  });
});
