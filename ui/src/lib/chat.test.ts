import { describe, expect, it } from 'vitest';
import { conversation, turnText, type Turn } from './chat';
import { emptyRun, type RunState } from './run';

function answer(id: number, text: string, error = false): Turn {
  const run: RunState = { ...emptyRun(), text };
  if (error) run.error = { code: 'busy', message: 'queue full' };
  return { id, role: 'assistant', content: '', run, mode: 'normal' };
}

function question(id: number, content: string): Turn {
  return { id, role: 'user', content };
}

describe('conversation', () => {
  it('sends the turns in order, answers by their run’s text', () => {
    expect(conversation('', [question(0, 'Hi'), answer(1, 'Hello!'), question(2, 'And?')])).toEqual([
      { role: 'user', content: 'Hi' },
      { role: 'assistant', content: 'Hello!' },
      { role: 'user', content: 'And?' },
    ]);
  });

  it('puts the system prompt first, trimmed, and leaves a blank one out', () => {
    expect(conversation('  Be brief.\n', [question(0, 'Hi')])).toEqual([
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Hi' },
    ]);
    expect(conversation(' \n ', [question(0, 'Hi')])).toEqual([{ role: 'user', content: 'Hi' }]);
  });

  it('leaves out exchanges whose answer failed, question and all', () => {
    const turns = [question(0, 'One'), answer(1, '', true), question(2, 'Two'), answer(3, 'B'), question(4, 'Three')];
    expect(conversation('S', turns)).toEqual([
      { role: 'system', content: 'S' },
      { role: 'user', content: 'Two' },
      { role: 'assistant', content: 'B' },
      { role: 'user', content: 'Three' },
    ]);
  });

  it('keeps the question whose failed answer was dropped to ask again', () => {
    expect(conversation('', [question(0, 'One')])).toEqual([{ role: 'user', content: 'One' }]);
  });
});

describe('turnText', () => {
  it('is a question’s text or an answer’s text so far', () => {
    expect(turnText(question(0, 'Q'))).toBe('Q');
    expect(turnText(answer(1, '```py\nx'))).toBe('```py\nx');
    expect(turnText({ id: 2, role: 'assistant', content: '' })).toBe('');
  });
});
