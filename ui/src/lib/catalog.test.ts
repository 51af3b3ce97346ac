import { describe, expect, it } from 'vitest';
import { countText, downloadRefusal, fileNameOf, fitText, headsFor, loadableModels, memoryNeeded, offeredFile, progressText, sizeText } from './catalog';
import type { DiskModel, HubFile } from './api/types';

const disk = (file_name: string, extra: Partial<DiskModel> = {}): DiskModel => ({
  file_name,
  path: `/m/${file_name}`,
  size_bytes: 1,
  quantization: null,
  partial: false,
  heads: file_name.endsWith('.medusa.gguf'),
  loaded: false,
  deletable: true,
  ...extra,
});

const hubFile = (path: string, split = false): HubFile => ({
  repo: 'a/b',
  path,
  size_bytes: 10,
  sha256: null,
  quantization: null,
  split,
});

describe('catalog figures', () => {
  it('says sizes as people read them', () => {
    expect(sizeText(98_362_432)).toBe('98 MB');
    expect(sizeText(1_070_000_000)).toBe('1.07 GB');
    expect(sizeText(2_500)).toBe('3 kB');
    expect(sizeText(12)).toBe('12 B');
  });

  it('says how far a download got, how fast, and what is left', () => {
    const p = { downloaded: 400e6, total: 1e9, resumed_from: 0 };
    expect(progressText(p, 20_000)).toBe('400 MB of 1.00 GB (40%) · 20 MB/s · 30 s left');
    // Just started: no speed yet.
    expect(progressText({ downloaded: 0, total: 1e9, resumed_from: 0 }, 0)).toBe('0 B of 1.00 GB (0%)');
    // Resumed: what was kept is not counted as fetched now.
    expect(progressText({ downloaded: 600e6, total: 1e9, resumed_from: 500e6 }, 10_000)).toBe(
      '600 MB of 1.00 GB (60%) · 10 MB/s · 40 s left · resumed at 500 MB',
    );
    expect(progressText({ downloaded: 1e9, total: 1e9, resumed_from: 0 }, 100_000)).toBe('1.00 GB of 1.00 GB (100%) · 10 MB/s');
  });

  it('finds the heads made for a model beside it', () => {
    const model = disk('SmolLM2-135M-Instruct.Q4_1.gguf');
    const heads = disk('SmolLM2-135M-Instruct.Q4_1.medusa.gguf');
    expect(headsFor(model, [model, heads, disk('other.medusa.gguf')])).toBe(heads);
    expect(headsFor(model, [model, disk('SmolLM2-135M-Instruct.Q4_1.medusa.gguf', { partial: true })])).toBeNull();
    expect(headsFor(model, [model])).toBeNull();
  });

  it('names files by their base name and refuses split parts', () => {
    expect(fileNameOf(hubFile('Q4_K_M/model-q4_k_m.gguf'))).toBe('model-q4_k_m.gguf');
    expect(downloadRefusal(hubFile('m-00001-of-00002.gguf', true))).toMatch(/split over several files/);
    expect(downloadRefusal(hubFile('m.gguf'))).toBeNull();
    expect(countText(1_234_567)).toBe('1.2M');
    expect(countText(5_300)).toBe('5.3k');
    expect(countText(42)).toBe('42');
  });
});

describe('loadableModels', () => {
  it('offers whole model files once, with the heads made for each and the one in use marked', () => {
    const models = [
      disk('base.gguf', { loaded: true }),
      disk('base.medusa.gguf'),
      disk('other-Q4_0.gguf'),
      disk('half.gguf', { partial: true }),
    ];
    const elsewhere = [disk('base.gguf', { loaded: true }), disk('third.gguf', { path: '/n/third.gguf' })];
    expect(
      loadableModels({
        download_dir: '/m',
        folders: [
          { path: '/m', models },
          { path: '/n', models: elsewhere },
        ],
      }),
    ).toEqual([
      { path: '/m/base.gguf', fileName: 'base.gguf', heads: '/m/base.medusa.gguf', loaded: true },
      { path: '/m/other-Q4_0.gguf', fileName: 'other-Q4_0.gguf', heads: null, loaded: false },
      { path: '/n/third.gguf', fileName: 'third.gguf', heads: null, loaded: false },
    ]);
    expect(loadableModels({ download_dir: '/m', folders: [] })).toEqual([]);
  });
});

describe('a model offered from the chat', () => {
  const file = (path: string, quantization: string | null, size_bytes: number, split = false): HubFile => ({
    repo: 'a/b',
    path,
    size_bytes,
    sha256: null,
    quantization,
    split,
  });

  it('offers the smallest file of the first format it knows, never a split one', () => {
    const files = [
      file('m-f16.gguf', 'F16', 700),
      file('m-q8_0.gguf', 'Q8_0', 380),
      file('big/m-q4_k_m.gguf', 'Q4_K_M', 250),
      file('m-q4_k_m.gguf', 'q4_k_m', 240),
      file('m-q4_0-00001-of-00002.gguf', 'Q4_0', 100, true),
    ];
    expect(offeredFile(files)?.path).toBe('m-q4_k_m.gguf');
    expect(offeredFile(files.filter((f) => f.quantization?.toUpperCase() !== 'Q4_K_M'))?.path).toBe('m-q8_0.gguf');
    // No offered format: the smallest loadable file.
    expect(offeredFile([file('m-f16.gguf', 'F16', 700), file('m-bf16.gguf', 'BF16', 690)])?.path).toBe('m-bf16.gguf');
    expect(offeredFile([file('m-00001-of-00002.gguf', 'Q4_K_M', 100, true)])).toBeNull();
  });

  it("sizes a file against the machine's memory", () => {
    expect(memoryNeeded(1e9)).toBe(1.712e9);
    // 1 GB needs 1.71 GB, within three quarters of 4 GB; not of 2 GB.
    expect(fitText(1e9, 4e9)).toEqual({ fits: true, text: "1.00 GB · fits this machine's 4.00 GB of memory" });
    expect(fitText(1e9, 2e9)).toEqual({
      fits: false,
      text: "1.00 GB · needs about 1.71 GB: too large for this machine's 2.00 GB of memory",
    });
    expect(fitText(1e9, null)).toEqual({ fits: null, text: '1.00 GB' });
  });
});
