import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { Conversation, ConversationMessage, RunRecord } from './api/types';
import type { Turn } from './chat';
import { ChatSession, emptyChat, followTurns, FOLLOW_MS, type ChatApi, type ChatState } from './chatSession';
import { OPEN_CONVERSATION_KEY } from './conversations';
import { memoryStorage } from './memoryStorage';

function message(id: number, role: 'user' | 'assistant', content: string, run_id: number | null = null, answering = false): ConversationMessage {
  return { id, role, content, run_id, answering, created_at: '2025-03-12T10:00:00Z' };
}

function stored(id: number, messages: ConversationMessage[], system_prompt = ''): Conversation {
  return { id, title: 'T', system_prompt, created_at: '2025-03-12T10:00:00Z', updated_at: '2025-03-12T10:00:00Z', messages };
}

function notFound() {
  return Object.assign(new Error('no such conversation'), { code: 'not_found' });
}

/** A session on a plain state, with an API whose methods each test stubs as it needs. */
function setup(api: Partial<ChatApi> = {}, initial: Record<string, string> = {}) {
  const state: ChatState = emptyChat();
  const storage = memoryStorage(initial);
  const shown = vi.fn();
  const fake = {
    createConversation: vi.fn(async (patch) => stored(7, [], patch?.system_prompt ?? '')),
    getConversation: vi.fn(async (id: number) => stored(id, [])),
    updateConversation: vi.fn(async (id: number, patch) => stored(id, [], patch.system_prompt ?? '')),
    getRun: vi.fn(),
    ...api,
  } as ChatApi;
  const restored = vi.fn();
  const session = new ChatSession(state, () => fake, storage, shown, restored);
  return { state, storage, shown, restored, api: fake, session };
}

// Taken before the tests fake the timers, to let pending promise callbacks run.
const realSetTimeout = setTimeout;
const settle = () => new Promise((resolve) => realSetTimeout(resolve, 0));

describe('followTurns', () => {
  it('updates answers being written in place when the messages are the same', () => {
    const turns: Turn[] = [
      { id: 0, role: 'user', content: 'Hi' },
      { id: 1, role: 'assistant', content: 'Hel', restored: true, runId: null, answering: true },
    ];
    const result = followTurns(turns, [message(1, 'user', 'Hi'), message(2, 'assistant', 'Hello!', 5)], 9);
    expect(result).toBe(turns);
    expect(turns[1]).toMatchObject({ id: 1, content: 'Hello!', answering: false, runId: 5 });
  });

  it('leaves finished turns alone', () => {
    const turns: Turn[] = [{ id: 0, role: 'user', content: 'Hi (edited here)' }];
    expect(followTurns(turns, [message(1, 'user', 'Hi')], 9)[0].content).toBe('Hi (edited here)');
  });

  it('rebuilds the turns, numbered on, when the messages changed', () => {
    const turns: Turn[] = [{ id: 0, role: 'user', content: 'Hi' }];
    const result = followTurns(turns, [message(1, 'user', 'Hi'), message(2, 'assistant', 'Yo', 3)], 9);
    expect(result).not.toBe(turns);
    expect(result.map((t) => t.id)).toEqual([9, 10]);
  });
});

describe('ChatSession', () => {
  beforeEach(() => vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] }));
  afterEach(() => vi.useRealTimers());

  it('numbers the turns it adds', () => {
    const { state, session } = setup();
    session.push({ role: 'user', content: 'a' });
    session.push({ role: 'assistant', content: 'b' });
    expect(state.turns.map((t) => t.id)).toEqual([0, 1]);
  });

  it('creates the conversation once, with the system prompt, and remembers it', async () => {
    const { state, storage, api, session } = setup();
    state.system = '  Be brief. ';
    expect(await session.ensureConversation()).toBe(7);
    expect(api.createConversation).toHaveBeenCalledWith({ system_prompt: 'Be brief.' });
    expect(state).toMatchObject({ conversationId: 7, savedSystem: 'Be brief.', listVersion: 1 });
    expect(storage.items.get(OPEN_CONVERSATION_KEY)).toBe('7');
    expect(await session.ensureConversation()).toBe(7);
    expect(api.createConversation).toHaveBeenCalledTimes(1);
  });

  it('does not adopt a conversation created for a chat left meanwhile', async () => {
    const { state, session } = setup();
    const pending = session.ensureConversation();
    session.leave();
    expect(await pending).toBe(7);
    expect(state.conversationId).toBeNull();
  });

  it('reopens the remembered conversation', async () => {
    const { state, shown, session } = setup(
      { getConversation: vi.fn(async (id: number) => stored(id, [message(1, 'user', 'Hi')], 'Sys')) },
      { [OPEN_CONVERSATION_KEY]: '4' },
    );
    session.reopenLast();
    await settle();
    expect(state).toMatchObject({ conversationId: 4, system: 'Sys', savedSystem: 'Sys' });
    expect(state.turns).toHaveLength(1);
    expect(shown).toHaveBeenCalled();
  });

  it('forgets a remembered conversation that is gone, silently', async () => {
    const { state, storage, session } = setup(
      { getConversation: vi.fn(async () => Promise.reject(notFound())) },
      { [OPEN_CONVERSATION_KEY]: '4' },
    );
    session.reopenLast();
    await settle();
    expect(storage.items.has(OPEN_CONVERSATION_KEY)).toBe(false);
    expect(state.chatError).toBeNull();
  });

  it('does not reopen over a chat already begun', async () => {
    const { state, session } = setup({}, { [OPEN_CONVERSATION_KEY]: '4' });
    session.reopenLast();
    session.push({ role: 'user', content: 'Hi' });
    await settle();
    expect(state.conversationId).toBeNull();
  });

  it('says why a conversation could not be opened', async () => {
    const { state, session } = setup({ getConversation: vi.fn(async () => Promise.reject(new Error('offline'))) });
    await session.open(3);
    expect(state.chatError).toBe('Chat #3 could not be opened: offline');
    expect(state.listVersion).toBe(1);
  });

  it('follows an answer being written until it ends', async () => {
    let calls = 0;
    const getConversation = vi.fn(async (id: number) =>
      stored(id, [message(1, 'user', 'Hi'), message(2, 'assistant', ++calls < 3 ? 'Hel' : 'Hello!', 5, calls < 3)]),
    );
    const { state, session } = setup({ getConversation });
    await session.open(2);
    expect(state.turns[1]).toMatchObject({ content: 'Hel', answering: true });
    for (let i = 0; i < 3; i++) {
      await vi.advanceTimersByTimeAsync(FOLLOW_MS);
      await settle();
    }
    expect(getConversation).toHaveBeenCalledTimes(3);
    expect(state.turns[1]).toMatchObject({ content: 'Hello!', answering: false, runId: 5 });
    expect(state.listVersion).toBe(1);
  });

  it('stops following when the chat is left', async () => {
    const getConversation = vi.fn(async (id: number) => stored(id, [message(2, 'assistant', 'Hel', null, true)]));
    const { session } = setup({ getConversation });
    await session.open(2);
    session.leave();
    await vi.advanceTimersByTimeAsync(FOLLOW_MS * 3);
    expect(getConversation).toHaveBeenCalledTimes(1);
  });

  it('clears the chat and forgets the conversation', async () => {
    const { state, storage, session } = setup();
    state.system = 'Sys';
    await session.ensureConversation();
    session.push({ role: 'user', content: 'Hi' });
    session.clear();
    expect(state).toMatchObject({ turns: [], system: '', savedSystem: '', conversationId: null });
    expect(storage.items.has(OPEN_CONVERSATION_KEY)).toBe(false);
  });

  it('saves the system prompt, and says when it could not', async () => {
    const { state, session, api } = setup();
    await session.ensureConversation();
    await session.saveSystem(7, 'New');
    expect(state).toMatchObject({ savedSystem: 'New', systemError: null, listVersion: 2 });
    vi.mocked(api.updateConversation).mockRejectedValueOnce(new Error('offline'));
    await session.saveSystem(7, 'Newer');
    expect(state.systemError).toBe('The system prompt was not saved: offline');
  });

  it('ignores a saved system prompt of a conversation left meanwhile', async () => {
    const { state, session } = setup();
    await session.saveSystem(3, 'New');
    expect(state.savedSystem).toBe('');
  });

  it('loads a reopened answer’s run, or says why it does not fit', async () => {
    const run = { id: 5, mode: 'normal', output: 'lo!' } as RunRecord;
    const { session } = setup({ getRun: vi.fn(async () => ({ run, steps: [] })) });
    const turn: Turn = { id: 1, role: 'assistant', content: 'Hello!', restored: true, runId: 5 };
    await session.loadRun(turn);
    expect(turn).toMatchObject({ content: 'Hel', mode: 'normal', loading: false, loadError: undefined });
    expect(turn.run?.text).toBe('lo!');

    const other: Turn = { id: 2, role: 'assistant', content: 'Bye', restored: true, runId: 5 };
    await session.loadRun(other);
    expect(other.run).toBeUndefined();
    expect(other.loadError).toBe("its output is not this answer's text");
  });

  it('loads every reopened answer’s run and hands on the last one', async () => {
    const runs: Record<number, RunRecord> = {
      5: { id: 5, mode: 'medusa', output: 'Hello!' } as RunRecord,
      6: { id: 6, mode: 'normal', output: 'Fine.' } as RunRecord,
    };
    const getRun = vi.fn(async (id: number) => ({ run: runs[id], steps: [] }));
    const conversation = stored(4, [
      message(1, 'user', 'Hi'),
      message(2, 'assistant', 'Hello!', 5),
      message(3, 'user', 'How are you?'),
      message(4, 'assistant', 'Fine.', 6),
    ]);
    const { state, restored, session } = setup({ getRun, getConversation: vi.fn(async () => conversation) });
    await session.open(4);
    await settle();
    expect(getRun.mock.calls.map(([id]) => id)).toEqual([5, 6]);
    expect(state.turns.filter((t) => t.role === 'assistant').map((t) => [t.mode, t.run?.text])).toEqual([
      ['medusa', 'Hello!'],
      ['normal', 'Fine.'],
    ]);
    expect(restored).toHaveBeenCalledTimes(1);
    expect(restored).toHaveBeenCalledWith(runs[6]);
  });

  it('hands on the last answer’s run even when its output is not that answer’s text', async () => {
    const run = { id: 5, mode: 'lookup', output: 'other' } as RunRecord;
    const getRun = vi.fn(async () => ({ run, steps: [] }));
    const conversation = stored(4, [message(1, 'user', 'Hi'), message(2, 'assistant', 'Hello!', 5)]);
    const { state, restored, session } = setup({ getRun, getConversation: vi.fn(async () => conversation) });
    await session.open(4);
    await settle();
    expect(state.turns[1].loadError).toBe("its output is not this answer's text");
    expect(restored).toHaveBeenCalledExactlyOnceWith(run);
  });

  it('says why when the last answer’s run cannot be read', async () => {
    const getRun = vi.fn(async () => {
      throw new Error('the server is gone');
    });
    const conversation = stored(4, [message(1, 'user', 'Hi'), message(2, 'assistant', 'Hello!', 9)]);
    const { restored, session } = setup({ getRun, getConversation: vi.fn(async () => conversation) });
    await session.open(4);
    await settle();
    expect(restored).toHaveBeenCalledExactlyOnceWith(null, 'run #9 could not be read: the server is gone');
  });

  it('hands on nothing for a conversation without answers, or once another is shown', async () => {
    const getRun = vi.fn(async () => ({ run: { id: 5, mode: 'normal', output: 'Hello!' } as RunRecord, steps: [] }));
    const questions = stored(3, [message(1, 'user', 'Hi')]);
    const answered = stored(4, [message(1, 'user', 'Hi'), message(2, 'assistant', 'Hello!', 5)]);
    const { restored, session } = setup({ getRun, getConversation: vi.fn(async (id: number) => (id === 3 ? questions : answered)) });
    await session.open(3);
    await settle();
    expect(restored).not.toHaveBeenCalled();
    const opening = session.open(4);
    await Promise.resolve();
    session.leave();
    await opening;
    await settle();
    expect(restored).not.toHaveBeenCalled();
  });

  it('says which remote engine wrote a reopened answer', async () => {
    const local = { id: 5, mode: 'normal', engine: null, model: { name: 'here' }, output: 'Hi' } as RunRecord;
    const remote = { id: 6, mode: 'auto', engine: 'lab', model: { name: 'SmolLM2' }, output: 'Yo' } as RunRecord;
    const { session } = setup({ getRun: vi.fn(async (id: number) => ({ run: id === 5 ? local : remote, steps: [] })) });
    const mine: Turn = { id: 1, role: 'assistant', content: 'Hi', restored: true, runId: 5 };
    const theirs: Turn = { id: 3, role: 'assistant', content: 'Yo', restored: true, runId: 6 };
    await session.loadRun(mine);
    await session.loadRun(theirs);
    expect(mine.remote).toBeNull();
    expect(theirs).toMatchObject({ mode: 'auto', remote: { engine: 'lab', model: 'SmolLM2' } });
  });
});
