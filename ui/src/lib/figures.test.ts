import { describe, expect, it } from 'vitest';
import { acceptanceText, draftModelDecodesText } from './figures';

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

describe('draftModelDecodesText', () => {
  it('says the decodes, their tokens and the tokens per decode', () => {
    expect(draftModelDecodesText({ draft_model_decodes: 0, draft_model_tokens: 0 })).toBe('no decodes yet');
    expect(draftModelDecodesText({ draft_model_decodes: 1, draft_model_tokens: 3 })).toBe(
      "1 decode, 3 tokens (3.0 per decode, every drafting request's in the same ones)",
    );
    expect(draftModelDecodesText({ draft_model_decodes: 40, draft_model_tokens: 130 })).toBe(
      "40 decodes, 130 tokens (3.3 per decode, every drafting request's in the same ones)",
    );
  });
});
