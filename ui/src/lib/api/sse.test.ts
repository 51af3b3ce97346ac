import { describe, expect, it } from 'vitest';
import { SseParser } from './sse';

function parse(chunks: (string | Uint8Array)[]): string[] {
  const out: string[] = [];
  const parser = new SseParser((d) => out.push(d));
  const encoder = new TextEncoder();
  for (const c of chunks) parser.push(typeof c === 'string' ? encoder.encode(c) : c);
  parser.end();
  return out;
}

describe('SseParser', () => {
  it('reads events split anywhere', () => {
    expect(parse(['da', 'ta: {"a":', '1}\n', '\ndata: 2\n\n'])).toEqual(['{"a":1}', '2']);
  });

  it('handles CRLF, including a CR and LF in different chunks', () => {
    expect(parse(['data: x\r', '\n\r\n', 'data: y\r\n\r\n'])).toEqual(['x', 'y']);
  });

  it('skips comments and joins multi-line data', () => {
    expect(parse([': keep-alive\n\n', 'data: one\ndata: two\n\n'])).toEqual(['one\ntwo']);
  });

  it('keeps a character split across chunks whole', () => {
    const bytes = new TextEncoder().encode('data: héllo ✓\n\n');
    const cut = bytes.indexOf(0xc3) + 1; // inside "é"
    expect(parse([bytes.slice(0, cut), bytes.slice(cut)])).toEqual(['héllo ✓']);
  });

  it('delivers a last event without its blank line at the end of the stream', () => {
    expect(parse(['data: a\n\ndata: b'])).toEqual(['a', 'b']);
  });

  it('reads several events from one chunk', () => {
    expect(parse(['data: 1\n\ndata: 2\n\ndata: 3\n\n'])).toEqual(['1', '2', '3']);
  });
});
