import type uPlot from 'uplot';
import { onThemeChange } from '../lib/theme';

/**
 * Keeps the uPlot chart drawn in `host` as wide as `host`, and draws it anew (`rebuild`) when the
 * theme changes, since its colours are read from the theme. Returns what stops both.
 */
export function fitPlot(host: HTMLElement, plot: () => uPlot | null, height: () => number, rebuild: () => void): () => void {
  const resize = new ResizeObserver(() => {
    // A hidden view measures 0 wide: keep the last size until it shows again.
    if (host.clientWidth > 0) plot()?.setSize({ width: host.clientWidth, height: height() });
  });
  resize.observe(host);
  const stopFollowing = onThemeChange(rebuild);
  return () => {
    resize.disconnect();
    stopFollowing();
  };
}
