import { describe, expect, it } from 'vitest';
import { counted, plural, sentence } from './words';

describe('counts in words', () => {
  it('takes the singular for one alone', () => {
    expect(counted(1, 'token')).toBe('1 token');
    expect(counted(0, 'token')).toBe('0 tokens');
    expect(counted(2, 'token')).toBe('2 tokens');
    expect(counted(-1, 'step')).toBe('-1 steps');
    expect(counted(1.5, 'step')).toBe('1.5 steps');
  });

  it('takes an irregular plural and a formatted count', () => {
    expect(counted(1, 'repository', 'repositories')).toBe('1 repository');
    expect(counted(3, 'repository', 'repositories')).toBe('3 repositories');
    expect(counted(12000, 'token', undefined, '12,000')).toBe('12,000 tokens');
    expect(counted(1, 'token', undefined, '1')).toBe('1 token');
  });

  it('gives the word alone for sentences that place the count themselves', () => {
    expect(plural(1, 'run')).toBe('run');
    expect(plural(4, 'run')).toBe('runs');
    expect(plural(1, 'residual block')).toBe('residual block');
  });
});

describe('sentences', () => {
  it('end with one mark, never two', () => {
    expect(sentence('the server is not answering')).toBe('the server is not answering.');
    expect(sentence('is `medusa serve` still running?')).toBe('is `medusa serve` still running?');
    expect(sentence('it stopped. ')).toBe('it stopped.');
    expect(sentence('stop!')).toBe('stop!');
  });
});
