// What the chat's conversation list shows, and which conversation a page reopens. Pure (storage
// is passed in), so it is unit-tested directly.

/** Where the open conversation's id is kept, to reopen it after a reload or a restart. */
export const OPEN_CONVERSATION_KEY = 'medusa.chat.conversation';

/** A conversation's title as shown: an untitled one (no prompt sent yet) is a "New chat". */
export function displayTitle(title: string): string {
  return title.trim() === '' ? 'New chat' : title;
}

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

/**
 * When `iso` was, from `now` (ms): "just now", "5 min ago", "3 h ago", "yesterday", "4 days
 * ago", then the local date ("12 Mar", with the year when it is not this year's). Times ahead of
 * `now` (another clock) are "just now"; an unreadable time is ''.
 */
export function relativeTime(iso: string, now: number): string {
  const then = Date.parse(iso);
  if (Number.isNaN(then)) return '';
  const seconds = (now - then) / 1000;
  if (seconds < 60) return 'just now';
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes} min ago`;
  const hours = Math.floor(minutes / 60);
  if (hours < 24) return `${hours} h ago`;
  const days = Math.floor(hours / 24);
  if (days === 1) return 'yesterday';
  if (days < 7) return `${days} days ago`;
  const date = new Date(then);
  const day = `${date.getDate()} ${MONTHS[date.getMonth()]}`;
  return date.getFullYear() === new Date(now).getFullYear() ? day : `${day} ${date.getFullYear()}`;
}

type Storage = Pick<globalThis.Storage, 'getItem' | 'setItem' | 'removeItem'>;

/** The conversation the page had open, if any. */
export function openConversation(storage: Storage | undefined): number | null {
  let value: string | null = null;
  try {
    value = storage?.getItem(OPEN_CONVERSATION_KEY) ?? null;
  } catch {
    // Storage may be refused (private windows, policies): the page then starts a new chat.
  }
  const id = Number(value);
  return value !== null && Number.isSafeInteger(id) && id > 0 ? id : null;
}

/** Remembers the open conversation (null: none). */
export function rememberConversation(storage: Storage | undefined, id: number | null) {
  try {
    if (id === null) storage?.removeItem(OPEN_CONVERSATION_KEY);
    else storage?.setItem(OPEN_CONVERSATION_KEY, String(id));
  } catch {
    // Not remembered: the next page starts a new chat, nothing is lost.
  }
}

/**
 * Where the tree each chat answer was asked with is kept, by run id. A run records the tree it
 * drafted as rank paths, which `auto` and a named tree of the same shape share: only the page that
 * asked knows which of them was picked, so a reopened chat can pick it again.
 */
export const RUN_TREES_KEY = 'medusa.chat.runTrees';

/** The most runs whose tree is kept; the oldest are forgotten first. */
export const RUN_TREES_KEPT = 500;

function runTrees(storage: Storage | undefined): Record<string, string> {
  try {
    const parsed: unknown = JSON.parse(storage?.getItem(RUN_TREES_KEY) ?? '{}');
    if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) return {};
    return Object.fromEntries(Object.entries(parsed).filter(([, tree]) => typeof tree === 'string')) as Record<string, string>;
  } catch {
    // Unreadable or refused: no tree is known, the reopened chat matches the run's paths instead.
    return {};
  }
}

/** Remembers that run `runId` was asked with tree `tree` (a name the tree picker offers). */
export function rememberRunTree(storage: Storage | undefined, runId: number, tree: string) {
  const trees = runTrees(storage);
  delete trees[runId];
  trees[runId] = tree;
  // Integer keys iterate in ascending order: the lowest run ids, the oldest, go first.
  const ids = Object.keys(trees);
  for (const id of ids.slice(0, Math.max(0, ids.length - RUN_TREES_KEPT))) delete trees[id];
  try {
    storage?.setItem(RUN_TREES_KEY, JSON.stringify(trees));
  } catch {
    // Not kept: a reopened chat then matches the run's recorded paths.
  }
}

/** The tree run `runId` was asked with in this browser, if known. */
export function rememberedRunTree(storage: Storage | undefined, runId: number): string | null {
  return runTrees(storage)[runId] ?? null;
}
