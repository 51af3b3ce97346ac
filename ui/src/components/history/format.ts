// How History's tables and detail pane write times and figures.

/** A stored timestamp in the reader's locale, or a dash. */
export function time(iso: string | null): string {
  return iso ? new Date(iso).toLocaleString() : '–';
}

/** A compact date and time, to the minute, for narrow tables. */
export function shortTime(iso: string | null): string {
  return iso ? new Date(iso).toLocaleString(undefined, { dateStyle: 'short', timeStyle: 'short' }) : '–';
}

/** `value` with `digits` decimals, or a dash when there is none. */
export function num(value: number | null | undefined, digits = 1): string {
  return value === null || value === undefined ? '–' : value.toFixed(digits);
}
