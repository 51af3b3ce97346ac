// The chat's conversation as the backend keeps it: created at the first question, reopened after a
// reload, followed while an answer is still being written, its system prompt saved. It works on a
// plain state object (the view passes its `$state`), so it is unit-tested with a fake transport.

import type { Transport } from './api/transport';
import type { Conversation, ConversationMessage, Mode, RunRecord } from './api/types';
import { restoredTurns, sameShape, withStoredRun, type Turn } from './chat';
import { openConversation, rememberConversation } from './conversations';
import { runTarget } from './engines';

type Storage = Parameters<typeof openConversation>[0];

export type ChatApi = Pick<Transport, 'createConversation' | 'getConversation' | 'updateConversation' | 'getRun'>;

export interface ChatState {
  turns: Turn[];
  system: string;
  /** The system prompt as the open conversation has it stored. */
  savedSystem: string;
  systemError: string | null;
  chatError: string | null;
  conversationId: number | null;
  /** Changes whenever a conversation may have changed, so that the list is read again. */
  listVersion: number;
}

export function emptyChat(): ChatState {
  return { turns: [], system: '', savedSystem: '', systemError: null, chatError: null, conversationId: null, listVersion: 0 };
}

/**
 * Brings `turns` up to date with the stored `messages`: in place when they are the same messages
 * (only answers being written change), otherwise as new turns numbered from `nextId`. Returns the
 * turns to show, `turns` itself when updated in place.
 */
export function followTurns(turns: Turn[], messages: ConversationMessage[], nextId: number): Turn[] {
  if (!sameShape(turns, messages)) return restoredTurns(messages, nextId);
  messages.forEach((m, i) => {
    const turn = turns[i];
    if (turn.answering) Object.assign(turn, { content: m.content, answering: m.answering, runId: m.run_id });
  });
  return turns;
}

/** How long to wait before reading again a conversation whose answer is being written. */
export const FOLLOW_MS = 1000;

export class ChatSession {
  /** Counts conversations shown: work begun for one is dropped when another is shown. */
  epoch = 0;
  private nextId = 0;
  private pollTimer: ReturnType<typeof setTimeout> | undefined;
  /** The run read for each restored answer, whether or not it could be shown with it. */
  private readonly read = new WeakMap<Turn, RunRecord>();

  /**
   * `onShown`: the turns were replaced or grew (the view scrolls down). `onRestored`: a shown
   * conversation's last answer was written by `run` (the view takes its mode, tree, sampling and
   * engine), or, with `run` null, its run could not be read, for the reason given.
   */
  constructor(
    private readonly state: ChatState,
    private readonly api: () => ChatApi,
    private readonly storage: Storage,
    private readonly onShown: () => void = () => {},
    private readonly onRestored: (run: RunRecord | null, problem?: string) => void = () => {},
  ) {}

  /** Adds `turn` and returns it as `state` holds it (the view's proxy, which updates the view). */
  push(turn: Omit<Turn, 'id'>): Turn {
    this.state.turns.push({ id: this.nextId++, ...turn });
    return this.state.turns[this.state.turns.length - 1];
  }

  remember(id: number | null) {
    this.state.conversationId = id;
    rememberConversation(this.storage, id);
  }

  /** The open conversation's id, created (with the system prompt) for the first question. */
  async ensureConversation(): Promise<number> {
    const s = this.state;
    if (s.conversationId !== null) return s.conversationId;
    const mine = this.epoch;
    const created = await this.api().createConversation({ system_prompt: s.system.trim() });
    if (mine === this.epoch) {
      this.remember(created.id);
      s.savedSystem = created.system_prompt;
      s.listVersion++;
    }
    return created.id;
  }

  /** Drops the work begun for the conversation shown, and its errors. */
  leave() {
    this.epoch++;
    clearTimeout(this.pollTimer);
    this.state.chatError = null;
    this.state.systemError = null;
  }

  /** Empties the chat for a new conversation (the mode and sampling are the view's and stay). */
  clear() {
    this.state.turns = [];
    this.state.system = '';
    this.state.savedSystem = '';
    this.remember(null);
  }

  /** Shows stored conversation `c`, following an answer still being written. */
  show(c: Conversation) {
    const s = this.state;
    s.turns = restoredTurns(c.messages, this.nextId);
    this.nextId += c.messages.length;
    s.system = c.system_prompt;
    s.savedSystem = c.system_prompt;
    this.remember(c.id);
    if (c.messages.some((m) => m.answering)) this.follow(c.id, this.epoch);
    this.onShown();
    void this.loadRuns(this.epoch);
  }

  /**
   * Loads the runs of every answer shown, so that a reopened conversation shows its figures,
   * tints and steps as it did when it was left; then hands the last answer's run on (read even
   * where its output is not the answer's text: its mode and tree are still the chat's), or why it
   * could not be read.
   */
  private async loadRuns(mine: number) {
    const answers = this.state.turns.filter((t) => t.restored && t.runId != null && !t.answering);
    await Promise.all(answers.map((t) => this.loadRun(t)));
    const last = answers.at(-1);
    if (!last || mine !== this.epoch) return;
    const run = this.read.get(last);
    if (run) this.onRestored(run);
    else this.onRestored(null, `run #${last.runId} could not be read: ${last.loadError ?? 'no answer'}`);
  }

  /** Reads conversation `id` and shows it, unless another was shown meanwhile. */
  async open(id: number) {
    const mine = this.epoch;
    try {
      const c = await this.api().getConversation(id);
      if (mine === this.epoch) this.show(c);
    } catch (err) {
      if (mine === this.epoch) this.state.chatError = `Chat #${id} could not be opened: ${(err as Error).message}`;
      this.state.listVersion++;
    }
  }

  /** Reopens the conversation of an earlier page, if one is remembered. */
  reopenLast() {
    const id = openConversation(this.storage);
    if (id !== null) void this.reopen(id);
  }

  /** Reopens conversation `id` unless the chat has begun meanwhile; a new chat, silently, if it is gone. */
  async reopen(id: number) {
    const mine = this.epoch;
    const s = this.state;
    try {
      const c = await this.api().getConversation(id);
      if (mine === this.epoch && s.turns.length === 0 && s.conversationId === null) this.show(c);
    } catch (err) {
      if ((err as { code?: string }).code === 'not_found' && s.conversationId === null) rememberConversation(this.storage, null);
    }
  }

  /** Reads conversation `id` again every second while one of its answers is being written. */
  private follow(id: number, mine: number) {
    clearTimeout(this.pollTimer);
    this.pollTimer = setTimeout(async () => {
      let c: Conversation;
      try {
        c = await this.api().getConversation(id);
      } catch (err) {
        if ((err as { code?: string }).code !== 'not_found' && mine === this.epoch) this.follow(id, mine);
        return;
      }
      if (mine !== this.epoch) return;
      const turns = followTurns(this.state.turns, c.messages, this.nextId);
      if (turns !== this.state.turns) {
        this.state.turns = turns;
        this.nextId += c.messages.length;
      }
      if (c.messages.some((m) => m.answering)) this.follow(id, mine);
      else this.state.listVersion++;
      this.onShown();
    }, FOLLOW_MS);
  }

  /**
   * Loads a reopened answer's run: its figures, its steps, who drafted each token. Returns the
   * run, or null when it could not be read or is not this answer's.
   */
  async loadRun(turn: Turn): Promise<RunRecord | null> {
    if (turn.run || turn.loading || turn.runId == null || turn.answering) return null;
    turn.loading = true;
    try {
      const detail = await this.api().getRun(turn.runId);
      this.read.set(turn, detail.run);
      const split = withStoredRun(turn.content, detail);
      if (split) {
        Object.assign(turn, split, { mode: detail.run.mode as Mode, remote: runTarget(detail.run) });
        turn.loadError = undefined;
        return detail.run;
      }
      turn.loadError = "its output is not this answer's text";
    } catch (err) {
      turn.loadError = (err as Error).message;
    } finally {
      turn.loading = false;
    }
    return null;
  }

  async saveSystem(id: number, value: string) {
    const s = this.state;
    try {
      const c = await this.api().updateConversation(id, { system_prompt: value });
      if (s.conversationId !== id) return;
      s.savedSystem = c.system_prompt;
      s.systemError = null;
      s.listVersion++;
    } catch (err) {
      if (s.conversationId === id) s.systemError = `The system prompt was not saved: ${(err as Error).message}`;
    }
  }

  /** Stops following: the view is gone. */
  dispose() {
    clearTimeout(this.pollTimer);
  }
}
