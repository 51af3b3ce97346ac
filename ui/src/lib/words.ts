// Counts in words, so that every count reads "1 token", "2 tokens": one helper rather than a
// suffix picked by hand at each place.

/** `one` for a count of 1, else `many` (the word with an s unless given). */
export function plural(count: number, one: string, many = `${one}s`): string {
  return count === 1 ? one : many;
}

/** "1 token", "0 tokens", "3 repositories": the count (as `shown`, when given) and its word. */
export function counted(count: number, one: string, many = `${one}s`, shown: string = String(count)): string {
  return `${shown} ${plural(count, one, many)}`;
}

/** `text` ended as a sentence: a full stop added unless it already ends with one, `?` or `!`. */
export function sentence(text: string): string {
  return /[.?!]$/.test(text.trimEnd()) ? text.trimEnd() : `${text.trimEnd()}.`;
}
