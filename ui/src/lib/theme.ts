// The colour theme: the system's (the default), or light or dark as chosen in Settings, kept in
// the browser's storage. The page's root carries the theme in use as `data-theme`, which the
// stylesheets and the charts follow.

export type ThemeChoice = 'system' | 'light' | 'dark';
export type Theme = 'light' | 'dark';

export const THEME_KEY = 'medusa-playground.theme';
/** Sent on the window whenever the theme in use may have changed. */
export const THEME_EVENT = 'medusa-theme';

type Storage = Pick<globalThis.Storage, 'getItem' | 'setItem'>;

export function resolveTheme(choice: ThemeChoice, systemDark: boolean): Theme {
  return choice === 'system' ? (systemDark ? 'dark' : 'light') : choice;
}

export function readTheme(storage: Storage | undefined): ThemeChoice {
  const stored = storage?.getItem(THEME_KEY);
  return stored === 'light' || stored === 'dark' ? stored : 'system';
}

const systemDark = () => matchMedia('(prefers-color-scheme: dark)');

function apply(choice: ThemeChoice) {
  document.documentElement.dataset.theme = resolveTheme(choice, systemDark().matches);
  window.dispatchEvent(new Event(THEME_EVENT));
}

/** Applies the stored choice now and again whenever the system's changes. */
export function startTheme(storage: Storage | undefined) {
  apply(readTheme(storage));
  systemDark().addEventListener('change', () => apply(readTheme(storage)));
}

/** Keeps `choice` and applies it. */
export function chooseTheme(storage: Storage | undefined, choice: ThemeChoice) {
  storage?.setItem(THEME_KEY, choice);
  apply(choice);
}

/** Calls `listener` whenever the theme in use may have changed; returns the unsubscribe. */
export function onThemeChange(listener: () => void): () => void {
  window.addEventListener(THEME_EVENT, listener);
  return () => window.removeEventListener(THEME_EVENT, listener);
}
