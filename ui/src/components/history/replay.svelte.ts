// The replay of a stored run's steps: how many are shown, and a timer that shows one more at a
// time. History owns one for the run in its detail pane, so that opening or closing a run pauses
// it and the speed is kept from one run to the next.

import { replayDelayMs } from '../../lib/history';

export class Replay {
  /** Steps in the run. */
  total = $state(0);
  /** Steps shown, from the first. */
  replayed = $state(0);
  playing = $state(false);
  /** Steps per second. */
  speed = $state(10);
  #timer: ReturnType<typeof setTimeout> | undefined;

  /** A newly opened run of `total` steps, shown whole. */
  load(total: number) {
    this.pause();
    this.total = total;
    this.replayed = total;
  }

  play() {
    if (this.total === 0) return;
    if (this.replayed >= this.total) this.replayed = 0;
    this.playing = true;
    this.#schedule();
  }

  pause() {
    this.playing = false;
    clearTimeout(this.#timer);
  }

  restart() {
    this.replayed = 0;
    this.play();
  }

  #schedule() {
    clearTimeout(this.#timer);
    // The delay is read at every step, so a new speed applies at once.
    this.#timer = setTimeout(() => {
      if (!this.playing) return;
      this.replayed = Math.min(this.total, this.replayed + 1);
      if (this.replayed >= this.total) this.playing = false;
      else this.#schedule();
    }, replayDelayMs(this.speed));
  }
}
