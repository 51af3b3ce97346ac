import { describe, expect, it } from 'vitest';
import { acceptanceKind, autoModeLabel, MODE_LABELS, MODES } from './modes';

describe('modes', () => {
  it('lists every mode in menu order with its name', () => {
    expect(MODES).toEqual(['normal', 'medusa', 'lookup', 'auto']);
    expect(MODES.map((m) => MODE_LABELS[m])).toEqual(['Normal', 'Medusa', 'Prompt lookup', 'Auto']);
  });

  it('names auto mode by what it drafts with', () => {
    expect(autoModeLabel(4)).toBe('Auto (lookup + Medusa, where each pays)');
    expect(autoModeLabel(null)).toBe('Auto (lookup + Medusa, where each pays)');
    expect(autoModeLabel(0)).toBe('Auto (lookup where it pays; no heads loaded)');
  });

  it('labels acceptance bars by head only in medusa mode', () => {
    expect(acceptanceKind('medusa')).toBe('head');
    expect(acceptanceKind('auto')).toBe('depth');
    expect(acceptanceKind('lookup')).toBe('depth');
    expect(acceptanceKind('normal')).toBe('depth');
  });
});
