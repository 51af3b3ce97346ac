// A chat's turns and the messages a request sends for them. Pure, so it is unit-tested directly.

import type { ChatMessage, Mode } from './api/types';
import type { RunState } from './run';

export interface Turn {
  /** Unique within the chat: answers that replace others (regenerate, edit) get new elements. */
  id: number;
  role: 'user' | 'assistant';
  /** A user's message; an answer's text is its run's. */
  content: string;
  run?: RunState;
  mode?: Mode;
  /** The step shown in the answer's inspector; null or absent when it is closed. */
  inspect?: number | null;
}

/** What a turn says: a question's text, or an answer's text so far. */
export function turnText(turn: Turn): string {
  return turn.role === 'assistant' ? (turn.run?.text ?? '') : turn.content;
}

/**
 * The messages of a request answering `turns` (the last a user's): the system prompt first when it
 * is not blank, then the turns. Exchanges whose answer failed are left out, question and all.
 */
export function conversation(system: string, turns: Turn[]): ChatMessage[] {
  const messages: ChatMessage[] = system.trim() === '' ? [] : [{ role: 'system', content: system.trim() }];
  turns.forEach((turn, i) => {
    const failed = turn.role === 'user' ? turns[i + 1]?.run?.error : turn.run?.error;
    if (!failed) messages.push({ role: turn.role, content: turnText(turn) });
  });
  return messages;
}
