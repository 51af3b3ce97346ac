// Data and colours for the uPlot charts, kept pure so they are unit-tested.

/** The charts' axis style from the theme's variables (`css` reads one). */
export function themedAxis(css: (name: string) => string) {
  return {
    stroke: css('--muted'),
    grid: { stroke: css('--border'), width: 1 },
    ticks: { stroke: css('--border'), width: 1, size: 4 },
    font: '11px ' + css('--mono'),
    labelFont: '11px ' + css('--font'),
    labelSize: 16,
  };
}

/** `color` at opacity `alpha` (0..1): hex (#rgb, #rrggbb, #rrggbbaa) and rgb()/rgba() are understood. */
export function withAlpha(color: string, alpha: number): string {
  const c = color.trim();
  const a = Math.round(Math.min(1, Math.max(0, alpha)) * 1000) / 1000;
  let m = /^#([0-9a-f]{3,4})$/i.exec(c);
  if (m) {
    const [r, g, b] = [...m[1]].map((d) => parseInt(d + d, 16));
    return `rgba(${r}, ${g}, ${b}, ${a})`;
  }
  m = /^#([0-9a-f]{6})(?:[0-9a-f]{2})?$/i.exec(c);
  if (m) {
    const n = parseInt(m[1], 16);
    return `rgba(${(n >> 16) & 255}, ${(n >> 8) & 255}, ${n & 255}, ${a})`;
  }
  m = /^rgba?\(\s*([\d.]+)[\s,]+([\d.]+)[\s,]+([\d.]+)/i.exec(c);
  if (m) return `rgba(${m[1]}, ${m[2]}, ${m[3]}, ${a})`;
  return c;
}

export interface ChartStep {
  accepted_len: number;
  tree_depth: number;
}

/** uPlot's columns for a step chart: step number (1-based), tokens accepted, tree depth. */
export function stepSeries(steps: readonly ChartStep[]): [number[], number[], number[]] {
  return [steps.map((_, i) => i + 1), steps.map((s) => s.accepted_len), steps.map((s) => s.tree_depth)];
}

/** Top of the token axis: one above the highest value shown, at least 2. */
export function stepAxisTop(steps: readonly ChartStep[]): number {
  let top = 0;
  for (const s of steps) top = Math.max(top, s.accepted_len, s.tree_depth);
  return Math.max(2, top + 1);
}

/** `values` with `value` appended, keeping the last `size`. */
export function pushWindow<T>(values: readonly T[], value: T, size: number): T[] {
  const next = [...values, value];
  return next.length > size ? next.slice(next.length - size) : next;
}
