import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Replay } from './replay.svelte';

describe('Replay', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it('shows a newly loaded run whole, and replays it from the first step', () => {
    const replay = new Replay();
    replay.load(3);
    expect(replay.replayed).toBe(3);
    replay.speed = 10;
    replay.play();
    expect(replay.replayed).toBe(0);
    expect(replay.playing).toBe(true);
    vi.advanceTimersByTime(100);
    expect(replay.replayed).toBe(1);
    vi.advanceTimersByTime(200);
    expect(replay.replayed).toBe(3);
    expect(replay.playing).toBe(false);
  });

  it('stops on pause and on loading another run, and keeps its speed', () => {
    const replay = new Replay();
    replay.load(10);
    replay.speed = 50;
    replay.restart();
    vi.advanceTimersByTime(40);
    replay.pause();
    vi.advanceTimersByTime(1000);
    expect(replay.replayed).toBe(2);
    replay.play();
    replay.load(4);
    vi.advanceTimersByTime(1000);
    expect(replay).toMatchObject({ replayed: 4, total: 4, playing: false, speed: 50 });
  });

  it('does nothing for a run without steps', () => {
    const replay = new Replay();
    replay.load(0);
    replay.play();
    expect(replay.playing).toBe(false);
  });
});
