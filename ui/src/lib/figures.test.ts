import { describe, expect, it } from 'vitest';
import { acceptanceText, draftModelDecodesText } from './figures';

describe('figures', () => {
  it('says what an acceptance bar counts, with its steps when known', () => {
    expect(acceptanceText('head 2', { depth: 2, kept: 3, drafted: 4, rate: 0.75 })).toBe(
      'head 2: steps kept, 3 of 4 steps (75.0%) that drafted 2 deep kept their guess at depth 2. Each depth counts every step that reached it, also those whose shallower guess was rejected, so a deeper one can be higher.',
    );
    expect(acceptanceText('depth 1', { depth: 1, kept: null, drafted: null, rate: 0.5 }, { accepted: 0, tried: 0 })).toBe(
      'depth 1: steps kept, 50.0% of the steps that drafted 1 deep kept their guess at depth 1. Each depth counts every step that reached it, also those whose shallower guess was rejected, so a deeper one can be higher.',
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
