import { describe, expect, it } from 'vitest';
import { memoryStorage } from './memoryStorage';
import {
  displayTitle,
  OPEN_CONVERSATION_KEY,
  openConversation,
  relativeTime,
  rememberConversation,
  rememberedRunTree,
  rememberRunTree,
  RUN_TREES_KEPT,
  RUN_TREES_KEY,
} from './conversations';

describe('displayTitle', () => {
  it('names an untitled conversation "New chat"', () => {
    expect(displayTitle('')).toBe('New chat');
    expect(displayTitle('  ')).toBe('New chat');
    expect(displayTitle('Name a fruit.')).toBe('Name a fruit.');
  });
});

describe('relativeTime', () => {
  const now = Date.parse('2025-03-20T12:00:00Z');
  const ago = (seconds: number) => new Date(now - seconds * 1000).toISOString();

  it('counts minutes, hours and days', () => {
    expect(relativeTime(ago(0), now)).toBe('just now');
    expect(relativeTime(ago(59), now)).toBe('just now');
    expect(relativeTime(ago(60), now)).toBe('1 min ago');
    expect(relativeTime(ago(59 * 60 + 59), now)).toBe('59 min ago');
    expect(relativeTime(ago(3600), now)).toBe('1 h ago');
    expect(relativeTime(ago(23 * 3600 + 3599), now)).toBe('23 h ago');
    expect(relativeTime(ago(24 * 3600), now)).toBe('yesterday');
    expect(relativeTime(ago(2 * 24 * 3600), now)).toBe('2 days ago');
    expect(relativeTime(ago(6 * 24 * 3600 + 3600), now)).toBe('6 days ago');
  });

  it('gives the local date after a week, with the year when it is another', () => {
    const local = (y: number, m: number, d: number) => new Date(y, m, d, 9, 30).getTime();
    const today = local(2025, 2, 20);
    expect(relativeTime(new Date(local(2025, 2, 12)).toISOString(), today)).toBe('12 Mar');
    expect(relativeTime(new Date(local(2024, 11, 31)).toISOString(), today)).toBe('31 Dec 2024');
  });

  it('takes times ahead of the clock as just now, and unreadable ones as nothing', () => {
    expect(relativeTime(new Date(now + 90_000).toISOString(), now)).toBe('just now');
    expect(relativeTime('not a time', now)).toBe('');
  });

  it('reads the backend’s nanosecond timestamps', () => {
    expect(relativeTime('2025-03-20T11:55:00.259104034Z', now)).toBe('4 min ago');
  });
});

describe('the open conversation', () => {
  it('is remembered, read back and forgotten', () => {
    const storage = memoryStorage();
    expect(openConversation(storage)).toBeNull();
    rememberConversation(storage, 12);
    expect(storage.items.get(OPEN_CONVERSATION_KEY)).toBe('12');
    expect(openConversation(storage)).toBe(12);
    rememberConversation(storage, null);
    expect(storage.items.has(OPEN_CONVERSATION_KEY)).toBe(false);
    expect(openConversation(storage)).toBeNull();
  });

  it('ignores what is not an id, and storage that refuses', () => {
    for (const value of ['', 'abc', '0', '-3', '1.5']) {
      expect(openConversation(memoryStorage({ [OPEN_CONVERSATION_KEY]: value }))).toBeNull();
    }
    const refusing = {
      getItem: () => {
        throw new Error('denied');
      },
      setItem: () => {
        throw new Error('denied');
      },
      removeItem: () => {
        throw new Error('denied');
      },
    };
    expect(openConversation(refusing)).toBeNull();
    expect(() => rememberConversation(refusing, 3)).not.toThrow();
    expect(openConversation(undefined)).toBeNull();
  });
});

describe('the tree each run was asked with', () => {
  it('is remembered by run id and read back', () => {
    const storage = memoryStorage();
    expect(rememberedRunTree(storage, 3)).toBeNull();
    rememberRunTree(storage, 3, 'mc_sim_7b_63');
    rememberRunTree(storage, 4, 'auto');
    expect(rememberedRunTree(storage, 3)).toBe('mc_sim_7b_63');
    expect(rememberedRunTree(storage, 4)).toBe('auto');
    expect(JSON.parse(storage.items.get(RUN_TREES_KEY)!)).toEqual({ 3: 'mc_sim_7b_63', 4: 'auto' });
  });

  it('forgets the oldest runs beyond the most kept', () => {
    const storage = memoryStorage();
    for (let id = 1; id <= RUN_TREES_KEPT + 2; id++) rememberRunTree(storage, id, `chain-${id}`);
    expect(rememberedRunTree(storage, 1)).toBeNull();
    expect(rememberedRunTree(storage, 2)).toBeNull();
    expect(rememberedRunTree(storage, 3)).toBe('chain-3');
    expect(rememberedRunTree(storage, RUN_TREES_KEPT + 2)).toBe(`chain-${RUN_TREES_KEPT + 2}`);
    expect(Object.keys(JSON.parse(storage.items.get(RUN_TREES_KEY)!))).toHaveLength(RUN_TREES_KEPT);
  });

  it('reads nothing from a damaged or refused store', () => {
    expect(rememberedRunTree(memoryStorage({ [RUN_TREES_KEY]: 'not json' }), 3)).toBeNull();
    expect(rememberedRunTree(memoryStorage({ [RUN_TREES_KEY]: '[1,2]' }), 0)).toBeNull();
    expect(rememberedRunTree(memoryStorage({ [RUN_TREES_KEY]: '{"3":5,"4":"auto"}' }), 3)).toBeNull();
    const refusing = {
      getItem: () => {
        throw new Error('refused');
      },
      setItem: () => {
        throw new Error('refused');
      },
      removeItem: () => {},
    };
    expect(rememberedRunTree(refusing, 3)).toBeNull();
    expect(() => rememberRunTree(refusing, 3, 'auto')).not.toThrow();
    expect(rememberedRunTree(undefined, 3)).toBeNull();
  });
});
