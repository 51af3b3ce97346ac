import { describe, expect, it } from 'vitest';
import { pushWindow, stepAxisTop, stepSeries, themedAxis, withAlpha } from './chart';

describe('chart helpers', () => {
  it('adds an alpha to theme colours', () => {
    expect(withAlpha('#5b4cdb', 0.3)).toBe('rgba(91, 76, 219, 0.3)');
    expect(withAlpha(' #fff ', 0.5)).toBe('rgba(255, 255, 255, 0.5)');
    expect(withAlpha('#7cc4ff88', 1)).toBe('rgba(124, 196, 255, 1)');
    expect(withAlpha('rgb(1, 2, 3)', 2)).toBe('rgba(1, 2, 3, 1)');
    expect(withAlpha('rgba(1 2 3 / 50%)', 0.25)).toBe('rgba(1, 2, 3, 0.25)');
    expect(withAlpha('red', 0.5)).toBe('red');
  });

  it('lays out steps as columns numbered from 1', () => {
    const steps = [
      { accepted_len: 1, tree_depth: 0 },
      { accepted_len: 3, tree_depth: 4 },
    ];
    expect(stepSeries(steps)).toEqual([
      [1, 2],
      [1, 3],
      [0, 4],
    ]);
    expect(stepAxisTop(steps)).toBe(5);
    expect(stepAxisTop([])).toBe(2);
  });

  it('keeps a window of recent values', () => {
    expect(pushWindow([1, 2, 3], 4, 3)).toEqual([2, 3, 4]);
    expect(pushWindow([], 1, 3)).toEqual([1]);
  });
  it('styles axes from the theme', () => {
    const axis = themedAxis((name) => `var${name}`);
    expect(axis).toEqual({
      stroke: 'var--muted',
      grid: { stroke: 'var--border', width: 1 },
      ticks: { stroke: 'var--border', width: 1, size: 4 },
      font: '11px var--mono',
      labelFont: '11px var--font',
      labelSize: 16,
    });
  });
});
