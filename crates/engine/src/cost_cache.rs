//! Decode costs measured on this machine, kept on disk per machine, model and context settings,
//! so that loading a model with Medusa heads sizes its tree without timing decodes again.
//! The cache only saves time: a missing, unreadable or foreign entry means measuring anew. Only
//! figures taken on a quiet machine are kept (see [`crate::speculative::costs::Calibration`]),
//! and figures that real steps later contradict replace them.

use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::cpu_kernel_choice::CpuKernels;
use crate::speculative::costs::CostPoint;
use crate::speculative::outlook::WidenedCosts;

/// Everything a decode's cost depends on that can change between loads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostKey {
    pub engine_version: String,
    pub model_path: String,
    pub model_bytes: u64,
    pub model_modified_unix: u64,
    /// llama.cpp's compute devices, `backend: description` (the CPU's model name, GPUs).
    pub devices: Vec<String>,
    pub threads: usize,
    pub gpu_layers: u32,
    pub n_batch: u32,
    pub n_ctx: u32,
    /// Batch-invariant kernels (exact mode), which cost differently.
    #[serde(default)]
    pub exact: bool,
    /// Batched or stock kernels for decodes of several tokens: the curve they draw differs.
    pub cpu_kernels: CpuKernels,
}

impl CostKey {
    /// The key for a model file loaded with these settings on this machine's devices.
    pub fn new(
        model_path: &Path,
        threads: usize,
        gpu_layers: u32,
        n_batch: u32,
        n_ctx: u32,
        exact: bool,
        cpu_kernels: CpuKernels,
    ) -> Self {
        let metadata = std::fs::metadata(model_path).ok();
        let model_path = std::fs::canonicalize(model_path).unwrap_or_else(|_| model_path.into());
        Self {
            engine_version: env!("CARGO_PKG_VERSION").to_owned(),
            model_path: model_path.display().to_string(),
            model_bytes: metadata.as_ref().map_or(0, |m| m.len()),
            model_modified_unix: metadata
                .and_then(|m| m.modified().ok())
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_secs()),
            devices: llama_cpp_2::list_llama_ggml_backend_devices()
                .into_iter()
                .map(|d| format!("{}: {}", d.backend, d.description))
                .collect(),
            threads,
            gpu_layers,
            n_batch,
            n_ctx,
            exact,
            cpu_kernels,
        }
    }

    fn file_name(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        let digest = Sha256::digest(&json);
        let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        format!("decode-costs-{hex}.json")
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    key: CostKey,
    /// By tokens in the batch, the central figure and its band.
    decode_costs: Vec<CostPoint>,
}

/// A folder of measured decode costs.
/// Whether a model file was made by `medusa scale-model` (`name.wide4.gguf`, `name.wide4.Q4_0.gguf`).
fn is_widened(model_path: &str) -> bool {
    let name = Path::new(model_path)
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    name.split('.').any(|part| {
        part.strip_prefix("wide")
            .is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()))
    })
}

#[derive(Debug, Clone)]
pub struct CostCache {
    dir: PathBuf,
}

impl CostCache {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The costs measured earlier under `key`, if any were kept and still read back sound.
    pub fn load(&self, key: &CostKey) -> Option<Vec<CostPoint>> {
        let path = self.dir.join(key.file_name());
        let text = std::fs::read_to_string(&path).ok()?;
        match serde_json::from_str::<Entry>(&text) {
            Ok(entry)
                if entry.key == *key
                    && !entry.decode_costs.is_empty()
                    && entry.decode_costs.iter().all(|p| {
                        p.tokens > 0
                            && p.low_ms.is_finite()
                            && p.high_ms.is_finite()
                            && 0.0 < p.low_ms
                            && p.low_ms <= p.ms
                            && p.ms <= p.high_ms
                    }) =>
            {
                Some(entry.decode_costs)
            }
            _ => {
                tracing::warn!(path = %path.display(), "ignoring an unusable decode-cost cache entry");
                None
            }
        }
    }

    /// Keeps `points` under `key`, replacing what was there (written whole, then renamed, so a
    /// reader never sees half a file).
    /// The costs measured on this machine, with the same settings, of the widest model made
    /// by widening (`medusa scale-model`, named `*.wideK*.gguf`) other than `like`'s model.
    pub fn widest_widened(&self, like: &CostKey) -> Option<WidenedCosts> {
        let entries = std::fs::read_dir(&self.dir).ok()?;
        entries
            .filter_map(|entry| {
                let text = std::fs::read_to_string(entry.ok()?.path()).ok()?;
                serde_json::from_str::<Entry>(&text).ok()
            })
            .filter(|e| {
                let k = &e.key;
                k.model_path != like.model_path
                    && k.devices == like.devices
                    && k.threads == like.threads
                    && k.gpu_layers == like.gpu_layers
                    && k.exact == like.exact
                    && k.cpu_kernels == like.cpu_kernels
                    && is_widened(&k.model_path)
            })
            .max_by_key(|e| e.key.model_bytes)
            .map(|e| WidenedCosts {
                file_name: Path::new(&e.key.model_path)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                file_bytes: e.key.model_bytes,
                points: e.decode_costs,
            })
    }

    pub fn store(&self, key: &CostKey, points: &[CostPoint]) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let entry = Entry {
            key: key.clone(),
            decode_costs: points.to_vec(),
        };
        let path = self.dir.join(key.file_name());
        let partial = path.with_extension("json.partial");
        std::fs::write(&partial, serde_json::to_vec_pretty(&entry)?)?;
        std::fs::rename(&partial, &path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(threads: usize) -> CostKey {
        CostKey {
            engine_version: "1".into(),
            model_path: "/models/m.gguf".into(),
            model_bytes: 100,
            model_modified_unix: 7,
            devices: vec!["CPU: Some CPU".into()],
            threads,
            gpu_layers: 0,
            n_batch: 512,
            n_ctx: 4096,
            exact: true,
            cpu_kernels: CpuKernels::Batched,
        }
    }

    #[test]
    fn the_widest_widened_model_measured_with_the_same_settings_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CostCache::new(dir.path());
        let model = |path: &str, bytes: u64, threads: usize| CostKey {
            model_path: path.into(),
            model_bytes: bytes,
            ..key(threads)
        };
        let one = [CostPoint::without_spread(1, 6.5)];
        assert!(cache.widest_widened(&key(2)).is_none());
        cache
            .store(&model("/models/m.wide4.Q4_0.gguf", 1_000, 2), &one)
            .unwrap();
        cache
            .store(&model("/models/m.wide8.gguf", 4_000, 2), &one)
            .unwrap();
        cache
            .store(&model("/models/m.wide16.gguf", 9_000, 4), &one)
            .unwrap();
        cache
            .store(&model("/models/widest.gguf", 9_000, 2), &one)
            .unwrap();
        let found = cache.widest_widened(&key(2)).unwrap();
        assert_eq!(
            (found.file_name.as_str(), found.file_bytes),
            ("m.wide8.gguf", 4_000)
        );
        // A widened model is not its own reference.
        let itself = cache
            .widest_widened(&model("/models/m.wide8.gguf", 4_000, 2))
            .unwrap();
        assert_eq!(itself.file_name, "m.wide4.Q4_0.gguf");
    }

    #[test]
    fn costs_come_back_only_for_the_same_machine_and_model() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CostCache::new(dir.path().join("costs"));
        assert_eq!(cache.load(&key(2)), None);
        let points = vec![
            CostPoint::without_spread(1, 6.5),
            CostPoint {
                tokens: 2,
                ms: 12.25,
                low_ms: 11.0,
                high_ms: 13.5,
            },
            CostPoint::without_spread(32, 101.0),
        ];
        cache.store(&key(2), &points).unwrap();
        assert_eq!(cache.load(&key(2)), Some(points.clone()));
        assert_eq!(cache.load(&key(4)), None, "other threads, other costs");
        let inexact = CostKey {
            exact: false,
            ..key(2)
        };
        assert_eq!(cache.load(&inexact), None, "other kernels, other costs");
        let stock = CostKey {
            cpu_kernels: CpuKernels::Stock,
            ..key(2)
        };
        assert_eq!(cache.load(&stock), None, "stock kernels, other costs");
        // Measuring again replaces the entry.
        cache
            .store(&key(2), &[CostPoint::without_spread(1, 7.0)])
            .unwrap();
        assert_eq!(
            cache.load(&key(2)),
            Some(vec![CostPoint::without_spread(1, 7.0)])
        );
    }

    #[test]
    fn figures_read_back_to_the_last_bit() {
        // Measured medians are arbitrary f64s; a cache that rounds them would make the second
        // load plan from figures that differ from the first's.
        let dir = tempfile::tempdir().unwrap();
        let cache = CostCache::new(dir.path());
        let points = vec![
            CostPoint {
                tokens: 1,
                ms: 28.092026999999998,
                low_ms: 27.9617515,
                high_ms: 28.316815,
            },
            CostPoint {
                tokens: 8,
                ms: 111.16252399661064,
                low_ms: 106.18682262916053,
                high_ms: 121.47943542557184,
            },
            CostPoint {
                tokens: 32,
                ms: 413.23705025274285,
                low_ms: 356.4876858239535,
                high_ms: 426.8237136944704,
            },
        ];
        cache.store(&key(2), &points).unwrap();
        let read = cache.load(&key(2)).unwrap();
        let bits = |p: &[CostPoint]| -> Vec<[u64; 3]> {
            p.iter()
                .map(|c| [c.ms.to_bits(), c.low_ms.to_bits(), c.high_ms.to_bits()])
                .collect()
        };
        assert_eq!(bits(&read), bits(&points));
    }

    #[test]
    fn damaged_entries_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CostCache::new(dir.path());
        let path = dir.path().join(key(2).file_name());
        std::fs::write(&path, b"{ not json").unwrap();
        assert_eq!(cache.load(&key(2)), None);
        // Sound JSON with a nonsensical reading is no better.
        cache
            .store(&key(2), &[CostPoint::without_spread(1, -3.0)])
            .unwrap();
        assert_eq!(cache.load(&key(2)), None);
        // Nor is a band that does not hold its figure.
        let outside = CostPoint {
            tokens: 1,
            ms: 9.0,
            low_ms: 10.0,
            high_ms: 11.0,
        };
        cache.store(&key(2), &[outside]).unwrap();
        assert_eq!(cache.load(&key(2)), None);
        // Entries from before figures had bands are measured anew.
        std::fs::write(
            &path,
            serde_json::json!({"key": key(2), "decode_ms_by_tokens": [[1, 129.3]]}).to_string(),
        )
        .unwrap();
        assert_eq!(cache.load(&key(2)), None);
    }
}
