import { describe, expect, it } from 'vitest';
import { acceptanceText } from './figures';

describe('figures', () => {
  it('says what an acceptance bar counts, with its steps when known', () => {
    expect(acceptanceText('head 2', 2, 0.75, { hits: 3, seen: 4 })).toBe(
      'head 2: 3 of 4 steps (75.0%) that drafted 2 deep had their guess at depth 2 accepted. Each depth counts only the steps that reached it, so a deeper one can be higher.',
    );
    expect(acceptanceText('depth 1', 1, 0.5)).toBe(
      'depth 1: 50.0% of the steps that drafted 1 deep had their guess at depth 1 accepted. Each depth counts only the steps that reached it, so a deeper one can be higher.',
    );
  });
});
