import { describe, expect, it } from 'vitest';
import { memoryStorage } from './memoryStorage';
import { readTheme, resolveTheme, THEME_KEY } from './theme';

describe('theme', () => {
  it('follows the system unless light or dark is chosen', () => {
    expect(resolveTheme('system', true)).toBe('dark');
    expect(resolveTheme('system', false)).toBe('light');
    expect(resolveTheme('light', true)).toBe('light');
    expect(resolveTheme('dark', false)).toBe('dark');
  });

  it('reads a stored choice, and the system for anything else', () => {
    expect(readTheme(memoryStorage({ [THEME_KEY]: 'dark' }))).toBe('dark');
    expect(readTheme(memoryStorage({ [THEME_KEY]: 'purple' }))).toBe('system');
    expect(readTheme(memoryStorage())).toBe('system');
    expect(readTheme(undefined)).toBe('system');
  });
});
