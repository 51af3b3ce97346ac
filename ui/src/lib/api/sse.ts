// Server-sent events from a streamed response body: the `data` of each event, whatever the
// chunk boundaries (mid-line, mid-event, mid-character), with CRLF or LF line ends.

/** Splits a byte stream into SSE event payloads. Feed chunks with `push`, then call `end`. */
export class SseParser {
  private decoder = new TextDecoder();
  private buffer = '';
  private data: string[] = [];

  constructor(private readonly onData: (data: string) => void) {}

  push(chunk: Uint8Array): void {
    this.buffer += this.decoder.decode(chunk, { stream: true });
    this.drain();
  }

  end(): void {
    this.buffer += this.decoder.decode();
    if (this.buffer.length > 0) this.buffer += '\n';
    this.drain();
    this.dispatch();
  }

  private drain(): void {
    for (;;) {
      const newline = this.buffer.search(/\r\n|\r|\n/);
      if (newline < 0) return;
      // A lone CR at the end may be the first half of a CRLF still on its way.
      if (this.buffer[newline] === '\r' && newline === this.buffer.length - 1) return;
      const width = this.buffer.startsWith('\r\n', newline) ? 2 : 1;
      const line = this.buffer.slice(0, newline);
      this.buffer = this.buffer.slice(newline + width);
      this.line(line);
    }
  }

  private line(line: string): void {
    if (line === '') return this.dispatch();
    if (line.startsWith(':')) return; // comment (keep-alive)
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') this.data.push(value);
  }

  private dispatch(): void {
    if (this.data.length === 0) return;
    const data = this.data.join('\n');
    this.data = [];
    this.onData(data);
  }
}
